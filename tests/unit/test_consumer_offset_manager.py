"""Consumer offsets as a slave copies them from its master (GET_ALL_CONSUMER_OFFSET)."""

from __future__ import annotations

import json
from pathlib import Path

from sluice.store.consumer_offset_manager import ConsumerOffsetManager


def test_a_slave_takes_the_masters_offsets_and_persists_them_only_when_they_changed(tmp_path: Path) -> None:
    master = ConsumerOffsetManager(str(tmp_path / "master"))
    master.commit_offset("g", "T", 0, 7)
    master.commit_offset("g", "T", 3, 2)
    sent = master.offset_table_json()  # what the master answers: queue ids as strings, as the JSON file has them
    assert sent == {"T@g": {"0": 7, "3": 2}}
    slave = ConsumerOffsetManager(str(tmp_path / "slave"))
    slave.replace_offsets({k: {int(q): o for q, o in v.items()} for k, v in sent.items()})
    assert slave.query_offset("g", "T", 3) == 2
    assert slave.persist()
    assert json.loads(Path(slave.path).read_text()) == {"offsetTable": sent}
    Path(slave.path).unlink()
    slave.replace_offsets({"T@g": {0: 7, 3: 2}})  # the same table again: nothing to write
    assert slave.persist() and not Path(slave.path).exists()
