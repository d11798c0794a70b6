"""What a Spark executor runs for one partition of an epoch's staged rows (``mapInArrow``):
write them as sink data files next to their target, return one small row per file written.
Entry points: :class:`FilePartsTask` (a FILE sink's part files), :class:`DeltaFilesTask`
(a Delta table's Parquet data files) and :data:`RESULT_DDL` (the rows they return).

Why here, in its own module: Spark's Python workers unpickle the task by reference, so it
must be importable there without the driver's state; the rows reach the task straight from
Spark's Parquet reader and never pass through the driver.

Order: the input carries each row's staged file (``SOURCE``, as its index in the epoch's
file list) and its position in that file (``ROW``). A partition's rows arrive as runs of
consecutive rows of one file; a task starts a new output file at every run boundary (and
every ``roll_rows``), so each output file is one contiguous run, keyed by (file, first row).
The driver orders the outputs by that key: the committed files, read in name order, hold the
epoch's rows in staged order — the same for a re-driven epoch, without a sort of all rows.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["RESULT_DDL", "ROW", "SOURCE", "DeltaFilesTask", "FilePartsTask"]

SOURCE = "__ldb_source"
ROW = "__ldb_row"
#: the rows a task returns, one per file it wrote
RESULT_DDL = "source int, first_row long, path string, rows long, bytes long, stats string"


def _runs(batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """(start, stop) of each run of consecutive rows of one staged file in ``batch``."""
    src = batch.column(SOURCE).to_numpy(zero_copy_only=False)
    row = batch.column(ROW).to_numpy(zero_copy_only=False)
    breaks = np.flatnonzero((np.diff(src) != 0) | (np.diff(row) != 1)) + 1
    edges = [0, *breaks.tolist(), batch.num_rows]
    return list(zip(edges[:-1], edges[1:], strict=False))


class _RunWriter:
    """Splits a partition into runs and hands each to ``open_file`` / ``write`` / ``close``."""

    roll_rows = 1_000_000

    def __init__(self, schema_ipc: bytes) -> None:
        self.schema_ipc = schema_ipc

    def open_file(self, schema: pa.Schema) -> Any:
        raise NotImplementedError

    def result(self, handle: Any, rows: int) -> tuple[str, int, str]:
        """(path, bytes, stats) of a closed file."""
        raise NotImplementedError

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        out: list[dict[str, Any]] = []
        handle, key, rows, last = None, None, 0, None
        for batch in batches:
            for start, stop in _runs(batch):
                src = int(batch.column(SOURCE)[start].as_py())
                first = int(batch.column(ROW)[start].as_py())
                continues = last == (src, first - 1) and rows < self.roll_rows
                if handle is not None and not continues:
                    out.append(self._close(handle, key, rows))
                    handle = None
                if handle is None:
                    handle, key, rows = self.open_file(schema), (src, first), 0
                part = pa.Table.from_batches([batch.slice(start, stop - start)])
                handle.write(part.select(schema.names).cast(schema))
                rows += stop - start
                last = (src, int(batch.column(ROW)[stop - 1].as_py()))
        if handle is not None:
            out.append(self._close(handle, key, rows))
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=pa.schema([
                ("source", pa.int32()), ("first_row", pa.int64()), ("path", pa.string()),
                ("rows", pa.int64()), ("bytes", pa.int64()), ("stats", pa.string())]))

    def _close(self, handle: Any, key: Any, rows: int) -> dict[str, Any]:
        handle.close()
        path, size, stats = self.result(handle, rows)
        return {"source": key[0], "first_row": key[1], "path": path, "rows": rows,
                "bytes": size, "stats": stats}


class FilePartsTask(_RunWriter):
    """Writes part files of a FILE sink into ``out_dir`` with the embedded sink's own writer
    (``connectors.files.FileSink``), so the bytes match what ``laminardb.open`` writes."""

    def __init__(self, out_dir: str, fmt: str, schema_ipc: bytes) -> None:
        super().__init__(schema_ipc)
        self.out_dir = out_dir
        self.fmt = fmt

    def open_file(self, schema: pa.Schema) -> Any:
        from laminardb.connectors.files import FileSink

        path = os.path.join(self.out_dir, f"{uuid.uuid4().hex}.{self.fmt}")
        return FileSink(path, format=self.fmt, schema=schema)

    def result(self, handle: Any, rows: int) -> tuple[str, int, str]:
        path = os.fspath(handle.path)
        _fsync(path)
        return path, os.path.getsize(path), ""


class _ParquetFile:
    def __init__(self, path: str, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.schema = schema
        self.writer = pq.ParquetWriter(path, schema)
        self.nulls = [0] * len(schema)

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)
        for i, col in enumerate(table.columns):
            self.nulls[i] += col.null_count

    def close(self) -> None:
        self.writer.close()


class DeltaFilesTask(_RunWriter):
    """Writes Parquet data files into the Delta table at ``table_path`` (invisible until the
    driver commits their add-actions) and returns each file's add-action fields."""

    def __init__(self, table_path: str, schema_ipc: bytes, epoch: int) -> None:
        super().__init__(schema_ipc)
        self.table_path = table_path
        self.epoch = epoch

    def open_file(self, schema: pa.Schema) -> Any:
        name = f"part-{self.epoch:012d}-{uuid.uuid4()}-c000.snappy.parquet"
        return _ParquetFile(os.path.join(self.table_path, name), schema)

    def result(self, handle: Any, rows: int) -> tuple[str, int, str]:
        _fsync(handle.path)
        nulls = {f.name: n for f, n in zip(handle.schema, handle.nulls, strict=True)
                 if not pa.types.is_nested(f.type)}
        stats = json.dumps({"numRecords": rows, "nullCount": nulls})
        return os.path.basename(handle.path), os.path.getsize(handle.path), stats


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

