"""Java's String.hashCode, which RocketMQ uses for tag codes and index key hashes.

Clients import this module for tag codes and sharding hashes; only the broker's bulk ``index_key_hashes``
needs numpy, so numpy is imported there, on first use, and ``import sluice`` never loads it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache
from operator import mul
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

_MASK32 = 0xFFFFFFFF


# 31**k mod 2**32, highest power first: h = sum(c_i * 31**(n-1-i)) mod 2**32 equals Java's loop, and
# summing products of small ints with map() keeps the work in C.
_POW31_MOD: list[int] = []


def _pow31_mod(n: int) -> list[int]:
    while len(_POW31_MOD) < n:
        _POW31_MOD.insert(0, (_POW31_MOD[0] * 31) & _MASK32 if _POW31_MOD else 1)
    return _POW31_MOD[len(_POW31_MOD) - n :]


_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` of ``s``: h = 31*h + c over UTF-16 code units, as a signed int32."""
    units: bytes | memoryview = s.encode("ascii") if s.isascii() else memoryview(s.encode(_UTF16_NATIVE)).cast("H")
    n = len(units)
    if n > len(_POW31_MOD):
        _pow31_mod(n)
    h: int = sum(map(mul, units, _POW31_MOD[len(_POW31_MOD) - n :])) & _MASK32
    return h - 0x100000000 if h & 0x80000000 else h


T = TypeVar("T")


def select_by_hash(queues: Sequence[T], key: str) -> T:
    """Same key → same queue (RocketMQ's SelectMessageQueueByHash over Java's String.hashCode): where a producer
    sends a message group's or a lite topic's messages, and so which broker holds a lite topic."""
    h = java_string_hash(key)
    index = abs(h - int(h / len(queues)) * len(queues))  # Java's truncating remainder, then abs
    return queues[index]


@lru_cache(maxsize=65536)
def tag_hash_code(tag: str) -> int:
    """The ConsumeQueue tags code of a tag (Java hashCode, cached: tags repeat)."""
    return java_string_hash(tag)


def index_key_hash(key: str) -> int:
    """IndexFile key hash: |hashCode(key)|, with Integer.MIN_VALUE mapped to 0, as RocketMQ's IndexFile computes it."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)


_POW31_CACHE: dict[int, np.ndarray] = {}


def _pow31(length: int) -> np.ndarray:
    arr = _POW31_CACHE.get(length)
    if arr is None:
        import numpy as np

        arr = np.ones(length, dtype=np.uint32)
        for i in range(length - 2, -1, -1):
            arr[i] = np.uint32((int(arr[i + 1]) * 31) & _MASK32)
        _POW31_CACHE[length] = arr
    return arr


def index_key_hashes(keys: list[str]) -> np.ndarray:
    """Vectorised ``index_key_hash`` over many keys (int64 array).

    Left-padding a key with zero code units does not change its polynomial hash, so keys are padded
    to one length and hashed as one uint32 matrix-vector product, which wraps mod 2**32 as Java does.
    """
    import numpy as np

    if not keys:
        return np.zeros(0, dtype=np.int64)
    width = max(map(len, keys))
    if all(k.isascii() for k in keys):
        raw = "".join(k.rjust(width, "\0") for k in keys).encode("ascii")
        units = np.frombuffer(raw, dtype=np.uint8).reshape(len(keys), width).astype(np.uint32)
    else:
        # UTF-16 may need more code units than characters: pad on code units instead.
        encoded = [k.encode("utf-16-be") for k in keys]
        width = max(len(e) for e in encoded) // 2
        raw = b"".join(e.rjust(width * 2, b"\0") for e in encoded)
        units = np.frombuffer(raw, dtype=">u2").reshape(len(keys), width).astype(np.uint32)
    h = (units @ _pow31(width)).astype(np.int64)
    h = np.where(h >= 0x80000000, h - 0x100000000, h)
    return np.where(h == -0x80000000, 0, np.abs(h))
