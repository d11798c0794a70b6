"""Per-partition event-time watermarks of one Kafka source, combined with idleness.

Entry point: :class:`PartitionWatermarks`. For each Kafka partition p, ``wm_p`` = the largest
event time seen in p − ``delay_ticks`` (int64 ticks of the event-time column). The source's
candidate is the MIN of ``wm_p`` over the partitions that are not idle; a partition is idle
while no message arrived from it for ``idle_timeout_ms`` (measured on this process's monotonic
clock). If every partition is idle the candidate is the MAX of them, so an input that went
quiet still closes its windows. A partition that has not delivered a message yet holds the
candidate back (to None) until it goes idle, like one that lags.

The candidate never decreases: when an idle partition wakes up behind the others its late
rows are late, as they would be in any watermark scheme; going backwards would reopen windows
that downstream operators already closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PartitionWatermarks"]


class PartitionWatermarks:
    """Tracks ``wm_p`` and idleness per partition; :meth:`current` gives the source candidate.

    Args:
        partitions: the assigned partitions.
        delay_ticks: subtracted from the max event time (the WATERMARK delay, in ticks).
        idle_timeout_ms: silence after which a partition stops holding the watermark back.
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(self, partitions: Iterable[int], *, delay_ticks: int, idle_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.delay_ticks = int(delay_ticks)
        self.idle_timeout_s = max(0, int(idle_timeout_ms)) / 1000.0
        self._clock = clock
        now = clock()
        self._max: dict[int, int | None] = {p: None for p in partitions}
        self._last: dict[int, float] = dict.fromkeys(self._max, now)
        self._emitted: int | None = None

    def seen(self, partition: int, *, max_event_time: int | None = None) -> None:
        """Record that ``partition`` delivered messages now, the largest event time among them
        being ``max_event_time`` (None when none of them was a valid row)."""
        self._last[partition] = self._clock()
        if max_event_time is not None:
            old = self._max.get(partition)
            if old is None or max_event_time > old:
                self._max[partition] = int(max_event_time)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (msgpack-able): the largest event time per partition and
        the candidate emitted so far. Idleness is not kept: it is measured afresh."""
        return {"max": {str(p): m for p, m in self._max.items()}, "emitted": self._emitted}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back a :meth:`state`; partitions it does not name keep theirs (None)."""
        for p, m in (state.get("max") or {}).items():
            if int(p) in self._max:
                self._max[int(p)] = None if m is None else int(m)
        emitted = state.get("emitted")
        self._emitted = None if emitted is None else int(emitted)

    def idle(self, partition: int, now: float | None = None) -> bool:
        """Whether ``partition`` has been silent for the idle timeout."""
        now = self._clock() if now is None else now
        return now - self._last[partition] >= self.idle_timeout_s

    def per_partition(self) -> dict[int, int | None]:
        """``wm_p`` per partition (None before its first valid row)."""
        return {p: None if m is None else m - self.delay_ticks for p, m in self._max.items()}

    def current(self) -> int | None:
        """The source's watermark candidate, or None while it cannot be placed yet."""
        now = self._clock()
        active = [p for p in self._max if not self.idle(p, now)]
        if active:
            marks = [self._max[p] for p in active]
            wm = None if any(m is None for m in marks) else min(marks)  # type: ignore[type-var]
        else:
            known = [m for m in self._max.values() if m is not None]
            wm = max(known) if known else None
        if wm is None:
            return self._emitted
        wm -= self.delay_ticks
        if self._emitted is None or wm > self._emitted:
            self._emitted = wm
        return self._emitted
