"""Rows from text: what ``insert_json()`` and ``insert_csv()`` take, parsed like the files of
``laminardb run``.

Entry points: ``parse_json_text(text)`` (a JSON array of objects, one object, or objects one
per line) and ``parse_csv_text(text, schema)`` (a header row, values read as text). Both return
``ParsedText``: the rows (a pyarrow Table, or dicts), each row's record index in the text, and
the records that did not parse as ``REJECTED_SCHEMA`` rows; ``Reactor.insert`` converts the rows
and merges both kinds of refusals by index. Parsing is vectorized (pyarrow's JSON and CSV
readers); Python loops over records only when a JSON text fails to parse as a whole.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.errors import SchemaMismatchError
from laminardb.sql.convert import rejected_batch


@dataclass
class ParsedText:
    """Rows parsed from text, and the records that did not parse (index, raw, error)."""

    data: Any  # a pyarrow Table or a list of dicts
    index: np.ndarray  # data row → record index in the text
    rejected: pa.RecordBatch  # REJECTED_SCHEMA


def parse_json_text(text: str | bytes | list[str], *, source: str) -> ParsedText:
    """A JSON array of objects, one object, or objects one per line (a list of lines too)."""
    if isinstance(text, list | tuple):
        lines = [t.decode() if isinstance(t, bytes) else str(t) for t in text]
        text = "\n".join(line.replace("\n", " ") for line in lines)
    raw = text.encode() if isinstance(text, str) else bytes(text)
    head = raw.lstrip()[:1]
    if head == b"[":
        return _json_array(raw, source)
    import pyarrow.json as pajson

    try:
        table = pajson.read_json(io.BytesIO(raw), parse_options=pajson.ParseOptions(newlines_in_values=True),
                                 read_options=pajson.ReadOptions(use_threads=False))
        return ParsedText(table, np.arange(table.num_rows), _no_rejects())
    except pa.ArrowInvalid:  # error path: one record per line, each parsed on its own
        return _json_line_by_line(raw)


def _json_array(raw: bytes, source: str) -> ParsedText:
    try:
        rows = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SchemaMismatchError(f"insert_json into {source!r}: not valid JSON ({exc}); pass a JSON "
                                  "array of objects or one object per line") from None
    if not isinstance(rows, list):
        rows = [rows]
    good = [i for i, r in enumerate(rows) if isinstance(r, dict)]
    bad = [i for i, r in enumerate(rows) if not isinstance(r, dict)]
    rejected = rejected_batch(np.array(bad, np.int64), pa.array([json.dumps(rows[i]) for i in bad], pa.string()),
                              pa.array(["not a JSON object"] * len(bad), pa.string()))
    return ParsedText([rows[i] for i in good], np.array(good, np.int64), rejected)


def _json_line_by_line(raw: bytes) -> ParsedText:
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.strip()]
    good_rows: list[dict] = []
    good: list[int] = []
    bad: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append((i, line, f"not valid JSON: {exc}"))
            continue
        if not isinstance(row, dict):
            bad.append((i, line, "not a JSON object"))
            continue
        good_rows.append(row)
        good.append(i)
    rejected = rejected_batch(np.array([b[0] for b in bad], np.int64), pa.array([b[1] for b in bad], pa.string()),
                              pa.array([b[2] for b in bad], pa.string()))
    return ParsedText(good_rows, np.array(good, np.int64), rejected)


def parse_csv_text(text: str | bytes, schema: pa.Schema, *, source: str) -> ParsedText:
    """CSV with a header row; values read as text and converted like a CSV file's."""
    import pyarrow.csv as pacsv

    raw = text.encode() if isinstance(text, str) else bytes(text)
    header = raw.split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    names = next(csv.reader([header]), [])
    bad: list[tuple[int, str, str]] = []

    def on_invalid(row: Any) -> str:  # error path: one call per malformed line
        bad.append((row.number - 2, row.text, f"expected {row.expected_columns} fields, got {row.actual_columns}"))
        return "skip"

    try:
        table = pacsv.read_csv(
            io.BytesIO(raw),
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 null_values=["", "NULL", "null"], strings_can_be_null=True))
    except pa.ArrowInvalid as exc:
        raise SchemaMismatchError(f"insert_csv into {source!r}: cannot read the CSV text ({exc}); "
                                  "pass text with a header row of column names") from None
    bad_idx = np.array(sorted(b[0] for b in bad), np.int64)
    n = table.num_rows
    # the p-th parsed record is the p-th index not taken by a malformed one
    index = np.arange(n) + np.searchsorted(bad_idx - np.arange(len(bad_idx)), np.arange(n), side="right")
    bad.sort()
    rejected = rejected_batch(bad_idx, pa.array([b[1] for b in bad], pa.string()),
                              pa.array([b[2] for b in bad], pa.string()))
    return ParsedText(table, index, rejected)


def _no_rejects() -> pa.RecordBatch:
    return rejected_batch(np.empty(0, np.int64), pa.array([], pa.string()), pa.array([], pa.string()))
