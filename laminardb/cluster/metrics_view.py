"""What the database head's ``metrics()`` and ``status()`` show: the engine's figures, kept
monotonic across recoveries, and never waited for longer than ``METRICS_BUDGET_S``.

Why: a recovery replaces the head's engine (new actors, state from the last checkpoint), so
its counters start again — from the checkpoint for the engine's own counters, from zero for
the sinks' and the actors' — while an operator reads one database whose counters only grow.
And a paused actor (or a recovery under way) can hold the engine's lock for as long as an
actor call may take: metrics must answer anyway, with the last figures, marked stale.

Entry points: ``MonotonicCounters.apply(engine, m)`` and ``BoundedRead(fn).read()``.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

METRICS_BUDGET_S = 1.2  # the head answers metrics() within this (the client's read: < 2 s)

# Counters a recovered engine restores from its checkpoint and then recounts as it replays
# (WAL, Kafka offsets): reported as the highest value seen, so they never step back and
# never count a replayed row twice.
_RESTORED = {
    "": ("events_ingested", "events_emitted", "late_events_dropped", "late_events_routed"),
    "sources": ("rows_in", "bytes_in", "parse_errors", "dead_letters"),
    "queries": ("rows_in", "rows_out", "late_dropped"),
    "streams": ("late_dropped",),
}
# Counters of objects a recovery builds anew (sinks, the source runners, the actors): they
# start from zero, so the next engine's are added to what the last one had reached.
_RESTARTED = {
    "sources": ("errors",),
    "queries": ("busy_s",),
    "sinks": ("rows_written", "rows_committed", "commits", "errors"),
}
_PER_ACTOR = ("rows_per_actor", "busy_s_per_actor", "cpu_s_per_actor", "poll_cpu_s_per_actor")


def _paths(m: dict[str, Any], rules: dict[str, tuple[str, ...]]):
    """(path, value) of every counter of ``m`` that ``rules`` names."""
    for section, keys in rules.items():
        if section == "":
            for k in keys:
                if isinstance(m.get(k), int | float):
                    yield (k,), m[k]
            continue
        for name, entry in (m.get(section) or {}).items():
            for k in keys:
                if isinstance(entry.get(k), int | float):
                    yield (section, name, k), entry[k]


def _restarted_paths(m: dict[str, Any]):
    yield from _paths(m, _RESTARTED)
    for name, entry in (m.get("streams") or {}).items():  # a sink's stream: its rows written
        if entry.get("kind") == "sink" and isinstance(entry.get("rows_emitted"), int):
            yield ("streams", name, "rows_emitted"), entry["rows_emitted"]
    for key in _PER_ACTOR:
        for i, v in enumerate((m.get("cluster") or {}).get(key) or []):
            if isinstance(v, int | float):
                yield ("cluster", key, i), v


def _put(m: dict[str, Any], path: tuple, value: Any) -> None:
    *parents, last = path
    for p in parents:
        m = m[p]
    m[last] = round(value, 6) if isinstance(value, float) else value


class MonotonicCounters:
    """Keeps a database's counters from going back when its engine is replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None  # the engine (``Connection``) the last figures came from
        self._high: dict[tuple, float] = {}  # restored counters: the highest value reported
        self._base: dict[tuple, float] = {}  # restarted counters: what earlier engines reached
        self._last: dict[tuple, float] = {}  # restarted counters: this engine's last raw figure

    def apply(self, engine: Any, m: dict[str, Any]) -> dict[str, Any]:
        """``m`` (``engine.metrics()``), its counters made monotonic in place."""
        with self._lock:
            if engine is not self._engine:
                self._carry(self._engine)
                self._engine = engine
            for path, v in _paths(m, _RESTORED):
                high = max(self._high.get(path, v), v)
                self._high[path] = high
                _put(m, path, high)
            for path, v in _restarted_paths(m):
                self._last[path] = v
                base = self._base.get(path)
                if base:
                    _put(m, path, base + v)
        return m

    def _carry(self, old: Any) -> None:
        """The engine changed: what ``old`` reached (its last figures, as it left them when it
        was abandoned, else as last read) is added under the next engine's counters."""
        final = None
        if old is not None:
            backend = getattr(old.engine, "backend", None)
            final = backend.final_counters() if hasattr(backend, "final_counters") else None
        reached = dict(self._last)
        if final is not None:
            for path, v in _restarted_paths(final):
                reached[path] = max(v, reached.get(path, v))
        for path, v in reached.items():
            self._base[path] = self._base.get(path, 0) + v
        self._last = {}


class BoundedRead:
    """``read()`` runs ``fn`` on a thread of its own and waits at most ``budget_s``: then it
    answers with the last result ``fn`` gave, marked stale (``stale(last, age_s)``). One run
    of ``fn`` at a time: reads while it is stuck wait on that same run."""

    def __init__(self, fn: Callable[[], dict[str, Any]], budget_s: float = METRICS_BUDGET_S) -> None:
        self._fn = fn
        self._budget_s = budget_s
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._last: tuple[float, dict[str, Any]] | None = None

    def read(self, stale: Callable[[dict[str, Any] | None, float | None], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            run = self._run
            if run is None or run.done.is_set():
                run = self._run = _Run(self._fn, self._keep)
        if run.done.wait(self._budget_s):
            if run.error is not None:
                raise run.error
            return copy.deepcopy(run.result)
        last = self._last
        if last is None:
            return stale(None, None)
        return stale(copy.deepcopy(last[1]), round(time.monotonic() - last[0], 3))

    def _keep(self, result: dict[str, Any]) -> None:
        self._last = (time.monotonic(), result)


class _Run:
    def __init__(self, fn: Callable[[], dict[str, Any]], keep: Callable[[dict[str, Any]], None]) -> None:
        self.done = threading.Event()
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self._fn, self._keep = fn, keep
        threading.Thread(target=self._go, name="laminardb-metrics-read", daemon=True).start()

    def _go(self) -> None:
        try:
            self.result = self._fn()
            self._keep(self.result)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader
            self.error = exc
        finally:
            self.done.set()
