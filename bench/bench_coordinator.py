"""Delta checkpoint coordinator benchmark: what one checkpoint epoch costs, sinks written by
Spark's executors from staged Parquet (``native``) against ``legacy``: an older head's Arrow IPC
stage files in the old session (``local[1]``, 512 MB). Before issue 21 item 2, ``legacy`` was the
driver path (every row through ``createDataFrame``/``toArrow``); that path is gone, and
Arrow IPC files now go through the executors too.

Run from the repository root:

    .venv/bin/python bench/bench_coordinator.py                          # 100k and 1M rows, 5 epochs
    .venv/bin/python bench/bench_coordinator.py --rows 100000 --epochs 10 --paths native
    .venv/bin/python bench/bench_coordinator.py --paths native --sinks partitioned   # partitioned FILE

``--sinks partitioned`` stages one partitioned FILE sink (``partitioned_by = 'region'``, 8
partitions) instead of FILE + Delta Lake. To compare two versions of the code in one run, run
it once per tree with that tree first on ``PYTHONPATH`` (``bench/README.md`` shows the loop).

An in-process head (the four checkpoint calls of the database head) stages ``--rows`` new
rows per epoch for two exactly-once sinks, a FILE (Parquet) sink and a Delta Lake sink: as
Parquet for the executor path (what ``StagedSink`` writes now), as Arrow IPC streams for the
legacy path (what it wrote before).
Each (path, rows) gets a fresh coordinator and Spark session and runs ``--epochs``
checkpoints after one warm-up epoch (JVM start and first query excluded). Reported:
barrier→manifest p50/p99 (``status()``; also without the prepare, where the stand-in head
writes the epoch's stage files that a real head streams as rows arrive), and CPU µs per sink row of the coordinator's work:
the Spark processes (the JVM and its Python workers) alone and with the driver's Python
(minus the bench head's own staging). Ends with ``BENCH_JSON [...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc_cpu  # noqa: E402
import ray  # noqa: E402,F401 - proc_cpu uses Ray's vendored psutil

from laminardb.checkpoint.spark_coordinator import CheckpointCoordinator  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()),
                    ("ts", pa.timestamp("ms"))])
# the old session: what spark_job.py fixed before the executor path
_LEGACY_ENV = {"LAMINARDB_COORDINATOR_SPARK_MASTER": "local[1]", "LAMINARDB_COORDINATOR_SPARK_MEMORY": "512m"}


class BenchHead:
    """Stages ``rows`` fresh rows per epoch for every sink; commits drop the stage files."""

    def __init__(self, directory: Path, sinks: dict[str, str], rows: int, *, parquet: bool,
                 schema: pa.Schema = SCHEMA) -> None:
        self.dir, self.sinks, self.rows, self.parquet = directory, sinks, rows, parquet
        self.schema = schema
        self.cpu_s = 0.0  # this thread's CPU staging rows: not the coordinator's work
        self.dir.mkdir(parents=True, exist_ok=True)
        self.next_id, self.committed, self.pending = 0, 0, set()
        self.keys = pa.array([f"key-{i}" for i in range(1000)])
        self.regions = pa.array([f"r{i}" for i in range(8)])

    def _path(self, name: str, epoch: int) -> Path:
        return self.dir / f"{name}-{epoch}.{'parquet' if self.parquet else 'arrows'}"

    def prepare_checkpoint(self, epoch: int) -> dict[str, Any]:
        t0 = time.thread_time()
        ids = np.arange(self.next_id, self.next_id + self.rows, dtype=np.int64)
        self.next_id += self.rows
        table = pa.table({"id": ids, "k": self.keys.take(pa.array(ids % 1000)), "v": ids * 0.25,
                          "ts": pa.array(1_700_000_000_000 + ids, pa.timestamp("ms"))}, schema=SCHEMA)
        if "region" in self.schema.names:  # the partitioned sink's partition column: 8 values
            table = table.append_column("region", self.regions.take(pa.array(ids % 8)))
        sinks = {}
        for name, sql in self.sinks.items():
            path = self._path(name, epoch)
            if self.parquet:  # as StagedSink: one row group per appended batch (here 64k rows)
                pq.write_table(table, path, row_group_size=65_536)
            else:
                with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, self.schema) as w:
                    w.write_table(table)
            sinks[name] = {"sql": sql, "schema": self.schema.serialize().to_pybytes(),
                           "stage": str(path), "rows": table.num_rows}
        self.pending.add(epoch)
        self.cpu_s += time.thread_time() - t0
        return {"epoch": epoch, "manifest_ref": f"bench/{epoch}", "bytes": table.nbytes,
                "stall_s": 0.0, "sinks": sinks, "sources": {}}

    def commit_checkpoint(self, epoch: int) -> None:
        for e in [e for e in self.pending if e <= epoch]:
            self.pending.discard(e)
            for name in self.sinks:
                self._path(name, e).unlink(missing_ok=True)
        self.committed = max(self.committed, epoch)

    def abort_checkpoint(self, epoch: int) -> None:
        self.pending.discard(epoch)

    def checkpoint_status(self) -> dict[str, Any]:
        return {"last_committed": self.committed, "pending": sorted(self.pending)}


def _run(path: str, rows: int, epochs: int, work: Path, kind: str = "file,delta") -> dict[str, Any]:
    """One (path, rows): a fresh coordinator and Spark session, a warm-up epoch, ``epochs``
    measured ones."""
    from laminardb.checkpoint.spark_job import spark_session, stop_spark

    work.mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in _LEGACY_ENV}
    if path == "legacy":
        os.environ.update(_LEGACY_ENV)
    try:
        schema = SCHEMA
        if kind == "partitioned":
            schema = SCHEMA.append(pa.field("region", pa.string()))
            sinks = {"out_parts": f"CREATE SINK out_parts INTO FILE (path = '{work / 'parts'}', format = 'parquet', "
                                  "partitioned_by = 'region') AS SELECT * FROM s"}
        else:
            sinks = {
                "out_file": f"CREATE SINK out_file INTO FILE (path = '{work / 'out'}', format = 'parquet') "
                            "AS SELECT * FROM s",
                "out_delta": f"CREATE SINK out_delta INTO DELTA_LAKE (path = '{work / 'lake'}') AS SELECT * FROM s",
            }
        head = BenchHead(work / "head", sinks, rows, parquet=path == "native", schema=schema)
        coord = CheckpointCoordinator(work / "state", head_resolver=lambda name: head)
        coord.register("bench", interval_s=None, checkpoint_dir=str(work / "ckpt"))
        t0 = time.perf_counter()
        coord.checkpoint_now("bench")  # warm-up: JVM start, first query, table creation
        warm = time.perf_counter() - t0
        coord._db("bench").stats.history.clear()  # noqa: SLF001 - bench only
        spark_session()  # started by the warm-up: sampled with its workers below
        head.cpu_s = 0.0
        before = proc_cpu.sample()
        t0 = time.perf_counter()
        for _ in range(epochs):
            coord.checkpoint_now("bench")
        wall = time.perf_counter() - t0
        spent = proc_cpu.used(before, proc_cpu.sample())
        st = coord.status("bench")
        # barrier→manifest minus the prepare: the stand-in head writes the whole epoch's stage
        # files inside prepare, where a real head has streamed them as rows arrived
        hist = list(coord._db("bench").stats.history)  # noqa: SLF001 - bench only
        after_prepare = np.array([dur - prep for dur, _, _, prep in hist])
        coord.stop()
    finally:
        stop_spark()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    me = os.getpid()
    spark_cpu = sum(p.cpu_s for p in spent if p.pid != me)
    jvm_cpu = sum(p.cpu_s for p in spent if p.pid != me and "java" in p.name)
    driver_cpu = sum(p.cpu_s for p in spent if p.pid == me) - head.cpu_s
    sink_rows = rows * len(sinks) * epochs
    return {
        "path": path, "sinks_kind": kind, "code": os.environ.get("PYTHONPATH", ""), "rows_per_epoch": rows, "sinks": len(sinks), "epochs": epochs,
        "warmup_s": round(warm, 2), "epoch_p50_s": round(st["duration_p50_s"], 3),
        "epoch_p99_s": round(st["duration_p99_s"], 3), "spark_p50_s": round(st["spark_p50_s"], 3),
        "after_prepare_p50_s": round(float(np.percentile(after_prepare, 50)), 3),
        "after_prepare_p99_s": round(float(np.percentile(after_prepare, 99)), 3),
        "sink_rows_per_s": round(sink_rows / wall),
        "spark_procs_cpu_us_per_row": round(spark_cpu / sink_rows * 1e6, 3),
        "jvm_cpu_us_per_row": round(jvm_cpu / sink_rows * 1e6, 3),
        "coordinator_cpu_us_per_row": round((spark_cpu + max(driver_cpu, 0.0)) / sink_rows * 1e6, 3),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="100000,1000000", help="rows per epoch, comma-separated")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--paths", default="legacy,native", help="legacy (driver), native (executors)")
    ap.add_argument("--sinks", default="file,delta", choices=["file,delta", "partitioned"],
                    help="the sinks: FILE + Delta Lake, or one partitioned FILE sink")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ldb-bench-coord-"))
    results = []
    try:
        for rows in (int(r) for r in args.rows.split(",")):
            for path in args.paths.split(","):
                out = _run(path, rows, args.epochs, work / f"{path}-{rows}", args.sinks)
                results.append(out)
                print(f"{path:>6} {rows:>9,} rows/epoch x {out['sinks']} sinks: barrier→manifest p50 "
                      f"{out['epoch_p50_s']} s p99 {out['epoch_p99_s']} s (after the prepare "
                      f"{out['after_prepare_p50_s']} / {out['after_prepare_p99_s']} s); CPU µs per sink row: Spark "
                      f"processes {out['spark_procs_cpu_us_per_row']} (JVM {out['jvm_cpu_us_per_row']}), with the driver's Python "
                      f"{out['coordinator_cpu_us_per_row']}; warm-up {out['warmup_s']} s", flush=True)
        print("BENCH_JSON " + json.dumps(results))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
