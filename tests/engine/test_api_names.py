"""The names of LaminarDB's Python bindings: insert_json, insert_csv, writer (insert, watermark,
flush), subscribe_callback, checkpoint, shutdown; the package surface help() shows; and the
references in docs/ (every public method, every error code)."""

from __future__ import annotations

import datetime as dt
import pydoc
import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import laminardb
from laminardb.connection import Connection, QueryResult
from laminardb.engine.subscriptions import CallbackSubscription, Subscription
from laminardb.engine.writer import Writer

ROOT = Path(__file__).resolve().parents[2]
SRC = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v DOUBLE, "
       "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);"
       "CREATE STREAM raw AS SELECT * FROM t;"
       "CREATE STREAM bars AS SELECT k, window_start, count(*) AS n FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND)")
ROWS = [{"ts": 100, "k": "a", "v": 1.5}, {"ts": 1200, "k": "b", "v": None}, {"ts": 2500, "k": "a", "v": 2.0}]


@pytest.fixture
def t(db):
    db.execute(SRC)
    return db


def _rows(sub) -> list[dict]:
    return sub.to_arrow().to_pylist()


# ------------------------------------------------------------------ insert_json / insert_csv
@pytest.mark.parametrize("form", ["array", "lines", "list", "one"])
def test_insert_json_forms_equal_insert(t, form):
    import json

    raw = t.subscribe_stream("raw")
    rows = ROWS[:1] if form == "one" else ROWS
    text = {"array": json.dumps(rows), "lines": "\n".join(map(json.dumps, rows)) + "\n\n",
            "list": [json.dumps(r) for r in rows], "one": json.dumps(rows[0], indent=2)}[form]
    assert t.insert_json("t", text) == len(rows)
    assert _rows(raw) == rows


def test_insert_json_bad_records_by_index(t):
    raw = t.subscribe_stream("raw")
    text = '{"ts": 1, "k": "a"}\n{"ts": 2, "k": \n[1, 2]\n{"ts": "x"}\n{"ts": 5, "k": "e"}\n'
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert_json("t", text)
    assert "row 1:" in str(e.value) and "not valid JSON" in str(e.value)
    assert raw.to_arrow().num_rows == 0
    r = t.insert_json("t", text, on_error="skip")
    assert int(r) == 2 and r.rejected_rows.column("index").to_pylist() == [1, 2, 3]
    assert [x["k"] for x in _rows(raw)] == ["a", "e"]
    r = t.insert_json("t", '[{"ts": 7}, 3, {"ts": "y"}]', on_error="skip")
    assert int(r) == 1 and r.rejected_rows.column("index").to_pylist() == [1, 2]


def test_insert_csv_like_the_cli(t):
    raw = t.subscribe_stream("raw")
    text = "ts,k,v\n100,a,1.5\n1200,b\n2500,a,2.0\n3000,c,oops\n"
    r = t.insert_csv("t", text, on_error="skip")
    assert int(r) == 2
    assert [(x["index"], x["raw"]) for x in r.rejected_rows.to_pylist()] == [(1, "1200,b"), (3, '{"ts":"3000","k":"c","v":"oops"}')]
    assert [x["ts"] for x in _rows(raw)] == [100, 2500]
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert_csv("t", text)
    assert "row 1: expected 3 fields, got 2" in str(e.value)
    db2 = laminardb.open()
    db2.execute("CREATE SOURCE e (ts TIMESTAMP(3) NOT NULL, WATERMARK FOR ts AS ts)")
    assert db2.insert_csv("e", "ts\n2024-01-01T10:00:00Z\n2024-01-01T12:00:00+02:00\n") == 2
    assert db2.metrics()["watermarks"]["e"] == 1_704_103_200_000


# ------------------------------------------------------------------ writer
def test_writer_buffers_flushes_and_advances_the_watermark(t):
    raw, bars = t.subscribe_stream("raw"), t.subscribe_stream("bars")
    w = t.writer("t")
    assert isinstance(w, Writer) and w.name == "t" and w.schema.names == ["ts", "k", "v"]
    for r in ROWS:
        w.insert(r)
    assert w.pending == 3 and raw.to_arrow().num_rows == 0 and w.current_watermark is None
    assert w.flush() == 3 and w.pending == 0
    assert _rows(raw) == ROWS and w.current_watermark == 1500
    assert bars.to_arrow().num_rows == 1  # [0, 1000) closed at 1500
    w.watermark(5000)  # explicit: windows close without new rows
    assert w.current_watermark == 5000
    assert sorted(r["window_start"] for r in _rows(bars)) == [0, 1000, 2000]
    w.watermark(10)  # never back
    assert w.current_watermark == 5000
    w.insert({"ts": 4000, "k": "late", "v": 0.0})
    w.close()
    assert t.metrics()["late_events_dropped"] == 1
    with pytest.raises(laminardb.LaminarError) as e:
        w.insert(ROWS[0])
    assert e.value.code == "LDB-3010"


def test_writer_context_manager_tables_and_errors(t):
    raw = t.subscribe_stream("raw")
    with t.writer("t") as w:
        w.insert(ROWS[:2])
        w.insert(pa.table({"ts": [5000], "k": ["z"], "v": [0.5]}))  # after what is buffered
        assert w.pending == 0
        w.insert(ROWS[2])
    assert [r["ts"] for r in _rows(raw)] == [100, 1200, 5000, 2500]
    with t.writer("t", on_error="skip") as w:
        w.insert([{"ts": 6000, "k": "ok"}, {"ts": "bad"}])
    assert w.rows_written == 1 and w.rows_rejected == 1
    with pytest.raises(laminardb.LaminarError) as e:
        t.writer("t").watermark(1_704_103_200_000 * 1000)
    assert e.value.code == "LDB-2004" and "epoch microseconds" in str(e.value)
    t.execute("CREATE SOURCE plain (x BIGINT)")
    with pytest.raises(laminardb.LaminarError) as e:
        t.writer("plain").watermark(1)
    assert e.value.code == "LDB-3011"


def test_writer_watermark_on_timestamp_sources(db):
    db.execute("CREATE SOURCE e (ts TIMESTAMP(6) NOT NULL, WATERMARK FOR ts AS ts)")
    w = db.writer("e")
    w.watermark("2024-01-01T10:00:00Z")
    assert w.current_watermark == 1_704_103_200_000_000
    w.watermark(dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC))
    assert w.current_watermark == 1_704_110_400_000_000


def test_writer_watermark_survives_a_restart(tmp_path):
    with laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"}) as db:
        db.execute(SRC)
        db.writer("t").watermark(7000)
        assert db.metrics()["watermarks"]["t"] == 7000
    with laminardb.open(tmp_path / "db") as db:  # close() checkpointed the explicit watermark
        assert db.metrics()["watermarks"]["t"] == 7000


# ------------------------------------------------------------------ subscribe_callback
def test_subscribe_callback_runs_on_a_connection_thread(t):
    got, threads, done = [], set(), threading.Event()

    def on_data(batch):
        got.append(batch)
        threads.add(threading.current_thread().name)
        if sum(b.num_rows for b in got) == 3:
            done.set()

    cb = t.subscribe_callback("raw", on_data)
    assert isinstance(cb, CallbackSubscription) and cb.is_active and "active" in repr(cb)
    t.insert("t", ROWS[:2])
    t.insert("t", ROWS[2])
    assert done.wait(10)
    assert pa.Table.from_batches(got).to_pylist() == ROWS
    assert threads == {"laminardb-callback-raw"}
    cb.cancel()
    cb.cancel()  # idempotent
    assert cb.wait(10) and not cb.is_active and "finished" in repr(cb)
    t.insert("t", {"ts": 9000, "k": "after"})
    assert sum(b.num_rows for b in got) == 3


def test_subscribe_callback_errors(t):
    seen = []
    cb = t.subscribe_callback("raw", lambda b: 1 / 0)
    t.insert("t", ROWS[0])
    with pytest.raises(ZeroDivisionError):
        cb.wait(10)
    assert isinstance(cb.error, ZeroDivisionError) and not cb.is_active
    t.insert("t", ROWS[1])  # the engine goes on
    kept = t.subscribe_callback("raw", lambda b: 1 / 0, on_error=seen.append)
    t.insert("t", ROWS[2])
    t.insert("t", {"ts": 3000, "k": "x"})
    assert kept._drain(10) and len(seen) == 2 and kept.is_active
    kept.cancel()
    assert kept.wait(10)


def test_close_hands_over_queued_batches(t):
    got = []
    gate = threading.Event()

    def slow(batch):
        gate.wait(10)
        got.append(batch.num_rows)

    t.subscribe_callback("raw", slow)
    for r in ROWS:
        t.insert("t", r)
    gate.set()
    t.close()
    assert got == [1, 1, 1]


# ------------------------------------------------------------------ checkpoint / shutdown
def test_checkpoint_and_shutdown(tmp_path, t):
    with pytest.raises(laminardb.LaminarError) as e:
        t.checkpoint()
    assert e.value.code == "LDB-5007"
    got = []
    t.subscribe_callback("raw", lambda b: got.append(b.num_rows))
    t.insert("t", ROWS)
    t.shutdown()
    assert got == [3]
    with pytest.raises(laminardb.LaminarError) as e:
        t.shutdown()
    assert e.value.code == "LDB-3001"
    t.close()  # close after shutdown is fine

    db = laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"})
    db.execute(SRC)
    db.insert("t", ROWS)
    assert db.checkpoint() >= 1
    db.insert("t", {"ts": 2700, "k": "b"})
    db.shutdown()  # a last checkpoint; open windows stay open
    db = laminardb.open(tmp_path / "db")
    assert db.metrics()["checkpoints"]["recovery"]["wal_records_replayed"] == 0
    bars = db.subscribe_stream("bars")
    db.finish()
    # [0, 1000) closed before the shutdown; the windows still open then continue here
    assert sorted((r["k"], r["window_start"], r["n"]) for r in _rows(bars)) == [
        ("a", 2000, 1), ("b", 1000, 1), ("b", 2000, 1)]
    db.close()


# ------------------------------------------------------------------ the package surface
def test_help_shows_the_api_not_the_error_catalogue():
    text = pydoc.render_doc(laminardb, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < 600
    for name in ("insert_json", "insert_csv", "subscribe_callback", "shutdown", "class Writer",
                 "class Connection", "class Subscription", "open(", "connect("):
        assert name in text, name
    for name in ("NullViolationError", "ConversionError", "FencedError", "WalCorruptError"):
        assert name not in text, name
    assert dir(laminardb) == sorted(laminardb.__all__)
    for name in ("LaminarError", "SqlError", "DataError", "EngineError", "ConnectorError", "CheckpointError",
                 "ControlPlaneError", "DiscoveryError", "ClusterError", "ConfigError", "InsertResult"):
        assert getattr(laminardb, name).__name__ == name
    from laminardb.errors import NullViolationError

    assert issubclass(NullViolationError, laminardb.DataError)


def _public(cls) -> set[str]:
    return {n for n in vars(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def test_python_reference_documents_every_public_method():
    doc = (ROOT / "docs" / "python.md").read_text()
    for cls in (Connection, Subscription, CallbackSubscription, QueryResult, Writer):
        for name in sorted(_public(cls)):
            assert re.search(rf"`[^`]*\b{name}\(", doc), f"docs/python.md lacks {cls.__name__}.{name}()"
    assert "laminardb.connect(" in doc and "laminardb.open(" in doc


def _codes_in_package() -> set[str]:
    codes = set()
    for path in (ROOT / "laminardb").rglob("*.py"):
        text = path.read_text()
        codes |= set(re.findall(r"""code\s*=\s*f?["'](LDB-\d{4})["']""", text))
    codes |= {f"LDB-{c}" for c in (2001, 2002, 2003, 2004, 2005)}  # per-row codes (laminardb/sql/convert.py)
    return codes


def test_error_reference_lists_every_code():
    doc = (ROOT / "docs" / "errors.md").read_text()
    listed = set(re.findall(r"^\|\s*`?(LDB-\d{4})", doc, flags=re.M))
    missing = sorted(_codes_in_package() - listed)
    assert not missing, f"docs/errors.md lacks {missing}: add a line per code (what it means, what to do)"
    assert len(_codes_in_package()) > 40
