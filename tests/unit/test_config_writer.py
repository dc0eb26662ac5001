"""Config files written off the caller's thread: a burst of changes shares writes, a failed write is retried."""

from __future__ import annotations

import errno
import json
import threading
import time
from pathlib import Path

import pytest

from sluice.common import files as files_module
from sluice.common.files import ConfigWriter


def test_a_burst_of_changes_shares_writes_and_the_last_state_is_written(tmp_path: Path):
    state = {"n": 0}
    lock = threading.Lock()

    def snapshot() -> dict:
        with lock:
            return dict(state)

    writer = ConfigWriter(str(tmp_path / "t.json"), snapshot)
    futures = []
    for i in range(1, 501):
        with lock:
            state["n"] = i
        futures.append(writer.request())
    for f in futures:
        f.result(10)  # each done once a write begun after it ended
    assert json.loads((tmp_path / "t.json").read_text()) == {"n": 500}
    assert writer.writes < 500  # shared, not one write per change
    writer.close()


def test_a_failed_write_fails_its_waiters_is_logged_once_and_is_retried(tmp_path: Path, monkeypatch, caplog):
    real = files_module.write_json_atomic
    failures = {"left": 3}

    target = str(tmp_path / "t.json")

    def flaky(path: str, data: dict, mode: int = 0o644) -> None:
        # Only this test's file: a broker another test of this process left running writes its own meanwhile.
        if path == target and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, mode)

    monkeypatch.setattr(files_module, "write_json_atomic", flaky)
    writer = ConfigWriter(str(tmp_path / "t.json"), lambda: {"v": 1}, retry_after=0.01)
    with pytest.raises(OSError):
        writer.request().result(10)
    deadline = time.monotonic() + 10
    while writer.writes == 0:  # retried, without any new change, until it worked
        assert time.monotonic() < deadline, "never written"
        time.sleep(0.01)
    assert json.loads((tmp_path / "t.json").read_text()) == {"v": 1} and failures["left"] == 0
    errors = [r for r in caplog.records if r.levelname == "ERROR" and target in r.getMessage()]
    assert len(errors) == 1 and "stays in memory" in errors[0].getMessage()
    writer.close()


def test_close_writes_what_changed_last(tmp_path: Path):
    state = {"v": 0}
    writer = ConfigWriter(str(tmp_path / "t.json"), lambda: dict(state))
    writer.request().result(10)
    state["v"] = 2
    writer.request()
    writer.close()
    assert json.loads((tmp_path / "t.json").read_text()) == {"v": 2}
