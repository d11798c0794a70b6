"""Kafka → windowed query → Kafka sink on a 2-actor cluster, against the real Tansu broker.

Each Kafka partition is consumed by the actor that owns it; malformed messages land in the
dead-letter topic; the windows equal DuckDB's batch answer over the valid messages.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from laminardb.cluster.backend import connect_in_process
from tests._services.fixtures import kafka_broker  # noqa: F401

ray = pytest.importorskip("ray")


RAY_CPUS = 2  # read by the ray_local fixture (tests/cluster_backend/conftest.py)


def _produce(bootstrap: str, topic: str, partitions: int, rows: list[dict], bad: list[bytes]) -> None:
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
            if i % 97 == 0 and bad:
                prod.send(topic, bad.pop(), partition=i % partitions)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)


def _read_all(bootstrap: str, topic: str, expect: int, timeout: float = 30.0) -> list:
    import time

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + timeout
        parts = set()
        while not parts and time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic) or set()
            time.sleep(0.05)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out = []
        while len(out) < expect and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(recs)
        return out
    finally:
        c.close()


@pytest.mark.integration
def test_kafka_to_kafka_on_two_actors(ray_local, kafka_broker):  # noqa: F811

    bootstrap = kafka_broker.bootstrap
    rng = np.random.default_rng(3)
    n = 3000
    ts = np.sort(rng.integers(0, 20_000, n))
    rows = [{"ts": int(t), "sym": str(s), "qty": int(q)}
            for t, s, q in zip(ts, rng.choice(["A", "B", "C", "D", "E"], n), rng.integers(1, 9, n), strict=True)]
    bad = [b"{not json", b'{"ts": "soon", "sym": "A", "qty": 1}', b'{"sym": "A", "qty": 2}']
    _produce(bootstrap, "trades-c", 4, rows, list(bad))

    db = connect_in_process("ray://auto", actors=2, vnodes=16)
    try:
        db.execute(f"""
            CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, qty BIGINT,
                                  WATERMARK FOR ts AS ts - INTERVAL '60' SECOND)
                FROM KAFKA (brokers = '{bootstrap}', topic = 'trades-c', format = 'json',
                            offset_reset = 'earliest', idle_timeout_ms = '500');
            CREATE STREAM bars AS SELECT sym, window_start, count(*) AS n, sum(qty) AS q
                FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND);
            CREATE SINK out FROM bars INTO KAFKA (brokers = '{bootstrap}', topic = 'bars-c', format = 'json');
            CREATE STREAM big AS SELECT ts, sym, qty FROM trades WHERE qty > 6;
            CREATE STREAM per_second AS SELECT window_start, count(*) AS n FROM trades
                GROUP BY tumble(ts, INTERVAL '1' SECOND);
        """)
        src = db.engine.reactor.nodes["trades"].connector
        assert sorted(p for ps in src.assignment.values() for p in ps) == [0, 1, 2, 3]
        assert len(src.assignment) == 2, "both actors own Kafka partitions"
        sub = db.subscribe_stream("bars")
        subs = {name: db.subscribe_stream(name) for name in ("big", "per_second", "trades")}
        db.start()
        db.flush(timeout_s=60)
        db.finish()
        got = sub.to_arrow()
        per_actor = db.metrics()["cluster"]["rows_per_actor"]
        # both actors read Kafka, and say what it cost them (fetch and decode, on their source threads)
        assert all(c > 0 for c in db.metrics()["cluster"]["poll_cpu_s_per_actor"])
        # rows went reader → owner between the actors, never through the client
        assert all(db.engine.reactor.nodes[q].op.fetched_to_client == 0 for q in ("bars", "big", "per_second"))
    finally:
        db.close()

    produced = pa.Table.from_pylist(rows)  # noqa: F841 - read by DuckDB by name
    want = duckdb.sql("SELECT sym, (ts // 1000) * 1000 AS window_start, count(*) AS n, sum(qty) AS q "
                      "FROM produced GROUP BY ALL ORDER BY ALL").fetchall()
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == [tuple(r) for r in want]
    # the other kinds of query on rows that stay on the reading actors: stateless (runs where
    # read), unkeyed partial aggregate (merged on the client), the source itself (fetched)
    big = duckdb.sql("SELECT ts, sym, qty FROM produced WHERE qty > 6 ORDER BY ALL").fetchall()
    assert sorted(tuple(r.values()) for r in subs["big"].to_arrow().to_pylist()) == [tuple(r) for r in big]
    per_second = duckdb.sql("SELECT (ts // 1000) * 1000, count(*) FROM produced GROUP BY ALL ORDER BY ALL").fetchall()
    assert sorted(tuple(r.values()) for r in subs["per_second"].to_arrow().to_pylist()) \
        == [tuple(r) for r in per_second]
    assert subs["trades"].to_arrow().num_rows == n
    assert all(r > 0 for r in per_actor), per_actor

    sunk = _read_all(bootstrap, "bars-c", expect=len(want))
    assert sorted((d["sym"], d["window_start"], d["n"], d["q"]) for d in (json.loads(m.value) for m in sunk)) \
        == [tuple(r) for r in want]
    dlq = _read_all(bootstrap, "trades-c.dlq", expect=len(bad))
    assert sorted(m.value for m in dlq) == sorted(bad)
    assert all(dict(m.headers) for m in dlq), "dead letters carry headers naming the error"
