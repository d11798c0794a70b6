"""Lookup join against PostgreSQL: rows/s through ``JOIN customers FOR SYSTEM_TIME AS OF``
with a warm cache and with no cache, beside the raw rate of the one-query-per-batch fetch.

Run from the repository root:

    .venv/bin/python bench/bench_lookup_postgres.py                 # 200k orders, 10k keys
    .venv/bin/python bench/bench_lookup_postgres.py --rows 500000 --keys 50000 --repeat 3

Steps: start a PostgreSQL 15 on a free loopback port (``tests/_services/databases.py``), fill
``customers`` (``--customers`` rows, id PRIMARY KEY, name, tier); make ``--rows`` orders whose
``cid`` is uniform over 1 … ``--keys`` (not timed). Then, ``--repeat`` times each:

* ``fetch``: ``PostgresLookup.fetch`` alone over each batch's distinct keys (one query per
  batch; what a batch costs when nothing is cached);
* ``no cache``: ``conn.insert`` of every batch into a source a lookup join reads (no cache:
  every batch's distinct keys fetched);
* ``warm cache``: the same with ``lookup.cache.max-rows`` ≥ ``--keys``, timed on a second
  pass over the orders (every key cached by the first).

Reports input rows/s (best, and the spread over the runs) and checks the output row count.
The machine may be shared with other work: compare runs of one invocation, not across days.
The last stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import laminardb  # noqa: E402
from laminardb.connectors.postgres_lookup import PostgresLookup  # noqa: E402
from laminardb.sql.lookup_tables import lookup_spec  # noqa: E402
from tests._services.databases import start_postgres  # noqa: E402

_TABLE = ("CREATE TABLE customers (id BIGINT, name VARCHAR, tier INT, PRIMARY KEY (id) NOT ENFORCED) WITH ("
          "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{port}/{db}', 'table-name' = 'customers', "
          "'username' = 'postgres'{cache})")
_JOIN = ("CREATE STREAM j AS SELECT o.id, o.cid, c.name, c.tier FROM (SELECT *, PROCTIME() AS pt FROM orders) AS o "
         "JOIN customers FOR SYSTEM_TIME AS OF o.pt AS c ON o.cid = c.id")


def _orders(rows: int, keys: int, batch: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(42)
    t = pa.table({"id": np.arange(rows, dtype=np.int64), "cid": rng.integers(1, keys + 1, rows, dtype=np.int64)})
    return t.to_batches(max_chunksize=batch)


def _through_join(port: int, db: str, batches: list[pa.RecordBatch], cache: str, passes: int) -> tuple[float, dict]:
    """Seconds for the last of ``passes`` over ``batches`` through the join; its metrics."""
    conn = laminardb.open()
    try:
        conn.execute(_TABLE.format(port=port, db=db, cache=cache))
        conn.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT)")
        conn.execute(_JOIN)
        for _ in range(passes - 1):
            for b in batches:
                conn.insert("orders", b)
        before = conn.metrics()["queries"]["j"]["rows_out"]
        t0 = time.perf_counter()
        for b in batches:
            conn.insert("orders", b)
        secs = time.perf_counter() - t0
        m = conn.metrics()["queries"]["j"]
        m["rows_out_timed"] = m["rows_out"] - before
        return secs, m
    finally:
        conn.close()


def _fetch_alone(spec, batches: list[pa.RecordBatch]) -> tuple[float, int]:
    src = PostgresLookup(spec)
    try:
        keys = [pc.unique(b.column(1)) for b in batches]  # distinct keys per batch: not timed
        t0 = time.perf_counter()
        fetched = sum(src.fetch(["id"], [k]).num_rows for k in keys)
        return time.perf_counter() - t0, fetched
    finally:
        src.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--customers", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    server = start_postgres()
    try:
        db = server.create_database("bench_lookup")
        pg = server.connect(db)
        with pg.cursor() as cur:
            cur.execute("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, tier INT)")
            cur.execute(f"INSERT INTO customers SELECT g, 'customer ' || g, g % 5 FROM generate_series(1, "
                        f"{args.customers}) g")
            cur.execute("ANALYZE customers")
        pg.close()
        batches = _orders(args.rows, args.keys, args.batch)
        expect = args.rows if args.keys <= args.customers else None
        schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tier", pa.int32())])
        spec = lookup_spec("customers", schema, ("id",), {"url": f"postgresql://127.0.0.1:{server.port}/{db}",
                                                         "table-name": "customers", "username": "postgres"},
                       fetcher=PostgresLookup)
        warm = f", 'lookup.cache.max-rows' = '{max(args.keys, 1)}', 'lookup.cache.ttl' = '1 h'"
        runs: dict[str, list[float]] = {"fetch": [], "no cache": [], "warm cache": []}
        info: dict[str, dict] = {}
        for _ in range(args.repeat):
            secs, fetched = _fetch_alone(spec, batches)
            runs["fetch"].append(args.rows / secs)
            info["fetch"] = {"rows_fetched": fetched, "queries": len(batches)}
            for name, cache, passes in (("no cache", "", 1), ("warm cache", warm, 2)):
                secs, m = _through_join(server.port, db, batches, cache, passes)
                if expect is not None:
                    assert m["rows_out_timed"] == expect, (name, m)
                runs[name].append(args.rows / secs)
                info[name] = m["lookup"]
        print(f"PostgreSQL lookup join: {args.rows:,} orders in batches of {args.batch}, {args.keys:,} distinct keys "
              f"over {args.customers:,} customers; {args.repeat} runs (shared machine: compare within this run)")
        out = {}
        for name, rates in runs.items():
            best, worst = max(rates), min(rates)
            spread = (best - worst) / best * 100 if best else 0.0
            print(f"  {name:<11} {best:>12,.0f} rows/s   (runs: {', '.join(f'{r:,.0f}' for r in rates)}; "
                  f"spread {spread:.0f}%)   {info[name]}")
            out[name] = {"best_rows_per_s": round(best), "runs": [round(r) for r in rates], "spread_pct": round(spread, 1),
                         "counters": info[name]}
        print("BENCH_JSON " + json.dumps({"bench": "lookup_postgres", "rows": args.rows, "keys": args.keys,
                                          "batch": args.batch, **out}))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
