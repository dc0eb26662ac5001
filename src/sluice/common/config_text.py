"""A running server's settings as RocketMQ's GET_BROKER_CONFIG / GET_NAMESRV_CONFIG answer them: Java properties
text, one ``camelCaseName=value`` a line, sorted (what ``mqadmin getBrokerConfig`` and ``getNamesrvConfig`` print).

Sluice's settings are RocketMQ's names in snake_case, so each goes back to its camelCase name; the store's and the
remoting endpoint's nested settings are listed beside the server's own, as RocketMQ's flat ``broker.properties``
has them. Secrets (passwords, secret keys) are never written: their value shows as ``******``.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import msgspec

REDACTED = "******"
_LINE_BREAK = re.compile(r"[\r\n]")
# Settings whose value is, or holds, a secret.
_SECRETS = frozenset({"init_authentication_user", "inner_client_authentication_credentials",
                      "tls_server_key_password", "tls_client_key_password"})


# Where RocketMQ's name is not the plain camelCase of Sluice's.
_RENAMED = {"broker_ip": "brokerIP1", "check_crc_on_recover": "checkCRCOnRecover", "listen_host": "bindAddress",
            "transaction_timeout": "transactionTimeOut", "min_lite_ttl": "minLiteTTl",
            "lite_subscription_check_timeout": "liteSubscriptionCheckTimeoutMills"}
# Fractions in Sluice's settings that RocketMQ's hold as whole percents.
_PERCENT = frozenset({"disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"})


def camel_case(name: str) -> str:
    """``flush_disk_type`` → ``flushDiskType`` (``broker_ip`` → ``brokerIP1``: RocketMQ's own spelling)."""
    renamed = _RENAMED.get(name)
    if renamed is not None:
        return renamed
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if value is None:
        return ""
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, (msgspec.Struct, dict)):
        return msgspec.json.encode(value).decode()
    return str(value)


def config_items(config: msgspec.Struct) -> dict[str, str]:
    """Every setting of ``config`` and of the settings structs nested in it, by RocketMQ's name."""
    out: dict[str, str] = {}
    for f in msgspec.structs.fields(config):
        value = getattr(config, f.name)
        if f.name in _SECRETS:
            out[camel_case(f.name)] = REDACTED if value else ""
        elif f.name in _PERCENT:
            out[camel_case(f.name)] = str(round(value * 100))
        elif isinstance(value, msgspec.Struct) and f.name in ("store", "remoting"):
            out.update(config_items(value))
        else:
            out[camel_case(f.name)] = _text(value)
    return out


def config_properties_text(config: msgspec.Struct, extra: dict[str, str] | None = None) -> str:
    """``config`` (and ``extra``) as properties text, sorted by name; line breaks in a value are escaped."""
    items = {**config_items(config), **(extra or {})}
    return "".join(f"{k}={_LINE_BREAK.sub(' ', v)}\n" for k, v in sorted(items.items()))
