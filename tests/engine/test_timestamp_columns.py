"""Every TIMESTAMP column refuses values no date can show — epoch µs or ns given as epoch ms —
not only the event-time column: such a cell used to be stored and then broke every reader of
the stream (``OverflowError: date value out of range``). Refused rows follow ``on_error``; the
rows around them go in."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest

import laminardb
from laminardb.errors import ConversionError

US = 1_700_000_000_123_456  # 2023-11-14 in epoch µs
NS = US * 1000
MS = 1_700_000_000_123

DDL = """CREATE SOURCE s (ts BIGINT NOT NULL, seen TIMESTAMP(3), note VARCHAR, WATERMARK FOR ts AS ts);
         CREATE STREAM o AS SELECT * FROM s"""


def _rows(sub) -> list[dict]:
    return [r for batch in sub for r in batch.to_pylist()]  # to_pylist() raised OverflowError before


@pytest.mark.parametrize("on_error", ["skip", "dead_letter"])
def test_epoch_us_and_ns_in_a_plain_timestamp_column_are_refused_with_a_hint(on_error):
    with laminardb.open() as db:
        db.execute(DDL)
        out = db.subscribe_stream("o")
        dead = db.subscribe_stream("s__rejected") if on_error == "dead_letter" else None
        r = db.insert("s", [{"ts": 1, "seen": US, "note": "us"}, {"ts": 2, "seen": MS, "note": "ok"},
                            {"ts": 3, "seen": NS, "note": "ns"}], on_error=on_error)
        assert (r.accepted, r.rejected) == (1, 2)
        errors = r.rejected_rows.to_pylist()
        assert [e["index"] for e in errors] == [0, 2]
        assert "column 'seen'" in errors[0]["error"] and "epoch microseconds" in errors[0]["error"]
        assert "epoch nanoseconds" in errors[1]["error"]
        assert f"{US} ms after the epoch" in errors[0]["error"]
        db.finish()
        assert _rows(out) == [{"ts": 2, "seen": datetime(2023, 11, 14, 22, 13, 20, 123000), "note": "ok"}]
        if dead is not None:
            assert [row["index"] for row in _rows(dead)] == [0, 2]


@pytest.mark.parametrize("data", [
    {"ts": 1, "seen": US, "note": "one row"},  # the one-row fast path
    pa.RecordBatch.from_pydict({"ts": [1], "seen": pa.array([US], pa.timestamp("ms")), "note": ["x"]},
                               schema=pa.schema([pa.field("ts", pa.int64(), False), ("seen", pa.timestamp("ms")),
                                                 ("note", pa.string())])),
    pa.table({"ts": [1], "seen": [US], "note": ["an int column"]}),
])
def test_raise_names_the_row_and_ingests_nothing(data):
    with laminardb.open() as db:
        db.execute(DDL)
        out = db.subscribe_stream("o")
        with pytest.raises(ConversionError) as e:
            db.insert("s", data)
        assert e.value.code == "LDB-2004" and "row 0: column 'seen'" in str(e.value)
        db.insert("s", {"ts": 2, "seen": MS, "note": "after"})
        db.finish()
        assert [r["note"] for r in _rows(out)] == ["after"]


def test_text_and_timestamp6_inputs_and_real_dates_at_the_edges():
    with laminardb.open() as db:
        db.execute("CREATE SOURCE s (id BIGINT, seen TIMESTAMP(6)); CREATE STREAM o AS SELECT * FROM s")
        out = db.subscribe_stream("o")
        r = db.insert_json("s", f'{{"id": 1, "seen": {US}}}\n{{"id": 2, "seen": "9999-12-31T23:59:59"}}\n'
                                f'{{"id": 3, "seen": "1850-06-01"}}\n{{"id": 4, "seen": {NS}}}', on_error="skip")
        assert r.accepted == 2 and [x["index"] for x in r.rejected_rows.to_pylist()] == [0, 3]
        db.finish()
        assert [x["seen"] for x in _rows(out)] == [datetime(9999, 12, 31, 23, 59, 59), datetime(1850, 6, 1)]


def test_csv_file_of_laminardb_run_refuses_the_row(tmp_path):
    from laminardb.cli.commands import main

    (tmp_path / "p.sql").write_text("CREATE SOURCE s (id BIGINT, seen TIMESTAMP(3));\n"
                                    "CREATE STREAM o AS SELECT id, seen FROM s;\n")
    (tmp_path / "in.csv").write_text(f"id,seen\n1,{US}\n2,{MS}\n")
    out = tmp_path / "o.jsonl"
    main(["run", str(tmp_path / "p.sql"), "--input", f"s={tmp_path / 'in.csv'}", "--output", f"o={out}"])
    assert out.read_text().count("\n") == 1 and '"id":2' in out.read_text().replace(" ", "")
    assert "epoch microseconds" in (tmp_path / "in.csv.rejected").read_text()
