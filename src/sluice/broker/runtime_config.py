"""Settings changed while the broker runs (RocketMQ's ``Configuration.update``: ``mqadmin updateBrokerConfig``).

UPDATE_BROKER_CONFIG's body is Java properties text under RocketMQ's names. Sluice takes the settings its code
reads at each use, so that a change applies at once (``RUNTIME_SETTINGS``); any other setting is refused naming it,
since it would only apply after a restart (set it in the configuration file instead), and so is an unknown name or
a value out of range. A request changes all its settings or none.

What was changed is kept in ``<store>/config/broker_runtime.json`` (atomic, fsynced) and applied over the
configuration file at the next start, as RocketMQ persists an update into its ``broker.properties``; a setting
removed from this list since, or a value no longer valid, stops the start naming the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import msgspec

from sluice.common.config import BrokerConfig
from sluice.common.config_loader import ConfigError
from sluice.common.config_text import camel_case
from sluice.common.files import load_json, write_json_atomic

FILE_NAME = "broker_runtime.json"
MAX_BODY = 64 * 1024
MAX_SETTINGS = 64

# RocketMQ's name → (the settings struct it lives in: "broker" or "store", Sluice's name). Each is read where it
# is used, never copied at start.
_RUNTIME = {
    "broker": ("broker_permission", "auto_create_topic_enable", "auto_create_subscription_group",
               "long_polling_enable", "short_polling_time_mills", "notify_consumer_ids_changed_enable", "trace_on"),
    "store": ("file_reserved_time", "delete_when", "disk_max_used_space_ratio", "max_message_size"),
}
RUNTIME_SETTINGS: dict[str, tuple[str, str]] = {
    camel_case(name): (section, name) for section, names in _RUNTIME.items() for name in names}


class ConfigUpdateError(ValueError):
    """A setting that cannot be changed as asked: the remark names it."""


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines (``key: value`` too), ``#`` and ``!`` comments and blank lines skipped, as Java's
    ``Properties.load`` reads the simple cases RocketMQ's admin writes."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigUpdateError(f"the line {line[:80]!r} is not key=value")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def _section(config: BrokerConfig, section: str) -> msgspec.Struct:
    return config if section == "broker" else config.store


def _validated(config: BrokerConfig, changes: Mapping[str, str | Any]) -> dict[tuple[str, str], Any]:
    """{(section, name): typed value} of ``changes`` (RocketMQ names → text or JSON values); ``ConfigUpdateError``
    names the first that cannot be changed at run time or is out of range."""
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        where = RUNTIME_SETTINGS.get(key)
        if where is None:
            known = any(camel_case(n) == key for n in _all_names(config))
            if known:
                raise ConfigUpdateError(f"{key} cannot be changed while the broker runs: set it in the "
                                        f"configuration file and restart")
            raise ConfigUpdateError(f"{key} is not a broker setting (those changed at run time: "
                                    f"{', '.join(sorted(RUNTIME_SETTINGS))})")
        by_section.setdefault(where[0], {})[where[1]] = value
    out: dict[tuple[str, str], Any] = {}
    for section, values in by_section.items():
        live = _section(config, section)
        current = msgspec.to_builtins(live)
        try:
            candidate = msgspec.convert({**current, **values}, type(live), strict=False)
        except (msgspec.ValidationError, ValueError) as exc:
            raise ConfigUpdateError(f"bad value: {_rocketmq_names(str(exc))}") from None
        for name in values:
            out[(section, name)] = getattr(candidate, name)
    return out


def _all_names(config: BrokerConfig) -> list[str]:
    return [f.name for f in msgspec.structs.fields(config)] + [f.name for f in msgspec.structs.fields(config.store)]


def _rocketmq_names(text: str) -> str:
    """msgspec's ``$.file_reserved_time`` → ``fileReservedTime``."""
    for names in _RUNTIME.values():
        for name in names:
            text = text.replace(f"$.{name}", camel_case(name))
    return text


class RuntimeConfig:
    """The broker's settings changed at run time: validated, persisted, applied."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.path = os.path.join(config.store.store_path_config, FILE_NAME)
        self.saved: dict[str, dict[str, Any]] = {}

    def load(self) -> None:
        """Apply what an earlier run changed (before anything reads the settings); a bad file stops the start."""
        data = load_json(self.path)
        if not data:
            return
        changes: dict[str, Any] = {}
        for section, values in data.items():
            if section not in _RUNTIME or not isinstance(values, dict):
                raise ConfigError(f"{self.path}: {section!r} is not a section of runtime settings (broker, store)")
            changes.update({camel_case(k): v for k, v in values.items()})
        try:
            self._apply(_validated(self.config, changes))
        except ConfigUpdateError as exc:
            raise ConfigError(f"{self.path}: {exc}") from None

    def validate(self, body: bytes) -> dict[tuple[str, str], Any]:
        """What an UPDATE_BROKER_CONFIG body asks, typed; ``ConfigUpdateError`` names what cannot be done."""
        if len(body) > MAX_BODY:
            raise ConfigUpdateError(f"the body is {len(body)} bytes; at most {MAX_BODY}")
        try:
            props = parse_properties(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise ConfigUpdateError("the body is not UTF-8 text") from None
        if not props:
            raise ConfigUpdateError("the body names no setting")
        if len(props) > MAX_SETTINGS:
            raise ConfigUpdateError(f"{len(props)} settings in one request; at most {MAX_SETTINGS}")
        return _validated(self.config, props)

    def persist(self, changes: Mapping[tuple[str, str], Any]) -> dict[str, dict[str, Any]]:
        """Write the file with ``changes`` merged in (blocking: call it off the event loop); returns what it holds."""
        saved = {s: dict(v) for s, v in self.saved.items()}
        for (section, name), value in changes.items():
            saved.setdefault(section, {})[name] = msgspec.to_builtins(value)
        write_json_atomic(self.path, saved)
        return saved

    def commit(self, changes: Mapping[tuple[str, str], Any], saved: dict[str, dict[str, Any]]) -> None:
        self._apply(changes)
        self.saved = saved

    def _apply(self, changes: Mapping[tuple[str, str], Any]) -> None:
        for (section, name), value in changes.items():
            setattr(_section(self.config, section), name, value)
            self.saved.setdefault(section, {})[name] = msgspec.to_builtins(value)
