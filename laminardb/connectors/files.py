"""File connectors: CSV / JSONL / Parquet in (:func:`read_file`), stream output out
(:class:`FileSink`, driven by the reactor or ``laminardb run`` with write / flush / close).

Bad rows never stop a read. A row that cannot be parsed (a CSV line with the wrong number of
fields, a line that is not a JSON object) or converted (``'abc'`` in a DOUBLE column, NULL in a
NOT NULL column) is dropped, the rows around it are kept, and it is counted in
:class:`ReadReport` and appended to a dead-letter file (default ``<path>.rejected``, created
only when needed) as a JSON line: ``{"line": n, "error": …, "raw": "text"}`` for parse errors
(1-based file line) or ``{"record": n, "error": …, "raw": {…}}`` for conversion errors
(1-based ordinal among parsed records). TIMESTAMP columns accept ISO-8601 text (optional
``Z`` / ``+01:00`` offset, converted to UTC) and integer epoch milliseconds.

Conversion is vectorized (text validated with Arrow regex kernels, then Arrow casts). Python
loops over rows only on error paths: the CSV parser's invalid-row callback, and the bisection
of a JSON chunk that failed to parse down to its bad lines.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
from laminardb.sql.types import type_name

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
_INT_RE = r"^[+-]?\d{1,18}$"  # 18 digits always fit int64, so the cast after it cannot overflow
_FLOAT_RE = r"(?i)^[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)$"
_DATE = r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
_TIME = r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,9})?)?"
_ISO_RE = rf"^{_DATE}([T ]{_TIME})?$"
_ISO_TZ_RE = rf"^{_DATE}[T ]{_TIME}(Z|[+-]\d{{2}}(:?\d{{2}})?)$"
_TRUE = pa.array(["true", "t", "1", "yes", "y"])
_FALSE = pa.array(["false", "f", "0", "no", "n"])


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


# -- conversion: any Arrow column → the schema's type, with a mask of values that do not fit ---


def _none(values: pa.Array) -> pa.Array:
    return pa.array(np.zeros(len(values), bool))


def _where(mask: pa.Array, values: pa.Array) -> pa.Array:
    """``values`` where ``mask`` is true, else NULL."""
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _matches(text: pa.Array, pattern: str) -> pa.Array:
    return pc.fill_null(pc.match_substring_regex(text, pattern), False)


def _cast_each(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Error path only: cast value by value, NULL (and flagged) where a value does not fit."""
    out, bad = [], []
    for v in values.to_pylist():
        try:
            out.append(pc.cast(pa.array([v], values.type), target)[0].as_py())
            bad.append(False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
            bad.append(v is not None)
    return pa.array(out, target), pa.array(bad, pa.bool_())


def _cast(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    try:
        return pc.cast(values, target), _none(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _cast_each(values, target)


def _from_text(text: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Parse a string column; returns (values, ok) where ok is False for unparsable text."""
    text = pc.utf8_trim_whitespace(text)
    if pa.types.is_boolean(target):
        low = pc.utf8_lower(text)
        truthy = pc.is_in(low, value_set=_TRUE)
        ok = pc.or_(truthy, pc.is_in(low, value_set=_FALSE))
        return _where(ok, truthy), ok
    if pa.types.is_integer(target) or pa.types.is_timestamp(target):
        is_int = _matches(text, _INT_RE)
        ints = pc.cast(_where(is_int, pc.replace_substring_regex(text, r"^\+", "")), pa.int64())
        if pa.types.is_integer(target):
            values, bad = _convert(ints, target)
            return values, pc.and_(is_int, pc.invert(bad))
        naive, zoned = _matches(text, _ISO_RE), _matches(text, _ISO_TZ_RE)
        unit = target.unit
        from_int, _ = _convert(ints, target)
        from_naive, bad_n = _cast(_where(naive, text), pa.timestamp(unit))
        from_zoned, bad_z = _cast(_where(zoned, text), pa.timestamp(unit, "UTC"))
        from_zoned = pc.cast(from_zoned, pa.timestamp(unit))
        ok = pc.or_(is_int, pc.or_(pc.and_not(naive, bad_n), pc.and_not(zoned, bad_z)))
        return pc.coalesce(from_int, from_naive, from_zoned), ok
    if pa.types.is_floating(target):
        ok = _matches(text, _FLOAT_RE)
        values, bad = _cast(_where(ok, text), target)
        return values, pc.and_not(ok, bad)
    values, bad = _cast(text, target)
    return values, pc.invert(bad)


def _convert(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Convert one column to ``target``; returns (values, bad) where ``bad`` marks non-NULL
    inputs that could not be converted (their output is NULL)."""
    src = values.type
    if src == target:
        return values, _none(values)
    if pa.types.is_null(src):
        return pa.nulls(len(values), target), _none(values)
    if pa.types.is_string(src) or pa.types.is_large_string(src):
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return pc.cast(values, target), _none(values)
        converted, ok = _from_text(values, target)
        return converted, pc.and_not(pc.is_valid(values), ok)
    if pa.types.is_timestamp(target):
        if pa.types.is_timestamp(src):
            # sub-unit precision is truncated, a zone is converted to UTC and dropped
            return pc.cast(values, target, safe=False), _none(values)
        if pa.types.is_integer(src) or pa.types.is_floating(src):  # epoch milliseconds
            ms, bad = _convert(values, pa.int64())
            return pc.cast(pc.cast(ms, pa.timestamp("ms")), target), bad
    try:
        return pc.cast(values, target), _none(values)
    except pa.ArrowNotImplementedError:
        try:
            return _convert(pc.cast(values, pa.string()), target)
        except pa.ArrowNotImplementedError:  # nested JSON value and the like: nothing fits
            return pa.nulls(len(values), target), pc.is_valid(values)
    except pa.ArrowInvalid:  # overflow or truncation: keep what round-trips exactly
        unsafe = pc.cast(values, target, safe=False)
        bad = pc.fill_null(pc.not_equal(pc.cast(unsafe, src, safe=False), values), True)
        bad = pc.and_(pc.is_valid(values), bad)
        return _where(pc.invert(bad), unsafe), bad


@dataclass
class _Conformed:
    table: pa.Table  # the rows that fit, in the schema's types
    rejected: pa.Table  # the input rows that did not fit, as they came
    positions: np.ndarray  # row positions of ``rejected`` within the input
    reasons: pa.Array  # one message per rejected row


def _conform(table: pa.Table, schema: pa.Schema) -> _Conformed:
    n = table.num_rows
    columns, reason = [], pa.nulls(n, pa.string())
    for field in schema:
        if field.name in table.column_names:
            src = table.column(field.name).combine_chunks()
        else:
            src = pa.nulls(n, pa.null())
        values, bad = _convert(src, field.type)
        if pc.any(bad).as_py():
            why = pc.binary_join_element_wise(
                f"column {field.name!r}: ", pc.cast(src, pa.string()),
                f" is not a valid {type_name(field.type)}", "")
            reason = pc.if_else(pc.and_(bad, pc.is_null(reason)), why, reason)
        if not field.nullable and values.null_count:
            missing = pc.and_(pc.is_null(values), pc.is_null(reason))
            why = pa.scalar(f"column {field.name!r} is NOT NULL but the value is missing")
            reason = pc.if_else(missing, why, reason)
        columns.append(values)
    out = pa.Table.from_arrays(columns, schema=schema)
    if reason.null_count == n:
        return _Conformed(out, table.slice(0, 0), np.empty(0, np.int64), reason.slice(0, 0))
    rejected = pc.is_valid(reason)
    positions = np.flatnonzero(rejected.to_numpy(zero_copy_only=False))
    return _Conformed(out.filter(pc.invert(rejected)), table.take(positions), positions,
                      reason.take(positions))


# -- JSON lines, vectorized: one string per row, built with Arrow string kernels -------------


def _quote(text: pa.Array) -> pa.Array:
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        text = pc.replace_substring(text, raw, escaped)
    if pc.any(_matches(text, r"[\x00-\x1f]")).as_py():  # rare: other control characters
        for code in range(32):
            text = pc.replace_substring(text, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise('"', text, '"', "")


def _json_values(col: pa.Array) -> pa.Array:
    t = col.type
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_floating(t):  # NaN and infinities are not JSON: they become null
        text = _where(pc.fill_null(pc.is_finite(col), False), pc.cast(col, pa.string()))
    elif pa.types.is_timestamp(t):
        zone = "Z" if t.tz else ""
        if t.tz:
            col = pc.cast(col, pa.timestamp(t.unit, "UTC"))
        iso = pc.strftime(col, format="%Y-%m-%dT%H:%M:%S")
        text = _quote(pc.binary_join_element_wise(iso, zone, ""))
    elif pa.types.is_null(t):
        text = pa.nulls(len(col), pa.string())
    else:
        try:
            text = _quote(pc.cast(col, pa.string()))
        except pa.ArrowNotImplementedError:  # nested values: rare, off the hot path
            text = pa.array([None if v is None else json.dumps(v, default=str)
                             for v in col.to_pylist()], pa.string())
    return pc.fill_null(text, "null")


def json_lines(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """One JSON object (as text) per row of ``table``."""
    if table.num_columns == 0:
        return pa.array(["{}"] * table.num_rows, pa.string())
    parts: list[Any] = []
    for i, name in enumerate(table.column_names):
        col = table.column(i)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        parts += [("{" if i == 0 else ",") + json.dumps(name) + ":", _json_values(col)]
    return pc.binary_join_element_wise(*parts, "}", "")


def _join_lines(lines: pa.Array) -> bytes:
    if len(lines) == 0:
        return b""
    lines = pc.binary_join_element_wise(lines, "\n", "")
    offsets = pa.array([0, len(lines)], pa.int32())
    return pc.binary_join(pa.ListArray.from_arrays(offsets, lines), "")[0].as_buffer().to_pybytes()


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
    """Iterator of schema-conformed batches from one file; see :func:`read_file`."""

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
        self._records = 0  # records parsed so far: numbers conversion rejects
        self._fh: Any = None
        self._parquet_rows = (0, 1)
        self._blocks = 0  # CSV blocks taken from the reader, for progress
        self._batches = {"csv": self._csv, "jsonl": self._jsonl, "parquet": self._parquet}[
            self.format]()

    def __next__(self) -> pa.RecordBatch:
        try:
            return next(self._batches)
        except StopIteration:
            self.close()
            raise

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

    def close(self) -> None:
        for fh in (self._fh, self._dead_fh):
            if fh is not None and not fh.closed:
                fh.close()

    # - dead letters -

    def _dead(self, data: bytes, count: int, first_error: str) -> None:
        self.report.rejected += count
        if self.report.first_error is None:
            self.report.first_error = first_error
        if self._dead_letter is None:
            return
        if self._dead_fh is None:
            self._dead_fh = open(self._dead_letter, "wb")  # noqa: SIM115 - closed in close()
            self.report.dead_letter_path = self._dead_letter
        self._dead_fh.write(data)

    def _reject_line(self, line: int, raw: str, error: str) -> None:
        record = {"line": line, "error": error, "raw": raw}
        self._dead(json.dumps(record).encode() + b"\n", 1, f"line {line}: {error}")

    def _emit(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        first_record = self._records + 1
        self._records += table.num_rows
        c = _conform(table, self.schema)
        if len(c.positions):
            numbers = pa.array(c.positions + first_record).cast(pa.string())
            errors = _quote(c.reasons)
            lines = pc.binary_join_element_wise(
                '{"record":', numbers, ',"error":', errors, ',"raw":', json_lines(c.rejected),
                "}", "")
            first = f"record {first_record + int(c.positions[0])}: {c.reasons[0].as_py()}"
            self._dead(_join_lines(lines), len(c.positions), first)
        self.report.rows += c.table.num_rows
        for batch in c.table.to_batches(max_chunksize=self.batch_rows):
            if batch.num_rows:
                yield batch

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
            self._reject_line(row.number, row.text, error)
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
            yield from self._emit(pa.Table.from_batches([batch]))

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
                for table in self._json_chunk(chunk, line):
                    yield from self._emit(table)
            line += chunk.count(b"\n")
            if not block:
                return

    def _json_chunk(self, data: bytes, line: int) -> Iterator[pa.Table]:
        try:
            table = _read_json(data)
        except pa.ArrowInvalid as exc:  # error path: bisect down to the lines that do not parse
            lines = data.rstrip(b"\n").split(b"\n")
            if len(lines) == 1:
                error = str(exc).split(" in row ")[0]
                self._reject_line(line, lines[0].decode("utf-8", "replace"), error)
                return
            mid = len(lines) // 2
            yield from self._json_chunk(b"\n".join(lines[:mid]), line)
            yield from self._json_chunk(b"\n".join(lines[mid:]), line + mid)
            return
        yield table

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
            yield from self._emit(pa.Table.from_batches([batch]))

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

