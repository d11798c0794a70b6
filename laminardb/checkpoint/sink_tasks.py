"""The coordinator's sinks, built from their spec, on the driver and again inside a Spark task.
Entry points: :func:`build_sink` (the coordinator's builder: ``make_sink``, or a
``SparkDeltaLakeSink`` for Delta Lake), :class:`SinkCommitTask` (``commit(e)`` or
``recover(e, info)`` of a sink whose commit reads its staged rows) and :class:`SinkWriteTask`
(an at-least-once sink: the epoch's rows written and flushed).

Why on an executor: a Kafka, PostgreSQL, Iceberg or remote Delta sink's commit reads the
epoch's rows from its ``EpochStage`` and sends them to the target; run in the driver, every
row would pass through the driver process. The task rebuilds the sink from the same spec
(CREATE SINK text, stream schema, stage root) the coordinator keeps in ``sinks.json``, so it
finds the same stage directory and ids: a Kafka sink's transactional.id (its token file is in
the stage) fences any older producer of the sink, and the driver's object never starts one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa

__all__ = ["NotASinkError", "SinkCommitTask", "SinkSpec", "SinkWriteTask", "build_sink"]


class NotASinkError(ValueError):
    """A sink spec whose text is no CREATE SINK (the coordinator reports it as a
    ``CheckpointPrepareError``)."""


class SinkSpec(NamedTuple):
    """What rebuilds a coordinator sink anywhere (picklable)."""

    name: str
    sql: str
    schema_ipc: bytes
    stage_root: str

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))


def build_sink(spec: SinkSpec) -> Any:
    """The sink of ``spec``; raises ``NotASinkError`` when ``spec.sql`` is no CREATE SINK. The
    object keeps its spec as ``coordinator_spec`` (what the executor tasks rebuild it from)."""
    from laminardb.connectors.sinks import _dir_name, make_sink
    from laminardb.sql import ddl

    stmt = ddl.parse_statement(spec.sql)
    if not isinstance(stmt, ddl.CreateSink):
        raise NotASinkError(f"sink {spec.name!r}: the head sent {spec.sql[:80]!r}, not a CREATE SINK")
    if stmt.connector.lower() in ("delta_lake", "deltalake", "delta"):
        # a Delta Lake sink that can also commit the add-actions of the executors' files
        from laminardb.checkpoint.spark_delta_sink import SparkDeltaLakeSink

        sink = SparkDeltaLakeSink(name=stmt.name, schema=spec.schema, options=stmt.options,
                                  stage_dir=os.path.join(spec.stage_root, _dir_name(stmt.name)))
    else:
        sink = make_sink(stmt, spec.schema, durable=True, stage_root=spec.stage_root)
    sink.coordinator_spec = spec
    return sink


class SinkCommitTask:
    """One task: rebuild the sink, run ``commit(epoch)`` (``op="commit"``) or
    ``recover(epoch, info)``, close it; yields (rows committed, epochs committed)."""

    def __init__(self, spec: SinkSpec, op: str, epoch: int, info: dict[str, Any] | None) -> None:
        self.spec, self.op, self.epoch, self.info = spec, op, epoch, info

    def __call__(self, _: Iterator[Any]) -> Iterator[tuple[int, int]]:
        sink = build_sink(self.spec)
        try:
            if self.op == "commit":
                sink.commit(self.epoch)
            else:
                sink.recover(self.epoch, self.info)
            yield int(sink.rows_committed), int(sink.epochs_committed)
        finally:
            sink.close()


class SinkWriteTask:
    """One task over every chunk, in staged order: rebuild an at-least-once sink, write the
    rows table by table, flush and close it; yields the rows written."""

    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec

    def __call__(self, chunks: Iterator[Any]) -> Iterator[int]:
        from laminardb.checkpoint.epoch_tasks import chunk_tables

        sink = build_sink(self.spec)
        rows = 0
        try:
            for chunk in filter(None, chunks):
                for table in chunk_tables(chunk.segments, self.spec.schema):
                    sink.write(table)
                    rows += table.num_rows
            sink.flush()
        finally:
            sink.close()
        yield rows
