"""Operator snapshot micro-bench: what checkpointing a big aggregation costs, step by step.

Run from the repository root:

    .venv/bin/python bench/bench_snapshot.py              # 100k and 1M live groups, BIGINT and VARCHAR keys
    .venv/bin/python bench/bench_snapshot.py --groups 100000 --compression none

One ``QueryOperator`` (COUNT/SUM/MAX per key in a 1-hour tumbling window that stays open) is
fed one row per key, then measured:

- ``snapshot()``: the copy taken under the engine lock (this is the ingest stall);
- ``encode()``: the bytes, built off the lock (key gather, vnode hashing, Arrow IPC, msgpack);
- ``encode(vnodes=half)``: one half of the vnodes, from the same image (tables cached);
- ``restore()``: decode + re-intern keys + upsert groups + write accumulators, into a fresh
  operator built from the same plan (checked: same group count and same first rows).

Each figure is the best of --repeat runs. Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.operators import snapshot as snap  # noqa: E402
from laminardb.operators.group_aggregate import NO_WATERMARK  # noqa: E402
from laminardb.operators.query_operator import QueryOperator  # noqa: E402
from laminardb.sql import ddl  # noqa: E402
from laminardb.sql.plan import RelationInfo  # noqa: E402
from laminardb.sql.planner import plan_query  # noqa: E402

_BATCH_ROWS = 65_536  # rows per process() call while building the state, like a bulk insert()
SQL = ("CREATE STREAM g AS SELECT k, window_start, count(*) AS n, sum(v) AS sv, max(v) AS mx "
       "FROM s GROUP BY k, tumble(ts, INTERVAL '1' HOUR)")


def build(n_groups: int, key_type: str) -> tuple[QueryOperator, object]:
    kt = pa.int64() if key_type == "bigint" else pa.string()
    schema = pa.schema([("k", kt), ("ts", pa.int64()), ("v", pa.int64())])
    stmt = ddl.parse_statement(SQL)
    plan = plan_query(stmt.query, lambda name: RelationInfo("s", schema, "ts", False))
    op = QueryOperator(plan)
    rng = np.random.default_rng(7)
    for lo in range(0, n_groups, _BATCH_ROWS):
        ids = np.arange(lo, min(lo + _BATCH_ROWS, n_groups), dtype=np.int64)
        keys = pa.array(ids) if key_type == "bigint" else pa.array([f"user-{i:08d}" for i in ids])
        batch = pa.RecordBatch.from_arrays(
            [keys, pa.array(rng.integers(0, 3_000_000, len(ids))), pa.array(rng.integers(0, 1000, len(ids)))],
            schema=schema)
        op.process(batch, NO_WATERMARK)
    assert op.agg.state_groups == n_groups
    return op, plan


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def timed_encode(img) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    blob = img.encode()
    return time.perf_counter() - t0, blob


def measure(n_groups: int, key_type: str, repeat: int) -> dict:
    op, plan = build(n_groups, key_type)
    t_snap, img = best(op.snapshot, repeat)
    t_enc, blob = min(timed_encode(op.snapshot()) for _ in range(repeat))  # fresh images: no cache
    t_half, half = best(lambda: img.encode(vnodes=range(snap.DEFAULT_VNODES // 2)), repeat)

    def restore():
        fresh = QueryOperator(plan)
        fresh.restore(blob)
        return fresh

    t_restore, fresh = best(restore, repeat)
    assert fresh.agg.state_groups == n_groups
    assert fresh.current_rows().slice(0, 100).equals(op.current_rows().slice(0, 100))
    return {"groups": n_groups, "key": key_type, "snapshot_ms": round(t_snap * 1e3, 1),
            "encode_ms": round(t_enc * 1e3, 1), "bytes": len(blob),
            "encode_half_ms": round(t_half * 1e3, 1), "half_bytes": len(half),
            "restore_ms": round(t_restore * 1e3, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--keys", nargs="+", default=["bigint", "varchar"], choices=["bigint", "varchar"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compression", default=snap._IPC_COMPRESSION or "none", choices=["none", "lz4", "zstd"])
    ap.add_argument("--cpu", type=int, default=0, help="CPU to pin to (-1: no pinning)")
    args = ap.parse_args()
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    snap._IPC_COMPRESSION = None if args.compression == "none" else args.compression
    results = []
    print(f"{'groups':>9} {'key':>8} {'snapshot':>9} {'encode':>8} {'MB':>7} {'half':>7} {'restore':>8}  (ms; "
          f"IPC compression {args.compression}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    for n in args.groups:
        for key in args.keys:
            r = measure(n, key, args.repeat)
            results.append(r)
            print(f"{n:>9,} {key:>8} {r['snapshot_ms']:>9} {r['encode_ms']:>8} {r['bytes'] / 1e6:>7.1f} "
                  f"{r['encode_half_ms']:>7} {r['restore_ms']:>8}", flush=True)
    print("BENCH_JSON " + json.dumps({"compression": args.compression, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
