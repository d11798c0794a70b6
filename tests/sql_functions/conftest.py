"""Fixtures for the scalar functions, Python UDFs and Flink DDL: a fresh in-memory connection,
and the session Kafka broker (a real Tansu process)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))  # tests._services

import laminardb  # noqa: E402
from tests._services.fixtures import kafka_broker  # noqa: E402,F401 - the session fixture


@pytest.fixture
def db():
    conn = laminardb.open()
    yield conn
    conn.close()
