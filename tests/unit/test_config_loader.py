"""Server config from TOML: the documented example loads, and mistakes are named."""

import argparse
import re
from pathlib import Path

import pytest

from sluice.cli.servers import announced_ip, broker_config, namesrv_config
from sluice.common.config import FlushDiskType, ProxyConfig
from sluice.common.config_loader import ConfigError, load, load_toml

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"


def _example(tmp_path: Path) -> Path:
    text = re.search(r"```toml\n(.*?)```", DOCS.read_text(), re.S).group(1)
    path = tmp_path / "sluice.toml"
    path.write_text(text)
    return path


def test_documented_example_config_loads(tmp_path):
    path = _example(tmp_path)
    data = load_toml(str(path))
    b = broker_config(argparse.Namespace(), data, str(path))
    assert b.broker_ip == "10.0.0.5" and b.namesrv_addrs == ["10.0.0.2:9876", "10.0.0.3:9876"]
    assert b.store.flush_disk_type is FlushDiskType.SYNC_FLUSH and b.remoting.write_buffer_max == 64 << 20
    assert namesrv_config(argparse.Namespace(), data, str(path)).port == 9876
    assert load(ProxyConfig, data["proxy"], f"{path} [proxy]").tls_server_mode == "permissive"


def test_flags_override_the_file(tmp_path):
    path = _example(tmp_path)
    args = argparse.Namespace(flush="async", broker_port=0, store=str(tmp_path / "s"), namesrv="127.0.0.1:1")
    b = broker_config(args, load_toml(str(path)), str(path))
    assert b.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH and b.listen_port == 0
    assert b.namesrv_addrs == ["127.0.0.1:1"] and b.store.store_path_root_dir == str(tmp_path / "s")


@pytest.mark.parametrize(("toml", "message"), [
    ("[stor]\nflush_disk_type = 'sync'\n", "bad.toml: unknown table [stor] (did you mean 'store'?)"),
    ("flush_disk_type = 'sync'\n", "bad.toml: flush_disk_type = 'sync' is outside any table; it belongs in [store]"),
    ("[broker]\nbroker_nmae = 'x'\n", "bad.toml [broker]: unknown setting 'broker_nmae' (did you mean 'broker_name'?)"),
    ("[store]\nmax_topic_length = 200\n", "bad.toml [store]: unknown setting 'max_topic_length'"),
    ("[broker]\nlisten_port = 'ten'\n", "listen_port: an integer from 0 to 65535 is allowed, got 'ten'"),
    ("[broker]\nlisten_port = -5\n", "listen_port: an integer from 0 to 65535 is allowed, got -5"),
    ("[broker]\ndefault_topic_queue_nums = 0\n",
     "default_topic_queue_nums: an integer from 1 to 1024 is allowed, got 0"),
    ("[store]\nmax_properties_size = 40000\n", "[store]: max_properties_size: an integer from 1 to 32767 is allowed, "
                                               "got 40000"),
    ("[store]\nflush_disk_type = 'sometimes'\n", "flush_disk_type: Invalid enum value 'sometimes'; sync or async"),
    ("[broker]\nauto_create_topic_enable = 'yes'\n", "auto_create_topic_enable: true or false is allowed, got 'yes'"),
    ("[broker.remoting]\nmax_frame_size = 10\n", "remoting.max_frame_size: an integer from 1024 to"),
    ("[broker.remoting]\nwrite_buffer_low = 999999999\n", "write_buffer_low <= write_buffer_high"),
    ("[store]\ndelete_when = '25'\n", "delete_when: hours of the day from 0 to 23"),
    ("[store]\nmapped_file_size_consume_queue = 30\n", "and a multiple of 20 is allowed, got 30"),
    ("[broker]\nbroker_name = 'a b'\n", "broker_name: 1 to 127 letters, digits"),
    ("[broker]\nstore = 5\n", "store must be a table"),
    ("[broker]\nmessage_delay_level = '1s 5x'\n", "message_delay_level: delay level '5x'"),
    ("[broker\n", "not valid TOML"),
    ("[broker]\nmetrics_label = 'region=eu'\n", "metrics_label: label:value pairs separated by ','"),
    ("[broker]\nmetrics_exporter_type = 'OTLP'\n", "metrics_exporter_type"),
])
def test_config_mistakes_are_named_with_the_file_the_key_and_what_is_allowed(tmp_path, toml, message):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        broker_config(argparse.Namespace(), load_toml(str(path)), str(path))


def test_a_typo_in_a_table_name_does_not_silently_drop_sync_flush(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text("[stor]\nflush_disk_type = 'sync'\n")
    with pytest.raises(ConfigError, match=r"unknown table \[stor\]"):
        namesrv_config(argparse.Namespace(), load_toml(str(path)), str(path))


def test_flag_mistakes_name_the_flag():
    with pytest.raises(ConfigError, match=re.escape("--broker-port: listen_port: an integer from 0 to 65535")):
        broker_config(argparse.Namespace(broker_port=70000), {}, "flags")
    with pytest.raises(ConfigError, match=re.escape("--flush: store.flush_disk_type: Invalid enum value 'maybe'")):
        broker_config(argparse.Namespace(flush="maybe"), {}, "flags")


def test_a_wildcard_host_binds_everywhere_but_is_never_announced():
    b = broker_config(argparse.Namespace(host="0.0.0.0"), {}, "flags")
    assert b.listen_host == "0.0.0.0" and b.broker_ip not in ("0.0.0.0", "")
    assert b.broker_ip == announced_ip("0.0.0.0")
    given = broker_config(argparse.Namespace(host="0.0.0.0"), {"broker": {"broker_ip": "10.1.2.3"}}, "f.toml")
    assert (given.listen_host, given.broker_ip) == ("0.0.0.0", "10.1.2.3")
    assert broker_config(argparse.Namespace(host="127.0.0.2"), {}, "flags").broker_ip == "127.0.0.2"


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(str(tmp_path / "nope.toml"))
