"""Cross-node merge of a local-global aggregate: the head's merge (``KeyedPartialMerger``, Arrow
hash aggregation + finisher, in the head's process) against the coordinator's epoch job
(``spark_merge.merge_epoch``: Spark groupBy + finisher on the executors + FILE part files),
on the same staged partials, side by side in one run.

Run from the repository root:

    .venv/bin/python bench/bench_spark_merge.py                       # 100k and 1M partial rows
    .venv/bin/python bench/bench_spark_merge.py --partials 200000 --repeats 5

Partials: ``--actors`` actors (2) each report every (window, key) group once, so an epoch of
P partial rows holds P / actors groups. Reported per size (medians of ``--repeats``, after one
warm-up): the head's CPU µs per partial row — merging, staging the final rows (head route),
staging the partials instead (Spark route) — hence the head's CPU the Spark route saves, and the
Spark job's CPU µs per partial row — every process under this one (the JVM and its Python
workers) plus the driver's own Python — and wall seconds. Ends with ``BENCH_JSON [...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc_cpu  # noqa: E402
import ray  # noqa: E402,F401 - proc_cpu uses Ray's vendored psutil

QUERY = ("SELECT k, window_start, count(*) AS c, sum(v) AS s, avg(v) AS a, min(v) AS mn, max(v) AS mx "
         "FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE")


def _plan():
    import laminardb

    with laminardb.open() as db:
        db.execute("CREATE SOURCE t (k VARCHAR, v DOUBLE, ts TIMESTAMP(3), "
                   f"WATERMARK FOR ts AS ts - INTERVAL '0' SECOND); CREATE STREAM q AS {QUERY}")
        r = db.engine.reactor
        return r.nodes["q"].plan, r.nodes["q"].sql, r.relation("t"), r.nodes["q"].schema


def _partials(plan, n: int, actors: int) -> pa.Table:
    """``n`` partial rows: every actor's partials of the same groups (10 windows of keys)."""
    from laminardb.cluster.partial import PartialState
    from laminardb.sql.arrays import numeric_view

    groups = n // actors
    windows = 10
    keys = pa.array([f"key-{i}" for i in range(groups // windows)])
    idx = plan.aggregate.time_index
    parts = []
    for a in range(actors):
        state = PartialState(plan)
        rng = np.random.default_rng(a)
        w = np.repeat(np.arange(windows), len(keys))
        batch = pa.RecordBatch.from_pydict({
            "k": pa.concat_arrays([keys] * windows), "v": rng.normal(size=len(w)),
            "ts": pa.array(w * 1000 + a, pa.timestamp("ms"))})
        state.run(batch, -(2**62), lambda b: numeric_view(b.column(idx)))
        parts.append(state.close(2**62))
    return pa.Table.from_batches(parts)


def _head_merge(plan, table: pa.Table, stage_dir: Path) -> tuple[float, float, float, int]:
    """The head's CPU: merging, staging the final rows (head route) and staging the partials
    instead (Spark route: more rows, wider) — the Spark route saves merge + finals − partials."""
    from laminardb.checkpoint.partial_stage import PartialStage
    from laminardb.checkpoint.sink import EpochStage
    from laminardb.cluster.partial import KeyedPartialMerger
    from laminardb.operators.query_operator import QueryOperator

    merger = KeyedPartialMerger(plan, QueryOperator(plan))
    t0 = time.thread_time()
    finals = merger.merge(table)
    merge = time.thread_time() - t0
    staged = []
    for name, rows, kind in (("finals", pa.Table.from_batches(finals), EpochStage),
                             ("partials", table, PartialStage)):
        stage = kind(stage_dir / name, rows.schema, fmt="parquet")
        t0 = time.thread_time()
        for b in rows.to_batches(max_chunksize=65_536):
            stage.append(b)
        stage.seal(1)
        staged.append(time.thread_time() - t0)
        stage.drop(1)
    return merge, staged[0], staged[1], sum(b.num_rows for b in finals)


def _spark_merge(spark, merge: dict, schema: pa.Schema, out: Path, epoch: int) -> tuple[float, float, int]:
    from laminardb.checkpoint.spark_merge import merge_epoch
    from laminardb.connectors.file_sink import TransactionalFileSink

    sink = TransactionalFileSink(out, format="parquet", schema=schema)
    before = proc_cpu.sample()
    t0 = time.perf_counter()
    _, rows = merge_epoch(spark, "file", sink, merge, epoch, schema)
    wall = time.perf_counter() - t0
    cpu = sum(p.cpu_s for p in proc_cpu.used(before, proc_cpu.sample()))
    sink.abort(epoch)
    return cpu, wall, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partials", default="100000,1000000", help="partial rows per epoch, comma-separated")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from laminardb.checkpoint.spark_job import spark_session, stop_spark

    plan, sql, relation, schema = _plan()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-merge-"))
    spark = spark_session()
    results = []
    try:
        epoch = 0
        for n in (int(x) for x in args.partials.split(",")):
            table = _partials(plan, n, args.actors)
            stage = work / f"partials-{n}.parquet"
            pq.write_table(table, stage)
            merge = {"sql": sql, "input": pickle.dumps(relation), "stage": str(stage), "rows": table.num_rows}
            epoch += 1
            _spark_merge(spark, merge, schema, work / "out", epoch)  # warm-up (workers, first plan)
            _head_merge(plan, table, work)
            head, finals, partials, sparks, walls = [], [], [], [], []
            for _ in range(args.repeats):  # alternate: the same machine noise for both
                cpu, stage_f, stage_p, rows_h = _head_merge(plan, table, work)
                head.append(cpu)
                finals.append(stage_f)
                partials.append(stage_p)
                epoch += 1
                cpu, wall, rows_s = _spark_merge(spark, merge, schema, work / "out", epoch)
                sparks.append(cpu)
                walls.append(wall)
                assert rows_h == rows_s, (rows_h, rows_s)
            res = {"partial_rows": table.num_rows, "groups": rows_s, "actors": args.actors,
                   "head_merge_cpu_us_per_partial": round(statistics.median(head) / n * 1e6, 3),
                   "head_stage_finals_cpu_us_per_partial": round(statistics.median(finals) / n * 1e6, 3),
                   "head_stage_partials_cpu_us_per_partial": round(statistics.median(partials) / n * 1e6, 3),
                   "spark_cpu_us_per_partial": round(statistics.median(sparks) / n * 1e6, 3),
                   "spark_wall_s": round(statistics.median(walls), 3),
                   "head_cpu_saved_s_per_epoch": round(statistics.median(head) + statistics.median(finals)
                                                       - statistics.median(partials), 3),
                   "cpus": os.cpu_count()}
            print(res, flush=True)
            results.append(res)
    finally:
        stop_spark()
        shutil.rmtree(work, ignore_errors=True)
    print("BENCH_JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
