"""The coordinator's epoch job on Spark's standalone cluster with 1 and 2 workers (issue 21):
does its rows/s grow with executors, and what CPU does it cost per sink row?

Run from the repository root (needs Java 17, as the tests do):

    .venv/bin/python bench/bench_spark_executors.py                  # 2M rows, 3 epochs each
    .venv/bin/python bench/bench_spark_executors.py --rows 1M --workers 1,2

Each worker is a node's worth of Spark (``laminardb spark up``: its own data dir and work dir,
1 core), all registered with one master, as ``ray up`` starts them on the nodes of a cluster;
here the "nodes" share one machine, as ``ray.cluster_utils.Cluster``'s nodes do. The
coordinator's own session (``spark_job.spark_session``, one executor per worker) writes a FILE
sink's epoch from one staged Parquet file per writer, exactly as a checkpoint does
(``native_epoch.write_epoch``), then the sink commits it; each epoch's committed rows are
checked against the staged ones. CPU is summed over every process under this one (master,
workers, executors, their Python workers, and this driver) from /proc, before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from proc_cpu import sample, used  # noqa: E402

SCHEMA = pa.schema([("ts", pa.timestamp("ms")), ("k", pa.string()), ("n", pa.int64()), ("v", pa.float64())])


def _count(text: str) -> int:
    scale = {"k": 10**3, "m": 10**6}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _stage(directory: Path, rows: int, writers: int) -> list[str]:
    """One staged epoch file per writer (as heads and actors stage), 64k-row row groups."""
    rng = np.random.default_rng(0)
    paths = []
    for w in range(writers):
        n = rows // writers
        ids = np.arange(w * n, (w + 1) * n, dtype=np.int64)
        table = pa.table({"ts": pa.array(1_700_000_000_000 + ids, pa.timestamp("ms")),
                          "k": pa.array(np.char.add("key-", (ids % 1000).astype(str))),
                          "n": ids, "v": rng.random(n)}, schema=SCHEMA)
        path = directory / f"epoch-{w}.parquet"
        pq.write_table(table, path, row_group_size=65_536)
        paths.append(str(path))
    return paths


def _run(workers: int, rows: int, epochs: int, staged: list[str], work: Path) -> dict:
    from laminardb.checkpoint import spark_job
    from laminardb.checkpoint.native_epoch import write_epoch
    from laminardb.connectors.file_sink import TransactionalFileSink
    from laminardb.spark.standalone import spark_status, start_spark, stop_spark_daemons

    head = work / f"spark-{workers}-head"
    dirs = [head] + [work / f"spark-{workers}-node{i}" for i in range(1, workers)]
    want = pa.concat_tables([pq.read_table(p) for p in staged])
    try:
        doc = start_spark(head, master_port=_free_port(), webui_port=_free_port(), memory_mb=2048)
        for d in dirs[1:]:
            start_spark(d, master=doc["master"], secret_file=doc["secret_file"], memory_mb=2048)
        _wait_workers(head, workers)
        os.environ["LAMINARDB_SPARK_DIR"] = str(head)
        spark_job.stop_spark()
        spark = spark_job.spark_session()
        times, cpu = [], []
        for e in range(1, epochs + 2):  # the first epoch warms the executors' Python workers up
            sink = TransactionalFileSink(work / f"out-{workers}-{e}", format="parquet", schema=SCHEMA)
            before, t = sample(), time.perf_counter()
            _, n = write_epoch(spark, "file", sink, staged, e, SCHEMA)
            sink.commit(e)
            elapsed, after = time.perf_counter() - t, sample()
            got = pa.concat_tables([pq.read_table(p) for p in sorted(sink.path.glob("part-*"))])
            assert n == rows and got.equals(want), "committed rows differ from the staged ones"
            if e > 1:
                times.append(elapsed)
                cpu.append(sum(p.cpu_s for p in used(before, after)))
            shutil.rmtree(sink.path)
        return {"workers": workers, "rows_per_s": rows / statistics.median(times),
                "epoch_s": statistics.median(times), "cpu_us_per_row": 1e6 * statistics.median(cpu) / rows,
                "executor_cores": sum(a["cores"] for a in spark_status(head)["applications"])}
    finally:
        from laminardb.checkpoint import spark_job

        spark_job.stop_spark()
        for d in reversed(dirs):
            stop_spark_daemons(d)


def _wait_workers(head: Path, n: int, timeout: float = 90.0) -> None:
    from laminardb.spark.standalone import spark_status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = spark_status(head) or {}
        if sum(w["state"] == "ALIVE" for w in st.get("workers", [])) >= n:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{n} Spark workers did not register within {timeout:.0f} s")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=_count, default=2_000_000, help="sink rows per epoch")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per worker count (median)")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--writers", type=int, default=2, help="staged files per epoch (one per writer)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ldb-spark-exec-"))
    try:
        staged = _stage(work, args.rows, args.writers)
        results = [_run(int(w), args.rows, args.epochs, staged, work) for w in args.workers.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"FILE epoch of {args.rows:,} rows from {args.writers} staged files, median of {args.epochs} epochs")
    print(f"{'workers':>8}{'executor cores':>16}{'epoch s':>10}{'rows/s':>14}{'CPU µs/row':>12}")
    for r in results:
        print(f"{r['workers']:>8}{r['executor_cores']:>16}{r['epoch_s']:>10.2f}{r['rows_per_s']:>14,.0f}"
              f"{r['cpu_us_per_row']:>12.3f}")
    if len(results) > 1:
        print(f"rows/s, {results[-1]['workers']} workers ÷ {results[0]['workers']}: "
              f"{results[-1]['rows_per_s'] / results[0]['rows_per_s']:.2f}×")


if __name__ == "__main__":
    main()
