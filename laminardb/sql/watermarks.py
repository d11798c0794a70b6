"""How the watermark of every event-time column derives from its root source's watermark.

Entry points: ``WatermarkMap`` (``IDENTITY`` for a source's own column) and ``WindowEdge``.

The reactor hands every node of a pipeline the watermark of the source at its root (ticks
of that source's event-time column). A query reads one input column as its event time; the
plan's ``input_watermark`` (a ``WatermarkMap``) turns the root watermark into that column's
watermark before the operator sees it. A windowed stream that emits on window close carries
event time on in its window bounds: after the window operator has seen watermark ``w`` it
never again emits a window that closed by ``w`` (end ≤ w − allowed lateness), so

* ``window_start``: the smallest start still to come, ``s = ⌊(w − L − size − offset) / slide⌋ ·
  slide + slide + offset`` (tumble: slide = size) — "no later row has window_start < s";
* ``window_end``: ``s + size``; ``window_time``: ``s + size − 1``;
* sessions: ``window_end`` (and ``window_time``) only — ``w − L`` (``− 1``); a session's start
  has no bound while it stays open.

So a second window over ``window_start`` of 1-minute bars closes its hour as soon as the
last bar of that hour was emitted, and gives what one window over the raw rows would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

NO_WATERMARK = int(np.iinfo(np.int64).min)  # == operators.group_aggregate.NO_WATERMARK
END_OF_TIME = int(np.iinfo(np.int64).max)  # == operators.group_aggregate.END_OF_TIME


@dataclass(frozen=True)
class WindowEdge:
    """The watermark of one window-bound column, given the watermark of the window's input."""

    edge: Literal["start", "end", "time"]
    size: int = 0
    slide: int = 0
    offset: int = 0
    lateness: int = 0
    session: bool = False

    def __call__(self, wm: int) -> int:
        w = wm - self.lateness
        if self.session:
            return w if self.edge == "end" else w - 1
        start = ((w - self.size - self.offset) // self.slide + 1) * self.slide + self.offset
        if self.edge == "start":
            return start
        return start + self.size if self.edge == "end" else start + self.size - 1

    def describe(self) -> str:
        late = f", {self.lateness} ticks of allowed lateness" if self.lateness else ""
        if self.session:
            return f"window_{self.edge} of sessions (gap windows){late}"
        shape = f"{self.size}" if self.slide == self.size else f"{self.size} sliding by {self.slide}"
        return f"window_{self.edge} of the next {shape}-tick window to close{late}"


@dataclass(frozen=True, eq=False)
class ProcessingTime:
    """The watermark of a ``PROCTIME()`` column: the processing-time clock (``laminardb/sql/clock.py``)
    at the batch being processed, whatever the source's event-time watermark (q12). Equal only
    to itself: two connections' clocks are two columns' times."""

    clock: object  # a ProcessingClock

    def __call__(self, wm: int) -> int:
        return self.clock.current()  # type: ignore[attr-defined]

    def describe(self) -> str:
        return "processing time (the connection's clock, stamped per ingested batch)"


def on_processing_time(m: WatermarkMap) -> bool:
    """Whether ``m`` follows the processing-time clock (then it advances without any event)."""
    return any(isinstance(s, ProcessingTime) for s in m.steps)


@dataclass(frozen=True)
class WatermarkMap:
    """A chain of ``WindowEdge`` steps from the root source's watermark to one column's."""

    steps: tuple[WindowEdge | ProcessingTime, ...] = ()

    def __call__(self, wm: int) -> int:
        if not self.steps or wm == NO_WATERMARK or wm == END_OF_TIME:
            return wm
        w = int(wm)
        for step in self.steps:
            w = step(w)
        return w

    def then(self, step: WindowEdge | ProcessingTime) -> WatermarkMap:
        return WatermarkMap((*self.steps, step))

    def describe(self) -> str:
        if not self.steps:
            return "the source watermark"
        return " → ".join(s.describe() for s in self.steps)


IDENTITY = WatermarkMap()
