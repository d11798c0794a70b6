"""Each reading actor polls a Kafka source on its own (``ClusterKafkaSource.poll``).

Why it matters: one poll round used to go to every reading actor and wait for all of them, so
an actor with records waited for the ones without, and an idle source cost the head ten Ray
calls a second per actor. Now an actor's records wait for another actor's poll one poll
interval at most. The checks are about order, not time: the empty actor's poll waits 20 s
here, and the rows of the other come in meanwhile. Two rules keep it exactly-once
and keep event time right: a partition whose actor has not answered yet holds the source's
watermark back, and a checkpoint keeps such a partition where the reading resumed.
"""

from __future__ import annotations

import json

import pytest

from laminardb.cluster import kafka_ingest
from laminardb.cluster.backend import connect_in_process
from laminardb.cluster.kafka_ingest import ClusterKafkaSource, _merged_position, partition_owners
from tests._services.fixtures import kafka_broker  # noqa: F401

ray = pytest.importorskip("ray")

RAY_CPUS = 2  # read by the ray_local fixture (tests/cluster_backend/conftest.py)
TOPIC = "polls-on-their-own"
ROWS = 300


def _produce(bootstrap: str, partition: int, rows: list[dict]) -> None:
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for r in rows:
            prod.send(TOPIC, json.dumps(r).encode(), partition=partition)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)


@pytest.mark.integration
def test_an_actors_records_do_not_wait_for_an_actor_without(ray_local, kafka_broker, monkeypatch):  # noqa: F811
    monkeypatch.setattr(kafka_ingest, "ACTOR_POLL_WAIT_MS", 20_000)  # the empty actor's poll: 20 s
    bootstrap = kafka_broker.bootstrap
    options = {"brokers": bootstrap, "topic": TOPIC, "format": "json", "offset_reset": "earliest",
               "partitions": "2"}
    db = connect_in_process("ray://auto", actors=2, vnodes=16)
    try:
        for name in ("s", "s2"):  # s2: the restored reading (its own source lock on the actors)
            db.execute(f"""CREATE SOURCE {name} (ts BIGINT NOT NULL, v BIGINT,
                               WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)
                           FROM KAFKA (brokers = '{bootstrap}', topic = '{TOPIC}', format = 'json',
                                       offset_reset = 'earliest', partitions = '2')""")
        cluster, node = db.engine.backend.cluster, db.engine.reactor.nodes["s"]
        src = ClusterKafkaSource(cluster, node, options)
        busy = partition_owners(2, 2).index(0)  # the actor reading partition 0
        quiet = 1 - busy
        _produce(bootstrap, 0, [{"ts": 1_000 + i, "v": i} for i in range(ROWS)])
        read, marks = 0, []
        for _ in range(150):  # ≤ 15 s: the rows come long before the quiet actor answers
            rows, wm = src.poll(100)
            read += rows.num_rows if rows is not None else 0
            marks.append(wm)
            if read >= ROWS:
                break
        assert read == ROWS
        assert quiet in src._inflight, "the quiet actor answered: this test proves nothing"
        assert set(marks) == {None}, "partition 1 has not been heard of: it must hold the watermark"
        state = src.checkpoint_state()
        assert set(state["actors"]) == {str(busy)}  # only what was ingested

        resume = {"v": 1, "kind": "cluster-kafka", "emitted": None, "actors": {
            str(busy): {"v": 1, "topic": TOPIC, "offsets": {"0": ROWS}, "watermarks": {"max": {"0": 1_299}}},
            str(quiet): {"v": 1, "topic": TOPIC, "offsets": {"1": 7}, "watermarks": {"max": {"1": 5}}}}}
        restored = ClusterKafkaSource(cluster, db.engine.reactor.nodes["s2"], options, restore_state=resume)
        kept = _merged_position(restored.checkpoint_state())  # no actor has answered it yet
        assert kept["offsets"] == {"0": ROWS, "1": 7}
        assert kept["watermarks"]["max"] == {"0": 1_299, "1": 5}
    finally:
        db.close()  # stops the actors, and with them the quiet actor's poll
