"""What a Spark task runs for one chunk of an epoch's staged files: read its groups with
pyarrow (``stage_files``: Parquet, or an older head's Arrow IPC) and write them as sink data
files next to their target, returning one small row per file. Entry points:
:func:`plan_chunks` (the driver's work list, from the files' footers), :class:`FilePartsTask`
(a FILE sink's part files), :class:`PartitionedPartsTask` (a partitioned FILE sink's, per
partition directory), :class:`DeltaFilesTask` (a Delta table's Parquet data files) and
:class:`SealTask` (a sink's sealed ``EpochStage`` file, Arrow IPC, for the sinks whose
commit applies it to their target: Kafka, PostgreSQL, Iceberg, a remote Delta table).

Why here, in its own module: Spark's Python workers unpickle the task by reference, so it
must be importable there without the driver's state. Why pyarrow and not Spark's Parquet
reader: the rows were staged by pyarrow and go out through pyarrow writers; Spark's reader
turns every row into a JVM row and back into Arrow for the Python task (measured 1.5 µs of
JVM CPU a row, `bench/README.md`), where pyarrow reads the columns as they are. Spark
schedules the chunks on its executors and retries a failed one; no row reaches the driver.

Order: a chunk is a run of consecutive row groups, of one staged file or of several in a row
(a small epoch's files, one per actor, make one chunk), keyed by where it starts: (file
index, first row). Each chunk becomes one output file; the driver names the outputs in key order,
so the committed files, read in name order, hold the epoch's rows in staged order — the same
files for a re-driven epoch, without a sort.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from laminardb.checkpoint.stage_files import read_groups, stage_groups

__all__ = ["CHUNK_ROWS", "MIN_CHUNK_ROWS", "Chunk", "DeltaFilesTask", "FilePartsTask", "PartitionedPartsTask",
           "ReadToEnd", "SealTask", "chunk_tables", "plan_chunks", "worker_pid"]

#: the most rows in one chunk (one output file), as the embedded FILE sink rolls its part files
CHUNK_ROWS = 1_000_000
#: the fewest rows in a chunk (unless the epoch has fewer): every Spark task costs the
#: coordinator 50-100 ms of CPU, its JVM's scheduling and the Python worker's protocol,
#: whatever it holds, while writing this many rows costs about as much
#: (bench/bench_epoch_tasks.py; bench/README.md, "a small epoch is one Spark task")
MIN_CHUNK_ROWS = 262_144
# small row groups (a head appends what each engine batch holds) are written out together
_WRITE_ROWS = 65_536

Segment = tuple[str, int, int]  # (staged file, first row group, row groups)


class Chunk(NamedTuple):
    """One task's work and one output file: consecutive row groups, from one staged file or
    from several in a row. Keyed by where it starts: (file index, first row in that file)."""

    source: int
    first_row: int
    segments: tuple[Segment, ...]


def plan_chunks(stage_files: Sequence[str], parallelism: int, *, max_rows: int = CHUNK_ROWS,
                min_rows: int | None = None) -> list[Chunk]:
    """Split the epoch's staged files, in order, into chunks of whole row groups: about
    ``parallelism`` of them (every core busy on a big epoch), each of ``min_rows`` to
    ``max_rows`` rows (``min_rows``: default ``MIN_CHUNK_ROWS``), so a small epoch with many
    staged files (one per actor) is one task and one output file. Reads footers only; a chunk
    of no rows is dropped."""
    min_rows = MIN_CHUNK_ROWS if min_rows is None else min_rows
    files = [(os.fspath(path), stage_groups(path)) for path in stage_files]
    total = sum(sum(groups) for _, groups in files)
    target = max(1, min(max_rows, max(min_rows, math.ceil(total / max(parallelism, 1)))))
    chunks: list[Chunk] = []
    segments: list[Segment] = []
    start: tuple[int, int] | None = None  # (file index, first row) of the open chunk
    rows = 0
    for i, (path, groups) in enumerate(files):
        first_group, file_row = 0, 0
        for g, group_rows in enumerate(groups):
            if start is None:
                start = (i, file_row)
            rows += group_rows
            file_row += group_rows
            if rows >= target:
                segments.append((path, first_group, g + 1 - first_group))
                chunks.append(Chunk(*start, tuple(segments)))
                segments, start, rows, first_group = [], None, 0, g + 1
        if first_group < len(groups):
            segments.append((path, first_group, len(groups) - first_group))
    if rows and start is not None:
        chunks.append(Chunk(*start, tuple(segments)))
    return chunks


class _ChunkWriter:
    """Reads each chunk's row groups and writes them to one file (``open_file``/``result``)."""

    def __init__(self, schema_ipc: bytes) -> None:
        self.schema_ipc = schema_ipc

    def open_file(self, schema: pa.Schema) -> Any:
        raise NotImplementedError

    def result(self, handle: Any, rows: int) -> tuple[str, int, str]:
        """(path, bytes, stats) of a closed file."""
        raise NotImplementedError

    def __call__(self, chunks: Iterator[Chunk]) -> Iterator[tuple[int, int, str, int, int, str]]:
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        for source, first_row, segments in chunks:
            handle, rows = self.open_file(schema), 0
            for table in chunk_tables(segments, schema):
                handle.write(table)
                rows += table.num_rows
            handle.close()
            out, size, stats = self.result(handle, rows)
            yield source, first_row, out, rows, size, stats


def chunk_tables(segments: Iterable[Segment], schema: pa.Schema) -> Iterator[pa.Table]:
    """A chunk's rows, in order, as tables of about ``_WRITE_ROWS`` rows cast to ``schema``:
    small row groups (a head appends what each engine batch holds) are written out together."""
    held: list[pa.Table] = []
    rows = 0
    groups = (t for path, first, count in segments for t in read_groups(path, first, count))
    for table in groups:
        held.append(table)
        rows += table.num_rows
        if rows >= _WRITE_ROWS:
            yield pa.concat_tables(held).cast(schema)
            held, rows = [], 0
    if rows:
        yield pa.concat_tables(held).cast(schema)


class FilePartsTask(_ChunkWriter):
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


class PartitionedPartsTask:
    """Writes a partitioned FILE sink's part files: each chunk's rows split by the partition
    columns (the embedded sink's own ``_Splitter``, one Arrow group-by per table) into one file
    per partition, ``<out_dir>/<chunk key>/<partition dir>/part.<fmt>``, with its ``FileSink``
    writer; one row per file, its partition directory in the last field."""

    def __init__(self, out_dir: str, fmt: str, schema_ipc: bytes, partition_by: list[str],
                 default_name: str) -> None:
        self.out_dir = out_dir
        self.fmt = fmt
        self.schema_ipc = schema_ipc
        self.partition_by = partition_by
        self.default_name = default_name

    def __call__(self, chunks: Iterator[Chunk]) -> Iterator[tuple[int, int, str, int, int, str]]:
        from laminardb.connectors.files import FileSink
        from laminardb.connectors.partitioned_sink import _Splitter

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        splitter = _Splitter(schema, self.partition_by, self.default_name)
        for source, first_row, segments in chunks:
            key = os.path.join(self.out_dir, f"{source:06d}-{first_row:012d}")
            files: dict[str, Any] = {}
            for table in chunk_tables(segments, schema):
                for batch in table.combine_chunks().to_batches():
                    for rel, rows in splitter.split(batch):
                        sink = files.get(rel)
                        if sink is None:
                            sink = files[rel] = FileSink(os.path.join(key, rel, f"part.{self.fmt}"),
                                                         format=self.fmt, schema=splitter.data_schema)
                        sink.write(rows)
            for rel, sink in files.items():
                rows = sink.rows_written
                sink.close()
                out = os.fspath(sink.path)
                _fsync(out)
                yield source, first_row, out, rows, os.path.getsize(out), rel


class SealTask:
    """Writes every chunk, in order, into one Arrow IPC file at ``out_path``: what
    ``EpochStage.seal`` would have made of the epoch's rows, for the sink's commit to apply.
    Run as a single task over all chunks; streams table by table (flat memory)."""

    def __init__(self, out_path: str, schema_ipc: bytes) -> None:
        self.out_path = out_path
        self.schema_ipc = schema_ipc

    def __call__(self, chunks: Iterator[Chunk]) -> Iterator[tuple[int, int, str, int, int, str]]:
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        rows = 0
        with open(self.out_path, "wb") as f:
            with ipc.new_file(f, schema) as w:
                for chunk in filter(None, chunks):
                    for table in chunk_tables(chunk.segments, schema):
                        w.write_table(table)
                        rows += table.num_rows
            f.flush()
            os.fsync(f.fileno())
        yield 0, 0, self.out_path, rows, os.path.getsize(self.out_path), ""


class _ParquetFile:
    def __init__(self, path: str, schema: pa.Schema) -> None:
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


class DeltaFilesTask(_ChunkWriter):
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


class ReadToEnd:
    """How every coordinator task is submitted (``mapPartitions(ReadToEnd(task))``): after
    ``task``'s rows, the rest of its input is read. Spark reuses a Python worker only after a
    task read its input to the end; otherwise the next task forks a fresh worker, which imports
    pyspark, pyarrow, pandas and laminardb again (1.5-2 CPU s)."""

    def __init__(self, task: Any) -> None:
        self.task = task

    def __call__(self, items: Iterable[Any]) -> Iterator[Any]:
        items = iter(items)
        yield from self.task(items)
        for _ in items:
            pass


def worker_pid(_: Iterator[Any]) -> Iterator[int]:
    """A no-op task (``spark_job._KeepWarm``): yields the Python worker's pid."""
    yield os.getpid()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

