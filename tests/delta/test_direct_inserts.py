"""Client inserts go straight to a reactor actor, which logs them in its own WAL; the head's
WAL only references them (``cluster/direct_insert.py``, ``checkpoint/actor_wals.py``).
Checked against the embedded engine over the same rows, with actors and the head killed at
the moments this path adds."""

from __future__ import annotations

import os
import signal

import pytest

from tests._services.procs import process_alive, wait_until
from tests.delta.workload import DDL, STREAMS, assert_exactly_once, batch

pytestmark = pytest.mark.integration

BATCHES = 16


def _wal_kinds(directory: str) -> list[str]:
    from laminardb.checkpoint.wal import Wal

    return [r.kind for r in Wal(os.path.join(directory, "wal")).replay(0)]


def _actor_wal_bytes(directory: str) -> int:
    root = os.path.join(directory, "actor-wal")
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def _pids(db) -> list[int]:
    return [m["pid"] for m in db.metrics()["cluster"]["members"]]


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)


def _run(db, *, hook=None, batches: int = BATCHES, before_finish=None) -> dict:
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for i in range(batches):
        db.insert("t", batch(i))
        for sub in subs.values():  # read as we go: rows queued in a killed head are lost
            while sub.try_next() is not None:
                pass
        if hook is not None:
            hook(i, db)
    if before_finish is not None:
        before_finish(db)
    db.finish()
    return {s: sub.to_arrow() for s, sub in subs.items()}


def test_rows_go_through_the_actors_and_the_head_logs_references(database):
    """Every insert takes the actors' path; the head's WAL holds references only, each
    actor's WAL the rows; the results equal the embedded engine's."""
    db = database(checkpoint_interval="off")
    seen: dict = {}

    def look(d) -> None:  # before finish(), whose checkpoint frees the WALs
        directory = d.metrics()["database"]["directory"]
        seen["kinds"] = _wal_kinds(directory)
        seen["members"] = os.listdir(os.path.join(directory, "actor-wal"))

    got = _run(db, before_finish=look)
    assert db._direct.staged == BATCHES
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    assert seen["kinds"].count("insert_ref") == BATCHES and "insert" not in seen["kinds"], seen
    assert len(seen["members"]) == 2, seen  # round robin: both actors took rows


def test_small_inserts_go_through_the_head(database):
    """A one-row insert costs the head less than one more call would: it keeps that path."""
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    for i in range(5):
        db.insert("t", {"k": 0, "seq": i, "v": 1, "ts": i})
    assert db._direct.staged == 0
    db.insert("t", batch(1))
    assert db._direct.staged == 1


def test_turned_off_every_insert_goes_through_the_head(database):
    db = database(checkpoint_interval="off", direct_inserts=False)
    seen: dict = {}
    got = _run(db, batches=4,
               before_finish=lambda d: seen.update(kinds=_wal_kinds(d.metrics()["database"]["directory"])))
    assert db._direct.staged == 0
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), 4)
    assert seen["kinds"].count("insert") == 4 and "insert_ref" not in seen["kinds"], seen


def test_an_actor_killed_between_logging_the_rows_and_the_head(database):
    """The actor took the rows, logged them and answered; it dies before the head hears of
    them. The head then references rows that only the dead actor's WAL file holds: the
    recovery reads them from there. Every row is applied once."""
    db = database(checkpoint_interval="off")
    call = db._call
    killed: list[int] = []

    def hooked(method, *args, **kwargs):
        if method == "insert_staged" and not killed and db._insert_seq == 9:
            desc = args[2]
            killed.append(_pids(db)[desc["actor"]])
            _kill(killed[0])
        return call(method, *args, **kwargs)

    db._call = hooked
    got = _run(db, hook=lambda i, d: d.checkpoint() if i == 4 else None)
    assert killed, "no actor was killed"
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    assert db.metrics()["database"]["recoveries"], "the head recovered nothing"


def test_head_and_every_actor_killed_the_rows_come_back_from_the_actor_wals(database):
    """No process that held the rows in memory is left: the restarted head restores the
    checkpoint and replays its references from the actors' WAL files."""
    db = database(checkpoint_interval="off")
    killed: list[int] = []

    def kill_all(i: int, d) -> None:
        if i == 4:
            d.checkpoint()
        if i == 10:
            pids = [d.metrics()["database"]["head_pid"], *_pids(d)]
            for pid in pids[1:] + pids[:1]:
                _kill(pid)
            killed.extend(pids)

    got = _run(db, hook=kill_all)
    assert killed
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    restarts = [r for r in db.metrics()["database"]["recoveries"] if r["cause"] == "head restarted"]
    assert len(restarts) == 1 and restarts[0]["wal_records_replayed"] >= 5, restarts
    assert not set(_pids(db)) & set(killed)


def test_checkpoints_free_what_the_actor_wals_hold(database):
    """A checkpoint frees the actors' WAL segments its retained checkpoints cover, and the
    WALs of actors that were replaced; a recovery after that still has every row."""
    db = database(checkpoint_interval="off", checkpoint_retain=1)
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    directory = db.metrics()["database"]["directory"]
    big = 200_000  # rows per batch: ~6 MB of IPC, so the actors' 16 MB segments roll
    for i in range(10):
        db.insert("t", batch(i, rows=big))
    held = _actor_wal_bytes(directory)
    assert held > 40 << 20, held
    db.checkpoint()
    db.insert("t", batch(10, rows=big))
    db.checkpoint()  # the first checkpoint's WAL is no longer retained: each actor's full segment goes
    freed = _actor_wal_bytes(directory)
    assert freed < held - (24 << 20), (held, freed)
    old = set(os.listdir(os.path.join(directory, "actor-wal")))
    _kill(_pids(db)[0])  # replaced: its WAL goes with the next checkpoint
    for i in range(11, 13):
        db.insert("t", batch(i, rows=big))
    db.checkpoint()
    db.insert("t", batch(13, rows=big))
    db.checkpoint()
    now = set(os.listdir(os.path.join(directory, "actor-wal")))
    assert len(now) == 2 and len(now & old) == 1, (old, now)
    db.finish()
    per_key = {r["k"]: r["c"] for r in db.query("SELECT k, c FROM per_key_total").to_pylist()}
    assert sum(per_key.values()) == 14 * big
    assert all(sub.rows_lost == 0 for sub in subs.values())


def test_json_and_csv_are_parsed_on_the_actors_bad_text_goes_through_the_head(database):
    """Text inserts take the actors' path too; a batch with a line that does not parse goes
    through the head, which reports and dead-letters it exactly as embedded."""
    import json

    import laminardb

    ddl = ("CREATE SOURCE s (k BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL, "
           "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND); "
           "CREATE MATERIALIZED VIEW totals AS SELECT k, count(*) AS c, sum(v) AS s FROM s GROUP BY k")
    lines = [json.dumps({"k": i % 7, "v": i, "ts": i}) for i in range(300)]
    csv_text = "k,v,ts\n" + "\n".join(f"{i % 7},{i},{300 + i}" for i in range(300))
    bad = lines[:5] + ['{"k": 1, "v": "not a number", "ts": 9}'] + lines[5:10]

    def run(db) -> tuple[list, list]:
        db.execute(ddl)
        db.insert_json("s", lines[:150])
        db.insert_json("s", "\n".join(lines[150:]))
        db.insert_csv("s", csv_text)
        refused = db.insert_json("s", bad, on_error="skip")
        return (db.query("SELECT * FROM totals ORDER BY k").to_pylist(),
                refused.rejected_rows.to_pylist() if refused.rejected_rows is not None else [])

    db = database(checkpoint_interval="off", direct_insert_min_bytes=0)  # these few rows too
    got, got_refused = run(db)
    assert db._direct.staged == 3  # the bad batch went through the head
    with laminardb.open() as embedded:
        want, want_refused = run(embedded)
    assert got == want
    assert got_refused == want_refused and len(got_refused) == 1


def test_a_checkpoint_after_an_actor_died_recovers_first(database):
    """An actor killed after the last insert, then ``checkpoint()`` with no call in between
    that touches it (no batch since): the head recovers and checkpoints, rather than failing
    the epoch in the coordinator's prepare; every row is still there once."""
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for i in range(3):
        db.insert("t", batch(i))
    first = db.checkpoint()
    _kill(_pids(db)[0])
    assert db.checkpoint() > first
    assert db.metrics()["database"]["recoveries"], "the dead actor was recovered from"
    for i in range(3, 5):
        db.insert("t", batch(i))
    db.finish()
    assert_exactly_once({s: sub.to_arrow() for s, sub in subs.items()},
                        db.query("SELECT * FROM per_key_total").to_arrow(), 5)
