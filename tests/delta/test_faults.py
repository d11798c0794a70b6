"""The fault matrix against real processes: actors SIGKILLed or paused (zombies), the broker
paused, the client gone while a Kafka pipeline runs. Each run is compared with an unbroken
one (the embedded engine over the same rows): per-key sequence numbers gap-free and
duplicate-free, aggregates exact, and no error reaches the caller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests._services.fixtures import kafka_broker, raft_cluster  # noqa: F401
from tests._services.procs import process_alive, repo_env, wait_until
from tests.delta.workload import (
    DDL,
    KAFKA_DDL,
    KAFKA_ROWS,
    SENTINEL_TS,
    STREAMS,
    assert_exactly_once,
    batch,
    expected_windows,
    kafka_rows,
    produce,
    produce_through_an_actor_kill,
    settled_windows,
)

pytestmark = pytest.mark.integration

BATCHES = 40


def _pids(db) -> list[int]:
    return [m["pid"] for m in db.metrics()["cluster"]["members"]]


def _run(db, kill_at: dict[int, object]) -> dict:
    """Insert BATCHES batches, calling ``kill_at[i](db)`` after batch i; collect outputs."""
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for i in range(BATCHES):
        db.insert("t", batch(i))
        if i in kill_at:
            kill_at[i](db)
    db.finish()
    return {s: subs[s].to_arrow() for s in STREAMS}


def _sigkill(index: int):
    def kill(db) -> None:
        os.kill(_pids(db)[index], signal.SIGKILL)
    return kill


def _checkpoint_now(db) -> None:
    db.checkpoint()


def test_actors_sigkilled_during_inserts_two_in_a_row(database):
    """One actor killed after a checkpoint, then the other while the first recovery's
    replayed rows are still fresh: both recovered, output exactly once, no error raised."""
    db = database(checkpoint_interval="off")
    got = _run(db, {8: _checkpoint_now, 15: _sigkill(1), 22: _sigkill(0), 30: _checkpoint_now})
    view = db.query("SELECT * FROM per_key_total").to_arrow()
    assert_exactly_once(got, view, BATCHES)
    recoveries = db.metrics()["database"]["recoveries"]
    assert len(recoveries) == 2, recoveries
    assert all(r["epoch"] >= 1 for r in recoveries)  # restored from a checkpoint, not from scratch


def test_killed_before_any_checkpoint_replays_the_whole_log(database):
    db = database(checkpoint_interval="off")
    got = _run(db, {5: _sigkill(0)})
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    assert db.metrics()["database"]["recoveries"][0]["epoch"] == 0


# raft_cluster before database: the database is dropped at teardown while its voters still
# run, not after they were killed (which made the drop wait on Raft for ~11 s)
def test_a_paused_actor_is_replaced_and_its_tokens_fenced(raft_cluster, database):  # noqa: F811
    """SIGSTOP: the actor stops answering; the head gives up on it and recovers on new actors,
    which Raft gives the vnodes with raised epochs. The old actor's tokens are refused, and
    after SIGCONT it is gone (Ray killed it): it can write nothing."""
    from laminardb.cluster.ownership import RaftConfig
    from laminardb.raft.exceptions import StaleEpochError

    voters = raft_cluster(3)
    db = database(raft=RaftConfig(tuple(voters.rpc_addresses), voters.secret), checkpoint_interval="off",
                  actor_call_timeout=2, actor_lost_after=2)
    paused: dict[str, object] = {}

    def pause(db) -> None:
        member = db.metrics()["cluster"]["members"][1]
        paused["tokens"] = voters.client().tokens(f"db/{db.database}", member["member"])
        paused["pid"] = member["pid"]
        os.kill(member["pid"], signal.SIGSTOP)

    try:
        got = _run(db, {10: _checkpoint_now, 14: pause})
    finally:
        if "pid" in paused:
            try:
                os.kill(paused["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    # the call timed out first (ActorTimeoutError), or the silent heartbeat got the actor
    # killed first: the waiting call then failed (ActorLostError) or the watchdog recovered
    cause = db.metrics()["database"]["recoveries"][0]["cause"]
    assert cause in ("ActorTimeoutError", "ActorLostError") or cause.startswith("unresponsive"), cause
    assert paused["tokens"], "the paused actor owned vnodes"
    with pytest.raises(StaleEpochError):
        voters.client().check_fence(paused["tokens"][0])
    wait_until(lambda: not process_alive(paused["pid"]), timeout=20)


# -- Kafka → Kafka: the pipeline lives in the cluster ---------------------------------------


def test_kafka_pipeline_outlives_its_killed_client_and_an_actor_kill(database, ray_cluster, kafka_broker,  # noqa: F811
                                                              tmp_path):
    """The README promise: a script starts a Kafka→Kafka pipeline and is SIGKILLed; an actor
    is SIGKILLed mid-stream; the sink topic, read committed, holds every result exactly once."""
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = kafka_broker.bootstrap
    src, dst = f"in-{os.getpid()}-{time.monotonic_ns()}", f"out-{os.getpid()}-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 1, 1)])
    admin.close()
    script = tmp_path / "pipeline.py"
    script.write_text(f"""
import laminardb, ray
ray.init(address={ray_cluster!r}, log_to_driver=False)
db = laminardb.connect("ray://auto", database="kafka-pipe", actors=2,
                       config={{"checkpoint_dir": {str(tmp_path / 'ckpt')!r}, "checkpoint_interval": "1s"}})
db.execute({KAFKA_DDL.format(brokers=bootstrap, src=src, dst=dst)!r})
db.start()
print("started", flush=True)
import time
time.sleep(600)  # the test SIGKILLs this client while its pipeline runs
""")
    proc = subprocess.Popen([sys.executable, str(script)], env=repo_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # bounded: the script prints once its pipeline runs
        assert line.strip() == "started", proc.stderr.read()[-3000:] if proc.poll() is not None else line
    finally:
        proc.kill()  # SIGKILL: no close(), no finalizer — the pipeline must not notice
        proc.wait(timeout=30)
    watcher = database("kafka-pipe")  # attaches to the running pipeline
    produce_through_an_actor_kill(bootstrap, src, watcher)
    expected = expected_windows()

    assert settled_windows(bootstrap, dst, expected, timeout=300) == expected
    assert len(watcher.metrics()["database"]["recoveries"]) >= 1


def test_broker_paused_for_five_seconds(database, kafka_broker):  # noqa: F811
    """SIGSTOP the broker for 5 s while a Kafka source runs: polls fail and retry, nothing is
    lost or doubled once it resumes."""
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = kafka_broker.bootstrap
    src = f"pause-{os.getpid()}-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(src, 2, 1)])
    admin.close()
    db = database(checkpoint_interval="1s")
    db.execute(KAFKA_DDL.split("CREATE SINK")[0].format(brokers=bootstrap, src=src))
    sub = db.subscribe_stream("per_key")
    db.start()
    produce(bootstrap, src, kafka_rows(0, KAFKA_ROWS // 2))
    os.kill(kafka_broker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(5)
    finally:
        os.kill(kafka_broker.proc.pid, signal.SIGCONT)
    produce(bootstrap, src, kafka_rows(KAFKA_ROWS // 2, KAFKA_ROWS))
    produce(bootstrap, src, [{"k": p, "seq": -1, "v": 0, "ts": SENTINEL_TS} for p in range(2)])
    expected = expected_windows()

    def got() -> list[tuple]:
        return sorted((r["k"], r["window_start"], r["c"], r["s"]) for r in sub.to_arrow().to_pylist())

    wait_until(lambda: len(got()) >= len(expected), timeout=300, interval=0.5)
    assert got() == expected


def test_checkpoint_store_full_for_a_while(database, tmp_path):
    """The checkpoint store is full (a real ENOSPC from a tiny tmpfs mounted on it):
    checkpoints fail with a typed error and the pipeline goes on; once space is back a
    checkpoint succeeds, and a later actor kill still recovers every result exactly once."""
    from laminardb.errors import LaminarError

    name = "full-store"
    store = tmp_path / "ckpt" / name / "checkpoints"
    store.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(store)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        db = database(name, checkpoint_interval="off")
        db.execute(DDL)
        subs = {s: db.subscribe_stream(s) for s in STREAMS}
        for i in range(10):
            db.insert("t", batch(i))
        db.checkpoint()
        ballast = store / "ballast"
        # fill the store to the last byte; unbuffered, so closing has nothing left to write
        # (a buffered file raised ENOSPC again on close when the last write was partial)
        with open(ballast, "wb", buffering=0) as f:
            try:
                while f.write(b"\0" * 65536):
                    pass
            except OSError:
                pass
        for i in range(10, 20):
            db.insert("t", batch(i))
        with pytest.raises(LaminarError):
            db.checkpoint()
        assert db.metrics()["checkpoints"]["failures"] >= 1
        ballast.unlink()
        for i in range(20, 25):
            db.insert("t", batch(i))
        db.checkpoint()
        for i in range(25, 30):
            db.insert("t", batch(i))
        os.kill(_pids(db)[0], signal.SIGKILL)
        for i in range(30, BATCHES):
            db.insert("t", batch(i))
        db.finish()
        got = {s: subs[s].to_arrow() for s in STREAMS}
        assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
        assert len(db.metrics()["database"]["recoveries"]) == 1
        db.drop_database()
    finally:
        subprocess.run(["umount", "-l", str(store)], capture_output=True, timeout=30)


def test_a_subscription_read_that_meets_a_killed_actor_recovers(database):
    """An actor killed while a batch is still on the actors (inserts are pipelined): the next
    call is a subscription read, which delivers that batch and meets the dead actor. The
    head recovers as for a data call; the client sees no error and every row once."""
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for i in range(BATCHES):
        if i == 12:
            victim = _pids(db)[0]
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda v=victim: not process_alive(v), timeout=10, interval=0.02)
        db.insert("t", batch(i))
        for sub in subs.values():  # a read first, after the kill
            while sub.try_next() is not None:
                pass
    db.finish()
    got = {s: subs[s].to_arrow() for s in STREAMS}
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    assert len(db.metrics()["database"]["recoveries"]) == 1
