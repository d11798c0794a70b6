"""Fixtures for the metrics tests: a broker of the test's own (the Kafka test kills it)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Make ``tests._services`` importable however pytest was started.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def own_broker() -> Iterator[Any]:
    """A Tansu broker for this test only, stopped at teardown if the test did not kill it."""
    from tests._services.kafka import start_kafka_broker

    broker = start_kafka_broker()
    yield broker
    broker.stop()
