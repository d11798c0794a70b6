"""Decoding Kafka message values (JSON, CSV, msgpack, raw) into Arrow rows of a source's schema.

Entry point: :class:`Decoder` (``Decoder(fmt, schema, key_column, time_column).decode(values,
keys)`` → :class:`Decoded`). Values and keys are Arrow binary arrays (what the Kafka fetch
path builds, :mod:`laminardb.connectors._kafka_records`) or lists of bytes. One call decodes
all messages of one poll at once:

* JSON: the values joined with newlines (one Arrow ``binary_join``, no Python per message) go
  through ``pyarrow.json.read_json`` with an explicit schema; CSV likewise through
  ``pyarrow.csv``; raw: one Arrow cast. msgpack unpacks per message (C) and builds each column
  with one ``pa.array`` call.
* Then the shared, vectorized conversion of :mod:`laminardb.connectors.files` turns the parsed
  columns into the schema's types (ISO-8601 text or integer epoch ms for TIMESTAMP columns)
  and flags values that do not fit and NULLs in NOT NULL columns (the event-time column counts
  as NOT NULL: a row without event time cannot be placed in time).

Bad messages never raise: they come back in :attr:`Decoded.rejected` as ``(index, error)``
with the rows around them kept. Python loops per message run only on error paths (bisection
of a JSON/CSV chunk that fails to parse, value-by-value conversion of a failing msgpack column)
and for the O(1)-per-message work of collecting values and keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from laminardb.connectors.files import _conform, _convert
from laminardb.sql.types import type_name

__all__ = ["FORMATS", "Decoded", "Decoder", "MessageFormat"]

MessageFormat = Literal["json", "csv", "msgpack", "raw"]
FORMATS: tuple[str, ...] = ("json", "csv", "msgpack", "raw")

# Arrow's JSON/CSV readers split input into blocks; one block per poll keeps a parse error
# local to the bisection of one chunk instead of a half-parsed stream.
_MIN_BLOCK = 1 << 20
_CSV_NULLS = ["", "NULL", "null"]


@dataclass
class Decoded:
    """The result of decoding one poll's messages."""

    table: pa.Table  # valid rows, in the source schema
    positions: np.ndarray  # int64: for each row of ``table``, the index of its message
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (message index, error)


class _ParseError(Exception):
    """A chunk does not parse to exactly one row per message."""


Messages: TypeAlias = "pa.Array | Sequence[bytes | None]"


def _binary(values: Messages | None, n: int) -> pa.Array:
    """Message bytes as a ``binary`` array (None → all NULL; a poll's values stay < 2 GiB)."""
    if values is None:
        return pa.nulls(n, pa.binary())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    return pa.array(values, pa.binary())


def _join(vals: pa.Array, sep: bytes, end: bytes = b"") -> pa.Buffer:
    """The values joined with ``sep`` (plus ``end``) as one buffer: one Arrow kernel call."""
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(vals)], pa.int32()), vals),
                            sep)[0].as_buffer()
    return pa.py_buffer(joined.to_pybytes() + end) if end else joined


def _count(data: pa.Buffer, byte: int) -> int:
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == byte))


def _blank_newlines(vals: pa.Array) -> pa.Array:
    """Pretty-printed messages: newlines inside a value become blanks (as JSON/CSV allow)."""
    return pc.replace_substring(pc.replace_substring(vals, b"\n", b" "), b"\r", b" ")


def _text_or_bytes(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Message bytes (or None) → ``target``; returns (array, bad) with bad marking misfits."""
    raw = _binary(values, len(values))
    bad = np.zeros(len(values), bool)
    if pa.types.is_binary(target) or pa.types.is_large_binary(target):
        return raw.cast(target), bad
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:  # error path: invalid UTF-8 somewhere
        out = []
        for i, v in enumerate(raw.to_pylist()):
            try:
                out.append(None if v is None else bytes(v).decode("utf-8"))
            except UnicodeDecodeError:
                out.append(None)
                bad[i] = True
        text = pa.array(out, pa.string())
    if pa.types.is_string(target):
        return text, bad
    converted, misfit = _convert(text, target)
    return converted, bad | misfit.to_numpy(zero_copy_only=False)


class Decoder:
    """Decodes message values of one format into rows of ``schema``.

    Args:
        fmt: ``json`` | ``csv`` | ``msgpack`` | ``raw``.
        schema: the source schema.
        key_column: a column filled from the message key instead of the value.
        time_column: the event-time column; NULL there rejects the row.
    """

    def __init__(self, fmt: MessageFormat, schema: pa.Schema, *, key_column: str | None = None,
                 time_column: str | None = None) -> None:
        self.fmt, self.schema, self.key_column = fmt, schema, key_column
        self.value_fields = [f for f in schema if f.name != key_column]
        # Conversion target: the schema with the event-time column NOT NULL.
        self._required = pa.schema([f.with_nullable(False) if f.name == time_column else f
                                    for f in schema])
        ts = [f for f in self.value_fields if pa.types.is_timestamp(f.type)]
        # JSON: explicit types for the fast path (ISO timestamps parse natively); when a
        # timestamp column holds epoch numbers, the timestamp columns are inferred instead and
        # converted afterwards. The mode that worked last is tried first.
        self._json_strict = pajson.ParseOptions(
            explicit_schema=pa.schema([f.with_nullable(True) for f in self.value_fields]),
            unexpected_field_behavior="ignore", newlines_in_values=False)
        self._json_loose = pajson.ParseOptions(
            explicit_schema=pa.schema([f.with_nullable(True) for f in self.value_fields
                                       if f not in ts]),
            unexpected_field_behavior="infer", newlines_in_values=False) if ts else None
        self._json_modes = [self._json_strict] + ([self._json_loose] if ts else [])
        # field name → the key as the messages spell it, where only the case differs
        # (``userId`` for a column declared unquoted as userId, which SQL folds to ``userid``):
        # matched as insert() matches names, never a silent NULL
        self._spelled: dict[str, str] = {}

    def _spelling(self, keys: Any) -> dict[str, str]:
        """The fields whose exact name is not among ``keys`` (one message's) but one key
        differs from it only in case: field name → that key."""
        keys = [k for k in keys if isinstance(k, str)]
        exact = set(keys)
        folded = {k.lower(): k for k in keys}
        return {f.name: folded[f.name.lower()] for f in self.value_fields
                if f.name not in exact and f.name.lower() in folded}

    def _respell_json(self, first: bytes) -> None:
        """Parse JSON with the key spelling the first message of a poll uses (a new parse
        schema only when it changed)."""
        try:
            rec = json.loads(first)
        except (ValueError, UnicodeDecodeError):
            return  # the parse below rejects it
        if not isinstance(rec, dict):
            return
        spelled = self._spelling(rec)
        if spelled == self._spelled:
            return
        self._spelled = spelled
        strict, loose = self._json_strict, self._json_loose

        def renamed(opts: pajson.ParseOptions) -> pajson.ParseOptions:
            schema = pa.schema([f.with_name(spelled.get(f.name, f.name)) for f in opts.explicit_schema])
            return pajson.ParseOptions(explicit_schema=schema, newlines_in_values=False,
                                       unexpected_field_behavior=opts.unexpected_field_behavior)

        self._json_modes = [renamed(strict)] + ([renamed(loose)] if loose is not None else [])

    def _unspell(self, table: pa.Table) -> pa.Table:
        if not self._spelled:
            return table
        back = {k: name for name, k in self._spelled.items()}
        return table.rename_columns([back.get(n, n) for n in table.column_names])

    # -- entry point ------------------------------------------------------------------------

    def decode(self, values: Messages, keys: Messages | None = None) -> Decoded:
        """Decode message ``values`` (and ``keys`` for the key column) into schema rows;
        both are Arrow binary arrays or lists of bytes, None standing for a missing value."""
        n = len(values)
        vals = _binary(values, n)
        rejected: list[tuple[int, str]] = []
        present = pc.fill_null(pc.greater(pc.binary_length(vals), 0), False)
        if pc.all(present).as_py():
            idx = np.arange(n, dtype=np.int64)
        else:  # tombstones and empty messages carry no row
            ok = present.to_numpy(zero_copy_only=False)
            idx = np.flatnonzero(ok).astype(np.int64)
            rejected += [(int(i), "the message has no value (empty or tombstone)")
                         for i in np.flatnonzero(~ok)]
            vals = vals.filter(present)
        pieces: list[tuple[pa.Table, np.ndarray]] = []
        if len(vals):
            key_col = None if self.key_column is None else _binary(keys, n)
            parse = {"json": self._json, "csv": self._csv, "msgpack": self._msgpack,
                     "raw": self._raw}[self.fmt]
            for table, pos in parse(vals, 0, rejected, idx):
                pieces.append(self._finish(table, idx[pos], key_col, rejected))
        pieces = [(t, p) for t, p in pieces if t.num_rows]
        rejected.sort()
        if not pieces:
            return Decoded(self.schema.empty_table(), np.empty(0, np.int64), rejected)
        if len(pieces) == 1:
            return Decoded(pieces[0][0], pieces[0][1], rejected)
        return Decoded(pa.concat_tables([t for t, _ in pieces]),
                       np.concatenate([p for _, p in pieces]), rejected)

    def _finish(self, table: pa.Table, positions: np.ndarray, keys: pa.Array | None,
                rejected: list[tuple[int, str]]) -> tuple[pa.Table, np.ndarray]:
        """Add the key column, convert to the schema, move misfits to ``rejected``."""
        if self.key_column is not None and keys is not None:
            target = self.schema.field(self.key_column).type
            col, bad = _text_or_bytes(keys.take(pa.array(positions)), target)
            for j in np.flatnonzero(bad):
                rejected.append((int(positions[j]), f"column {self.key_column!r}: the message "
                                 f"key is not a valid {type_name(target)}"))
            table = table.append_column(self.key_column, col)
            if bad.any():
                keep = np.flatnonzero(~bad)
                table, positions = table.take(keep), positions[keep]
        c = _conform(table, self._required)
        if len(c.positions):
            for j, why in zip(c.positions, c.reasons.to_pylist(), strict=True):
                rejected.append((int(positions[j]), why))
            positions = np.delete(positions, c.positions)
        out = c.table
        if not out.schema.equals(self.schema):
            out = pa.Table.from_arrays(out.columns, schema=self.schema)
        return out, positions

    # -- formats: each yields (table with any column types, row → index into ``vals``) ------

    def _json(self, vals: pa.Array, base: int, rejected: list[tuple[int, str]],
              idx: np.ndarray) -> Any:
        data = _join(vals, b"\n")
        if _count(data, 10) != len(vals) - 1:  # pretty-printed messages: newlines are blanks
            vals = _blank_newlines(vals)
            data = _join(vals, b"\n")
        self._respell_json(vals[0].as_py())
        yield from self._json_chunk(vals, data, base, rejected, idx)

    def _json_parse(self, data: pa.Buffer, rows: int) -> pa.Table:
        error: Exception | None = None
        for k, opts in enumerate(self._json_modes):
            try:
                table = pajson.read_json(pa.BufferReader(data), parse_options=opts,
                                         read_options=pajson.ReadOptions(
                                             use_threads=False,
                                             block_size=max(len(data) + 1, _MIN_BLOCK)))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                error = exc
                continue
            if table.num_rows != rows:
                error = _ParseError("the message is not exactly one JSON object")
                continue
            if k:  # remember the mode that worked
                self._json_modes.insert(0, self._json_modes.pop(k))
            return table
        assert error is not None
        raise error

    def _json_chunk(self, vals: pa.Array, data: pa.Buffer, base: int,
                    rejected: list[tuple[int, str]], idx: np.ndarray) -> Any:
        try:
            table = self._json_parse(data, len(vals))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, _ParseError) as exc:
            # error path: bisect down to the messages that do not parse
            if len(vals) == 1:
                why = str(exc).split(" in row ")[0]
                rejected.append((int(idx[base]), f"bad JSON: {why}"))
                return
            mid = len(vals) // 2
            for part, start in ((vals[:mid], base), (vals[mid:], base + mid)):
                yield from self._json_chunk(part, _join(part, b"\n"), start, rejected, idx)
            return
        yield self._unspell(table), np.arange(base, base + len(vals), dtype=np.int64)

    def _csv(self, vals: pa.Array, base: int, rejected: list[tuple[int, str]],
             idx: np.ndarray) -> Any:
        data = _join(vals, b"\n", b"\n")
        if _count(data, 10) != len(vals):
            vals = _blank_newlines(vals)
            data = _join(vals, b"\n", b"\n")
        yield from self._csv_chunk(vals, data, base, rejected, idx)

    def _csv_chunk(self, vals: pa.Array, data: pa.Buffer, base: int,
                   rejected: list[tuple[int, str]], idx: np.ndarray) -> Any:
        names = [f.name for f in self.value_fields]
        invalid: list[tuple[int, str]] = []

        def on_invalid(row: Any) -> str:  # error path: one call per malformed line
            invalid.append((row.number - 1, f"bad CSV: expected {row.expected_columns} fields, "
                                            f"got {row.actual_columns}"))
            return "skip"

        try:
            table = pacsv.read_csv(
                pa.BufferReader(data),
                read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                               block_size=max(len(data) + 1, _MIN_BLOCK)),
                parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid,
                                                  ignore_empty_lines=False),
                convert_options=pacsv.ConvertOptions(
                    column_types={name: pa.string() for name in names},
                    null_values=_CSV_NULLS, strings_can_be_null=True))
            if table.num_rows + len(invalid) != len(vals) or any(
                    not 0 <= i < len(vals) for i, _ in invalid):
                raise _ParseError("the message is not exactly one CSV record")
        except (pa.ArrowInvalid, _ParseError) as exc:
            if len(vals) == 1:
                rejected.append((int(idx[base]), f"bad CSV: {exc}"))
                return
            mid = len(vals) // 2
            for part, start in ((vals[:mid], base), (vals[mid:], base + mid)):
                yield from self._csv_chunk(part, _join(part, b"\n", b"\n"), start, rejected,
                                           idx)
            return
        keep = np.arange(len(vals), dtype=np.int64)
        if invalid:
            rejected.extend((int(idx[base + i]), why) for i, why in invalid)
            keep = np.delete(keep, [i for i, _ in invalid])
        yield table, keep + base

    def _msgpack(self, vals: pa.Array, base: int, rejected: list[tuple[int, str]],
                 idx: np.ndarray) -> Any:
        rows: list[dict[str, Any]] = []
        pos: list[int] = []
        for i, v in enumerate(vals.to_pylist()):
            try:
                # raw=False: text as str; strict_map_key: only str/bytes keys; size limits
                # default to the message length, so a hostile length prefix cannot balloon.
                rec = msgpack.unpackb(v, raw=False, strict_map_key=True, timestamp=3,
                                      ext_hook=_no_ext)
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError,
                    msgpack.StackError) as exc:
                rejected.append((int(idx[i]), f"bad msgpack: {type(exc).__name__} {exc}".rstrip()))
                continue
            if not isinstance(rec, dict):
                rejected.append((int(idx[i]), f"bad msgpack: expected a map, got "
                                              f"{type(rec).__name__}"))
                continue
            rows.append(rec)
            pos.append(i)
        bad = np.zeros(len(rows), bool)
        columns = []
        spelled = self._spelling(rows[0]) if rows else {}
        for f in self.value_fields:
            key = spelled.get(f.name, f.name)
            col, misfit = _py_column([r.get(key) for r in rows], f.type)
            for j in np.flatnonzero(misfit & ~bad):
                rejected.append((int(idx[pos[j]]), f"column {f.name!r}: "
                                 f"{rows[j].get(key)!r} is not a valid {type_name(f.type)}"))
            bad |= misfit
            columns.append(col)
        table = pa.Table.from_arrays(columns, names=[f.name for f in self.value_fields])
        positions = np.array(pos, np.int64)
        if bad.any():
            keep = np.flatnonzero(~bad)
            table, positions = table.take(keep), positions[keep]
        yield table, positions

    def _raw(self, vals: pa.Array, base: int, rejected: list[tuple[int, str]],
             idx: np.ndarray) -> Any:
        (f,) = self.value_fields
        col, bad = _text_or_bytes(vals, f.type)
        for j in np.flatnonzero(bad):
            rejected.append((int(idx[j]), f"column {f.name!r}: the message value is not a "
                                          f"valid {type_name(f.type)}"))
        keep = np.flatnonzero(~bad)
        table = pa.Table.from_arrays([col], names=[f.name])
        yield (table.take(keep) if bad.any() else table), keep.astype(np.int64)


def _no_ext(code: int, data: bytes) -> Any:
    msg = f"msgpack extension type {code} is not accepted"
    raise ValueError(msg)


def _py_column(values: list[Any], target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Python values → an Arrow column of ``target`` (or inferred for timestamps, converted by
    the shared conversion later); value by value only when the whole column fails."""
    parse_type = None if pa.types.is_timestamp(target) else target
    try:
        arr = pa.array(values, parse_type)
        if parse_type is None and not (pa.types.is_integer(arr.type) or pa.types.is_string(
                arr.type) or pa.types.is_timestamp(arr.type) or pa.types.is_null(arr.type)):
            raise TypeError(arr.type)
        return arr, np.zeros(len(values), bool)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        pass
    out: list[Any] = []
    bad = np.zeros(len(values), bool)
    for i, v in enumerate(values):  # error path
        try:
            one = pa.array([v], parse_type)
            if parse_type is None:
                one, misfit = _convert(one, target)
                if pc.any(misfit).as_py():
                    raise ValueError(v)
            out.append(one[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
                OverflowError, ValueError):
            out.append(None)
            bad[i] = True
    return pa.array(out, target), bad
