"""Fixtures for the embedded engine's tests: a fresh connection per test, and shared hypothesis settings."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # so tests import the oracle as ``oracle``

import laminardb  # noqa: E402


@pytest.fixture
def db():
    conn = laminardb.open()
    yield conn
    conn.close()


@pytest.fixture
def trades(db):
    """A connection with the ``trades`` source (BIGINT event time, 1 s watermark delay)."""
    db.execute(
        "CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, qty BIGINT, "
        "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)"
    )
    return db
