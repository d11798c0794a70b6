"""Nexmark's plan-tree queries (joins, Top-N, OVER) in the Delta mode: each stateful node on
the actors, partitioned by its own key. Events/s through 1 and 2 reactor actors, beside the
embedded engine, on the same generated rows, with every result compared to the embedded one.

Run from the repository root:

    .venv/bin/python bench/bench_nexmark_cluster.py                        # 1M events per query
    .venv/bin/python bench/bench_nexmark_cluster.py --events 300k --queries q3,q20

Per query and engine: a fresh connection, a warm-up of 20k events (numba kernels loaded in
every actor), then ``insert()`` of every generated batch with its output drained, and
``finish()``, timed. Ray starts here with 2 CPUs (one per actor); the client — here the
database head's role: the tree's stateless nodes and the exchange between nodes — shares
those cores. The last stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TREES = ("q3", "q4", "q5", "q7", "q8", "q9", "q18", "q19", "q20", "q23")
WARM_EVENTS = 20_000


def _count(text: str) -> int:
    scale = {"k": 10**3, "m": 10**6}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _one(open_db, name: str, events: int, batch_events: int) -> tuple[float, int, list]:
    """Seconds for ``events`` through query ``name``, the rows out, the folded result."""
    from laminardb.nexmark import QUERIES, SOURCES_DDL, generate

    db = open_db()
    try:
        db.execute(SOURCES_DDL)
        db.execute(QUERIES[name].statement())
        sub = db.subscribe_stream(name, history_rows=0)
        batches = list(generate(events, seed=3, batch_events=batch_events))
        out = []
        t0 = time.perf_counter()
        for stream, batch in batches:
            db.insert(stream, batch)
            while (b := sub.try_next()) is not None:
                out.append(b)
        db.finish()
        while (b := sub.try_next()) is not None:
            out.append(b)
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return seconds, sum(b.num_rows for b in out), out


def _folded(batches: list) -> list:
    import pyarrow as pa

    from tests.nexmark.test_nexmark import _fold, _normalize

    if not batches:
        return []
    return _normalize(_fold(pa.Table.from_batches(batches)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=_count, default=1_000_000)
    ap.add_argument("--batch-events", type=_count, default=65_536)
    ap.add_argument("--queries", default=",".join(TREES))
    args = ap.parse_args()
    names = [q.strip() for q in args.queries.split(",") if q.strip()]

    import ray

    import laminardb
    from laminardb.actors.client import Cluster, ClusterConnection

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    results: dict = {}
    want: dict = {}
    print(f"{'query':6} {'engine':9} {'events/s':>11} {'seconds':>8} {'rows out':>9}  same as embedded")
    try:
        for label, actors in (("embedded", 0), ("1 actor", 1), ("2 actors", 2)):
            pool = Cluster(actors, 256) if actors else None  # one pool at a time: 2 CPUs
            try:
                open_db = (lambda p=pool: ClusterConnection(p, shutdown_on_close=False)) if pool else laminardb.open
                for name in names:
                    _one(open_db, name, WARM_EVENTS, args.batch_events)
                    seconds, rows, out = _one(open_db, name, args.events, args.batch_events)
                    folded = _folded(out)
                    same = want.setdefault(name, folded) == folded
                    eps = args.events / seconds
                    results.setdefault(name, {})[label] = {"eps": eps, "seconds": seconds, "rows_out": rows,
                                                           "same": same}
                    print(f"{name:6} {label:9} {eps:11,.0f} {seconds:8.2f} {rows:9,}  {'yes' if same else 'NO'}",
                          flush=True)
            finally:
                if pool is not None:
                    pool.shutdown()
    finally:
        ray.shutdown()
    print("BENCH_JSON " + json.dumps({"events": args.events, "queries": results}))


if __name__ == "__main__":
    main()
