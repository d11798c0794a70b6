"""Local-global aggregation merged on the key owners, who stage the only sink's rows
themselves (``cluster/owner_merge.py``, ``checkpoint/actor_stages.py``), end to end: a durable
database of two real Ray actors, the real Spark coordinator writing the exactly-once FILE
sink from the head's and the actors' stage files. Rows are inserted so every key is on both
actors (each takes a row range), and the head merges, decodes and stages no row.
Oracle: DuckDB over the same rows; an actor SIGKILLed between checkpoints loses nothing and
duplicates nothing."""

from __future__ import annotations

import os
import signal

import pyarrow as pa
import pytest

from tests._services.procs import process_alive, wait_until
from tests.delta.test_spark_merge_delta import DDL, _assert_equal, _batch, _committed, _sentinel

pytestmark = pytest.mark.integration


def _merges(db) -> dict:
    return db.metrics()["cluster"]["partial_merge"]["per_key"]


def _stage_files(tmp_path, db, name: str) -> list[str]:
    root = tmp_path / "ckpt" / db.database / "staged" / "out" / "actors"
    return sorted(str(p.relative_to(root)) for p in root.glob(f"*/{name}")) if root.is_dir() else []


def _wait_open_files(tmp_path, db) -> None:
    """Both owners' open files, once the batches' rounds (pipelined: ``insert()`` returns
    before the actors answer) have closed their windows."""
    wait_until(lambda: len(_stage_files(tmp_path, db, "open.parquet")) == 2, timeout=30,
               what="an open stage file on each owner")


def test_the_owners_stage_the_only_sinks_rows_then_the_head_when_a_subscriber_comes(database, tmp_path):
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(DDL.format(out=out))
    raw = []
    for i in range(6):  # two checkpoints, three batches each: windows close in both epochs
        db.insert("t", _batch(i))
        raw.append(_batch(i))
        if i == 4:  # closed windows wait in each owner's open file until the barrier
            _wait_open_files(tmp_path, db)
        if i % 3 == 2:
            db.checkpoint()
    merges = _merges(db)
    assert merges["merged_at_head"] == 0 and merges["merged_on_actors"] > 0, merges
    committed = _committed(out)
    _assert_equal(committed, pa.concat_tables(raw[:5]))  # windows closed by batch 5's watermark
    assert merges["staged_on_actors"] == committed.num_rows
    sink = db.metrics()["sinks"]["out"]
    assert sink["rows_written"] == sink["rows_committed"] == committed.num_rows, sink
    assert _stage_files(tmp_path, db, "epoch-*.parquet") == []  # committed epochs are released

    sub = db.subscribe_stream("per_key")  # a second consumer: the owners send their rows to the head
    for i in range(6, 8):
        db.insert("t", _batch(i))
        raw.append(_batch(i))
    db.insert("t", _sentinel())
    db.checkpoint()
    after = _merges(db)
    assert after["staged_on_actors"] == merges["staged_on_actors"], after
    assert after["merged_on_actors"] > merges["merged_on_actors"] and after["merged_at_head"] == 0, after
    _assert_equal(_committed(out), pa.concat_tables(raw))
    got = sub.to_arrow()
    assert got.num_rows == _committed(out).num_rows - committed.num_rows > 0


def test_an_actor_killed_with_staged_rows_loses_and_repeats_none(database, tmp_path):
    """Rows staged in both owners' open files since the last checkpoint, then actor 1
    SIGKILLed: the database recovers from that checkpoint, the dead actor's open file is
    dropped and its rows made again by the replay, so the FILE sink holds every window once."""
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(DDL.format(out=out))
    raw = [_batch(i) for i in range(8)]
    for i in range(3):
        db.insert("t", raw[i])
    db.checkpoint()
    for i in range(3, 5):
        db.insert("t", raw[i])
    _wait_open_files(tmp_path, db)
    pid = db.metrics()["cluster"]["members"][1]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)
    for i in range(5, 8):
        db.insert("t", raw[i])
    db.insert("t", _sentinel())
    db.checkpoint()
    assert db.metrics()["database"]["recoveries"], "the kill was recovered from"
    committed = _committed(out)
    _assert_equal(committed, pa.concat_tables(raw))  # every window once, each exact
    assert _merges(db)["merged_at_head"] == 0
