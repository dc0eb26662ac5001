"""Client-side offsets: the in-memory table and the broadcasting consumer's local file."""

from __future__ import annotations

import json
import threading

import pytest

from sluice.client.offset_store import LocalFileOffsetStore, OffsetTable
from sluice.common.errors import OffsetStoreError
from sluice.common.structs import MessageQueue

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-a", 1)
R0 = MessageQueue("%RETRY%g", "broker-a", 0)


def test_unknown_queue_reads_minus_one():
    assert OffsetTable().read(Q0) == -1


def test_increase_only_ignores_smaller_offsets():
    t = OffsetTable()
    t.update(Q0, 10, increase_only=True)
    t.update(Q0, 7, increase_only=True)
    assert t.read(Q0) == 10
    t.update(Q0, 7)
    assert t.read(Q0) == 7


def test_snapshot_by_topic_and_remove():
    t = OffsetTable({Q0: 1, R0: 2})
    assert t.snapshot("T") == {Q0: 1}
    assert t.snapshot() == {Q0: 1, R0: 2}
    assert t.remove(Q0) == 1 and t.remove(Q0) == -1
    assert Q0 not in t and len(t) == 1


def test_increase_only_updates_from_many_threads_keep_the_maximum():
    t = OffsetTable()

    def work(start: int) -> None:
        for off in range(start, 5000, 4):
            t.update(Q0, off, increase_only=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.read(Q0) == 4999


def _store(tmp_path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore("g", "10.0.0.1@1", base_dir=tmp_path)


def test_file_lives_under_client_id_and_group(tmp_path):
    s = _store(tmp_path)
    assert s.path == tmp_path / "10.0.0.1@1" / "g" / "offsets.json"


def test_offsets_survive_a_restart(tmp_path):
    s = _store(tmp_path)
    s.load()  # no file yet: fine
    s.update_offset(Q0, 42)
    s.update_offset(R0, 3)
    assert s.persist_all() is True
    s2 = _store(tmp_path)
    s2.load()
    assert (s2.read_offset(Q0), s2.read_offset(R0), s2.read_offset(Q1)) == (42, 3, -1)


def test_file_format_is_readable_json(tmp_path):
    s = _store(tmp_path)
    s.update_offset(Q0, 5)
    s.persist_all()
    data = json.loads(s.path.read_text())
    assert data == {"clientId": "10.0.0.1@1", "group": "g",
                    "offsetTable": [{"brokerName": "broker-a", "queueId": 0, "topic": "T", "offset": 5}]}


def test_persist_keeps_the_previous_version_as_bak_and_skips_unchanged_writes(tmp_path):
    s = _store(tmp_path)
    s.update_offset(Q0, 1)
    s.persist_all()
    assert not s.bak_path.exists()
    assert s.persist_all() is False
    s.update_offset(Q0, 2)
    assert s.persist_all() is True
    assert json.loads(s.bak_path.read_text())["offsetTable"][0]["offset"] == 1
    assert json.loads(s.path.read_text())["offsetTable"][0]["offset"] == 2
    assert not s.path.with_name("offsets.json.tmp").exists()


def test_removed_queue_keeps_its_persisted_offset(tmp_path):
    s = _store(tmp_path)
    s.update_offset(Q0, 9)
    s.update_offset(Q1, 4)
    s.persist_all()
    s.remove(Q0)
    s.update_offset(Q1, 6)
    s.persist_all()
    assert Q0 not in s.offsets()
    assert s.read_offset(Q0) == 9  # back from what the file holds
    s2 = _store(tmp_path)
    s2.load()
    assert s2.offsets() == {Q0: 9, Q1: 6}


def test_persist_selected_queues_only(tmp_path):
    s = _store(tmp_path)
    s.update_offset(Q0, 1)
    s.update_offset(Q1, 2)
    s.persist_all([Q1])
    s2 = _store(tmp_path)
    s2.load()
    assert s2.offsets() == {Q1: 2}
    s.persist(Q0)
    s3 = _store(tmp_path)
    s3.load()
    assert s3.offsets() == {Q0: 1, Q1: 2}


def test_missing_file_falls_back_to_bak(tmp_path):
    s = _store(tmp_path)
    s.update_offset(Q0, 1)
    s.persist_all()
    s.update_offset(Q0, 2)
    s.persist_all()
    s.path.unlink()
    s2 = _store(tmp_path)
    s2.load()
    assert s2.read_offset(Q0) == 1


@pytest.mark.parametrize("content", ["{not json", "", "[1, 2]", '{"offsetTable": [{"topic": "T"}]}',
                                     '{"offsetTable": {"a": 1}}'])
def test_corrupt_file_is_an_error_naming_it(tmp_path, content):
    s = _store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(content)
    with pytest.raises(OffsetStoreError, match="offsets.json"):
        s.load()


def test_unwritable_directory_is_an_error_naming_the_file(tmp_path):
    blocker = tmp_path / "10.0.0.1@1"
    blocker.write_text("a file where a directory should be")
    s = _store(tmp_path)
    s.update_offset(Q0, 1)
    with pytest.raises(OffsetStoreError, match="offsets.json"):
        s.persist_all()


class _Broker:
    """Stands in for the client's broker calls: records when each commit starts and ends (a test double of the
    network, not of the offset store under test)."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.events: list[tuple[str, str, int]] = []
        self.fail = fail
        self.api = self

    async def master_addr_of(self, mq: MessageQueue) -> str:
        return "127.0.0.1:10911"

    def refresh_route_soon(self, topic: str) -> None:
        self.events.append(("refresh", topic, -1))

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        import asyncio

        from sluice.remoting.errors import RemotingError
        self.events.append(("start", mq.topic, mq.queue_id))
        await asyncio.sleep(0.01)
        self.events.append(("end", mq.topic, mq.queue_id))
        if mq.queue_id in self.fail:
            raise RemotingError("connection reset")


def test_a_topics_first_commit_ends_before_its_other_queues_commits_start_together() -> None:
    """Apache RocketMQ makes a group's offset table of a topic at its first commit without a lock: two first
    commits at once may lose one. Per topic, one commit goes first; the others then go at once."""
    import asyncio

    from sluice.client.remote_offset_store import RemoteBrokerOffsetStore
    broker = _Broker()
    store = RemoteBrokerOffsetStore(broker, "g")  # type: ignore[arg-type]
    queues = [MessageQueue(t, "broker-a", i) for t in ("A", "B") for i in range(4)]
    for mq in queues:
        store.update_offset(mq, 5 + mq.queue_id)
    asyncio.run(store.persist_all(queues))
    for topic in ("A", "B"):
        mine = [(what, qid) for what, t, qid in broker.events if t == topic]
        assert mine[:2] == [("start", 0), ("end", 0)], mine  # the first alone
        assert [w for w, _ in mine[2:5]] == ["start"] * 3, mine  # the other three at once
    assert broker.events[0][0] == broker.events[1][0] == "start"  # (the two topics' first commits together)
    asyncio.run(store.persist_all(queues))  # nothing new to commit: nothing sent
    assert len(broker.events) == 16


def test_a_commit_asked_for_by_hand_raises_after_every_queue_was_tried() -> None:
    import asyncio

    from sluice.client.remote_offset_store import RemoteBrokerOffsetStore
    from sluice.common.errors import ClientError
    broker = _Broker(fail={1})
    store = RemoteBrokerOffsetStore(broker, "g")  # type: ignore[arg-type]
    queues = [MessageQueue("A", "broker-a", i) for i in range(4)]
    for mq in queues:
        store.update_offset(mq, 7)
    with pytest.raises(ClientError, match="cannot commit offset 7 of A@broker-a:1 for group g: connection reset"):
        asyncio.run(store.persist_all(queues, raise_errors=True))
    assert sorted(qid for what, _, qid in broker.events if what == "end") == [0, 1, 2, 3]
    before = len(broker.events)
    asyncio.run(store.persist_all(queues))  # (logged, not raised: the periodic commit tries queue 1 again)
    assert [qid for what, _, qid in broker.events[before:] if what == "start"] == [1]
