"""Exponential backoff with full jitter, for every "try again later" of the clients.

After the n-th failure in a row the wait is uniform in [0, min(cap, base · 2ⁿ⁻¹)] (AWS's "full jitter"): clients
that failed together do not come back together, and a long outage costs one attempt per ``cap``, not one per
fixed second. A success starts over from ``base``.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# The client's own generator: jitter drawn here leaves an application's use of ``random`` (its seeded sequences)
# alone.
RNG = random.Random()


class Backoff:
    """The waits (s) between the attempts of one thing: a reconnect, a route lookup, a queue's pulls."""

    __slots__ = ("base", "cap", "failures", "_random")

    def __init__(self, base: float, cap: float, rng: Callable[[], float] | None = None) -> None:
        if base < 0 or cap < 0:
            raise ValueError(f"backoff needs a base and a cap of at least 0, got base {base} and cap {cap}")
        self.base = base
        self.cap = cap
        self.failures = 0
        self._random = rng or RNG.random

    def ceiling(self) -> float:
        """The longest the next wait may be."""
        if self.failures <= 0:
            return min(self.cap, self.base)
        # min before the power could overflow: 2 ** 1100 is not a float
        return min(self.cap, self.base * 2.0 ** min(self.failures - 1, 64))

    def fail(self) -> float:
        """Note one more failure; the wait before the next attempt."""
        self.failures += 1
        return self._random() * self.ceiling()

    def succeed(self) -> None:
        self.failures = 0
