"""Run one Nexmark query embedded over generated events and measure it.

Entry point: :func:`run_query` → :class:`RunResult` (events/s over the engine's own time, rows
out, peak state rows and bytes, peak process RSS). Used by ``laminardb nexmark`` and
``bench/bench_nexmark.py``.
"""

from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass

from laminardb.nexmark.generator import NexmarkConfig, generate
from laminardb.nexmark.queries import SOURCES_DDL, query
from laminardb.nexmark.udfs import UDFS

__all__ = ["RunResult", "run_query"]

# metrics() walks every operator's state: sample it every this many batches (and at the end),
# so that sampling stays well under 1 % of the run.
_SAMPLE_EVERY = 8


@dataclass(frozen=True)
class RunResult:
    query: str
    events: int  # all events generated (persons, auctions and bids), as Nexmark counts them
    seconds: float  # engine time: insert() of every batch + finish(), not generation
    rows_out: int
    peak_state_rows: int
    peak_state_bytes: int
    peak_rss_bytes: int

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def run_query(name: str, *, events: int, seed: int = 0, batch_events: int = 65_536,
              config: NexmarkConfig | None = None) -> RunResult:
    """Run query ``name`` over ``events`` generated events (all three streams are inserted).

    Raises the engine's typed error (an ``UnsupportedSqlError`` …) for a query laminardb does
    not run yet.
    """
    import laminardb

    q = query(name)
    db = laminardb.open(config={"udfs": UDFS})  # q14 calls count_char
    try:
        db.execute(SOURCES_DDL)
        db.execute(q.statement())
        sub = db.subscribe_stream(q.name, history_rows=0)
        rows_out = peak_rows = peak_bytes = 0
        engine_s = 0.0
        gc.collect()
        for i, (stream, batch) in enumerate(generate(events, seed=seed, batch_events=batch_events,
                                                     config=config)):
            t0 = time.perf_counter()
            db.insert(stream, batch)
            while (out := sub.try_next()) is not None:
                rows_out += out.num_rows
            engine_s += time.perf_counter() - t0
            if i % _SAMPLE_EVERY == 0:
                peak_rows, peak_bytes = _state(db, q.name, peak_rows, peak_bytes)
        peak_rows, peak_bytes = _state(db, q.name, peak_rows, peak_bytes)
        t0 = time.perf_counter()
        db.finish()
        while (out := sub.try_next()) is not None:
            rows_out += out.num_rows
        engine_s += time.perf_counter() - t0
    finally:
        db.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return RunResult(q.name, events, engine_s, rows_out, peak_rows, peak_bytes, rss)


def _state(db, name: str, rows: int, nbytes: int) -> tuple[int, int]:
    m = db.metrics()["queries"].get(name, {})
    return max(rows, m.get("state_rows") or 0), max(nbytes, m.get("state_bytes") or 0)
