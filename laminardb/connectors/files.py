"""File connectors: CSV / JSONL / Parquet in (:func:`read_file`), stream output out
(:class:`FileSink`, driven by the reactor or ``laminardb run`` with write / flush / close).

Bad rows never stop a read. A record that cannot be parsed (a CSV line with the wrong number of
fields, a line that is not a JSON object) or converted (``'abc'`` in a DOUBLE column, NULL in a
NOT NULL column) is dropped, the rows around it are kept, and it is counted in
:class:`ReadReport` and appended to a dead-letter file (default ``<path>.rejected``, created
only when needed) as a JSON line ``{"index": i, "raw": "…", "error": "…"}`` — the schema of
``insert(on_error=…)`` rejections and of the ``<source>__rejected`` streams. ``index`` is the
record's 0-based position in the file (blank lines and the CSV header not counted; for files
without blank lines, JSONL line = index + 1 and CSV line = index + 2); ``raw`` is the line as
text when it did not parse, else the parsed record as a JSON object in text. TIMESTAMP columns
accept ISO-8601 text (optional ``Z`` / ``+01:00`` offset, converted to UTC) and epoch
milliseconds; values convert exactly as in ``insert()`` (:mod:`laminardb.sql.convert`).

Conversion is vectorized (text validated with Arrow regex kernels, then Arrow casts). Python
loops over rows only on error paths: the CSV parser's invalid-row callback, and the bisection
of a JSON chunk that failed to parse down to its bad lines.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import (
    FileFormatError,
    FileReadError,
    SinkClosedError,
    SinkWriteError,
    SourceFileNotFoundError,
)
from laminardb.sql.convert import (  # noqa: F401 - _conform, _convert, json_lines: imported from here too
    REJECTED_SCHEMA,
    _conform,
    _convert,
    _join_lines,
    json_lines,
    rejected_batch,
    rejected_json_lines,
)

__all__ = ["FileFormat", "FileReader", "FileSink", "ReadReport", "infer_format", "read_file"]

FileFormat = Literal["csv", "jsonl", "parquet"]

_FORMAT_NAMES: dict[str, FileFormat] = {
    "csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "jsonl",
    "parquet": "parquet", "pq": "parquet",
}
# Bytes per CSV block / JSON chunk: large enough that one insert() amortizes the per-batch
# cost of the engine, small enough that progress moves and memory stays flat.
_BLOCK_BYTES = 1 << 20
# Parquet rows buffered before a row group is written: small row groups bloat the footer.
_PARQUET_ROW_GROUP = 128 * 1024
_CSV_NULLS = ["", "NULL", "null"]

def infer_format(path: str | os.PathLike[str], format: str | None = None) -> FileFormat:
    """The file format: ``format`` if given (``csv``, ``jsonl``/``json``/``ndjson``,
    ``parquet``), else from the file extension."""
    name = (format or Path(path).suffix.lstrip(".")).lower()
    if name in _FORMAT_NAMES:
        return _FORMAT_NAMES[name]
    what = f"format {format!r}" if format else f"the extension of {str(path)!r}"
    msg = (f"cannot tell the file format from {what}: use a .csv, .jsonl or .parquet file name, "
           "or pass format='csv' | 'jsonl' | 'parquet'")
    raise FileFormatError(msg)


# -- reading -----------------------------------------------------------------------------------


@dataclass
class ReadReport:
    """What a :class:`FileReader` read: rows kept, rows rejected and where they went."""

    path: str
    rows: int = 0
    rejected: int = 0
    first_error: str | None = None
    dead_letter_path: str | None = None

    def summary(self) -> str:
        text = f"{self.path}: {self.rows:,} rows"
        if self.rejected:
            text += f", {self.rejected:,} rejected (first: {self.first_error})"
        return text + (f"; see {self.dead_letter_path}" if self.dead_letter_path else "")


class FileReader(Iterator[pa.RecordBatch]):
    """Iterator of schema-conformed batches from one file; see :func:`read_file`.

    ``last_index`` holds, after each batch, the file index (see the module docstring) of each
    of its rows; ``with_index()`` iterates ``(batch, index)`` pairs instead.
    """

    def __init__(self, path: str | os.PathLike[str], *, format: str | None, schema: pa.Schema,
                 batch_rows: int, dead_letter: str | os.PathLike[str] | bool) -> None:
        self.path = os.fspath(path)
        self.format = infer_format(self.path, format)
        self.schema = schema
        self.batch_rows = max(1, int(batch_rows))
        if not os.path.isfile(self.path):
            msg = f"input file {self.path!r} does not exist: check the path (and the working directory)"
            raise SourceFileNotFoundError(msg)
        self.total_bytes = os.path.getsize(self.path)
        if dead_letter is True:
            dead_letter = self.path + ".rejected"
        self._dead_letter = os.fspath(dead_letter) if dead_letter else None
        self._dead_fh: Any = None
        self.report = ReadReport(self.path)
        self._records = 0  # records parsed so far (CSV: past the malformed ones)
        self._malformed: list[int] = []  # CSV: indexes of records the parser refused, ascending
        self.last_index: np.ndarray = np.empty(0, np.int64)
        self._fh: Any = None
        self._parquet_rows = (0, 1)
        self._blocks = 0  # CSV blocks taken from the reader, for progress
        self._batches = {"csv": self._csv, "jsonl": self._jsonl, "parquet": self._parquet}[
            self.format]()

    def __next__(self) -> pa.RecordBatch:
        try:
            batch, self.last_index = next(self._batches)
        except StopIteration:
            if self._fh is not None and not self._fh.closed:
                self._fh.close()  # the dead-letter file stays open for reject() until close()
            raise
        return batch

    def with_index(self) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        """``(batch, index)``: each batch with the file index of each of its rows."""
        for batch in self:
            yield batch, self.last_index

    @property
    def progress(self) -> float:
        """Fraction of the file consumed, 0.0 … 1.0 (bytes; rows for Parquet)."""
        if self.format == "parquet":
            done, total = self._parquet_rows
            return min(1.0, done / max(total, 1))
        if self._fh is None or self._fh.closed:
            return 1.0 if self.report.rows or self.report.rejected else 0.0
        done = self._fh.tell()
        if self.format == "csv":  # Arrow's CSV reader reads ahead; one batch ≈ one block
            done = min(done, self._blocks * _BLOCK_BYTES)
        return min(1.0, done / max(self.total_bytes, 1))

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fh in (self._fh, self._dead_fh):
            if fh is not None and not fh.closed:
                fh.close()

    # - dead letters -

    def reject(self, rejected: pa.RecordBatch | pa.Table) -> None:
        """Move rows this reader yielded to the rejected ones (``REJECTED_SCHEMA``: index, raw,
        error) and append them to the dead-letter file: ``laminardb run`` reports here the rows
        ``insert()`` refused (an implausible event time)."""
        self.report.rows -= rejected.num_rows
        self._dead(rejected)

    def _dead(self, rejected: pa.RecordBatch | pa.Table) -> None:
        if rejected.num_rows == 0:
            return
        self.report.rejected += rejected.num_rows
        if self.report.first_error is None:
            self.report.first_error = (f"record {rejected.column('index')[0].as_py()}: "
                                       f"{rejected.column('error')[0].as_py()}")
        if self._dead_letter is None:
            return
        if self._dead_fh is None:
            self._dead_fh = open(self._dead_letter, "wb")  # noqa: SIM115 - closed in close()
            self.report.dead_letter_path = self._dead_letter
        for batch in (rejected.to_batches() if isinstance(rejected, pa.Table) else [rejected]):
            self._dead_fh.write(rejected_json_lines(batch))
        self._dead_fh.flush()  # a reported rejection is readable in the file at once

    def _reject_line(self, index: int, raw: str, error: str) -> None:
        self._dead(rejected_batch(np.array([index]), pa.array([raw]), pa.array([error])))

    def _emit(self, table: pa.Table, index: np.ndarray) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        c = _conform(table, self.schema)
        if len(c.positions):
            self._dead(rejected_batch(index[c.positions], json_lines(c.rejected), c.reasons))
            index = np.delete(index, c.positions)
        self.report.rows += c.table.num_rows
        at = 0
        for batch in c.table.to_batches(max_chunksize=self.batch_rows):
            if batch.num_rows:
                yield batch, index[at : at + batch.num_rows]
                at += batch.num_rows

    # - formats -

    def _csv(self) -> Iterator[pa.RecordBatch]:
        fh = self._fh = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        header = next(csv.reader([fh.readline().decode("utf-8-sig", "replace")]), [])
        fh.seek(0)
        if not header:
            return
        present = [name for name in self.schema.names if name in header]
        self._require_columns(set(header))

        def on_invalid(row: Any) -> str:  # error path: one call per malformed line
            error = f"expected {row.expected_columns} fields, got {row.actual_columns}"
            index = row.number - 2  # the parser numbers records from 1, the header included
            self._malformed.append(index)
            self._reject_line(index, row.text, error)
            return "skip"

        reader = pacsv.open_csv(
            fh,
            read_options=pacsv.ReadOptions(block_size=_BLOCK_BYTES, use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in present},
                include_columns=present, null_values=_CSV_NULLS, strings_can_be_null=True),
        )
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:
                raise FileReadError(f"cannot read CSV file {self.path!r}: {exc}") from exc
            self._blocks += 1
            n = batch.num_rows
            parsed = self._records + np.arange(n)
            self._records += n
            # the p-th parsed record is the p-th index no malformed record took
            taken = np.asarray(self._malformed, np.int64)
            index = parsed + np.searchsorted(taken - np.arange(len(taken)), parsed, side="right")
            yield from self._emit(pa.Table.from_batches([batch]), index)

    def _jsonl(self) -> Iterator[pa.RecordBatch]:
        fh = self._fh = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        rest, line = b"", 1
        while True:
            block = fh.read(_BLOCK_BYTES)
            data = rest + block
            if block:
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                chunk, rest = data[: cut + 1], data[cut + 1 :]
            else:
                chunk, rest = data, b""
            if chunk.strip():
                for table, first in self._json_chunk(chunk, line, self._records):
                    yield from self._emit(table, first + np.arange(table.num_rows))
            line += chunk.count(b"\n")
            if not block:
                return

    def _json_chunk(self, data: bytes, line: int, first: int) -> Iterator[tuple[pa.Table, int]]:
        """Tables of ``data`` (lines from file line ``line``, records from index ``first``) with
        the index of their first record; advances ``self._records`` past every record."""
        try:
            table = _read_json(data)
        except pa.ArrowInvalid as exc:  # error path: bisect down to the lines that do not parse
            lines = data.rstrip(b"\n").split(b"\n")
            if len(lines) == 1:
                error = str(exc).split(" in row ")[0]
                self._records = first + 1
                self._reject_line(first, lines[0].decode("utf-8", "replace"), f"line {line}: {error}")
                return
            mid = len(lines) // 2
            yield from self._json_chunk(b"\n".join(lines[:mid]), line, first)
            yield from self._json_chunk(b"\n".join(lines[mid:]), line + mid, self._records)
            return
        self._records = first + table.num_rows
        yield table, first

    def _parquet(self) -> Iterator[pa.RecordBatch]:
        try:
            pf = pq.ParquetFile(self.path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise FileReadError(f"cannot read Parquet file {self.path!r}: {exc}") from exc
        names = set(pf.schema_arrow.names)
        self._require_columns(names)
        present = [name for name in self.schema.names if name in names]
        self._parquet_rows = (0, pf.metadata.num_rows)
        for batch in pf.iter_batches(batch_size=self.batch_rows, columns=present):
            self._parquet_rows = (self._parquet_rows[0] + batch.num_rows, pf.metadata.num_rows)
            first, self._records = self._records, self._records + batch.num_rows
            yield from self._emit(pa.Table.from_batches([batch]), first + np.arange(batch.num_rows))

    def _require_columns(self, names: set[str]) -> None:
        missing = [f.name for f in self.schema if not f.nullable and f.name not in names]
        if missing:
            msg = (f"{self.path!r} has no column {', '.join(map(repr, missing))}, which the "
                   f"source declares NOT NULL: add it to the file (its columns are "
                   f"{', '.join(sorted(names))})")
            raise FileReadError(msg)


def _read_json(data: bytes) -> pa.Table:
    if not data.strip():
        return pa.table({})
    opts = pajson.ReadOptions(use_threads=False, block_size=max(len(data) + 1, _BLOCK_BYTES))
    return pajson.read_json(io.BytesIO(data), read_options=opts)


def read_file(path: str | os.PathLike[str], *, format: str | None = None, schema: pa.Schema,
              batch_rows: int = 65536,
              dead_letter: str | os.PathLike[str] | bool = True) -> FileReader:
    """Read a CSV, JSONL or Parquet file as batches of at most ``batch_rows`` rows in ``schema``.

    Args:
        path: the file; its extension gives the format unless ``format`` (``"csv"``,
            ``"jsonl"``/``"json"``/``"ndjson"``, ``"parquet"``) is set.
        schema: the target schema (usually a source's). Extra file columns are ignored, missing
            nullable ones are NULL, missing NOT NULL ones raise :class:`FileReadError`.
        batch_rows: the most rows per yielded batch.
        dead_letter: where rejected rows go: ``True`` for ``<path>.rejected``, a path, or
            ``False`` to only count them.

    Returns:
        A :class:`FileReader`: iterate it for ``pyarrow.RecordBatch`` es; ``.report`` counts
        kept and rejected rows, ``.progress`` is the fraction read.
    """
    return FileReader(path, format=format, schema=schema, batch_rows=batch_rows,
                      dead_letter=dead_letter)


# -- writing -----------------------------------------------------------------------------------


class FileSink:
    """Writes batches of one stream to a CSV, JSONL or Parquet file (truncated on open).

    JSONL has one object per row with ISO-8601 timestamps and is readable after each
    ``flush()``; CSV is written with Arrow's CSV writer; a Parquet file is only complete
    (readable) after ``close()``, which writes its footer.
    """

    def __init__(self, path: str | os.PathLike[str], *, format: str | None = None,
                 schema: pa.Schema) -> None:
        self.path = os.fspath(path)
        self.format = infer_format(self.path, format)
        self.schema = schema
        self.rows_written = 0
        self._closed = False
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            if self.format == "parquet":
                self._writer: Any = pq.ParquetWriter(self.path, schema)
            else:
                self._out = pa.OSFile(self.path, "wb")
                if self.format == "csv":
                    self._writer = pacsv.CSVWriter(self._out, schema)
        except (OSError, pa.ArrowException) as exc:
            msg = (f"cannot create sink file {self.path!r}: {exc}; check that the directory is "
                   "writable or choose another path")
            raise SinkWriteError(msg) from exc

    def __enter__(self) -> FileSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append the rows of ``batch`` (a Table is written batch by batch)."""
        if self._closed:
            raise SinkClosedError(f"sink {self.path!r} is closed: open a new FileSink to write again")
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        batch = self._conform(batch)
        try:
            if self.format == "jsonl":
                self._out.write(_join_lines(json_lines(batch)))
            elif self.format == "csv":
                self._writer.write_batch(batch)
            else:
                self._pending.append(batch)
                self._pending_rows += batch.num_rows
                if self._pending_rows >= _PARQUET_ROW_GROUP:
                    self._write_row_group()
        except (OSError, pa.ArrowException) as exc:
            raise SinkWriteError(f"cannot write to sink file {self.path!r}: {exc}") from exc
        self.rows_written += batch.num_rows

    def flush(self) -> None:
        """Push buffered rows to the file (Parquet: end the current row group)."""
        if self._closed:
            return
        if self.format == "parquet":
            self._write_row_group()
        else:
            self._out.flush()

    def close(self) -> None:
        """Flush and close; idempotent."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        if self.format != "jsonl":
            self._writer.close()
        if self.format != "parquet":
            self._out.close()

    def _write_row_group(self) -> None:
        if self._pending:
            self._writer.write_table(pa.Table.from_batches(self._pending, schema=self.schema))
            self._pending, self._pending_rows = [], 0

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return conform_to_sink(batch, self.schema, f"sink {self.path!r}")

