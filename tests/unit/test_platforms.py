"""Sluice off Linux: the client imports and runs without what only Linux or POSIX has (as on Windows), the store
syncs with F_FULLFSYNC on macOS, and the servers refuse Windows in one line. Each check runs in a child
interpreter, where the platform can be changed before Sluice is imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.without_posix import run_without_posix

CLIENT_USE = """
import asyncio, importlib.util, sys, tempfile
from pathlib import Path

import sluice, sluice.aio
for name in sluice.__all__:
    getattr(sluice, name)
for name in sluice.aio.__all__:
    getattr(sluice.aio, name)
import sluice.cli.main, sluice.client.admin, sluice.spark.options, sluice.spark.queue_client
if importlib.util.find_spec("pyarrow") is not None:  # the Spark source and sink's plain-Python halves
    import sluice.spark.sink, sluice.spark.source
from sluice import Message, Producer, PullConsumer, PushConsumer, SimpleConsumer
from sluice.client.offset_store import LocalFileOffsetStore
from sluice.common.structs import MessageQueue

Producer("p", namesrv="127.0.0.1:1")
PushConsumer("c", namesrv="127.0.0.1:1").subscribe("t")
PullConsumer("c", namesrv="127.0.0.1:1")
SimpleConsumer("c", namesrv="127.0.0.1:1")

async def aio():
    p = sluice.aio.Producer("p", namesrv="127.0.0.1:1")
    c = sluice.aio.PushConsumer("c", namesrv="127.0.0.1:1")
    c.subscribe("t", "a || b")
    return p, c

asyncio.run(aio())
with tempfile.TemporaryDirectory() as tmp:  # a broadcasting consumer's offsets: written durably, read back
    mq = MessageQueue("t", "broker-a", 0)
    store = LocalFileOffsetStore("g", "client", tmp)
    store.update_offset(mq, 7)
    assert store.persist_all([mq])
    again = LocalFileOffsetStore("g", "client", tmp)
    again.load()
    assert again.read_offset(mq) == 7
print(" ".join(sorted(m for m in ("fcntl", "resource", "termios", "uvloop") if m in sys.modules)) or "none")
"""


def test_the_client_imports_and_runs_without_the_posix_only_modules():
    assert run_without_posix(CLIENT_USE).stdout.split() == ["none"]


def test_remoting_runs_without_rlimits():
    """The client shares remoting with the servers: it imports without ``resource``, and the connection limit is
    then the configured one."""
    run_without_posix("from sluice.remoting.server import connection_limit\nassert connection_limit(1000) == 1000")


@pytest.mark.parametrize("command", [["dev"], ["broker", "--namesrv", "127.0.0.1:1"], ["namesrv"], ["proxy"]])
def test_the_servers_refuse_windows_in_one_line(command: list[str], tmp_path: Path):
    # Modules that pick their Windows half by sys.platform at import (asyncio, shutil: argparse imports it on first
    # use) are imported before the platform changes.
    code = ("import atexit, shutil, sys\nfrom sluice.cli.main import main\n"
            "atexit.register(lambda: print(sorted(m for m in sys.modules if m.startswith(('sluice.store', "
            "'sluice.broker', 'sluice.namesrv')))))\n"
            "sys.platform = 'win32'\nsys.exit(main(sys.argv[1:]))")
    res = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [f"sluice {command[0]}: the servers run on Linux and macOS, not on Windows "
                                       "(the broker's store needs POSIX file calls: pwrite, flock, O_DSYNC); run them "
                                       "under WSL or in a container: the client works on Windows"]
    assert res.stdout.strip() == "[]", "nothing of the servers was imported"
    assert not (tmp_path / ".sluice").exists()


MACOS_STORE = """
import errno, fcntl, os, sys, types
import numpy, asyncio, concurrent.futures, mmap, uuid  # imported as on Linux: only Sluice sees macOS

full_fsyncs = []
fake = types.ModuleType("fcntl")
fake.__dict__.update({k: v for k, v in vars(fcntl).items() if not k.startswith("__")})
fake.F_FULLFSYNC = 51

def fake_fcntl(fd, cmd, arg=0):
    if cmd == fake.F_FULLFSYNC:
        full_fsyncs.append(fd)
        if fd == -2:
            raise OSError(errno.ENOTSUP, "not supported here")
        if fd == -3:
            raise OSError(errno.EIO, "the disk failed")
        return 0 if fd < 0 else os.fsync(fd)
    return fcntl.fcntl(fd, cmd, arg)

fake.fcntl = fake_fcntl
sys.modules["fcntl"] = fake
sys.platform = "darwin"
del os.posix_fallocate, os.fdatasync

from sluice.common import platform
assert platform.fdatasync is platform.fsync and platform.MAPPED_WRITES_NEED_MSYNC
fsynced = []
real_fsync, os.fsync = os.fsync, lambda fd: fsynced.append(fd)
platform.fsync(-2)  # a file system without F_FULLFSYNC: a plain fsync
assert fsynced == [-2], fsynced
try:
    platform.fsync(-3)
    raise AssertionError("an I/O error must not pass for a sync")
except OSError as exc:
    assert exc.errno == errno.EIO and fsynced == [-2]
os.fsync = real_fsync

from sluice.common.config import MessageStoreConfig
from sluice.store import MessageStore
from tests.unit.helpers import msg, read_queue

cfg = MessageStoreConfig(store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=64 * 1024,
                         mapped_file_size_consume_queue=20 * 100, flush_disk_type="SYNC")
full_fsyncs.clear()
with MessageStore(cfg) as store:
    for i in range(50):
        assert store.put_message(msg(body=b"m%d" % i)).ok
assert full_fsyncs, "the store synced without F_FULLFSYNC"
with MessageStore(cfg) as store:
    assert [m.body for m in read_queue(store, "T", 0)] == [b"m%d" % i for i in range(50)]
print("ok")
"""


def test_the_store_syncs_with_full_fsync_on_macos(tmp_path: Path):
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", MACOS_STORE, str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=120, cwd=root)
    assert res.returncode == 0 and res.stdout.split() == ["ok"], res.stderr[-5000:]
