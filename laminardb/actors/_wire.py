"""Arrow IPC for batches crossing process boundaries (never pickle rows)."""

from __future__ import annotations

import pyarrow as pa


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def to_ipc_array(batch: pa.RecordBatch):
    """IPC as a numpy uint8 array: Ray stores it once and actors map it without copying."""
    import numpy as np

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return np.frombuffer(sink.getvalue(), dtype=np.uint8)


def from_ipc(data) -> pa.RecordBatch:
    """From IPC bytes, a pyarrow Buffer or a numpy uint8 array (zero-copy where possible)."""
    reader = pa.ipc.open_stream(data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
    batches = list(reader)
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, schema=reader.schema).combine_chunks()
    out = table.to_batches()
    return out[0] if out else pa.RecordBatch.from_pylist([], schema=reader.schema)
