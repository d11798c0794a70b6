"""Fixtures for the join tests: two sources ``l`` and ``r`` with out-of-order rows, and a
driver that runs a planned query's ``PlanOperator`` the way the reactor does."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "engine"))  # the shared oracle helpers
