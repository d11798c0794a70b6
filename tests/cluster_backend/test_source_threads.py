"""A reactor actor polls its sources on threads of their own (concurrency group ``sources``).

Why it matters: a poll waits up to its timeout for records. When polls shared the actor's
one thread with everything else, a source with nothing to read held up the actor's batches,
tree steps and the other sources' polls for that wait, every round: Kafka → Nexmark q20 ran
at a third of the speed it runs at now (bench/README.md, "Issue 20 … polls on their own
threads"). The checks here are about order, not time: the empty source's poll is still
waiting when the other calls have finished.
"""

from __future__ import annotations

import json

import pytest

from laminardb.cluster.backend import connect_in_process
from tests._services.fixtures import kafka_broker  # noqa: F401

ray = pytest.importorskip("ray")

RAY_CPUS = 1  # read by the ray_local fixture (tests/cluster_backend/conftest.py)
_WAIT_MS = 60_000  # the empty source's poll: far longer than anything else here takes


def _produce(bootstrap: str, topic: str, rows: list[dict]) -> None:
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for r in rows:
            prod.send(topic, json.dumps(r).encode(), partition=0)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)


@pytest.mark.integration
def test_an_empty_sources_poll_holds_up_neither_the_actor_nor_another_source(ray_local, kafka_broker):  # noqa: F811
    bootstrap = kafka_broker.bootstrap
    opts = f"brokers = '{bootstrap}', format = 'json', offset_reset = 'earliest', partitions = '1'"
    db = connect_in_process("ray://auto", actors=1, vnodes=16)
    try:
        db.execute(f"""
            CREATE SOURCE quiet (ts BIGINT NOT NULL, v BIGINT) FROM KAFKA ({opts}, topic = 'threads-quiet');
            CREATE SOURCE busy (ts BIGINT NOT NULL, v BIGINT) FROM KAFKA ({opts}, topic = 'threads-busy');
        """)
        _produce(bootstrap, "threads-busy", [{"ts": i, "v": i} for i in range(500)])
        actor = db.engine.backend.cluster.actors[0]
        waiting = actor.poll_kafka.remote("quiet", _WAIT_MS, [])
        read = []
        while sum(read) < 500:  # the busy source's polls return its records meanwhile
            ref = actor.poll_kafka.remote("busy", 5_000, [])
            done, _ = ray.wait([ref], timeout=60)
            assert done, "a poll of a source with records did not return"
            read.append(ray.get(ref)[0]["rows"])
        other = actor.ready.remote()  # a call of the actor's main thread
        assert ray.wait([other], timeout=60)[0], "the actor's main thread was held up by a poll"
        assert not ray.wait([waiting], timeout=0)[0], "the empty source's poll should still be waiting"
        assert sum(read) == 500

        _produce(bootstrap, "threads-quiet", [{"ts": 1, "v": 1}])  # its poll returns with this row
        done, _ = ray.wait([waiting], timeout=60)
        assert done and ray.get(waiting)[0]["rows"] == 1
    finally:
        db.close()
