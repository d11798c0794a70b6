"""The coordinator's epoch job, for every sink: Spark tasks on the executors read the head's
staged files and write the sink's output; the driver only renames, installs or commits, once
per epoch. Entry points: :func:`native_kind` (which way this sink's epoch goes),
:func:`write_epoch` (run the job before the manifest; returns the manifest info),
:func:`commits_on_executor` / :func:`run_on_executor` (a sink whose commit reads its staged
rows commits in a Spark task) and :class:`SparkDeltaLakeSink` (a Delta Lake sink that commits
the executors' add-actions).

Why: the old path copied every row into the JVM (``createDataFrame``), sorted it and copied
it back (``toArrow``) — 3–4 µs a row in the driver. Here the driver holds the epoch's file
list, their footers' row-group counts and one small row per written file, never the rows.

Kinds (``native_kind``), before the manifest::

    file:        executors: staged row groups → part files in <path>/_staging/.spark-<e>/
                 driver: rename them to _staging/part-<e>-<writer>-<n>.<fmt>, n in staged order
    partitioned: executors: each chunk split by the partition columns → a part file per
                 partition in _staging/.spark-<e>/<chunk>/<partition>/
                 driver: rename them to _staging/<partition>/part-<e>-<writer>-<n>.<fmt>
    delta:       executors: Parquet data files in the (local) table directory, in no commit yet
                 driver: their add-actions → <stage>/actions-<e>.json
    stage:       (Kafka, PostgreSQL, Iceberg, a remote Delta table) one task writes the sink's
                 sealed epoch file (Arrow IPC, what pre_commit seals) under a temporary name
                 driver: EpochStage.adopt renames it to epoch-<e>.arrow
    write:       (an at-least-once sink) one task rebuilds the sink, writes the rows, flushes

After the manifest, ``commit(e)``: FILE and partitioned FILE are the sink's own renames
(idempotent; recover() re-drives them), Delta Lake one commit of the staged actions with app
transaction (app id, version = e). A ``stage`` sink's commit reads its rows, so it runs in a
Spark task on a sink rebuilt from its spec (``sink_tasks``), as does its recovery.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from laminardb.checkpoint.epoch_tasks import (
    DeltaFilesTask,
    FilePartsTask,
    PartitionedPartsTask,
    ReadToEnd,
    SealTask,
    plan_chunks,
)
from laminardb.checkpoint.spark_delta_sink import SparkDeltaLakeSink
from laminardb.connectors.exceptions import SinkWriteError
from laminardb.connectors.file_sink import TransactionalFileSink
from laminardb.connectors.partitioned_sink import PartitionedTransactionalFileSink

__all__ = ["SparkDeltaLakeSink", "commits_on_executor", "fresh_tmp", "native_kind", "run_on_executor",
           "stage_delta_files", "write_epoch"]


class _Written(NamedTuple):
    """One file a task wrote: its chunk's key (staged file, first row) and what a commit needs
    (``stats``: a Delta file's statistics, or a partitioned part file's partition directory)."""

    source: int
    first_row: int
    path: str
    rows: int
    bytes: int
    stats: str


def native_kind(sink: Any) -> str:
    """How the executors write this sink's epoch: ``"file"``, ``"partitioned"``, ``"delta"``,
    ``"stage"`` or ``"write"`` (see the module docstring). Every sink has one: no epoch's rows
    go through the driver."""
    if type(sink) is TransactionalFileSink:
        return "file"
    if type(sink) is PartitionedTransactionalFileSink:
        return "partitioned"
    if isinstance(sink, SparkDeltaLakeSink) and "://" not in sink.path:
        return "delta"
    if hasattr(sink, "epoch_stage"):
        return "stage"
    if getattr(sink, "transactional", False) or not hasattr(sink, "coordinator_spec"):
        msg = (f"the coordinator cannot write a {type(sink).__name__} on Spark's executors; "
               "use a FILE, DELTA_LAKE, KAFKA, POSTGRES or ICEBERG sink")
        raise SinkWriteError(msg)
    return "write"


def commits_on_executor(sink: Any) -> bool:
    """True when the sink's commit and recovery read its staged rows (``stage`` sinks): they
    run in a Spark task (:func:`run_on_executor`), never on the driver's object."""
    return hasattr(sink, "epoch_stage") and native_kind(sink) == "stage"


def _run(spark: Any, stage_files: list[str], task: Any) -> list[Any]:
    """One Spark job: a task per chunk of the staged files (``epoch_tasks.plan_chunks``), run on
    the executors; returns the tasks' rows (one per written file) in staged order."""
    from laminardb.checkpoint.spark_job import _Watchdog

    sc = spark.sparkContext
    chunks = plan_chunks(stage_files, sc.defaultParallelism)
    if not chunks:
        return []
    with _Watchdog():
        rows = sc.parallelize(chunks, len(chunks)).mapPartitions(ReadToEnd(task)).collect()
    return sorted((_Written(*r) for r in rows), key=lambda r: (r.source, r.first_row))


def _run_one(spark: Any, task: Any, chunks: list[Any]) -> list[Any]:
    """One Spark job of one task over ``chunks`` in order (one item when there are none)."""
    from laminardb.checkpoint.spark_job import _Watchdog

    with _Watchdog():
        return spark.sparkContext.parallelize(chunks or [None], 1).mapPartitions(ReadToEnd(task)).collect()


def write_epoch(spark: Any, kind: str, sink: Any, stage_files: list[str], epoch: int,
                schema: pa.Schema) -> tuple[dict[str, Any], int]:
    """Write ``epoch`` of ``sink`` from its staged files on the executors and stage it for the
    sink's commit; returns (manifest info, rows)."""
    writers = {"file": _write_file_epoch, "partitioned": _write_partitioned_epoch,
               "delta": _write_delta_epoch, "stage": _write_stage_epoch, "write": _write_rows}
    return writers[kind](spark, sink, stage_files, epoch, schema)


def fresh_tmp(staging: Path, epoch: int) -> Path:
    """An empty ``_staging/.spark-<epoch>`` for the executors' files; a crashed job's is removed."""
    tmp = staging / f".spark-{epoch:012d}"  # under _staging: readers never see it
    for left in staging.glob(".spark-*"):  # of a job a crash interrupted: never staged
        shutil.rmtree(left, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _write_file_epoch(spark: Any, sink: TransactionalFileSink, stage_files: list[str],
                      epoch: int, schema: pa.Schema) -> tuple[dict[str, Any], int]:
    tmp = fresh_tmp(sink.staging, epoch)
    try:
        task = FilePartsTask(str(tmp), sink.format, schema.serialize().to_pybytes())
        results = _run(spark, stage_files, task)
        rows = sum(r.rows for r in results)
        info = sink.adopt(epoch, [r.path for r in results], rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info, rows


def _write_partitioned_epoch(spark: Any, sink: PartitionedTransactionalFileSink, stage_files: list[str],
                             epoch: int, schema: pa.Schema) -> tuple[dict[str, Any], int]:
    tmp = fresh_tmp(sink.staging, epoch)
    try:
        task = PartitionedPartsTask(str(tmp), sink.format, schema.serialize().to_pybytes(),
                                    sink.partition_by, sink.default_name)
        results = _run(spark, stage_files, task)
        parts: dict[str, list[str]] = {}
        for r in results:  # in chunk order: a partition's files in staged row order
            parts.setdefault(r.stats, []).append(r.path)
        rows = sum(r.rows for r in results)
        info = sink.adopt(epoch, parts, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info, rows


def _write_delta_epoch(spark: Any, sink: SparkDeltaLakeSink, stage_files: list[str],
                       epoch: int, schema: pa.Schema) -> tuple[dict[str, Any], int]:
    Path(sink.path).mkdir(parents=True, exist_ok=True)
    task = DeltaFilesTask(sink.path, sink.table_schema.serialize().to_pybytes(), epoch)
    results = _run(spark, stage_files, task)
    return stage_delta_files(sink, epoch, [(r.path, r.bytes, r.stats, r.rows) for r in results])


def stage_delta_files(sink: SparkDeltaLakeSink, epoch: int,
                      files: list[tuple[str, int, str, int]]) -> tuple[dict[str, Any], int]:
    """Stage the data files the executors wrote into a Delta table, each (path in the table,
    bytes, stats JSON, rows), as ``epoch``'s add-actions; returns (manifest info, rows)."""
    actions = [{"path": path, "size": size, "stats": stats,
                "modification_time": int(os.stat(os.path.join(sink.path, path)).st_mtime * 1000)}
               for path, size, stats, _ in files]
    sink.stage_actions(epoch, actions)
    rows = sum(f[3] for f in files)
    return {"rows": rows, "files": len(actions)}, rows


def _write_stage_epoch(spark: Any, sink: Any, stage_files: list[str], epoch: int,
                       schema: pa.Schema) -> tuple[dict[str, Any], int]:
    """The sink's sealed epoch file, written by one task (the rows in staged order), then
    installed by a rename: what ``sink.pre_commit(epoch)`` returns and leaves staged."""
    stage = sink.epoch_stage
    stage.drop_incoming()
    tmp = stage.incoming(epoch)
    chunks = plan_chunks(stage_files, 1)
    task = SealTask(os.fspath(tmp), sink.schema.serialize().to_pybytes())
    rows = _Written(*_run_one(spark, task, chunks)[0]).rows
    if rows == 0:  # no rows, no target commit (as pre_commit)
        tmp.unlink(missing_ok=True)
        return {"rows": 0}, 0
    stage.adopt(epoch, tmp)
    return {"rows": rows}, rows


def _write_rows(spark: Any, sink: Any, stage_files: list[str], epoch: int,
                schema: pa.Schema) -> tuple[dict[str, Any], int]:
    """An at-least-once sink: written now, by one task (a retried epoch writes again)."""
    from laminardb.checkpoint.sink_tasks import SinkWriteTask

    rows = sum(_run_one(spark, SinkWriteTask(sink.coordinator_spec), plan_chunks(stage_files, 1)))
    sink.rows_written = getattr(sink, "rows_written", 0) + rows
    return {}, rows


def run_on_executor(spark: Any, sink: Any, op: str, epoch: int, info: dict[str, Any] | None = None) -> None:
    """``sink.commit(epoch)`` (``op="commit"``) or ``sink.recover(epoch, info)`` in one Spark
    task, on the sink rebuilt from its spec; the counters it reports are added to ``sink``'s.
    Nothing to do (no job) when no epoch is staged."""
    from laminardb.checkpoint.sink_tasks import SinkCommitTask

    staged = sink.epoch_stage.epochs()
    if not staged or (op == "commit" and min(staged) > epoch):
        return
    task = SinkCommitTask(sink.coordinator_spec, op, epoch, info)
    rows, epochs = _run_one(spark, task, [])[0]
    sink.rows_committed += rows
    sink.epochs_committed += epochs
