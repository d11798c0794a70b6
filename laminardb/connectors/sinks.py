"""Which sink object a ``CREATE SINK … INTO <connector> (…)`` builds. Entry point:
:func:`make_sink`, called by the connection for every CREATE SINK (and again on reopen).

A durable database (``laminardb.open(directory)``) gets exactly-once sinks that the
checkpoint coordinator drives through pre_commit / commit (``TwoPhaseSink``); an in-memory
one gets the at-least-once sinks, which write as rows arrive.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

from laminardb.sql import ddl
from laminardb.sql.exceptions import UnsupportedSqlError

__all__ = ["make_sink"]

_CONNECTORS = ("FILE (path = '…', format = 'jsonl'[, partitioned_by = 'col, …'])", "KAFKA (brokers = '…', topic = '…')",
               "DELTA_LAKE (path = '…')", "ICEBERG (warehouse = '…', table = 'namespace.name')")


def make_sink(stmt: ddl.CreateSink, schema: pa.Schema, *, durable: bool,
              stage_root: str | None) -> Any:
    """The sink for ``stmt``, writing rows of ``schema``.

    Args:
        stmt: the parsed CREATE SINK.
        schema: the schema of the stream the sink reads.
        durable: the database keeps checkpoints: build exactly-once (two-phase) sinks.
        stage_root: a directory of the database where sinks that stage outside their
            target keep their epochs (each in a subdirectory named after the sink);
            required for DELTA_LAKE.

    Returns:
        FILE: a :class:`~laminardb.connectors.file_sink.TransactionalFileSink` writing part
        files into the directory ``path`` when durable, else a
        :class:`~laminardb.connectors.files.FileSink` writing the single file ``path``; with
        ``partitioned_by = 'a, b'``, their Hive-partitioned forms (``path/a=…/b=…/part-…``,
        :mod:`~laminardb.connectors.partitioned_sink`).
        DELTA_LAKE: a :class:`~laminardb.connectors.delta_lake.DeltaLakeSink` (durable only).
        ICEBERG: an :class:`~laminardb.connectors.iceberg_sink.IcebergSink` (durable only).
        KAFKA: an :class:`~laminardb.connectors.kafka_sink.ExactlyOnceKafkaSink` with
        ``delivery.guarantee = 'exactly-once'`` (durable only), else a ``KafkaSink``.

    Raises:
        UnsupportedSqlError: unknown connector, missing path, or DELTA_LAKE/ICEBERG in memory. (Unknown
            FILE options are refused when the statement is written: ``options.check_new_statement``.)
    """
    connector = stmt.connector.lower()
    if connector == "kafka":
        from laminardb._extras import require

        require("kafka", extra="kafka", for_what=f"Kafka sink {stmt.name!r}")
        from laminardb.connectors.kafka_sink import (
            ExactlyOnceKafkaSink,
            KafkaSink,
            delivery_guarantee,
        )

        if delivery_guarantee(stmt.options) == "exactly-once":
            if not durable or stage_root is None:
                msg = (f"sink {stmt.name!r}: delivery.guarantee = 'exactly-once' needs a durable "
                       "database, whose checkpoints commit the sink's Kafka transactions: open it "
                       "with laminardb.open('./directory'), or use delivery.guarantee = 'at-least-once'")
                raise UnsupportedSqlError(msg)
            return ExactlyOnceKafkaSink(name=stmt.name, schema=schema, options=stmt.options,
                                        stage_dir=os.path.join(stage_root, _dir_name(stmt.name)))
        return KafkaSink(schema=schema, options=stmt.options)
    if connector == "file":
        path = stmt.options.get("path")
        if not path:
            raise UnsupportedSqlError(f"sink {stmt.name!r} needs path = '…'")
        fmt = stmt.options.get("format")
        partitioned = stmt.options.get("partitioned_by")
        if partitioned:
            from laminardb.connectors.partitioned_sink import (
                DEFAULT_PARTITION,
                PartitionedFileSink,
                PartitionedTransactionalFileSink,
            )

            cls = PartitionedTransactionalFileSink if durable else PartitionedFileSink
            return cls(path, format=fmt, schema=schema, partition_by=partitioned,
                       default_name=stmt.options.get("partition_default_name") or DEFAULT_PARTITION)
        if durable:
            from laminardb.connectors.file_sink import TransactionalFileSink

            return TransactionalFileSink(path, format=fmt, schema=schema)
        from laminardb.connectors.files import FileSink

        return FileSink(path, format=fmt, schema=schema)
    if connector in ("delta_lake", "deltalake", "delta"):
        if not durable or stage_root is None:
            msg = (f"sink {stmt.name!r}: Delta Lake sinks are exactly-once and need a durable "
                   "database: open it with laminardb.open('./directory')")
            raise UnsupportedSqlError(msg)
        from laminardb.connectors.delta_lake import DeltaLakeSink

        stage_dir = os.path.join(stage_root, _dir_name(stmt.name))
        return DeltaLakeSink(name=stmt.name, schema=schema, options=stmt.options,
                             stage_dir=stage_dir)
    if connector == "iceberg":
        if not durable or stage_root is None:
            msg = (f"sink {stmt.name!r}: Iceberg sinks are exactly-once and need a durable "
                   "database: open it with laminardb.open('./directory')")
            raise UnsupportedSqlError(msg)
        from laminardb.connectors.iceberg_sink import IcebergSink

        return IcebergSink(name=stmt.name, schema=schema, options=stmt.options,
                           stage_dir=os.path.join(stage_root, _dir_name(stmt.name)))
    raise UnsupportedSqlError(f"sink connector {stmt.connector.upper()} is not available; use "
                              f"{', '.join(_CONNECTORS[:-1])} or {_CONNECTORS[-1]}")


def sink_class_name(stmt: ddl.CreateSink, *, durable: bool) -> str:
    """The class name of the sink ``make_sink`` builds for ``stmt`` (what ``metrics()`` shows as
    a sink's ``connector``), without building it: the Delta mode stages exactly-once sinks for
    its coordinator and reports them under the name the embedded engine would."""
    connector = stmt.connector.lower()
    if connector == "kafka":
        from laminardb.connectors.kafka_sink import delivery_guarantee

        return "ExactlyOnceKafkaSink" if durable and delivery_guarantee(stmt.options) == "exactly-once" else "KafkaSink"
    if connector == "file":
        partitioned = "Partitioned" if stmt.options.get("partitioned_by") else ""
        return f"{partitioned}{'TransactionalFileSink' if durable else 'FileSink'}"
    if connector in ("delta_lake", "deltalake", "delta"):
        return "DeltaLakeSink"
    if connector == "iceberg":
        return "IcebergSink"
    return stmt.connector


def is_two_phase(stmt: ddl.CreateSink) -> bool:
    """True when ``make_sink`` builds a two-phase (exactly-once) sink for ``stmt`` in a durable
    database: the Delta mode stages those for its coordinator, which commits them."""
    connector = stmt.connector.lower()
    if connector == "kafka":
        from laminardb.connectors.kafka_sink import delivery_guarantee

        return delivery_guarantee(stmt.options) == "exactly-once"
    return connector in ("file", "delta_lake", "deltalake", "delta", "iceberg", "postgres")


def _dir_name(name: str) -> str:
    """A sink name as one safe path component (quoted names may hold '/' or '..')."""
    return re.sub(r"[^A-Za-z0-9_-]", lambda m: f"%{ord(m.group()):02x}", name)
