"""The coordinator's epoch job for a sink that staged a local-global aggregate's partials
(``partial_stage.py``): Spark merges every actor's partials per (window, key) and its
executors finish and write the sink's files. Entry point: :func:`merge_epoch`.

Steps (FILE not partitioned, or a local Delta Lake table; the driver never holds a row)::

    executors: spark.read.parquet(partials) → groupBy(ws, k0..) sum / min / max
               → repartition(n, ws, k0..) → sortWithinPartitions(ws, k0..)
               → mapInArrow: the query's own finisher (HAVING, projection, output types),
                 one file per partition, written with native_epoch's writers
    driver:    names the files by partition (FILE: renames them to part-<e>-<w>-<n>; Delta:
               stages their add-actions), as ``native_epoch.write_epoch`` does

The finisher is the embedded engine's ``QueryOperator``, re-planned on each executor from the
query text and input relation the head sent, so HAVING and projection have exactly the
embedded semantics. A re-driven epoch writes the same files: ``repartition`` by a fixed count
hashes each group to the same partition, and rows are sorted by (window, keys) inside it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.errors import ControlPlaneError

__all__ = ["SparkMergeError", "merge_epoch"]

_RESULT = "part INT, path STRING, rows BIGINT, bytes BIGINT, stats STRING"


class SparkMergeError(ControlPlaneError):
    """The epoch job could not rebuild the query whose partials a sink staged."""

    code = "LDB-6040"


def plan_of(merge: dict[str, Any]):
    """The query the partials belong to, planned by laminardb's planner as the head did."""
    from laminardb.sql import ddl
    from laminardb.sql.planner import plan_query

    relation = merge["input"]  # a RelationInfo, carried by Ray's call and Spark's task (no pickle of ours)
    try:
        stmt = ddl.parse_statement(f"CREATE STREAM __spark_merge AS {merge['sql']}")
        plan = plan_query(stmt.query, lambda name: relation)
    except Exception as exc:
        msg = (f"the epoch job could not re-plan the query {merge['sql'][:120]!r} over "
               f"{relation.name!r}: {exc}; run the same laminardb version on the coordinator "
               "and the database head, or turn spark_merge off for this database")
        raise SparkMergeError(msg) from exc
    if plan.aggregate is None or not plan.aggregate.keys or plan.aggregate.window is None:
        raise SparkMergeError(f"the query {merge['sql'][:120]!r} is not a keyed window aggregate: "
                              "its sink cannot hold partials; turn spark_merge off for this database")
    return plan


def merge_epoch(spark: Any, kind: str | None, sink: Any, merge: dict[str, Any], epoch: int,
                schema: pa.Schema) -> tuple[dict[str, Any], int]:
    """Merge, finish and write ``epoch`` of ``sink`` from its staged partials; returns
    (manifest info, final rows). ``kind``: ``native_epoch.native_kind`` of the sink; other
    than ``"file"`` or ``"delta"`` (the head expected one of those: a sink changed since) the
    partials are merged on the driver, bounded by the epoch's groups."""
    plan = plan_of(merge)
    if kind not in ("file", "delta"):
        return _merge_on_driver(sink, plan, merge, epoch)
    if kind == "file":
        return _file_epoch(spark, sink, plan, merge, epoch, schema)
    return _delta_epoch(spark, sink, plan, merge, epoch)


def _merged_frame(spark: Any, plan: Any, stage_files: list[str]):
    """The partials merged per (window, key), hashed into a fixed number of partitions and
    sorted inside each: what the executors finish and write."""
    from pyspark.sql import functions as F

    from laminardb.cluster.partial import merge_columns

    group_by, aggs = merge_columns(plan.aggregate.specs, len(plan.aggregate.keys))
    exprs = []
    for col, fn, name in aggs:
        value = F.col(col)
        if col.endswith("_v"):  # min/max: only partials that have a value take part
            value = F.when(F.col(col[:-2] + "_h"), value)
        exprs.append(getattr(F, fn)(value).alias(name))
    n = max(1, spark.sparkContext.defaultParallelism)
    return (spark.read.parquet(*stage_files).groupBy(*group_by).agg(*exprs)
            .repartition(n, *group_by).sortWithinPartitions(*group_by))


class FinishTask:
    """Runs on the executors (``mapInArrow``): merged groups → the query's finisher → one file
    of the partition, written by ``writer`` (native_epoch's FILE or Delta writer); yields one
    small row per file."""

    def __init__(self, merge: dict[str, Any], writer: Any, schema_ipc: bytes) -> None:
        self.merge = {"sql": merge["sql"], "input": merge["input"]}
        self.writer = writer
        self.schema_ipc = schema_ipc

    def __call__(self, batches):
        from pyspark import TaskContext

        from laminardb.cluster.partial import finish_merged
        from laminardb.operators.query_operator import QueryOperator

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        plan = plan_of(self.merge)
        finisher = QueryOperator(plan)
        handle, rows = None, 0
        for batch in batches:
            for out in finish_merged(plan, finisher, pa.Table.from_batches([batch])):
                if out.num_rows == 0:
                    continue
                if handle is None:
                    handle = self.writer.open_file(schema)
                table = pa.Table.from_batches([out]).select(schema.names).cast(schema)
                handle.write(table)
                rows += table.num_rows
        if handle is None:  # every group of the partition failed HAVING, or none hashed here
            return
        handle.close()
        path, size, stats = self.writer.result(handle, rows)
        yield pa.RecordBatch.from_pydict({"part": [TaskContext.get().partitionId()], "path": [path],
                                          "rows": [rows], "bytes": [size], "stats": [stats]},
                                         schema=pa.schema([("part", pa.int32()), ("path", pa.string()),
                                                           ("rows", pa.int64()), ("bytes", pa.int64()),
                                                           ("stats", pa.string())]))


def _run(spark: Any, plan: Any, merge: dict[str, Any], writer: Any, schema: pa.Schema) -> list[Any]:
    """The job; returns one row per written file, in partition order."""
    from laminardb.checkpoint.spark_job import _Watchdog

    frame = _merged_frame(spark, plan, [merge["stage"]])
    task = FinishTask(merge, writer, schema.serialize().to_pybytes())
    with _Watchdog():
        rows = frame.mapInArrow(task, _RESULT).collect()
    return sorted(rows, key=lambda r: r["part"])


def _file_epoch(spark: Any, sink: Any, plan: Any, merge: dict[str, Any], epoch: int,
                schema: pa.Schema) -> tuple[dict[str, Any], int]:
    from laminardb.checkpoint.epoch_tasks import FilePartsTask
    from laminardb.checkpoint.native_epoch import fresh_tmp

    tmp = fresh_tmp(sink.staging, epoch)  # under _staging: readers never see it
    try:
        writer = FilePartsTask(str(tmp), sink.format, schema.serialize().to_pybytes())
        results = _run(spark, plan, merge, writer, schema)
        rows = sum(r["rows"] for r in results)
        info = sink.adopt(epoch, [r["path"] for r in results], rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info, rows


def _delta_epoch(spark: Any, sink: Any, plan: Any, merge: dict[str, Any],
                 epoch: int) -> tuple[dict[str, Any], int]:
    from laminardb.checkpoint.epoch_tasks import DeltaFilesTask
    from laminardb.checkpoint.native_epoch import stage_delta_files

    Path(sink.path).mkdir(parents=True, exist_ok=True)
    schema = sink.table_schema
    writer = DeltaFilesTask(sink.path, schema.serialize().to_pybytes(), epoch)
    results = _run(spark, plan, merge, writer, schema)
    return stage_delta_files(sink, epoch, [(r["path"], r["bytes"], r["stats"], r["rows"]) for r in results])


def _merge_on_driver(sink: Any, plan: Any, merge: dict[str, Any], epoch: int) -> tuple[dict[str, Any], int]:
    """A sink the executors do not write (the head expected they would): merged here with
    Arrow, one row per group, then the sink's own two-phase path."""
    import pyarrow.parquet as pq

    from laminardb.cluster.partial import finish_merged, merge_partials
    from laminardb.operators.query_operator import QueryOperator

    merged = merge_partials(pq.read_table(merge["stage"]), plan.aggregate.specs, len(plan.aggregate.keys))
    n = 0
    for out in finish_merged(plan, QueryOperator(plan), merged):
        sink.write(out)
        n += out.num_rows
    return sink.pre_commit(epoch), n
