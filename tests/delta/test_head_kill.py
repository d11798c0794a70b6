"""The database head SIGKILLed, against real processes: during inserts, during a checkpoint
(after the head prepared it, while the coordinator writes the sinks' epoch), and under a
Kafka → Kafka exactly-once pipeline. Ray restarts the head; it recovers from its directory
and the coordinator's epoch log; the client waits for it and repeats its calls (inserts
numbered, so each is applied once). Each run is compared with an unbroken one (the
embedded engine over the same rows, and DuckDB over the committed FILE sink output):
per-key sequence numbers gap-free and duplicate-free, aggregates exact, no error raised."""

from __future__ import annotations

import os
import signal
import threading
import time

import duckdb
import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401
from tests._services.procs import descendants, pids_with_arg, process_alive, wait_until
from tests.delta.workload import (
    DDL,
    KAFKA_DDL,
    KAFKA_ROWS,
    KEYS,
    ROWS,
    SENTINEL_TS,
    STREAMS,
    assert_exactly_once,
    batch,
    expected_windows,
    kafka_rows,
    produce,
    reference,
    rows,
    settled_windows,
)

pytestmark = pytest.mark.integration

BATCHES = 24


def _head_pid(db) -> int:
    return db.metrics()["database"]["head_pid"]


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)


#: per_key again, read by its FILE sink alone: the key owners merge its windows and stage them
#: for the sink themselves (checkpoint/actor_stages.py), with no subscriber to send them to the head
_STAGED_ON_ACTORS = DDL.split("CREATE STREAM per_key AS")[1].split(";")[0]


def _with_file_sinks(out: str) -> str:
    return DDL + (f"; CREATE SINK seqs FROM passthru INTO FILE (path = '{out}/seqs', format = 'parquet')"
                  f"; CREATE SINK windows FROM per_window INTO FILE (path = '{out}/windows', format = 'parquet')"
                  f"; CREATE STREAM per_key_sunk AS {_STAGED_ON_ACTORS}"
                  f"; CREATE SINK keys FROM per_key_sunk INTO FILE (path = '{out}/keys', format = 'parquet')")


def _drain(subs: dict) -> dict:
    """Read what the head queued for each subscription (so the client holds every row)."""
    for sub in subs.values():
        while sub.try_next() is not None:
            pass
    return subs


def _check_file_sinks(out: str) -> None:
    """The committed FILE output, read by DuckDB: every (key, seq) once, every window exact."""
    seqs = duckdb.sql(f"SELECT k, count(*) AS n, count(DISTINCT seq) AS d, min(seq) AS lo, max(seq) AS hi "
                      f"FROM '{out}/seqs/*.parquet' GROUP BY k ORDER BY k").fetchall()
    per_key = BATCHES * ROWS // KEYS
    assert seqs == [(k, per_key, per_key, 0, per_key - 1) for k in range(KEYS)]
    expected, _ = reference(BATCHES)
    got = duckdb.sql(f"SELECT window_start, c, s FROM '{out}/windows/*.parquet'").to_arrow_table()
    assert rows(got) == rows(expected["per_window"])
    got = duckdb.sql(f"SELECT k, window_start, c, s, top FROM '{out}/keys/*.parquet'").to_arrow_table()
    assert rows(got) == rows(expected["per_key"])


def _recovered_by_restart(db, old_pid: int) -> dict:
    recoveries = db.metrics()["database"]["recoveries"]
    restarts = [r for r in recoveries if r["cause"] == "head restarted"]
    assert len(restarts) == 1, recoveries
    assert _head_pid(db) != old_pid
    return restarts[0]


def _insert_batches(db, subs: dict, lo: int, hi: int) -> None:
    for i in range(lo, hi):
        db.insert("t", batch(i))
        _drain(subs)


def _insert_rest_and_check(db, subs: dict, out: str, start: int, killed_pid: int) -> None:
    """Insert batches ``start``… to the end, finish, and check every row once: in the
    subscriptions, the view and the FILE sinks; the head recovered by a restart."""
    _insert_batches(db, subs, start, BATCHES)
    db.finish()
    got = {s: sub.to_arrow() for s, sub in subs.items()}
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    _recovered_by_restart(db, killed_pid)
    _check_file_sinks(out)


def _actor_pids(db) -> list[int]:
    return [m["pid"] for m in db.metrics()["cluster"]["members"]]


def _named_actors(database: str) -> list[str]:
    from ray.util import list_named_actors

    from laminardb.cluster.head import reactor_prefix

    return [a["name"] for a in list_named_actors(all_namespaces=True)
            if a["name"].startswith(reactor_prefix(database))]


def test_head_sigkilled_during_inserts(database, tmp_path):
    """A checkpoint, then the head and one actor killed together while inserts run: the
    insert it cut off is repeated by the client and applied once; everything after goes on;
    subscriptions, the FILE sinks and the view hold every row once. The restarted head takes
    over the actor still alive (same process: no new one to wait for) and replaces the dead
    one. Dropping the database stops the actors too — they are detached from the head."""
    from laminardb.cluster.head import drop_database

    out = str(tmp_path / "out")
    db = database(checkpoint_interval="off")
    db.execute(_with_file_sinks(out))
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    killed: dict[str, int] = {}

    def kill_head() -> None:
        killed["pid"] = pid
        _kill(actors[0])
        _kill(pid)

    timer = None
    for i in range(BATCHES):
        db.insert("t", batch(i))
        _drain(subs)
        if i == 7:
            db.checkpoint()
        if i == 11:
            pid, actors = _head_pid(db), _actor_pids(db)
            timer = threading.Timer(0.2, kill_head)  # lands in one of the next inserts
            timer.start()
    timer.join(30)
    assert killed, "the head was not killed"
    db.finish()
    got = {s: sub.to_arrow() for s, sub in subs.items()}
    assert all(sub.rows_lost == 0 for sub in subs.values())
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    report = _recovered_by_restart(db, killed["pid"])
    assert report["epoch"] == 1 and report["wal_records_replayed"] >= 1, report
    _check_file_sinks(out)
    after = _actor_pids(db)
    assert after[1] == actors[1] and after[0] != actors[0], (actors, after)
    assert len(_named_actors(db.database)) == 2
    assert drop_database(db.database)
    assert _named_actors(db.database) == []
    wait_until(lambda: not any(process_alive(p) for p in after), timeout=30, interval=0.1)


def test_head_sigkilled_during_a_checkpoint(database, tmp_path):
    """The head killed after it prepared a checkpoint (its pending manifest is on disk)
    while the coordinator writes the sinks' epoch: whether the coordinator records that
    epoch before the restarted head fences it or not, the FILE sinks end with every row once;
    the client's checkpoint() is repeated and returns a later epoch."""
    from laminardb.checkpoint.store import CheckpointStore

    out = str(tmp_path / "out")
    db = database(checkpoint_interval="off")
    store = CheckpointStore(os.path.join(str(tmp_path / "ckpt"), db.database))
    db.execute(_with_file_sinks(out))
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    _insert_batches(db, subs, 0, 12)
    pid, actors = _head_pid(db), _actor_pids(db)
    killed: list[int] = []
    stop = threading.Event()

    def kill_when_prepared() -> None:
        while not stop.is_set():
            if store.pending():
                _kill(pid)
                killed.append(pid)
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=kill_when_prepared, daemon=True)
    watcher.start()
    try:
        epoch = db.checkpoint()
    finally:
        stop.set()
        watcher.join(30)
    assert killed, "the checkpoint finished before its prepare could be seen"
    assert epoch >= 1
    _insert_rest_and_check(db, subs, out, 12, pid)
    assert db.metrics()["database"]["coordinator"]["manifest_epoch"] >= epoch
    assert _actor_pids(db) == actors  # the restarted head went on with the live actors


def test_kafka_pipeline_resumes_after_a_head_kill(database, kafka_broker):  # noqa: F811
    """A running Kafka → Kafka (exactly-once) pipeline: the head killed mid-stream comes back
    with its source running from the checkpointed offsets (no start() by hand), and the sink
    topic, read committed, holds every window once."""
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = kafka_broker.bootstrap
    src, dst = f"hk-in-{os.getpid()}-{time.monotonic_ns()}", f"hk-out-{os.getpid()}-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 1, 1)])
    admin.close()
    db = database(checkpoint_interval="1s")
    db.execute(KAFKA_DDL.format(brokers=bootstrap, src=src, dst=dst))
    db.start()
    produce(bootstrap, src, kafka_rows(0, KAFKA_ROWS // 2))
    wait_until(lambda: db.metrics()["events_ingested"] >= KAFKA_ROWS // 2, timeout=60)
    time.sleep(1.5)  # a checkpoint covers part of the input
    pid = _head_pid(db)
    _kill(pid)
    produce(bootstrap, src, kafka_rows(KAFKA_ROWS // 2, KAFKA_ROWS))
    produce(bootstrap, src, [{"k": p, "seq": -1, "v": 0, "ts": SENTINEL_TS} for p in range(2)])
    expected = expected_windows()

    assert settled_windows(bootstrap, dst, expected, timeout=120) == expected
    _recovered_by_restart(db, pid)
    assert db.metrics()["sources"]["trades"]["status"] != "stopped"


def _kill_heads_until(stop: threading.Event) -> None:
    """SIGKILL every database head process of this test's Ray (a descendant of this process)
    as soon as it appears, until ``stop``."""
    while not stop.is_set():
        mine = set(descendants(os.getpid()))
        for pid in pids_with_arg("ray::DatabaseHead"):
            if pid in mine:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.01)


def test_reconnect_timeout_gives_a_typed_error_and_connect_waits(database):
    """A client whose reconnect_timeout is shorter than the restart gets HeadUnavailableError
    (LDB-8005), not a Ray exception; a connect() to the restarting head waits for it (no
    LDB-8003) and sees every acknowledged row."""
    from laminardb.cluster.exceptions import HeadUnavailableError

    db = database(checkpoint_interval="off", reconnect_timeout="500ms")
    db.execute(DDL)
    for i in range(4):
        db.insert("t", batch(i))
    pid = _head_pid(db)
    stop = threading.Event()
    # a head that restarts in about a second, faster than Ray tells the client it died: keep
    # killing every restart (a crash loop) until the client has given up
    looping = threading.Thread(target=_kill_heads_until, args=(stop,), daemon=True)
    looping.start()
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.01)
    t0 = time.monotonic()
    try:
        with pytest.raises(HeadUnavailableError) as raised:
            db.offset("t")
    finally:
        stop.set()
        looping.join(10)
    assert raised.value.code == "LDB-8005" and "reconnect_timeout" in str(raised.value)
    assert time.monotonic() - t0 < 15
    again = database(db.database)  # connect() to a restarting head waits for it
    assert again.offset("t") == 4 * ROWS
    assert db.offset("t") == 4 * ROWS  # the first connection works again too
    restarts = [r for r in again.metrics()["database"]["recoveries"] if r["cause"] == "head restarted"]
    assert restarts and _head_pid(again) != pid  # one or more: the loop may kill a recovered head


def test_head_sigkilled_during_a_rescale(database, tmp_path):
    """The head killed while it rescales 2 → 1 actors (a checkpoint, new ownership in the
    pool, restore): the restarted head recovers from its directory with whatever pool it
    comes back with, the client's scale() is repeated, and every row is in the subscriptions
    and the FILE sinks once."""
    out = str(tmp_path / "out")
    db = database(checkpoint_interval="off")
    db.execute(_with_file_sinks(out))
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    _insert_batches(db, subs, 0, 10)
    pid = _head_pid(db)
    killed_at: list[float] = []

    def kill_head() -> None:
        killed_at.append(time.monotonic())
        _kill(pid)

    timer = threading.Timer(0.3, kill_head)  # lands inside the rescale (its checkpoint, its new pool)
    timer.start()
    try:
        db.scale(1)
        returned_at = time.monotonic()
    finally:
        timer.join(30)
    assert killed_at and killed_at[0] < returned_at, "the kill did not land inside scale()"
    _insert_rest_and_check(db, subs, out, 10, pid)

