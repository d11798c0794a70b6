"""Run one Nexmark query embedded over generated events and measure it.

Entry point: :func:`run_query` → :class:`RunResult` (events/s over the engine's own time, rows
out, peak state rows and bytes, peak process RSS). Used by ``laminardb nexmark`` and
``bench/bench_nexmark.py``. q13 reads a side-input CSV file besides the streams: the one given
(``side_input=``, else the environment variable ``NEXMARK_SIDE_INPUT``), or one the runner
writes itself (:func:`write_side_input`) into a temporary directory for the run.
"""

from __future__ import annotations

import gc
import os
import resource
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass

from laminardb.nexmark.generator import NexmarkConfig, generate
from laminardb.nexmark.queries import SOURCES_DDL, query
from laminardb.nexmark.udfs import UDFS

__all__ = ["RunResult", "run_query", "write_side_input", "SIDE_INPUT_ROWS"]

# q13 joins on mod(auction, 10000) = key: the side input has a row for every key 0 … 9,999
SIDE_INPUT_ROWS = 10_000
_SIDE_INPUT_VAR = "NEXMARK_SIDE_INPUT"

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


def write_side_input(path: str, rows: int = SIDE_INPUT_ROWS) -> str:
    """Write Nexmark's side input (q13's ``side_input`` table) to ``path`` and return it: a CSV
    file with a header row ``key,value``, keys ``0 … rows − 1`` and each value its key as text
    (the side input of Beam's Nexmark, ``NexmarkUtils.prepareSideInput``)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    keys = pa.array(range(rows), pa.int64())
    pacsv.write_csv(pa.table({"key": keys, "value": keys.cast(pa.string())}), path)
    return path


def run_query(name: str, *, events: int, seed: int = 0, batch_events: int = 65_536,
              config: NexmarkConfig | None = None, side_input: str | None = None) -> RunResult:
    """Run query ``name`` over ``events`` generated events (all three streams are inserted).

    ``side_input``: q13's side-input CSV file (``key,value`` with a header row); by default the
    environment variable ``NEXMARK_SIDE_INPUT``, else a file of :data:`SIDE_INPUT_ROWS` rows
    written for the run (and removed after it). It is read whole before the first event, off
    the clock. Raises the engine's typed error (an ``UnsupportedSqlError`` …) for a query
    laminardb does not run yet.
    """
    with ExitStack() as stack:
        variables = {}
        if "${" + _SIDE_INPUT_VAR + "}" in query(name).statement():
            path = side_input or os.environ.get(_SIDE_INPUT_VAR)
            if not path:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="laminardb-nexmark-"))
                path = write_side_input(os.path.join(tmp, "side_input.csv"))
            variables[_SIDE_INPUT_VAR] = path
        return _run(name, events=events, seed=seed, batch_events=batch_events, config=config,
                    variables=variables)


def _run(name: str, *, events: int, seed: int, batch_events: int, config: NexmarkConfig | None,
         variables: dict[str, str]) -> RunResult:
    import laminardb

    q = query(name)
    db = laminardb.open(config={"udfs": UDFS, "vars": variables})  # q14 calls count_char
    try:
        db.execute(SOURCES_DDL)
        db.execute(q.statement())
        sub = db.subscribe_stream(q.name, history_rows=0)
        if variables:  # q13: its side-input file is read whole before any bid arrives
            db.start()
            db.flush()
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
