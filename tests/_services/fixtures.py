"""Pytest fixtures that start real services; import them into a ``conftest.py``.

* ``raft_cluster`` — factory: ``raft_cluster(n=3, extra_args=())`` starts voters in the test's
  tmp dir; all are killed at teardown (also when the test fails).
* ``kafka_broker`` — session-scoped Tansu broker (``.bootstrap``), killed at session end.
* ``postgres_server``, ``mariadb_server`` — session-scoped database servers (``databases.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._services.raft import TEST_SECRET, RaftCluster, start_raft_cluster


@pytest.fixture
def raft_cluster(tmp_path: Path) -> Iterator[Callable[..., RaftCluster]]:
    """Factory starting real voter processes; every cluster is stopped at teardown."""
    started: list[RaftCluster] = []

    def make(n: int = 3, *, extra_args: tuple[str, ...] = (), secret: str = TEST_SECRET,
             wait: bool = True) -> RaftCluster:
        base = tmp_path / f"raft{len(started)}"
        base.mkdir()
        cluster = start_raft_cluster(base, n=n, secret=secret, extra_args=extra_args, wait=wait)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[object]:
    """A real Tansu broker on a free loopback port for the whole session."""
    from tests._services.kafka import start_kafka_broker

    broker = start_kafka_broker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A real PostgreSQL server (``wal_level = logical``) on loopback for the whole session;
    ``.create_database()`` gives each test its own database."""
    from tests._services.databases import postgres_available, start_postgres

    if not postgres_available():
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (.ci/run installs it)")
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[object]:
    """A real MariaDB server (row-based binlog) on loopback for the whole session; user
    ``ldb``/``ldb``; ``.create_database()`` gives each test its own database."""
    from tests._services.databases import mariadb_available, start_mariadb

    if not mariadb_available():
        pytest.fail("MariaDB is not installed: apt-get install mariadb-server (.ci/run installs it)")
    server = start_mariadb()
    try:
        yield server
    finally:
        server.stop()
