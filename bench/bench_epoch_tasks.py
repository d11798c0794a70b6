"""What one coordinator epoch job costs Spark by its number of tasks (issue 20).

A FILE sink's epoch of 9,000 rows in 3 staged Parquet files (one per "actor") is written by ``FilePartsTask`` on the coordinator's own Spark session
(``spark_job.spark_session``), 6 row groups of 500 rows each, cut into 1, 2 or 6 chunks (``plan_chunks``: 1 is what a small
epoch gets now; 6 is what one chunk per core of every file gave before). Per setting: 3 warm
epochs, then ``--epochs`` timed; CPU is the JVM's and its Python workers' (their process
tree, from /proc), per epoch. Settings run in the order given, twice by default, so the JVM's
warming shows as the spread.

    .venv/bin/python bench/bench_epoch_tasks.py --tasks 6,1,2,6,1,2
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.checkpoint.epoch_tasks import FilePartsTask, ReadToEnd, plan_chunks  # noqa: E402
from laminardb.checkpoint.spark_job import _jvm_process, spark_session, stop_spark  # noqa: E402

_HZ = os.sysconf("SC_CLK_TCK")
_SCHEMA = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("c", pa.int64()), ("s", pa.float64())])
_GROUP_ROWS = 500


def _tree_cpu(root: int) -> tuple[float, float]:
    """(CPU s of ``root`` and every descendant, CPU s of ``root`` alone)."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
                procs[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / _HZ)
            except OSError:
                pass
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(procs[p][1] for p in tree if p in procs), procs.get(root, (0, 0.0))[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="6,1,2,6,1,2", help="tasks per epoch (1, 2, 3, 6, 9 or 18), in run order")
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ldb-bench-epoch-tasks-"))
    try:
        files = []
        for i in range(3):
            path = root / f"stage{i}.parquet"
            with pq.ParquetWriter(path, _SCHEMA) as w:
                for _ in range(6):
                    n = _GROUP_ROWS
                    w.write_table(pa.table({"k": range(n), "w": [0] * n, "c": [1] * n, "s": [1.0] * n}, schema=_SCHEMA))
            files.append(str(path))
        total = 18 * _GROUP_ROWS
        spark = spark_session()
        sc = spark.sparkContext
        jvm = _jvm_process().pid
        out = root / "out"
        out.mkdir()
        task = ReadToEnd(FilePartsTask(str(out), "parquet", _SCHEMA.serialize().to_pybytes()))
        print(f"coordinator epoch job, {total:,} rows in 3 staged files; CPU ms per epoch (JVM + Python workers)")
        for n in (int(x) for x in args.tasks.split(",")):
            chunks = plan_chunks(files, 1, max_rows=total // n, min_rows=0)
            assert len(chunks) == n, (n, len(chunks))
            for _ in range(3):
                sc.parallelize(chunks, n).mapPartitions(task).collect()
            (c0, j0), t0 = _tree_cpu(jvm), time.perf_counter()
            for _ in range(args.epochs):
                sc.parallelize(chunks, n).mapPartitions(task).collect()
            (c1, j1), wall = _tree_cpu(jvm), time.perf_counter() - t0
            print(f"  {n} task(s): {(c1 - c0) / args.epochs * 1000:6.0f} ms (JVM {(j1 - j0) / args.epochs * 1000:.0f}, "
                  f"workers {((c1 - j1) - (c0 - j0)) / args.epochs * 1000:.0f}); wall {wall / args.epochs * 1000:.0f} ms",
                  flush=True)
            for p in out.iterdir():
                p.unlink()
    finally:
        stop_spark()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
