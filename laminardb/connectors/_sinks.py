"""What every sink shares: conforming a stream's batches to the schema the sink was made for."""

from __future__ import annotations

import pyarrow as pa

from laminardb.connectors.exceptions import SinkSchemaError


def conform_to_sink(data, schema: pa.Schema, what: str):
    """A batch or table of a sink's stream, cast to the sink's schema (or a clear error)."""
    if data.schema.equals(schema):
        return data
    if data.schema.names != schema.names:
        msg = (f"{what} expects columns {schema.names}, got {data.schema.names}: write batches "
               "of the stream the sink was created for")
        raise SinkSchemaError(msg)
    try:
        return data.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = f"{what}: batch types {data.schema.types} do not convert to {schema.types}: {exc}"
        raise SinkSchemaError(msg) from exc
