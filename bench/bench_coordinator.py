"""Delta checkpoint coordinator benchmark: what one checkpoint epoch costs, and Spark's share.

Run from the repository root:

    .venv/bin/python bench/bench_coordinator.py                 # 100k rows per epoch, 10 epochs
    .venv/bin/python bench/bench_coordinator.py --rows 1000000 --epochs 5

An in-process head (the four checkpoint calls of the database head) stages ``--rows`` new
rows per epoch for two exactly-once sinks, a FILE (Parquet) sink and a Delta Lake sink, as
Arrow IPC stream files; the coordinator (``CheckpointCoordinator``) runs ``--epochs``
checkpoints after one warm-up epoch (JVM start and first query excluded). Reported from
``status()``: barrier→manifest p50/p99, the Spark job's p50 and its share of the epoch,
and the rest (sink writes and pre-commits, the epoch log). Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.checkpoint.spark_coordinator import CheckpointCoordinator

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()),
                    ("ts", pa.timestamp("ms"))])


class BenchHead:
    """Stages ``rows`` fresh rows per epoch for every sink; commits drop the stage files."""

    def __init__(self, directory: Path, sinks: dict[str, str], rows: int) -> None:
        self.dir, self.sinks, self.rows = directory, sinks, rows
        self.dir.mkdir(parents=True, exist_ok=True)
        self.next_id, self.committed, self.pending = 0, 0, set()
        self.keys = pa.array([f"key-{i}" for i in range(1000)])

    def prepare_checkpoint(self, epoch: int) -> dict[str, Any]:
        ids = np.arange(self.next_id, self.next_id + self.rows, dtype=np.int64)
        self.next_id += self.rows
        table = pa.table({"id": ids, "k": self.keys.take(pa.array(ids % 1000)), "v": ids * 0.25,
                          "ts": pa.array(1_700_000_000_000 + ids, pa.timestamp("ms"))}, schema=SCHEMA)
        sinks = {}
        for name, sql in self.sinks.items():
            path = self.dir / f"{name}-{epoch}.arrows"
            with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, SCHEMA) as w:
                w.write_table(table)
            sinks[name] = {"sql": sql, "schema": SCHEMA.serialize().to_pybytes(),
                           "stage": str(path), "rows": table.num_rows}
        self.pending.add(epoch)
        return {"epoch": epoch, "manifest_ref": f"bench/{epoch}", "bytes": table.nbytes,
                "stall_s": 0.0, "sinks": sinks, "sources": {}}

    def commit_checkpoint(self, epoch: int) -> None:
        for e in [e for e in self.pending if e <= epoch]:
            self.pending.discard(e)
            for name in self.sinks:
                (self.dir / f"{name}-{e}.arrows").unlink(missing_ok=True)
        self.committed = max(self.committed, epoch)

    def abort_checkpoint(self, epoch: int) -> None:
        self.pending.discard(epoch)

    def checkpoint_status(self) -> dict[str, Any]:
        return {"last_committed": self.committed, "pending": sorted(self.pending)}


def _read_alone(head: BenchHead, work: Path) -> tuple[float, float]:
    """One sink's epoch (two parts) read by the Spark job and by plain pyarrow, best of 3."""
    from laminardb.checkpoint.spark_job import read_epoch, read_stage_file, spark_session

    epoch = head.committed + 1
    head.prepare_checkpoint(epoch)
    files = [str(head.dir / f"out_file-{epoch}.arrows"), str(head.dir / f"out_delta-{epoch}.arrows")]
    spark, best_spark, best_arrow = spark_session(), float("inf"), float("inf")
    for _ in range(3):
        t = time.perf_counter()
        a = read_epoch(spark, files)
        best_spark = min(best_spark, time.perf_counter() - t)
        t = time.perf_counter()
        b = pa.concat_tables([read_stage_file(f) for f in files])
        best_arrow = min(best_arrow, time.perf_counter() - t)
        assert a.equals(b)
    return best_spark, best_arrow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ldb-bench-coord-"))
    try:
        sinks = {
            "out_file": f"CREATE SINK out_file INTO FILE (path = '{work / 'out'}', format = 'parquet') "
                        "AS SELECT * FROM s",
            "out_delta": f"CREATE SINK out_delta INTO DELTA_LAKE (path = '{work / 'lake'}') AS SELECT * FROM s",
        }
        head = BenchHead(work / "head", sinks, args.rows)
        coord = CheckpointCoordinator(work / "state", head_resolver=lambda name: head)
        coord.register("bench", interval_s=None, checkpoint_dir=str(work / "ckpt"))
        t0 = time.perf_counter()
        coord.checkpoint_now("bench")  # warm-up: JVM start, first query, table creation
        warm = time.perf_counter() - t0
        # drop the warm-up epoch from the statistics
        coord._db("bench").stats.history.clear()  # noqa: SLF001 - bench only
        t0 = time.perf_counter()
        for _ in range(args.epochs):
            coord.checkpoint_now("bench")
        wall = time.perf_counter() - t0
        st = coord.status("bench")
        coord.stop()
        spark_s, arrow_s = _read_alone(head, work)
        out = {
            "rows_per_epoch": args.rows, "sinks": len(sinks), "epochs": args.epochs,
            "warmup_s": round(warm, 2), "epoch_p50_s": round(st["duration_p50_s"], 3),
            "epoch_p99_s": round(st["duration_p99_s"], 3),
            "spark_p50_s": round(st["spark_p50_s"], 3), "spark_share": round(st["spark_share"], 3),
            "rows_per_s": round(args.rows * args.epochs / wall),
            "read_epoch_spark_s": round(spark_s, 3), "read_epoch_pyarrow_s": round(arrow_s, 4),
            "cpus": os.cpu_count(),
        }
        print(f"{args.rows:,} rows/epoch x {len(sinks)} sinks: epoch p50 {out['epoch_p50_s']} s "
              f"(p99 {out['epoch_p99_s']} s), Spark job p50 {out['spark_p50_s']} s = "
              f"{out['spark_share']:.0%} of the epoch; first epoch (JVM start) {out['warmup_s']} s")
        print(f"one sink's epoch read alone: Spark {out['read_epoch_spark_s']} s, "
              f"pyarrow read + concat {out['read_epoch_pyarrow_s']} s")
        print("BENCH_JSON " + json.dumps(out))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
