"""Fixtures for connector tests: the session Tansu broker and Kafka helpers around it."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Make ``tests._services`` importable however pytest was started (no tests/__init__.py).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._services.fixtures import kafka_broker, mariadb_server, postgres_server  # noqa: E402,F401


@pytest.fixture
def bootstrap(kafka_broker: Any) -> str:  # noqa: F811
    return kafka_broker.bootstrap


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    """Factory: a fresh topic name, created with ``partitions`` partitions."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    def make(partitions: int = 1) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="laminardb-test-admin")
        try:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        finally:
            admin.close()
        return name

    return make


@pytest.fixture
def producer(bootstrap: str) -> Iterator[Any]:
    """A kafka-python producer; call ``.flush()`` before reading."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all",
                      client_id="laminardb-test-producer")
    yield p
    p.close(timeout=10)


@pytest.fixture
def sources() -> Iterator[Callable[..., Any]]:
    """Factory for KafkaSource; every source is closed at teardown."""
    from laminardb.connectors.kafka import KafkaSource

    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("name", "src")
        kwargs.setdefault("time_col", None)
        kwargs.setdefault("delay_ticks", 0)
        src = KafkaSource(**kwargs)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()


@pytest.fixture
def read_topic(bootstrap: str) -> Callable[..., list[Any]]:
    """``read_topic(topic, expect=n)``: the records of a topic, read from the beginning."""
    return lambda topic, *, expect, timeout=15.0: _read_topic(bootstrap, topic, expect=expect,
                                                              timeout=timeout)


def _read_topic(bootstrap: str, topic: str, *, expect: int, timeout: float = 15.0) -> list[Any]:
    """All records of ``topic`` (every partition) once ``expect`` have arrived, or at timeout."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      client_id="laminardb-test-reader")
    try:
        deadline = time.monotonic() + timeout
        parts: set[int] = set()
        while not parts and time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic) or set()
            if not parts:
                time.sleep(0.1)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Any] = []
        while len(out) < expect and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(recs)
        # a short extra poll catches messages beyond ``expect`` (which a test may assert on)
        for recs in c.poll(timeout_ms=300).values():
            out.extend(recs)
        return out
    finally:
        c.close()
