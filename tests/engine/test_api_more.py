"""API behaviours added after the first API tests: columnar dict inserts, bounded
subscription history, insert after finish(), watermarks reported after finish()."""

from __future__ import annotations

import pyarrow as pa
import pytest

import laminardb

SRC = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v BIGINT, WATERMARK FOR ts AS ts - INTERVAL '10' MILLISECOND);"
       "CREATE STREAM s AS SELECT ts, k, v FROM t")


def test_dict_of_columns_is_one_batch_of_rows():
    db = laminardb.open()
    db.execute(SRC)
    sub = db.subscribe_stream("s")
    assert db.insert("t", {"ts": [1, 2, 3], "k": ["a", None, "c"], "v": [4, 5, 6]}) == 3
    assert sub.to_arrow().to_pylist() == [
        {"ts": 1, "k": "a", "v": 4}, {"ts": 2, "k": None, "v": 5}, {"ts": 3, "k": "c", "v": 6}]
    with pytest.raises(laminardb.LaminarError) as e:
        db.insert("t", {"ts": [1, 2], "k": ["a"], "v": [1, 2]})  # unequal lengths
    assert e.value.code == "LDB-2001"
    assert sub.to_arrow().num_rows == 3, "the refused insert left no rows"


def test_to_arrow_keeps_taken_batches_and_history_can_be_bounded():
    db = laminardb.open()
    db.execute(SRC)
    keep = db.subscribe_stream("s")
    bounded = db.subscribe_stream("s", history_rows=2)
    none = db.subscribe_stream("s", history_rows=0)
    for i in range(4):
        db.insert("t", {"ts": i, "k": "x", "v": i})
    assert keep.try_next().num_rows == 1
    assert keep.to_arrow().num_rows == 4, "to_arrow() is everything delivered, taken or not"
    assert bounded.to_arrow().column("v").to_pylist() == [2, 3] and bounded.history_truncated
    assert none.to_arrow().num_rows == 0
    assert [none.try_next().column("v")[0].as_py() for _ in range(4)] == [0, 1, 2, 3]


def test_insert_after_finish_and_watermark_report():
    db = laminardb.open()
    db.execute(SRC)
    db.insert("t", pa.table({"ts": [100, 250], "k": ["a", "b"], "v": [1, 2]}))
    assert db.metrics()["watermarks"]["t"] == 240
    db.finish()
    assert db.metrics()["watermarks"]["t"] == 240, "the last watermark the data gave, not +inf"
    with pytest.raises(laminardb.LaminarError) as e:
        db.insert("t", {"ts": 300, "k": "a", "v": 3})
    assert e.value.code == "LDB-3004"
