"""Fixtures for the PostgreSQL lookup join tests: the session PostgreSQL server."""

from __future__ import annotations

import sys
from pathlib import Path

# Make ``tests._services`` importable however pytest was started (no tests/__init__.py).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._services.fixtures import postgres_server  # noqa: E402,F401
