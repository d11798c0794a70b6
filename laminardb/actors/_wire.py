"""Arrow IPC for batches crossing process boundaries (never pickle rows)."""

from __future__ import annotations

import pyarrow as pa


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.RecordBatch:
    reader = pa.ipc.open_stream(pa.py_buffer(data))
    batches = list(reader)
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, schema=reader.schema).combine_chunks()
    out = table.to_batches()
    return out[0] if out else pa.RecordBatch.from_pylist([], schema=reader.schema)
