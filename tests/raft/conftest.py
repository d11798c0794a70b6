"""Fixtures for control-plane tests: real voter processes (``raft_cluster``)."""

from __future__ import annotations

import sys
from pathlib import Path

# Make ``tests._services`` importable however pytest was started (no tests/__init__.py).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._services.fixtures import raft_cluster  # noqa: E402,F401
