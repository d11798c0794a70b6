"""Processing time: the clock behind ``PROCTIME()`` and processing-time windows (Nexmark q12).

Entry point: ``ProcessingClock(clock)``; a connection makes one from ``config["clock"]`` (a
callable returning epoch milliseconds; default: the wall clock), so tests inject a clock they
drive. The reactor stamps it once per ingested batch (``tick()``), before the batch runs:
every ``PROCTIME()`` of that batch reads the same instant (``current()``), and that instant
is also the watermark of every processing-time column — so a row stamped ``t`` lands in a
window that ends after ``t`` and is never late, and a window closes once the clock has passed
its end (at the next batch of any source, or at ``finish()``).

Processing time is not deterministic: a durable database replaying its WAL stamps replayed
rows with the time of the replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from laminardb.errors import ConfigError

__all__ = ["ProcessingClock"]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ProcessingClock:
    """The connection's processing-time clock, stamped per ingested batch; never goes back."""

    __slots__ = ("_clock", "_now")

    def __init__(self, clock: Callable[[], float | int] | None = None) -> None:
        if clock is not None and not callable(clock):
            msg = (f"config['clock'] must be a callable returning epoch milliseconds (e.g. "
                   f"lambda: time.time() * 1000), not {type(clock).__name__}")
            raise ConfigError(msg, code="LDB-9060")
        self._clock = clock or _wall_ms
        self._now: int | None = None

    def _read(self) -> int:
        t = self._clock()
        try:
            return int(t)
        except (TypeError, ValueError, OverflowError) as exc:
            msg = f"config['clock'] returned {t!r}; it must return epoch milliseconds as a number"
            raise ConfigError(msg, code="LDB-9060") from exc

    def tick(self) -> int:
        """Read the clock for the batch about to run (monotone: a clock going back is held)."""
        t = self._read()
        self._now = t if self._now is None else max(self._now, t)
        return self._now

    def current(self) -> int:
        """The instant of the batch being processed (the clock itself before any batch)."""
        return self._now if self._now is not None else self._read()
