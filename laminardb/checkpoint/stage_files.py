"""Reading a head's staged epoch files group by group, on Spark's executors: Parquet (what
heads write, one row group per engine batch) or Arrow IPC, file or stream (an older head's).
Entry points: :func:`stage_groups` (rows per group, for the driver's chunk plan) and
:func:`read_groups` (a run of groups as tables, for a task).

Why groups: a task reads one chunk of consecutive groups and holds at most a few of them at
once, so memory stays flat for any epoch size. Arrow IPC is memory-mapped: counting its
batches on the driver reads their headers, not their rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

__all__ = ["read_groups", "stage_groups"]

_PARQUET_MAGIC = b"PAR1"
_ARROW_FILE_MAGIC = b"ARROW1"


def _kind(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(len(_ARROW_FILE_MAGIC))
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    return "arrow-file" if head == _ARROW_FILE_MAGIC else "arrow-stream"


def stage_groups(path: str | os.PathLike[str]) -> list[int]:
    """The rows of each group of a staged file, in file order."""
    path = os.fspath(path)
    kind = _kind(path)
    if kind == "parquet":
        meta = pq.ParquetFile(path).metadata
        return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    if kind == "arrow-file":
        with ipc.open_file(pa.memory_map(path)) as r:
            return [r.get_batch(i).num_rows for i in range(r.num_record_batches)]
    with ipc.open_stream(pa.memory_map(path)) as r:
        return [b.num_rows for b in r]


def read_groups(path: str | os.PathLike[str], first: int, count: int) -> Iterator[pa.Table]:
    """Groups ``first`` .. ``first + count - 1`` of a staged file, one table each."""
    path = os.fspath(path)
    kind = _kind(path)
    if kind == "parquet":
        staged = pq.ParquetFile(path)
        for g in range(first, first + count):
            yield staged.read_row_group(g, use_threads=False)
        return
    source = pa.memory_map(path)
    if kind == "arrow-file":
        with ipc.open_file(source) as r:
            for g in range(first, first + count):
                yield pa.Table.from_batches([r.get_batch(g)])
        return
    with ipc.open_stream(source) as r:
        for g, batch in enumerate(r):
            if g >= first + count:
                break
            if g >= first:
                yield pa.Table.from_batches([batch])
