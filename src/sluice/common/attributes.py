"""Topic and subscription-group attributes: RocketMQ's TopicAttributes / SubscriptionGroupAttributes, the
``+key=value,-key`` modification text of AttributeParser and the checks of AttributeUtil.

A topic's or group's attributes are a ``str → str`` map kept with its config (``"attributes"`` in topics.json /
subscriptionGroup.json, as RocketMQ keeps them). A request changes them with a modification: ``+key=value`` adds
or updates, ``-key`` deletes (only ``+`` when the topic or group is created). Every refusal raises
``AttributeRefused`` with RocketMQ's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluice.common.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
)

MAX_MODIFICATION = 4096  # characters of one ``+k=v,-k`` text: far more than every known attribute needs
MAX_ATTRIBUTE_VALUE = 1024


class AttributeRefused(ValueError):
    """A modification RocketMQ refuses (its RuntimeException message)."""


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    changeable: bool

    def verify(self, value: str) -> None:
        if len(value) > MAX_ATTRIBUTE_VALUE:
            raise AttributeRefused(f"value of {self.name} is longer than {MAX_ATTRIBUTE_VALUE} characters")


@dataclass(frozen=True, slots=True)
class EnumAttribute(Attribute):
    universe: tuple[str, ...]
    default: str

    def verify(self, value: str) -> None:
        if value not in self.universe:
            raise AttributeRefused(f"value is not in set: [{', '.join(java_hash_set_order(self.universe))}]")


@dataclass(frozen=True, slots=True)
class LongRangeAttribute(Attribute):
    low: int
    high: int
    default: int

    def verify(self, value: str) -> None:
        n = java_long(value)
        if n is None:
            raise AttributeRefused(f'For input string: "{value[:64]}"')
        if not self.low <= n <= self.high:
            raise AttributeRefused(f"value is not in range({self.low}, {self.high})")

    def value_of(self, attributes: Mapping[str, str]) -> int:
        n = java_long(attributes.get(self.name, ""))
        return self.default if n is None else n


@dataclass(frozen=True, slots=True)
class BooleanAttribute(Attribute):
    default: bool

    def verify(self, value: str) -> None:
        if value.lower() not in ("true", "false"):
            raise AttributeRefused("boolean attribute format is wrong.")


@dataclass(frozen=True, slots=True)
class StringAttribute(Attribute):
    pass


def java_hash_set_order(values: tuple[str, ...]) -> list[str]:
    """``values`` in the order Java iterates a Guava ``Sets.newHashSet(values...)`` of them: what RocketMQ's
    refusals print. Buckets of a table sized for the values (String.hashCode spread as HashMap spreads it), each
    in insertion order."""
    expected = len(values)
    capacity = expected + 1 if expected < 3 else int(expected / 0.75 + 1.0)
    size = 1
    while size < capacity:
        size *= 2
    buckets: dict[int, list[str]] = {}
    for v in values:
        h = 0
        for unit in range(0, len(b := v.encode("utf-16-be")), 2):
            h = (31 * h + int.from_bytes(b[unit:unit + 2], "big")) & 0xFFFFFFFF
        buckets.setdefault((h ^ (h >> 16)) & (size - 1), []).append(v)
    return [v for i in sorted(buckets) for v in buckets[i]]


def java_long(text: str) -> int | None:
    """``text`` as Java's Long.parseLong reads it, or None where it throws."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit() or len(body.lstrip("0")) > 19:
        return None
    n = int(text)
    return n if -(2**63) <= n < 2**63 else None


# RocketMQ 5.5's TopicMessageType, in its order.
TOPIC_MESSAGE_TYPES = ("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED")

QUEUE_TYPE = EnumAttribute("queue.type", False, ("BatchCQ", "SimpleCQ"), "SimpleCQ")
CLEANUP_POLICY = EnumAttribute("cleanup.policy", False, ("DELETE", "COMPACTION"), "DELETE")
MESSAGE_TYPE = EnumAttribute("message.type", True, TOPIC_MESSAGE_TYPES, "NORMAL")
RESERVE_TIME = LongRangeAttribute("reserve.time", True, -1, 2**63 - 1, -1)
LITE_TOPIC_EXPIRATION = LongRangeAttribute("lite.topic.expiration", True, -1, 30 * 24 * 60, -1)

TOPIC_ATTRIBUTES: dict[str, Attribute] = {a.name: a for a in (
    QUEUE_TYPE, CLEANUP_POLICY, MESSAGE_TYPE, RESERVE_TIME, LITE_TOPIC_EXPIRATION)}

# 0 turns a group's priority mode off, 100 (the default) makes every pop of a priority topic take the highest
# priority first; in between, that share of pops.
PRIORITY_FACTOR = LongRangeAttribute("priority.factor", True, 0, 100, 100)

GROUP_ATTRIBUTES: dict[str, Attribute] = {a.name: a for a in (
    PRIORITY_FACTOR,
    StringAttribute("lite.bind.topic", True),
    LongRangeAttribute("lite.sub.client.quota", True, -1, 2**63 - 1, 2000),
    EnumAttribute("lite.sub.model", True, ("Shared", "Exclusive"), "Shared"),
    BooleanAttribute("lite.sub.reset.offset.exclusive", True, False),
    BooleanAttribute("lite.sub.reset.offset.unsubscribe", True, False),
    LongRangeAttribute("lite.sub.client.max.event.cnt", True, 10, 2**63 - 1, 400),
    StringAttribute("lite.sub.wildcard", True),
)}


def parse_modification(text: str | None) -> dict[str, str]:
    """``+k1=v1,+k2=v2,-k3`` as a map of the signed keys (AttributeParser.parseToMap)."""
    if not text:
        return {}
    if len(text) > MAX_MODIFICATION:
        raise AttributeRefused(f"attributes modification is longer than {MAX_MODIFICATION} characters")
    out: dict[str, str] = {}
    kvs = text.split(",")
    while kvs and not kvs[-1]:  # (Java's split drops trailing empty strings)
        kvs.pop()
    for kv in kvs:
        if "=" in kv:
            parts = kv.split("=")
            while parts and not parts[-1]:  # (Java's split again: "+k=" is one part, and Java's [1] then throws)
                parts.pop()
            if len(parts) < 2:
                raise AttributeRefused(f"Index 1 out of bounds for length {len(parts)}")
            key, value = parts[0], parts[1]
            if "+" not in key:
                raise AttributeRefused(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise AttributeRefused(f"delete attribute format is wrong: {key}")
        if key in out:
            raise AttributeRefused(f"key duplication: {key}")
        out[key] = value
    return out


def modification_text(attributes: Mapping[str, str]) -> str:
    """The inverse of ``parse_modification`` (AttributeParser.parseToString): what a client sends."""
    return ",".join(k if not v else f"{k}={v}" for k, v in attributes.items())


def alter(create: bool, universe: Mapping[str, Attribute], current: Mapping[str, str],
          modification: Mapping[str, str]) -> dict[str, str]:
    """The attributes after ``modification`` (signed keys) of ``current`` (AttributeUtil.alterCurrentAttributes):
    on ``create`` only additions; an update of an unchangeable attribute, an unknown key, a value out of its
    set or range, a deletion of an absent key are refused."""
    init: dict[str, str] = {}
    add: dict[str, str] = {}
    update: dict[str, str] = {}
    delete: dict[str, str] = {}
    seen: set[str] = set()
    for key, value in modification.items():
        real = key[1:]
        if not real or "+" in real or "-" in real:
            raise AttributeRefused("kv string format wrong.")
        if real in seen:
            raise AttributeRefused(f"alter duplication key. key: {real}")
        seen.add(real)
        if create:
            if not key.startswith("+"):
                raise AttributeRefused(f"only add attribute is supported while creating topic. key: {real}")
            init[real] = value
        elif key.startswith("+"):
            (update if real in current else add)[real] = value
        elif key.startswith("-"):
            if real not in current:
                raise AttributeRefused(f"attempt to delete a nonexistent key: {real}")
            delete[real] = value
        else:
            raise AttributeRefused(f"wrong format key: {real}")
    for alter_set, is_init, is_delete in ((init, True, False), (add, False, False), (update, False, False),
                                          (delete, False, True)):
        for key, value in alter_set.items():
            attribute = universe.get(key)
            if attribute is None:
                raise AttributeRefused(f"unsupported key: {key}")
            if not is_init and not attribute.changeable:
                raise AttributeRefused(f"attempt to update an unchangeable attribute. key: {key}")
            if not is_delete:
                attribute.verify(value)
    out = {**current, **init, **add, **update}
    for key in delete:
        out.pop(key, None)
    return out


def topic_attributes_unsupported(modification: Mapping[str, str]) -> str | None:
    """Why Sluice cannot make a topic what ``modification`` (signed keys) asks (features it does not have: RocketMQ
    5.5 takes them), or None."""
    for attribute, why in ((QUEUE_TYPE, "Sluice keeps SimpleCQ consume queues only"),
                           (CLEANUP_POLICY, "Sluice has no compacted topics")):
        value = modification.get("+" + attribute.name)
        if value is not None and value != attribute.default:
            return f"{attribute.name}={value} is not supported by Sluice: {why}"
    return None


def message_type_of_properties(props: Mapping[str, str]) -> str:
    """A message's type by its properties, each type excluding the later ones
    (TopicMessageType.parseFromMessageProperty)."""
    if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
        return "TRANSACTION"
    if PROPERTY_DELAY_TIME_LEVEL in props or PROPERTY_TIMER_DELIVER_MS in props or PROPERTY_TIMER_DELAY_SEC in props \
            or PROPERTY_TIMER_DELAY_MS in props:
        return "DELAY"
    if PROPERTY_SHARDING_KEY in props:
        return "FIFO"
    if PROPERTY_PRIORITY in props:
        return "PRIORITY"
    if PROPERTY_LITE_TOPIC in props:
        return "LITE"
    return "NORMAL"
