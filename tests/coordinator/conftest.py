"""Fixtures of the checkpoint-coordinator tests: real Raft voters (``raft_cluster``), one
real Spark session for the whole test session (``spark``), and the fake database head."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Make ``tests._services`` importable however pytest was started.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._services.fixtures import raft_cluster  # noqa: E402,F401


@pytest.fixture(scope="session")
def _spark_for_the_session():
    """Stops the coordinator's SparkSession once the test session ends."""
    pytest.importorskip("pyspark")
    from laminardb.checkpoint.spark_job import stop_spark

    yield
    stop_spark()


@pytest.fixture
def spark(_spark_for_the_session):
    """The coordinator's SparkSession, started once per test session (a JVM takes seconds),
    and again after a test killed its JVM or stopped it (``spark_session`` checks)."""
    from laminardb.checkpoint.spark_job import spark_session

    return spark_session()
