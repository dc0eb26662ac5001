"""Java's String.hashCode, which RocketMQ uses for tag codes and index key hashes."""

from functools import lru_cache

import numpy as np

_MASK32 = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` of ``s``: h = 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK32
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def tag_hash_code(tag: str) -> int:
    """The ConsumeQueue tags code of a tag (Java hashCode, cached: tags repeat)."""
    return java_string_hash(tag)


def index_key_hash(key: str) -> int:
    """IndexFile key hash: |hashCode(key)|, with Integer.MIN_VALUE mapped to 0 (spec §7.3)."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)


_POW31_CACHE: dict[int, np.ndarray] = {}


def _pow31(length: int) -> np.ndarray:
    arr = _POW31_CACHE.get(length)
    if arr is None:
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
