"""Config objects from TOML files, flags and keyword settings, checked by msgspec against their Structs.

Every key must be known, every value of its type and within its range (``sluice.common.config``); a mistake stops
the program with a ``ConfigError`` naming where it came from (the file and table, or the flag), the key, and what
is allowed.
"""

from __future__ import annotations

import difflib
import enum
import re
import tomllib
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from msgspec import inspect

from sluice.common.config import PATTERN_WORDS, BrokerConfig, MessageStoreConfig, NamesrvConfig, ProxyConfig
from sluice.common.errors import SluiceError

T = TypeVar("T")

SERVER_TABLES = ("namesrv", "broker", "store", "proxy")
_FIELDS_OF = {"namesrv": NamesrvConfig.__struct_fields__, "broker": BrokerConfig.__struct_fields__,
              "store": MessageStoreConfig.__struct_fields__, "proxy": ProxyConfig.__struct_fields__}


class ConfigError(SluiceError, ValueError):
    """A config file, flag or setting that cannot be used; the message names where, the key and what is allowed."""


class SettingError(ConfigError, TypeError):
    """A keyword setting of a client that does not exist or has a value it cannot take."""


def load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def server_tables(data: Mapping[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """A server config file's tables (``[namesrv]``, ``[broker]``, ``[store]``, ``[proxy]``); any other is an
    error."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if name not in SERVER_TABLES and not isinstance(table, Mapping):
            owners = [t for t in SERVER_TABLES if name in _FIELDS_OF.get(t, ())]
            hint = f"; it belongs in {' or '.join(f'[{t}]' for t in owners)}" if owners else ""
            raise ConfigError(f"{where}: {name} = {table!r} is outside any table{hint}; the tables are "
                              f"{', '.join(f'[{t}]' for t in SERVER_TABLES)}")
        if name not in SERVER_TABLES:
            raise ConfigError(f"{where}: unknown table [{name}]{_did_you_mean(name, SERVER_TABLES)}; the tables are "
                              f"{', '.join(f'[{t}]' for t in SERVER_TABLES)}")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: {name} must be a table ([{name}]), not {table!r}")
        out[name] = dict(table)
    return out


def load(cls: type[T], data: Mapping[str, Any], where: str, sources: Mapping[str, str] | None = None,
         error: type[ConfigError] = ConfigError) -> T:
    """``data`` as a ``cls``, every key and value checked. ``sources`` maps a key (``remoting.max_frame_size``)
    to where it came from when that is not ``where`` (a flag)."""
    try:
        return msgspec.convert(_normalized(cls, data), cls, strict=True)
    except msgspec.ValidationError as exc:
        raise error(_explain(cls, data, str(exc), where, sources or {})) from None


def check(config: T, where: str = "config") -> T:
    """``config`` (made in code, where nothing checked it) checked as a loaded one would be; a checked copy."""
    return load(type(config), msgspec.to_builtins(config), where)


def _normalized(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """Dashes in keys read as underscores; enum settings by any spelling their ``parse`` takes."""
    info = inspect.type_info(cls)
    fields = {f.name: f.type for f in getattr(info, "fields", ())}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_") if isinstance(key, str) else key
        typ = fields.get(name)
        if isinstance(typ, inspect.EnumType) and isinstance(value, str):
            parse = getattr(typ.cls, "parse", None)
            if parse is not None:
                try:
                    value = parse(value).value
                except ValueError:
                    pass  # msgspec names the allowed values
        elif isinstance(typ, inspect.StructType) and isinstance(value, Mapping):
            value = _normalized(typ.cls, value)
        out[name] = value
    return out


_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def _explain(cls: type, data: Mapping[str, Any], message: str, where: str, sources: Mapping[str, str]) -> str:
    m = _AT.match(message)
    assert m is not None
    problem, path = m.group("problem"), (m.group("path") or "").lstrip(".")
    keys = [k for k in re.split(r"\.|\[\d+\]", path) if k] if path else []
    unknown = re.match(r"Object contains unknown field `(.*)`", problem)
    if unknown:
        keys.append(unknown.group(1))
    dotted = ".".join(keys)
    origin = sources.get(dotted, where)
    owner, field_type = _field(cls, keys)
    shown = keys[1:] if keys and origin.endswith(f"[{keys[0]}]") else keys  # "[store]: max_message_size"
    key = ".".join(shown)
    if unknown:
        known = [f.name for f in getattr(inspect.type_info(owner), "fields", ())] if owner else []
        return f"{origin}: unknown setting {key!r}{_did_you_mean(keys[-1], known)}"
    value = _value_at(data, keys)
    allowed = _allowed(field_type)
    got = f", got {value!r}" if value is not _MISSING else ""
    prefix = f"{origin}: {key}: " if key else f"{origin}: "
    if problem.startswith("Expected"):
        return f"{prefix}{allowed or problem}{got}"
    return f"{prefix}{problem}{'; ' + allowed if allowed and not isinstance(field_type, inspect.StructType) else ''}"


_MISSING = object()


def _value_at(data: Mapping[str, Any], keys: list[str]) -> Any:
    cur: Any = data
    for k in keys:
        if not isinstance(cur, Mapping):
            return _MISSING
        cur = cur.get(k, cur.get(k.replace("_", "-"), _MISSING))
        if cur is _MISSING:
            return _MISSING
    return cur


def _field(cls: type, keys: list[str]) -> tuple[type | None, Any]:
    """The Struct class holding the last of ``keys``, and that field's msgspec type (None when unknown)."""
    owner: type | None = cls
    typ: Any = None
    for i, k in enumerate(keys):
        if owner is None:
            return None, None
        info = inspect.type_info(owner)
        fields = {f.name: f.type for f in getattr(info, "fields", ())}
        typ = fields.get(k)
        if i < len(keys) - 1:
            owner = typ.cls if isinstance(typ, inspect.StructType) else None
    return owner, typ


def _allowed(typ: Any) -> str:
    """What a field takes, in words: ``an integer from 0 to 65535``, ``true or false``, ..."""
    if isinstance(typ, inspect.IntType | inspect.FloatType):
        kind = "an integer" if isinstance(typ, inspect.IntType) else "a number"
        low, high = typ.ge if typ.ge is not None else typ.gt, typ.le if typ.le is not None else typ.lt
        multiple = f" and a multiple of {typ.multiple_of}" if getattr(typ, "multiple_of", None) else ""
        if low is not None and high is not None:
            return f"{kind} from {low} to {high}{multiple} is allowed"
        if low is not None:
            return f"{kind} of at least {low}{multiple} is allowed"
        if high is not None:
            return f"{kind} of at most {high}{multiple} is allowed"
        return f"{kind} is allowed"
    if isinstance(typ, inspect.BoolType):
        return "true or false is allowed"
    if isinstance(typ, inspect.StrType):
        if not typ.pattern:
            return "a string is allowed"
        return f"{PATTERN_WORDS.get(typ.pattern, f'a string matching {typ.pattern!r}')} is allowed"
    if isinstance(typ, inspect.EnumType):
        described = getattr(typ.cls, "allowed", None)
        if described is not None:
            return f"{described()} is allowed"
        values = [e.value for e in typ.cls] if issubclass(typ.cls, enum.Enum) else []
        return f"one of {', '.join(map(str, values))} is allowed"
    if isinstance(typ, inspect.LiteralType):
        return f"one of {', '.join(repr(v) for v in typ.values)} is allowed"
    if isinstance(typ, inspect.StructType):
        return "a table is allowed"
    return ""


def _did_you_mean(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
