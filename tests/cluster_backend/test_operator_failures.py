"""Failures as an operator meets them, against real Ray actors (and the real Tansu broker):
a slow actor is waited for and never declared dead; a paused actor does not hang metrics();
a dead actor on the Kafka path is an ActorLostError on the next call, not a log line forever;
a Kafka source without offset_reset reads the topic from its start.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401

ray = pytest.importorskip("ray")

RAY_CPUS = 2  # read by the ray_local fixture (tests/cluster_backend/conftest.py)

COUNTS = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts);"
          "CREATE STREAM c AS SELECT k, count(*) AS n FROM t GROUP BY k")


def _pids(db) -> list[int]:
    return [m["pid"] for m in db.metrics()["cluster"]["members"]]


def _counts(sub) -> dict[str, int]:
    latest: dict[str, int] = {}
    for r in sub.to_arrow().to_pylist():
        if r["__weight"] == 1:
            latest[r["k"]] = r["n"]
    return latest


@pytest.mark.integration
def test_a_slow_actor_is_waited_for_and_a_paused_one_times_out_alive(ray_local):
    """Item 1: a call slower than any probe is waited for; past ``actor_call_timeout`` it is
    an ActorTimeoutError — the actor is marked slow, never dead — and it works after."""
    from laminardb.cluster.backend import connect_in_process as connect
    from laminardb.cluster.exceptions import ActorTimeoutError

    db = connect("ray://auto", actors=2, vnodes=32, config={"actor_call_timeout": 1.5})
    try:
        db.execute(COUNTS)
        sub = db.subscribe_stream("c")
        # a first batch, so the calls timed below find both actors warm: a first call (its
        # kernels loaded) on a loaded machine may take longer than the 1.5 s on its own
        db.insert("t", [{"ts": 0, "k": k} for k in "abcdef"])
        assert _counts(sub) == dict.fromkeys("abcdef", 1)
        pid = _pids(db)[1]
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(0.4, os.kill, (pid, signal.SIGCONT)).start()  # a 400 ms stall
        db.insert("t", [{"ts": 1, "k": k} for k in "abcdef"])
        assert _counts(sub) == dict.fromkeys("abcdef", 2), "the read waited for the slow actor"
        assert db.metrics()["cluster"]["dead"] == {}, "a slow call never marks an actor dead"

        os.kill(pid, signal.SIGSTOP)
        try:
            db.insert("t", [{"ts": 2, "k": k} for k in "abcdef"])  # pipelined: on the actors
            t0 = time.monotonic()
            with pytest.raises(ActorTimeoutError) as err:
                sub.to_arrow()
            assert time.monotonic() - t0 < 10, "bounded by actor_call_timeout"
            assert err.value.code == "LDB-8004" and f"pid {pid}" in str(err.value)
            assert db.metrics()["cluster"]["members"][1]["state"] == "slow"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert _counts(sub) == dict.fromkeys("abcdef", 3), "the batch that timed out is delivered after"
        cluster = db.metrics()["cluster"]
        assert cluster["dead"] == {} and [m["state"] for m in cluster["members"]] == ["ok", "ok"]
        db.insert("t", [{"ts": 3, "k": k} for k in "abcdef"])
        assert _counts(sub) == dict.fromkeys("abcdef", 4)
    finally:
        db.close()


@pytest.mark.integration
def test_metrics_answers_while_an_actor_is_paused(ray_local):
    """Item 3: SIGSTOP an actor with batches in flight: metrics() returns within ~3 s and
    marks it slow; after SIGCONT every batch is delivered and the actor is ok again."""
    from laminardb.cluster.backend import connect_in_process as connect

    db = connect("ray://auto", actors=2, vnodes=32, max_in_flight=4)
    try:
        db.execute(COUNTS)
        sub = db.subscribe_stream("c")
        db.insert("t", [{"ts": 0, "k": k} for k in "abcdef"])
        db.flush()
        pid = _pids(db)[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            db.insert("t", [{"ts": 1, "k": k} for k in "abcdef"])  # pipelined: left on the actors
            t0 = time.monotonic()
            m = db.metrics()
            took = time.monotonic() - t0
            assert took < 3.0, f"metrics() took {took:.1f} s with a paused actor"
            members = m["cluster"]["members"]
            assert [x["state"] for x in members] == ["slow", "ok"]
            assert m["cluster"]["slow"] == [0] and m["cluster"]["dead"] == {}
            # the paused actor's last figures (it answered _pids' read), marked by their age
            assert m["cluster"]["rows_per_actor"][0] is not None and m["cluster"]["rows_per_actor"][1] is not None
            assert members[0]["stale_s"] is not None and members[1]["stale_s"] is None
        finally:
            os.kill(pid, signal.SIGCONT)
        db.flush()
        assert _counts(sub) == dict.fromkeys("abcdef", 2)
        assert [x["state"] for x in db.metrics()["cluster"]["members"]] == ["ok", "ok"]
    finally:
        db.close()


def _produce(bootstrap: str, topic: str, rows: list[dict], partitions: int = 2) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i, r in enumerate(rows):
            prod.send(topic, json.dumps(r).encode(), partition=i % partitions)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)


@pytest.mark.integration
def test_kafka_source_reads_from_the_start_and_a_dead_reader_is_an_error(ray_local, kafka_broker):  # noqa: F811
    """Items 5 and 2: with no offset_reset every row produced before the source opened is
    read; when a reading actor dies, the runner stops (counted, logged once) and the next
    flush/read raises ActorLostError while metrics() shows the dead actor."""
    from laminardb.cluster.backend import connect_in_process as connect
    from laminardb.cluster.exceptions import ActorLostError

    rows = [{"ts": i, "k": f"k{i % 5}"} for i in range(2000)]
    _produce(kafka_broker.bootstrap, "ops-default-start", rows)
    db = connect("ray://auto", actors=2, vnodes=32)
    try:
        db.execute(f"""
            CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts)
                FROM KAFKA (brokers = '{kafka_broker.bootstrap}', topic = 'ops-default-start',
                            format = 'json', idle_timeout_ms = '300');
            CREATE STREAM c AS SELECT k, count(*) AS n FROM t GROUP BY k""")
        sub = db.subscribe_stream("c")
        db.start()
        db.flush(timeout_s=60)
        assert _counts(sub) == {f"k{i}": 400 for i in range(5)}, "no offset_reset: the whole topic"

        ray.kill(db.engine.backend.cluster.actors[1])
        runner = db.engine.runners["t"]
        deadline = time.monotonic() + 20
        while runner.fatal is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(runner.fatal, ActorLostError), runner.last_error
        errors = runner.errors
        time.sleep(0.5)
        assert runner.errors == errors == 1 and not runner._thread.is_alive(), "stopped, not retrying"
        m = db.metrics()
        assert 1 in m["cluster"]["dead"] and m["cluster"]["members"][1]["state"] == "dead"
        assert m["sources"]["t"]["status"] == "error" and "ActorLostError" in m["sources"]["t"]["last_error"]
        with pytest.raises(ActorLostError) as err:
            db.flush(timeout_s=5)
        assert err.value.code == "LDB-8002" and "actor 1" in str(err.value)
        with pytest.raises(ActorLostError):
            sub.to_arrow()
        with pytest.raises(ActorLostError):
            db.query("SELECT * FROM c")
    finally:
        db.close()
