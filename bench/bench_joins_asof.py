"""Throughput of the ASOF join, the event-time temporal join and the lookup join (rows/s).

    .venv/bin/python bench/bench_joins_asof.py [--left 1000000] [--right 100000] [--keys 1000]

Left rows (orders) and right rows (trades / versions) with event times advancing together and
out of order by up to 1 s (within the 2-second watermark delay), interleaved in batches of
``--batch`` rows (the lookup join reads a table of one row per key, loaded first), inserted through a connection as an application would. Prints left+right rows
per second of engine time, left rows per second, output rows and the peak join state (rows).
Never a timed assertion: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

import laminardb

DDL = """
CREATE SOURCE o (sym BIGINT, qty BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);
CREATE SOURCE t (sym BIGINT, price BIGINT, ts BIGINT NOT NULL, PRIMARY KEY (sym) NOT ENFORCED,
                 WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);
"""
QUERIES = {
    "asof >=": "SELECT o.sym, o.qty, o.ts, t.price FROM o ASOF JOIN t MATCH_CONDITION(o.ts >= t.ts) ON o.sym = t.sym",
    "asof <= (left)": ("SELECT o.sym, o.qty, o.ts, t.price FROM o LEFT ASOF JOIN t MATCH_CONDITION(o.ts <= t.ts) "
                       "ON o.sym = t.sym"),
    "temporal": "SELECT o.sym, o.qty, o.ts, t.price FROM o JOIN t FOR SYSTEM_TIME AS OF o.ts ON o.sym = t.sym",
    "lookup": ("SELECT b.sym, b.qty, s.price FROM (SELECT *, PROCTIME() AS pt FROM o) AS b "
               "JOIN t FOR SYSTEM_TIME AS OF b.pt AS s ON b.sym = s.sym"),
}


def _batches(n: int, keys: int, span_ms: int, batch: int, seed: int, value: str) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    clock = np.sort(rng.integers(0, span_ms, n))
    ts = np.maximum(0, clock - rng.integers(0, 1000, n))
    sym = rng.integers(0, keys, n)
    vals = rng.integers(0, 10_000, n)
    schema = pa.schema([("sym", pa.int64()), (value, pa.int64()), ("ts", pa.int64())])
    return [pa.RecordBatch.from_arrays([pa.array(sym[i:i + batch]), pa.array(vals[i:i + batch]),
                                        pa.array(ts[i:i + batch])], schema=schema) for i in range(0, n, batch)]


def run(name: str, sql: str, left, right) -> dict:
    db = laminardb.open()
    db.execute(DDL)
    db.execute(f"CREATE STREAM j AS {sql}")
    sub = db.subscribe_stream("j", history_rows=0)
    join = db.engine.reactor.nodes["j"].op.joins()[0]
    out = peak = 0
    # interleave by time: the right batch covering the same event times goes first
    order = sorted([(int(b.column("ts")[0].as_py()), 1, b) for b in right] +
                   [(int(b.column("ts")[0].as_py()), 0, b) for b in left], key=lambda x: (x[0], -x[1]))
    if name == "lookup":  # the table first: a lookup sees what the table holds when a row arrives
        order = [x for x in order if x[1] == 1] + [x for x in order if x[1] == 0]
    t0 = time.perf_counter()
    for _, side, b in order:
        db.insert("t" if side else "o", b)
        while (r := sub.try_next()) is not None:
            out += r.num_rows
        peak = max(peak, sum(join.state_rows()))
    db.finish()
    while (r := sub.try_next()) is not None:
        out += r.num_rows
    secs = time.perf_counter() - t0
    db.close()
    n_left = sum(b.num_rows for b in left)
    n_right = sum(b.num_rows for b in right)
    return {"query": name, "seconds": secs, "rows_per_s": (n_left + n_right) / secs, "left_per_s": n_left / secs,
            "rows_out": out, "peak_state_rows": peak}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--left", type=int, default=1_000_000)
    p.add_argument("--right", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--queries", default=",".join(QUERIES))
    args = p.parse_args()
    span = args.left  # 1 left row per ms of event time
    left = _batches(args.left, args.keys, span, args.batch, 1, "qty")
    right = _batches(args.right, args.keys, span, max(1, args.batch * args.right // args.left), 2, "price")
    run("asof >=", QUERIES["asof >="], left[:4], right[:4])  # warm the kernels (numba cache)
    print(f"{args.left:,} left rows, {args.right:,} right rows, {args.keys:,} keys, batches of {args.batch:,}")
    print(f"{'join':<16}{'rows/s (l+r)':>14}{'left rows/s':>13}{'seconds':>9}{'rows out':>11}{'peak state':>12}")
    # the lookup table holds one row per key (q13's side input): every left row finds one
    table = [pa.RecordBatch.from_pydict({"sym": np.arange(args.keys), "price": np.arange(args.keys),
                                         "ts": np.zeros(args.keys, np.int64)})]
    for name in [q.strip() for q in args.queries.split(",") if q.strip()]:
        r = run(name, QUERIES[name], left, table if name == "lookup" else right)
        print(f"{name:<16}{r['rows_per_s'] / 1e6:>12.2f}M {r['left_per_s'] / 1e6:>11.2f}M {r['seconds']:>8.2f}"
              f"{r['rows_out']:>11,}{r['peak_state_rows']:>12,}")


if __name__ == "__main__":
    main()
