"""``sluice dev --ha``: the name server, an etcd and three brokers of one group come up in one command, one of
them is elected master, sends are acknowledged, and Ctrl-C (SIGTERM) stops everything."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from sluice import Message, Producer, SendStatus
from sluice.common.errors import ClientError
from tests.broker_process import free_port, free_ports_below_ephemeral
from tests.etcd_server import require_etcd
from tests.integration.helpers import wait_until


def test_dev_ha_starts_a_group_that_elects_a_master_and_takes_sends(tmp_path: Path) -> None:
    require_etcd()
    # The three brokers take base, +10, +20 and their fast channels 2 below each.
    base = free_ports_below_ephemeral((-2, 0, 1, 8, 10, 11, 18, 20, 21))
    ns = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "dev", "--ha", "--no-grpc", "--store",
                             str(tmp_path / "dev"), "--broker-port", str(base), "--namesrv-port", str(ns),
                             "--dashboard-port", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(tmp_path / "dev.log", "w"),
                            text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(8)]
        assert lines[0].startswith("sluice dev --ha ready"), (lines, (tmp_path / "dev.log").read_text()[-3000:])
        assert any(line.strip().startswith("dashboard    http://127.0.0.1:") for line in lines), lines
        with Producer("dev-ha", namesrv=f"127.0.0.1:{ns}") as producer:

            def acknowledged() -> bool:
                try:
                    return producer.send(Message("DevHA", b"hello")).status is SendStatus.SEND_OK
                except ClientError:  # (no route yet)
                    return False

            wait_until(acknowledged, 30, "a send acknowledged by the elected SYNC_MASTER and its slaves")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert proc.stdout is not None
        proc.stdout.close()
