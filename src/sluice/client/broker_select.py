"""Which address of a broker group a request goes to (RocketMQ MQClientInstance.findBrokerAddressIn*).

A group is one broker name: id 0 its master, 1.. its slaves, as the route names them (``{id: "ip:port"}``).
Pure: the caller passes the group's addresses from its latest route.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.common.structs import MASTER_ID

# (address, is a slave): a pull answered by a slave must not carry an offset commit (RocketMQ clears the flag).
FoundBroker = tuple[str, bool]


def publish_addr(addrs: Mapping[int, str] | None) -> str | None:
    """Sends and transaction ends: the master only; a slave cannot take writes."""
    return addrs.get(MASTER_ID) if addrs else None


def admin_addr(addrs: Mapping[int, str] | None) -> FoundBroker | None:
    """Offset commits and queries: the master, else the lowest slave (it keeps serving reads meanwhile)."""
    if not addrs:
        return None
    bid = MASTER_ID if MASTER_ID in addrs else min(addrs)
    return addrs[bid], bid != MASTER_ID


def subscribe_addr(addrs: Mapping[int, str] | None, broker_id: int = MASTER_ID) -> FoundBroker | None:
    """Pulls: ``broker_id`` (what the last pull's answer suggested) when the group has it; a suggested slave that
    is gone gives way to the next id, as in RocketMQ; otherwise the master, else the lowest slave."""
    if not addrs:
        return None
    tries = (broker_id,) if broker_id == MASTER_ID else (broker_id, broker_id + 1)
    for bid in tries:
        addr = addrs.get(bid)
        if addr is not None:
            return addr, bid != MASTER_ID
    return admin_addr(addrs)


__all__ = ["FoundBroker", "admin_addr", "publish_addr", "subscribe_addr"]
