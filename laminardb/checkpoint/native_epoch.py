"""The coordinator's epoch job for FILE and Delta Lake sinks: Spark tasks on the executors
read the staged Parquet and write the sink's files; the driver only renames or commits, once
per epoch. Entry points: :func:`native_kind` (can this sink's epoch go this way?),
:func:`write_epoch` (run the job; returns the manifest info) and
:class:`SparkDeltaLakeSink` (a Delta Lake sink that commits the executors' add-actions).

Why: the old path copied every row into the JVM (``createDataFrame``), sorted it and copied
it back (``toArrow``) — 3–4 µs a row in the driver. Here the driver holds the epoch's file
list, their footers' row-group counts and one small row per written file, never the rows.

Steps, FILE (``TransactionalFileSink``, not partitioned)::

    executors: staged row groups → part files in <path>/_staging/.spark-<epoch>/ (FileSink writer)
    driver:    rename them to _staging/part-<epoch>-<writer>-<n>.<fmt>, n in staged row order
    commit(e): the sink's own rename into <path> (idempotent; recover() re-drives it)

Delta Lake::

    executors: staged row groups → Parquet data files in the table directory (in no commit yet)
    driver:    their add-actions → <stage>/actions-<epoch>.json (durable, before the manifest)
    commit(e): one Delta commit of those actions with app transaction (app id, version = e),
               skipped when the table already records e (idempotent re-drive)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from laminardb.checkpoint._files import atomic_write, fsync_dir
from laminardb.checkpoint.epoch_tasks import DeltaFilesTask, FilePartsTask, plan_chunks
from laminardb.connectors.delta_lake import DeltaLakeSink
from laminardb.connectors.exceptions import SinkWriteError
from laminardb.connectors.file_sink import TransactionalFileSink

__all__ = ["SparkDeltaLakeSink", "native_kind", "write_epoch"]

_PARQUET_MAGIC = b"PAR1"


class _Written(NamedTuple):
    """One file a task wrote: its chunk's key (staged file, first row) and what a commit needs."""

    source: int
    first_row: int
    path: str
    rows: int
    bytes: int
    stats: str


_ACTIONS = re.compile(r"^actions-(\d{12})\.json$")


def _is_parquet(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == _PARQUET_MAGIC
    except OSError:
        return False


def native_kind(sink: Any, schema: pa.Schema, stage_files: list[str]) -> str | None:
    """``"file"`` or ``"delta"`` when the executors can write this epoch, else None (the
    bounded driver path of ``spark_job.iter_epoch``: Kafka, PostgreSQL, Iceberg, partitioned
    FILE, a remote Delta table, or Arrow IPC stage files)."""
    if not stage_files or not all(_is_parquet(p) for p in stage_files):
        return None
    if type(sink) is TransactionalFileSink:
        return "file"
    if isinstance(sink, SparkDeltaLakeSink) and "://" not in sink.path:
        return "delta"
    return None


def _run(spark: Any, stage_files: list[str], task: Any) -> list[Any]:
    """One Spark job: a task per chunk of the staged files (``epoch_tasks.plan_chunks``), run on
    the executors; returns the tasks' rows (one per written file) in staged order."""
    from laminardb.checkpoint.spark_job import _Watchdog

    sc = spark.sparkContext
    chunks = plan_chunks(stage_files, sc.defaultParallelism)
    if not chunks:
        return []
    with _Watchdog():
        rows = sc.parallelize(chunks, len(chunks)).mapPartitions(task).collect()
    return sorted((_Written(*r) for r in rows), key=lambda r: (r.source, r.first_row))


def write_epoch(spark: Any, kind: str, sink: Any, stage_files: list[str], epoch: int,
                schema: pa.Schema) -> tuple[dict[str, Any], int]:
    """Write ``epoch`` of ``sink`` from its staged files on the executors and stage it for the
    sink's commit; returns (manifest info, rows)."""
    if kind == "file":
        return _write_file_epoch(spark, sink, stage_files, epoch, schema)
    return _write_delta_epoch(spark, sink, stage_files, epoch, schema)


def _write_file_epoch(spark: Any, sink: TransactionalFileSink, stage_files: list[str],
                      epoch: int, schema: pa.Schema) -> tuple[dict[str, Any], int]:
    tmp = sink.staging / f".spark-{epoch:012d}"  # under _staging: readers never see it
    for left in sink.staging.glob(".spark-*"):  # of a job a crash interrupted: never staged
        shutil.rmtree(left, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        task = FilePartsTask(str(tmp), sink.format, schema.serialize().to_pybytes())
        results = _run(spark, stage_files, task)
        names = [f"part-{epoch:012d}-{sink.writer}-{n:04d}.{sink.format}" for n in range(len(results))]
        for name in names:
            if (sink.path / name).exists():
                msg = (f"sink {os.fspath(sink.path)!r} already holds {name!r}, written by another "
                       "run: point the sink at a new directory or move the old part files away")
                raise SinkWriteError(msg)
        for r, name in zip(results, names, strict=True):
            os.replace(r.path, sink.staging / name)
        fsync_dir(sink.staging)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"files": names}, sum(r.rows for r in results)


def _write_delta_epoch(spark: Any, sink: SparkDeltaLakeSink, stage_files: list[str],
                       epoch: int, schema: pa.Schema) -> tuple[dict[str, Any], int]:
    Path(sink.path).mkdir(parents=True, exist_ok=True)
    task = DeltaFilesTask(sink.path, sink.table_schema.serialize().to_pybytes(), epoch)
    results = _run(spark, stage_files, task)
    actions = [{"path": r.path, "size": r.bytes, "stats": r.stats,
                "modification_time": int(os.stat(os.path.join(sink.path, r.path)).st_mtime * 1000)}
               for r in results]
    sink.stage_actions(epoch, actions)
    rows = sum(r.rows for r in results)
    return {"rows": rows, "files": len(actions)}, rows


class SparkDeltaLakeSink(DeltaLakeSink):
    """A :class:`DeltaLakeSink` whose epochs may also arrive as data files the executors wrote:
    their add-actions wait in ``actions-<epoch>.json`` in the stage directory, and ``commit``
    puts each staged epoch in one Delta commit carrying (app id, version = epoch)."""

    def stage_actions(self, epoch: int, actions: list[dict[str, Any]]) -> None:
        data = json.dumps({"epoch": epoch, "actions": actions}).encode()
        atomic_write(self._actions_path(epoch), data, what="Delta Lake add-actions")

    def _actions_path(self, epoch: int) -> Path:
        return self._stage.dir / f"actions-{epoch:012d}.json"

    def _action_epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for n in os.listdir(self._stage.dir)
                      if (m := _ACTIONS.match(n)))

    def _read_actions(self, epoch: int) -> list[dict[str, Any]]:
        return json.loads(self._actions_path(epoch).read_bytes())["actions"]

    def commit(self, epoch: int) -> None:
        """Commit staged epochs <= ``epoch`` (rows staged by the driver path first, then the
        executors' files), each once: epochs the table records already are skipped."""
        super().commit(epoch)
        epochs = [e for e in self._action_epochs() if e <= epoch]
        if not epochs:
            return
        done = self._last_committed()
        for e in epochs:
            if e > done:
                actions = self._read_actions(e)
                self._commit_actions(e, actions)
                self.epochs_committed += 1
                self.rows_committed += sum(json.loads(a["stats"])["numRecords"] for a in actions)
                done = e
            self._actions_path(e).unlink(missing_ok=True)  # a crash before: the table records e

    def _commit_actions(self, epoch: int, actions: list[dict[str, Any]]) -> None:
        dl = self._dl
        from deltalake.transaction import AddAction, create_table_with_add_actions

        adds = [AddAction(a["path"], int(a["size"]), {}, int(a["modification_time"]), True, a["stats"])
                for a in actions]
        props = dl.CommitProperties(app_transactions=[dl.Transaction(self.app_id, epoch)])
        try:
            if dl.DeltaTable.is_deltatable(self.path):
                dl.DeltaTable(self.path).create_write_transaction(
                    adds, "append", self.table_schema, commit_properties=props)
            else:
                create_table_with_add_actions(self.path, dl.Schema.from_arrow(self.table_schema), adds,
                                              mode="append", commit_properties=props)
        except (OSError, dl.exceptions.DeltaError, pa.ArrowException) as exc:
            raise self._error(f"commit epoch {epoch} to", self.path, exc) from exc

    def abort(self, epoch: int) -> None:
        """Drop epoch's staged rows or add-actions, and the data files no log will reference."""
        super().abort(epoch)
        path = self._actions_path(epoch)
        if not path.exists():
            return
        for a in self._read_actions(epoch):
            Path(self.path, a["path"]).unlink(missing_ok=True)
        path.unlink(missing_ok=True)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        for e in self._action_epochs():
            if e > epoch:
                self.abort(e)
        super().recover(epoch, info)  # its commit(epoch) commits the staged actions too

    def highest_epoch(self) -> int:
        return max([super().highest_epoch(), *self._action_epochs()])
