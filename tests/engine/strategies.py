"""Hypothesis strategies for engine scenarios: a few keys incl. NULL, nullable values, out-of-order
event times, random insert() batch boundaries and watermark delays. Entry point: ``scenarios``."""

from __future__ import annotations

from hypothesis import strategies as st
from oracle import Scenario

SYMS = st.sampled_from(["A", "B", "C", None])
TAGS = st.sampled_from(["x", "y", "zz", "", None])
PRICES = st.one_of(st.none(), st.integers(-40, 40).map(lambda v: v / 4))
QTYS = st.one_of(st.none(), st.integers(-5, 20))


@st.composite
def scenarios(draw, *, max_rows: int = 60, step: int = 120, delays=(0, 150, 1000, 2500, 10**7)):
    """Event times drift upward (``step`` ms per row on average) with jitter both ways, so that
    some rows arrive behind the watermark; a few rows get a large negative jump (very late)."""
    n = draw(st.integers(1, max_rows))
    # On a coarse grid, event times often land exactly on window bounds and watermarks exactly on
    # window ends / session ends, which is where off-by-one lateness bugs live.
    grid = draw(st.sampled_from([1, 50, 100]))
    rows = []
    for i in range(n):
        jitter = draw(st.one_of(st.integers(-600, 600), st.integers(-5000, 0), st.integers(-2500, -800), st.just(0)))
        ts = max(0, (i * step + jitter) // grid * grid)
        rows.append({"ts": ts, "sym": draw(SYMS), "tag": draw(TAGS), "price": draw(PRICES), "qty": draw(QTYS)})
    cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=min(12, n)))
    delay = draw(st.sampled_from(delays))
    return Scenario(rows, cuts, delay)
