"""PostgreSQL sink throughput: rows/s the exactly-once sink writes into PostgreSQL, beside the
rate of a bare psycopg2 COPY of the same rows.

Run from the repository root:

    .venv/bin/python bench/bench_postgres_sink.py              # 1M rows, ~1 min on 2 vCPUs
    .venv/bin/python bench/bench_postgres_sink.py --rows 200000

Starts its own PostgreSQL 15 (``tests/_services/databases.py``: fsync off, loopback) and stops
it at the end. Rows: ``k`` text (``--keys`` distinct), ``seq`` bigint, ``v`` double, ``ts``
timestamp(3), in 65,536-row batches, ``--epoch`` rows per checkpoint epoch. Timed, best of
``--repeat``, each into a fresh table:

1. raw COPY: ``pyarrow.csv.write_csv`` of each epoch's rows into a buffer + ``copy_expert``
   (``COPY … FROM STDIN (FORMAT csv)``) + commit — what a hand-written loader does.
2. sink, append: ``ExactlyOncePostgresSink`` with no key — ``write()`` of every batch (staged
   as Arrow IPC), ``pre_commit(e)`` and ``commit(e)`` per epoch (one transaction: COPY + the
   ``laminardb_epochs`` row).
3. sink, upsert: the same sink with ``primary_key = 'k'`` over a changelog: each epoch
   carries, for its keys, the retraction of the previous row and the new one (``-old, +new``);
   the sink collapses them per key, COPies the survivors into a TEMP table and applies one
   ``INSERT … ON CONFLICT DO UPDATE``. Its rate counts changelog rows in.
   Beside it, raw COPY of the same changelog rows (what the table would take append-only).

Every run's table is checked: append runs hold every row; upsert runs hold one row per key
with the last value.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from laminardb.connectors.postgres_sink import ExactlyOncePostgresSink  # noqa: E402
from tests._services.databases import start_postgres  # noqa: E402

BATCH = 65_536
SCHEMA = pa.schema([("k", pa.string()), ("seq", pa.int64()), ("v", pa.float64()), ("ts", pa.timestamp("ms"))])
CHANGELOG = SCHEMA.append(pa.field("__weight", pa.int64()))


def rows(lo: int, hi: int, keys: int) -> pa.Table:
    i = np.arange(lo, hi, dtype=np.int64)
    names = np.char.add("key-", (i % keys).astype(str))
    return pa.table({"k": pa.array(names, pa.string()), "seq": i, "v": i * 0.25,
                     "ts": pa.array(1_700_000_000_000 + i, pa.timestamp("ms"))}, schema=SCHEMA)


def changelog(lo: int, hi: int, keys: int) -> pa.Table:
    """Rows lo..hi as updates: row i replaces row i - keys of its key (a retraction first)."""
    new = rows(lo, hi, keys)
    old = rows(lo - keys, hi - keys, keys)
    w = pa.array(np.ones(hi - lo, dtype=np.int64))
    new = new.append_column("__weight", w)
    old = old.append_column("__weight", pa.compute.negate(w))
    # interleave -old, +new per row (the order a GROUP BY changelog emits them in)
    both = pa.concat_tables([old, new])
    order = np.argsort(np.concatenate([np.arange(hi - lo) * 2, np.arange(hi - lo) * 2 + 1]), kind="stable")
    out = both.take(order)
    valid = pa.compute.greater_equal(out["seq"], 0)  # the first epoch has no old rows
    return out.filter(valid)


def raw_copy(conn, table_name: str, epochs: list[pa.Table]) -> float:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table_name}")
        cur.execute(f"CREATE TABLE {table_name} (k text, seq bigint, v double precision, ts timestamp)")
    conn.commit()
    t0 = time.perf_counter()
    for t in epochs:
        buf = io.BytesIO()
        pacsv.write_csv(t.select(SCHEMA.names), buf, pacsv.WriteOptions(include_header=False))
        buf.seek(0)
        with conn.cursor() as cur:
            cur.copy_expert(f"COPY {table_name} (k, seq, v, ts) FROM STDIN WITH (FORMAT csv)", buf)
        conn.commit()
    return time.perf_counter() - t0


def run_sink(conn, url: str, table_name: str, epochs: list[pa.Table], *, key: str | None,
             schema: pa.Schema, stage: Path) -> float:
    shutil.rmtree(stage, ignore_errors=True)
    with conn.cursor() as cur:  # a fresh table (a new stage is a new writer: it would append again)
        cur.execute(f"DROP TABLE IF EXISTS {table_name}")
    conn.commit()
    opts = {"url": url, "table": table_name, **({"primary_key": key} if key else {})}
    s = ExactlyOncePostgresSink(name=table_name, schema=schema, options=opts, stage_dir=stage)
    try:
        t0 = time.perf_counter()
        for e, t in enumerate(epochs, start=1):
            for b in t.to_batches(max_chunksize=BATCH):
                s.write(b)
            s.pre_commit(e)
            s.commit(e)
        return time.perf_counter() - t0
    finally:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--epoch", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    server = start_postgres()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pgsink-"))
    try:
        db = server.create_database("bench")
        url = f"postgresql://postgres@{server.host}:{server.port}/{db}"
        conn = server.connect(db)
        conn.autocommit = False
        bounds = [(lo, min(a.rows, lo + a.epoch)) for lo in range(0, a.rows, a.epoch)]
        append = [rows(lo, hi, a.keys) for lo, hi in bounds]
        changes = [changelog(lo, hi, a.keys) for lo, hi in bounds]
        n_changes = sum(t.num_rows for t in changes)
        best: dict[str, float] = {}
        for _ in range(a.repeat):
            for label, fn in [
                ("raw COPY (psycopg2)", lambda: raw_copy(conn, "raw_t", append)),
                ("sink append (COPY)", lambda: run_sink(conn, url, "app_t", append, key=None, schema=SCHEMA,
                                                        stage=tmp / "app")),
                ("raw COPY of the changelog rows", lambda: raw_copy(conn, "rawc_t", changes)),
                ("sink upsert (changelog)", lambda: run_sink(conn, url, "up_t", changes, key="k", schema=CHANGELOG,
                                                             stage=tmp / "up")),
            ]:
                best[label] = min(best.get(label, float("inf")), fn())
        with conn.cursor() as cur:
            cur.execute("SELECT (SELECT count(*) FROM app_t), (SELECT count(*) FROM up_t), "
                        "(SELECT max(seq) - min(seq) FROM up_t), (SELECT count(DISTINCT k) FROM up_t)")
            app_n, up_n, spread, up_keys = cur.fetchone()
        assert app_n == a.rows, f"append sink wrote {app_n} rows, not {a.rows}"
        assert up_n == up_keys == min(a.keys, a.rows) and spread == up_n - 1, "upsert table not last-per-key"
        conn.close()
        print(f"{a.rows:,} rows, epochs of {a.epoch:,}, {a.keys:,} keys; changelog: {n_changes:,} rows; "
              f"best of {a.repeat}")
        for label, secs in best.items():
            n = n_changes if "changelog" in label else a.rows
            print(f"  {label:34s} {secs:7.2f} s  {n / secs:12,.0f} rows/s")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
