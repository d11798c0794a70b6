"""Nexmark's plan-tree queries (joins, Top-N, OVER) in the Delta mode: each stateful node on
the actors, partitioned by its own key. Events/s through 1 and 2 reactor actors, beside the
embedded engine, on the same generated rows, with every result compared to the embedded one.

Run from the repository root:

    .venv/bin/python bench/bench_nexmark_cluster.py                        # 1M events per query
    .venv/bin/python bench/bench_nexmark_cluster.py --events 300k --queries q3,q20

Per query and engine: a fresh connection, a warm-up of 20k events (numba kernels loaded in
every actor), then ``insert()`` of every generated batch with its output drained, and
``finish()``, timed. Results are compared by an order-free digest of the (folded) output,
taken off the clock. Ray starts here with 2 CPUs (one per actor); the client — here the
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


def _one(open_db, name: str, events: int, batch_events: int) -> tuple[float, int, tuple[int, int]]:
    """Seconds for ``events`` through query ``name`` (its output drained and digested as it
    comes, the digest's time not counted), the rows out, and the output's digest."""
    from laminardb.nexmark import QUERIES, SOURCES_DDL, generate

    db = open_db()
    digest = [0, 0]
    digest_s = 0.0

    def take(batch) -> None:
        nonlocal digest_s
        t = time.perf_counter()
        n, h = _digest(batch)
        digest[0] += n
        digest[1] += h
        digest_s += time.perf_counter() - t

    rows = 0
    try:
        db.execute(SOURCES_DDL)
        db.execute(QUERIES[name].statement())
        sub = db.subscribe_stream(name, history_rows=0)
        batches = list(generate(events, seed=3, batch_events=batch_events))
        t0 = time.perf_counter()
        for stream, batch in batches:
            db.insert(stream, batch)
            while (b := sub.try_next()) is not None:
                rows += b.num_rows
                take(b)
        db.finish()
        while (b := sub.try_next()) is not None:
            rows += b.num_rows
            take(b)
        seconds = time.perf_counter() - t0 - digest_s
    finally:
        db.close()
    return seconds, rows, (digest[0], digest[1])


def _digest(batch) -> tuple[int, int]:
    """An order-free digest of a batch's rows: (Σ weight, Σ weight × hash(row)), doubles
    rounded to 6 digits. Additive over batches, so a changelog's digest is its folded
    result's — compared without holding millions of rows (q23 emits 3.6M wide rows)."""
    import duckdb
    import pyarrow as pa

    names = [n for n in batch.schema.names if n != "__weight"]
    cols = ", ".join(f'round("{n}", 6)' if pa.types.is_floating(batch.schema.field(n).type) else f'"{n}"'
                     for n in names)
    weight = '"__weight"' if "__weight" in batch.schema.names else "1"
    con = duckdb.connect()
    con.register("b", pa.Table.from_batches([batch]))
    n, h = con.sql(f"SELECT sum({weight})::BIGINT, sum({weight}::HUGEINT * hash({cols})::HUGEINT) FROM b").fetchall()[0]
    con.close()
    return int(n or 0), int(h or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=_count, default=1_000_000)
    ap.add_argument("--batch-events", type=_count, default=65_536)
    ap.add_argument("--queries", default=",".join(TREES))
    args = ap.parse_args()
    names = [q.strip() for q in args.queries.split(",") if q.strip()]

    import ray

    import laminardb
    from laminardb.cluster.actor_pool import ActorPool
    from laminardb.cluster.backend import cluster_connection

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    results: dict = {}
    want: dict = {}
    print(f"{'query':6} {'engine':9} {'events/s':>11} {'seconds':>8} {'rows out':>9}  same as embedded")
    try:
        for label, actors in (("embedded", 0), ("1 actor", 1), ("2 actors", 2)):
            pool = ActorPool(actors, 256) if actors else None  # one pool at a time: 2 CPUs
            try:
                open_db = (lambda p=pool: cluster_connection(p, shutdown_on_close=False)) if pool else laminardb.open
                for name in names:
                    _one(open_db, name, WARM_EVENTS, args.batch_events)
                    seconds, rows, digest = _one(open_db, name, args.events, args.batch_events)
                    same = want.setdefault(name, digest) == digest
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
