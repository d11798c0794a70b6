"""Which sink object a ``CREATE SINK … INTO <connector> (…)`` builds (placeholder until the
two-phase FILE and Delta Lake sinks land: in-memory behaviour only)."""

from __future__ import annotations

import pyarrow as pa

from laminardb.sql import ddl
from laminardb.sql.exceptions import UnsupportedSqlError


def make_sink(stmt: ddl.CreateSink, schema: pa.Schema, *, durable: bool, stage_root: str | None):
    if stmt.connector not in ("file", "kafka"):
        raise UnsupportedSqlError(
            f"sink connector {stmt.connector.upper()} is not available; use FILE (path = '…', format = 'jsonl') "
            "or KAFKA (brokers = '…', topic = '…')")
    if stmt.connector == "kafka":
        from laminardb.connectors.kafka import KafkaSink

        return KafkaSink(schema=schema, options=stmt.options)
    from laminardb.connectors.files import FileSink

    path = stmt.options.get("path")
    if not path:
        raise UnsupportedSqlError(f"sink {stmt.name!r} needs path = '…'")
    return FileSink(path, format=stmt.options.get("format"), schema=schema)
