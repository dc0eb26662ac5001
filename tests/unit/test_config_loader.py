"""Server config from TOML: the documented example loads, and mistakes are named."""

import argparse
import re
from pathlib import Path

import pytest

from sluice.cli.servers import broker_config, namesrv_config
from sluice.common.config import FlushDiskType
from sluice.common.config_loader import ConfigError, load_toml

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


def test_flags_override_the_file(tmp_path):
    path = _example(tmp_path)
    args = argparse.Namespace(flush="async", broker_port=0, store=str(tmp_path / "s"), namesrv="127.0.0.1:1")
    b = broker_config(args, load_toml(str(path)), str(path))
    assert b.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH and b.listen_port == 0
    assert b.namesrv_addrs == ["127.0.0.1:1"] and b.store.store_path_root_dir == str(tmp_path / "s")


@pytest.mark.parametrize(("toml", "message"), [
    ("[broker]\nbroker_nmae = 'x'\n", "unknown setting 'broker_nmae'"),
    ("[broker]\nlisten_port = 'ten'\n", "listen_port must be an integer"),
    ("[store]\nflush_disk_type = 'sometimes'\n", "sync or async"),
    ("[broker]\nmessage_delay_level = '1s 5x'\n", "delay level '5x'"),
    ("[broker\n", "not valid TOML"),
])
def test_config_mistakes_are_named(tmp_path, toml, message):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        broker_config(argparse.Namespace(), load_toml(str(path)), str(path))


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(str(tmp_path / "nope.toml"))
