"""Sink rows staged by the actors that made them (``checkpoint/actor_stages.py``), end to end: a
durable database of two real Ray actors, the real Spark coordinator writing the exactly-once
FILE sink from the head's and the actors' stage files.
- Local-global aggregation merged on the key owners, who stage the only sink's rows
  (``cluster/owner_merge.py``). Rows are inserted so every key is on both actors (each takes
  a row range), and the head merges, decodes and stages no row.
- A plan tree (a join) whose root's rows each actor stages for the only sink
  (``DistributedPlanOperator._steps``): the head decodes no row of it.
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


def _after(table: pa.Table, ms: int) -> pa.Table:
    """``table`` with its event times ``ms`` later."""
    import pyarrow.compute as pc

    ts = table["ts"].cast(pa.int64())
    return table.set_column(table.column_names.index("ts"), "ts", pc.add(ts, ms).cast(pa.timestamp("ms")))


def test_the_owners_stage_the_only_sinks_rows_beside_a_subscriber_and_the_head_for_a_query(database, tmp_path):
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

    sub = db.subscribe_stream("per_key")  # the owners stage on, and keep the rows for the subscriber
    for i in range(6, 8):
        db.insert("t", _batch(i))
        raw.append(_batch(i))
    db.insert("t", _sentinel())
    db.checkpoint()
    after = _merges(db)
    new_rows = _committed(out).num_rows - committed.num_rows
    assert after["staged_on_actors"] - merges["staged_on_actors"] == new_rows > 0, after
    assert after["merged_on_actors"] > merges["merged_on_actors"] and after["merged_at_head"] == 0, after
    _assert_equal(_committed(out), pa.concat_tables(raw))
    got = sub.to_arrow()
    assert got.num_rows == new_rows == db.metrics()["cluster"]["rows_by_ref"]["per_key"]
    _assert_equal(got, pa.concat_tables(raw[5:]))  # batch i is window i: 5..7 closed now

    db.execute("CREATE STREAM per_key_big AS SELECT * FROM per_key WHERE c > 1")  # a query reads it: the head stages
    for i in range(8, 10):  # after the sentinel's watermark
        db.insert("t", _after(_batch(i), 2 * 10**9))
        raw.append(_after(_batch(i), 2 * 10**9))
    db.insert("t", _after(_sentinel(), 2 * 10**9))
    db.checkpoint()
    last = _merges(db)
    assert last["staged_on_actors"] == after["staged_on_actors"], last
    _assert_equal(_committed(out), pa.concat_tables(raw))
    assert db.metrics()["cluster"]["rows_by_ref"]["per_key"] == new_rows
    assert sub.to_arrow().num_rows == _committed(out).num_rows - committed.num_rows


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


@pytest.mark.parametrize("fold", [True, False], ids=["folded", "merge-calls"])
def test_a_closes_merges_ride_with_the_owners_next_batch_and_go_before_the_barrier(database, tmp_path, fold):
    """``fold_merges`` (the default): the owners' merge of a close goes inside their next
    batch call, not in calls of its own; what is still due when a checkpoint comes goes
    before its barrier, so the epoch holds every window the watermark closed. The committed
    windows are DuckDB's either way, and every staged row is counted once."""
    out = tmp_path / "out"
    db = database(checkpoint_interval="off", fold_merges=fold)
    db.execute(DDL.format(out=out))
    raw = [_batch(i) for i in range(10)]
    for i, batch in enumerate(raw):
        db.insert("t", batch)
        if i == 5:
            db.checkpoint()
            _assert_equal(_committed(out), pa.concat_tables(raw[:5]))  # batch 5 closed window 4
    db.insert("t", _sentinel())
    db.checkpoint()
    committed = _committed(out)
    _assert_equal(committed, pa.concat_tables(raw))
    merges = _merges(db)
    assert merges["merged_at_head"] == 0 and merges["staged_on_actors"] == committed.num_rows, merges
    assert (merges["merges_folded"] > 0) is fold, merges
    sink = db.metrics()["sinks"]["out"]
    assert sink["rows_written"] == sink["rows_committed"] == committed.num_rows, sink
    assert db.metrics()["queries"]["per_key"]["rows_out"] == committed.num_rows


def _wide(i: int, keys: int = 6000) -> pa.Table:
    """Window ``i``: ``keys`` keys twice each, so each owner's part of a close is far above
    the 64 KB that ride inside an answer and travels as an object reference."""
    import numpy as np

    rng = np.random.default_rng(50 + i)
    rows = 2 * keys
    idx = np.arange(i * rows, (i + 1) * rows)
    return pa.table({"k": pa.array(np.tile(np.arange(keys), 2)), "v": pa.array(rng.normal(size=rows)),
                     "i": pa.array(rng.integers(1, 50, rows)),
                     "ts": pa.array(i * 1000 + (idx - i * rows) * 1000 // rows, pa.timestamp("ms"))})


def test_folded_merges_of_wide_closes_fetch_their_parts_by_reference(database, tmp_path):
    """Closes whose parts are object references (too big to ride inside an answer), folded
    into the owners' next batch calls: nested in the call's arguments, Ray does not fetch
    them, so the owner does. Every window is DuckDB's."""
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(DDL.format(out=out))
    raw = [_wide(i) for i in range(5)]
    for batch in raw:
        db.insert("t", batch)
    db.insert("t", _sentinel())
    db.checkpoint()
    _assert_equal(_committed(out), pa.concat_tables(raw))
    assert _merges(db)["merges_folded"] > 0


JOIN_DDL = """
CREATE SOURCE l (k BIGINT, a BIGINT);
CREATE SOURCE r (k BIGINT, b BIGINT);
CREATE STREAM j AS SELECT l.k, l.a, r.b FROM l JOIN r ON l.k = r.k WHERE r.b % 3 <> 0;
CREATE SINK out FROM j INTO FILE (path = '{out}', format = 'parquet');
"""
JOIN_ORACLE = "SELECT l.k, l.a, r.b FROM l JOIN r ON l.k = r.k WHERE r.b % 3 <> 0"
JOIN_ROWS = 3000  # 48 KB a batch: sent to an actor, not through the head


def _side(i: int, value: str) -> pa.Table:
    """Keys 0..499 (and NULL, which joins nothing) with a unique value per row."""
    import numpy as np

    rng = np.random.default_rng(100 + i)
    ids = np.arange(i * JOIN_ROWS, (i + 1) * JOIN_ROWS)
    return pa.table({"k": pa.array(rng.integers(0, 500, JOIN_ROWS), mask=rng.random(JOIN_ROWS) < 0.02),
                     value: pa.array(ids)})


def _joined(sides: dict[str, list[pa.Table]]) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    for name, tables in sides.items():
        con.register(name, pa.concat_tables(tables))
    return sorted(con.sql(JOIN_ORACLE).fetchall())


def _rows_of(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table[c].to_pylist() for c in ("k", "a", "b")), strict=True))


def _exchange(db) -> dict:
    return db.metrics()["cluster"]["plan_exchange"]["j"]


def _insert_both(db, sides: dict[str, list[pa.Table]], i: int) -> None:
    for name, value in (("l", "a"), ("r", "b")):
        t = _side(i if name == "l" else 1000 + i, value)
        db.insert(name, t)
        sides[name].append(t)


def test_a_trees_sink_is_staged_by_the_actors_beside_subscribers_and_by_the_head_for_a_query(database, tmp_path):
    """The tree's only sink staged by the actors (the head decodes no root row); a subscriber
    comes: the actors still stage the sink's rows and keep them for the subscriber alone, whose
    client fetches them by reference (the head decodes none and writes none); a query on the
    stream comes: the rows go to the head, which stages the sink's from then on. Every joined
    row is committed once throughout."""
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(JOIN_DDL.format(out=out))
    sides: dict[str, list[pa.Table]] = {"l": [], "r": []}
    for i in range(4):  # two checkpoints: rows staged in both epochs
        _insert_both(db, sides, i)
        if i % 2 == 1:
            db.checkpoint()
    counts = _exchange(db)
    committed = _committed(out)
    assert _rows_of(committed) == _joined(sides)
    assert counts["root_rows"] == 0 and counts["root_rows_staged"] == committed.num_rows > 0, counts
    assert counts["messages"] > 0, counts  # the join's inputs did cross between the actors
    sink = db.metrics()["sinks"]["out"]
    assert sink["rows_written"] == sink["rows_committed"] == committed.num_rows, sink
    assert db.metrics()["queries"]["j"]["rows_out"] == committed.num_rows
    assert _stage_files(tmp_path, db, "epoch-*.parquet") == []  # committed epochs are released

    sub = db.subscribe_stream("j")  # the actors stage on, and send the rows for the subscriber
    for i in range(4, 6):
        _insert_both(db, sides, i)
    db.checkpoint()
    after = _exchange(db)
    with_sub = _committed(out)
    assert _rows_of(with_sub) == _joined(sides)
    new_rows = with_sub.num_rows - committed.num_rows
    assert after["root_rows_staged"] - counts["root_rows_staged"] == new_rows > 0, after
    assert after["root_rows"] == 0 and after["root_rows_by_ref"] == sub.to_arrow().num_rows == new_rows, after
    assert _rows_of(sub.to_arrow()) == sorted(set(_rows_of(with_sub)) - set(_rows_of(committed)))
    sink = db.metrics()["sinks"]["out"]
    assert sink["rows_committed"] == with_sub.num_rows, sink
    assert db.metrics()["queries"]["j"]["rows_out"] == with_sub.num_rows

    db.execute("CREATE STREAM j_pos AS SELECT k, a FROM j WHERE a >= 0")  # a query reads it too
    for i in range(6, 8):
        _insert_both(db, sides, i)
    db.checkpoint()
    last = _exchange(db)
    everything = _committed(out)
    assert _rows_of(everything) == _joined(sides)
    assert last["root_rows_staged"] == after["root_rows_staged"], last  # the head stages them now
    assert last["root_rows_by_ref"] == after["root_rows_by_ref"], last
    assert last["root_rows"] - after["root_rows"] == everything.num_rows - with_sub.num_rows > 0, last
    assert sub.to_arrow().num_rows == everything.num_rows - committed.num_rows


def test_an_actor_killed_with_a_trees_staged_rows_loses_and_repeats_none(database, tmp_path):
    """Join rows staged in both actors' open files since the last checkpoint, then actor 1
    SIGKILLed: the database recovers from that checkpoint, the dead actor's open file is
    dropped and the replay makes its rows again, so the FILE sink holds every joined row once.
    A subscriber that has read nothing yet holds references to rows the dead actor made: the
    head owns those objects (the actors' return values), so the subscriber still gets every
    joined row once, none lost."""
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(JOIN_DDL.format(out=out))
    sub = db.subscribe_stream("j")  # read only after the kill
    sides: dict[str, list[pa.Table]] = {"l": [], "r": []}
    for i in range(2):
        _insert_both(db, sides, i)
    db.checkpoint()
    _insert_both(db, sides, 2)
    wait_until(lambda: len(_stage_files(tmp_path, db, "open.parquet")) == 2, timeout=30,
               what="an open stage file on each actor")
    pid = db.metrics()["cluster"]["members"][1]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)
    for i in range(3, 5):
        _insert_both(db, sides, i)
    db.checkpoint()
    assert db.metrics()["database"]["recoveries"], "the kill was recovered from"
    assert _rows_of(_committed(out)) == _joined(sides)  # every joined row once
    assert _exchange(db)["root_rows_by_ref"] > 0 and _exchange(db)["root_rows"] == 0
    assert _rows_of(sub.to_arrow()) == _joined(sides) and sub.rows_lost == 0
