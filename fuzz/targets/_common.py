"""What the fuzz targets share: the failure a broken property raises."""

from __future__ import annotations


class PropertyViolation(AssertionError):
    """A decoder gave a wrong answer (as opposed to raising an exception it does not document)."""


def expect(condition: object, what: str) -> None:
    """Raise ``PropertyViolation(what)`` unless ``condition`` holds."""
    if not condition:
        raise PropertyViolation(what)


def pieces(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut into 1 to 8 pieces at places derived from ``seed``: how reads may split a byte stream."""
    count = 1 + seed % 8
    if count == 1 or len(data) < 2:
        return [data]
    step = max(1, len(data) // count)
    cuts = sorted({min(len(data), i * step + (seed * (i + 7)) % step) for i in range(1, count)})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
