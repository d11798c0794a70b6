"""A fresh Ray per test: the coordinator's fault injection (``LAMINARDB_TEST_COORD_CRASH_AT``)
reaches it through the job's runtime environment, which differs per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests._services.ray_local import start_local_ray

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests._services

ray = pytest.importorskip("ray")


@pytest.fixture
def ray_with_env():
    started = []

    def start(**env: str) -> None:
        start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                        runtime_env={"env_vars": dict(env)} if env else None)
        started.append(True)

    yield start
    if started:
        ray.shutdown()
