"""File connectors: every format round-trips; bad rows are reported, dead-lettered, never fatal."""

from __future__ import annotations

import json
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminardb.connectors import (
    FileFormatError,
    FileReadError,
    FileSink,
    SinkClosedError,
    SinkSchemaError,
    SourceFileNotFoundError,
    infer_format,
    read_file,
)

SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("ms"), nullable=False),
    pa.field("symbol", pa.string()),
    pa.field("price", pa.float64()),
    pa.field("qty", pa.int64()),
    pa.field("ok", pa.bool_()),
])


def _ts(*args: int) -> datetime:
    return datetime(2024, 1, 2, *args)


@pytest.fixture
def table() -> pa.Table:
    return pa.table({
        "ts": pa.array([_ts(9, 30, 0, 250_000), _ts(9, 30, 1), _ts(9, 30, 2, 999_000)],
                       pa.timestamp("ms")),
        "symbol": ["A,B", 'quo"te\nnl', None],
        "price": [1.5, None, -2.25e10],
        "qty": [1, 2**40, None],
        "ok": [True, False, None],
    }, schema=SCHEMA)


def _read(path, **kw) -> tuple[pa.Table, object]:
    with read_file(path, schema=SCHEMA, **kw) as reader:
        batches = list(reader)
    return pa.Table.from_batches(batches, schema=SCHEMA), reader.report


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_round_trip(tmp_path, table, ext):
    path = tmp_path / f"out.{ext}"
    with FileSink(path, schema=SCHEMA) as sink:
        sink.write(table.to_batches()[0].slice(0, 2))
        sink.flush()
        sink.write(table.slice(2))
    assert sink.rows_written == 3
    got, report = _read(path)
    assert got.equals(table)
    assert report.rows == 3 and report.rejected == 0
    assert not (tmp_path / f"out.{ext}.rejected").exists()


def test_jsonl_output_is_plain_json_with_iso_timestamps(tmp_path, table):
    path = tmp_path / "out.jsonl"
    with FileSink(path, format="jsonl", schema=SCHEMA) as sink:
        sink.write(table)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"ts": "2024-01-02T09:30:00.250", "symbol": "A,B", "price": 1.5,
                       "qty": 1, "ok": True}
    assert rows[1]["symbol"] == 'quo"te\nnl' and rows[1]["price"] is None
    assert rows[2]["price"] == -2.25e10 and rows[2]["qty"] is None


def test_csv_accepts_iso_and_epoch_ms_and_offsets(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        "qty,ts,symbol,extra\n"
        "1,2024-01-02T09:30:00.250,A,x\n"
        "2,1704187801000,B,y\n"
        "3,2024-01-02 10:30:02+01:00,C,z\n"
        "+4,2024-01-02T09:30:03Z,D,w\n"
    )
    got, report = _read(path)
    assert report.rejected == 0
    assert got.column("ts").to_pylist() == [_ts(9, 30, 0, 250_000), _ts(9, 30, 1), _ts(9, 30, 2),
                                           _ts(9, 30, 3)]
    assert got.column("qty").to_pylist() == [1, 2, 3, 4]
    assert got.column("price").null_count == 4  # missing nullable column → NULL


def test_csv_bad_rows_are_reported_and_valid_rows_kept(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        "ts,symbol,price,qty,ok\n"
        "2024-01-02T09:30:00,A,1.0,1,true\n"
        "2024-01-02T09:30:01,B,abc,2,true\n"      # price not a number
        "2024-01-02T09:30:02,C,1.0\n"             # too few fields
        ",D,1.0,4,true\n"                          # NULL in NOT NULL ts
        "2024-13-02T09:30:04,E,1.0,5,true\n"       # month 13
        "2024-01-02T09:30:05,F,2.0,99999999999999999999,true\n"  # overflows BIGINT
        "2024-01-02T09:30:06,G,3.0,7,maybe\n"      # not a boolean
        "2024-01-02T09:30:07,H,4.0,8,0\n"
    )
    got, report = _read(path)
    assert got.column("symbol").to_pylist() == ["A", "H"]
    assert report.rows == 2 and report.rejected == 6
    assert "expected 5 fields" in report.first_error or "price" in report.first_error
    dead = [json.loads(line) for line in (tmp_path / "in.csv.rejected").read_text().splitlines()]
    assert len(dead) == 6
    assert sorted(d["index"] for d in dead) == [1, 2, 3, 4, 5, 6]  # records after the header, from 0
    assert next(d for d in dead if d["index"] == 2)["raw"] == "2024-01-02T09:30:02,C,1.0"
    by_error = " | ".join(d["error"] for d in dead)
    for needle in ("'price': abc is not a valid DOUBLE", "expected 5 fields",
                   "'ts' is NOT NULL", "'ts': 2024-13-02T09:30:04", "'qty'", "'ok': maybe"):
        assert needle in by_error
    assert report.dead_letter_path == str(tmp_path / "in.csv.rejected")


def test_a_reported_rejection_is_in_the_dead_letter_file_while_the_reader_is_open(tmp_path):
    """A user (or ``laminardb run``) reads the dead letters as soon as the report counts them,
    without closing the reader first."""
    path = tmp_path / "in.csv"
    path.write_text("ts,symbol,price,qty,ok\n2024-01-02T09:30:00,A,abc,1,true\n")
    reader = read_file(path, schema=SCHEMA)
    try:
        assert list(reader) == [] and reader.report.rejected == 1
        dead = (tmp_path / "in.csv.rejected").read_text().splitlines()
        assert [json.loads(line)["index"] for line in dead] == [0]
    finally:
        reader.close()


def test_jsonl_bad_lines_are_reported_and_valid_rows_kept(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"ts": 1704187800000 + i, "symbol": f"S{i}", "price": i, "qty": i})
             for i in range(50)]
    lines[10] = '{"ts": 1704187800010, "symbol": "broken"'  # not JSON
    lines[20] = '[1, 2]'  # not an object
    lines[30] = json.dumps({"ts": "2024-01-02T09:30:00", "symbol": "S30", "price": "x"})
    lines.insert(40, "")  # blank lines are skipped
    path.write_text("\n".join(lines))  # no trailing newline
    got, report = _read(path, batch_rows=7)
    assert report.rejected == 3 and report.rows == 47
    kept = got.column("symbol").to_pylist()
    assert kept == [f"S{i}" for i in range(50) if i not in (10, 20, 30)]
    dead = [json.loads(line) for line in (tmp_path / "in.jsonl.rejected").read_text().splitlines()]
    assert all(set(d) == {"index", "raw", "error"} and isinstance(d["raw"], str) for d in dead)
    assert {d["index"] for d in dead} == {10, 20, 30}  # record positions (blank lines not counted)
    assert any("'price'" in d["error"] for d in dead)
    assert json.loads(next(d["raw"] for d in dead if d["index"] == 30))["symbol"] == "S30"


def test_batches_respect_batch_rows_and_progress(tmp_path, table):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.concat_tables([table] * 100), path)
    reader = read_file(path, schema=SCHEMA, batch_rows=64)
    sizes = [b.num_rows for b in reader]
    assert sum(sizes) == 300 and max(sizes) <= 64
    assert reader.progress == 1.0


def test_dead_letter_can_be_disabled(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("ts,qty\n2024-01-02T09:30:00,x\n")
    _, report = _read(path, dead_letter=False)
    assert report.rejected == 1 and report.dead_letter_path is None
    assert not (tmp_path / "in.csv.rejected").exists()


def test_whole_file_errors_say_what_to_do(tmp_path):
    with pytest.raises(SourceFileNotFoundError, match="does not exist"):
        read_file(tmp_path / "missing.csv", schema=SCHEMA)
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(FileFormatError, match="format='csv'") as info:
        read_file(tmp_path / "x.txt", schema=SCHEMA)
    assert info.value.code == "LDB-4001"
    (tmp_path / "nots.csv").write_text("symbol\nA\n")
    with pytest.raises(FileReadError, match="NOT NULL"):
        list(read_file(tmp_path / "nots.csv", schema=SCHEMA))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(FileReadError):
        list(read_file(tmp_path / "bad.parquet", schema=SCHEMA))
    assert infer_format("a.NDJSON") == "jsonl" and infer_format("a", "PARQUET") == "parquet"


def test_sink_rejects_foreign_batches_and_writes_after_close(tmp_path, table):
    sink = FileSink(tmp_path / "sub" / "dir" / "o.csv", schema=SCHEMA)  # parents are created
    with pytest.raises(SinkSchemaError, match="expects columns"):
        sink.write(pa.record_batch({"x": [1]}))
    sink.write(table.cast(SCHEMA).to_batches()[0])
    sink.close()
    sink.close()
    with pytest.raises(SinkClosedError):
        sink.write(table.to_batches()[0])
