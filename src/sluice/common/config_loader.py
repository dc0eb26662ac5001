"""Config objects from TOML files and flags: every key checked against the dataclass, errors name the key."""

from __future__ import annotations

import dataclasses
import enum
import tomllib
import typing
from typing import Any, TypeVar

from sluice.common.errors import SluiceError

T = TypeVar("T")


class ConfigError(SluiceError, ValueError):
    """A config file or flag that cannot be used; the message names the file and key."""


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


def _coerce(value: Any, hint: Any, where: str) -> Any:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        parse = getattr(hint, "parse", None)
        try:
            return parse(value) if parse else hint(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    return value


def update_from_dict(obj: T, data: dict[str, Any], where: str) -> T:
    """Set ``obj``'s fields from ``data`` (nested tables fill nested config objects)."""
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ConfigError(f"{where}: unknown setting {key!r}")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key} must be a table")
            update_from_dict(current, value, f"{where}.{key}")
        else:
            setattr(obj, name, _coerce(value, hints[name], f"{where}.{key}"))
    post = getattr(obj, "__post_init__", None)
    if post is not None:
        try:
            post()
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return obj
