"""How the dashboard writes a wait: milliseconds, seconds, minutes or hours, as people read them."""

from __future__ import annotations

import pytest

from sluice.dashboard.format import duration_ms


@pytest.mark.parametrize(("ms", "text"), [(0, "0 ms"), (-5, "0 ms"), (850, "850 ms"), (12_500, "12.5 s"),
                                          (200_000, "3 min 20 s"), (7_500_000, "2 h 5 min")])
def test_a_wait_reads_in_the_unit_that_fits_it(ms: int, text: str) -> None:
    assert duration_ms(ms) == text
