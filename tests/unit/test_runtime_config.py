"""Settings changed at run time (UPDATE_BROKER_CONFIG): the runtime ones change and are kept for the next start;
anything else is refused naming it, and a request changes all it asks or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.broker.runtime_config import ConfigUpdateError, RuntimeConfig, parse_properties
from sluice.common.config import BrokerConfig, MessageStoreConfig
from sluice.common.config_loader import ConfigError


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(store=MessageStoreConfig(store_path_root_dir=str(tmp_path)))


def test_properties_text_is_read_as_java_reads_the_simple_cases() -> None:
    assert parse_properties("# c\n! c\n\nfileReservedTime = 48\nautoCreateTopicEnable:false\n") == {
        "fileReservedTime": "48", "autoCreateTopicEnable": "false"}
    with pytest.raises(ConfigUpdateError, match="not key=value"):
        parse_properties("justakey\n")


def test_a_runtime_setting_changes_now_and_again_at_the_next_start(tmp_path: Path) -> None:
    config = _config(tmp_path)
    rc = RuntimeConfig(config)
    changes = rc.validate(b"fileReservedTime=48\nautoCreateTopicEnable=false\nbrokerPermission=4\n")
    rc.commit(changes, rc.persist(changes))
    assert (config.store.file_reserved_time, config.auto_create_topic_enable, config.broker_permission) == (
        48, False, 4)
    assert json.loads((tmp_path / "config" / "broker_runtime.json").read_text()) == {
        "broker": {"auto_create_topic_enable": False, "broker_permission": 4}, "store": {"file_reserved_time": 48}}
    again = _config(tmp_path)
    RuntimeConfig(again).load()
    assert (again.store.file_reserved_time, again.auto_create_topic_enable, again.broker_permission) == (48, False, 4)


@pytest.mark.parametrize(("body", "named"), [
    (b"listenPort=1", "listenPort cannot be changed while the broker runs"),
    (b"noSuchSetting=1", "noSuchSetting is not a broker setting"),
    (b"fileReservedTime=many", "fileReservedTime"),
    (b"brokerPermission=99", "brokerPermission"),
    (b"fileReservedTime=48\nlistenPort=1", "listenPort"),
    (b"", "names no setting"),
])
def test_anything_else_is_refused_naming_it_and_nothing_changes(tmp_path: Path, body: bytes, named: str) -> None:
    config = _config(tmp_path)
    before = (config.store.file_reserved_time, config.listen_port, config.broker_permission)
    with pytest.raises(ConfigUpdateError, match=named):
        RuntimeConfig(config).validate(body)
    assert (config.store.file_reserved_time, config.listen_port, config.broker_permission) == before
    assert not (tmp_path / "config" / "broker_runtime.json").exists()


def test_a_bad_saved_file_stops_the_start_naming_the_file_and_the_key(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "broker_runtime.json").write_text('{"broker": {"listen_port": 1}}')
    with pytest.raises(ConfigError, match=r"broker_runtime.json: listenPort"):
        RuntimeConfig(_config(tmp_path)).load()
