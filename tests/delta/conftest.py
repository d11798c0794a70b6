"""One real local Ray for the whole package (databases are cheap to create and drop; a Ray
start is not), and helpers that compare a database in the cluster with the embedded engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests._services.ray_local import start_local_ray

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests._services

ray = pytest.importorskip("ray")


@pytest.fixture(scope="package")
def ray_cluster():
    """Two CPUs: one database of two reactor actors at a time (heads take no CPU)."""
    start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture
def database(ray_cluster, tmp_path, request):
    """``open_db(**config)``: a fresh database in the cluster, dropped after the test."""
    import laminardb
    from laminardb.cluster.head import drop_database

    names: list[str] = []

    def open_db(name: str | None = None, *, raft=None, actors: int = 2, **config):
        name = name or f"{request.node.name[:40]}-{len(names)}"
        names.append(name)
        config.setdefault("checkpoint_dir", str(tmp_path / "ckpt"))
        return laminardb.connect("ray://auto", database=name, actors=actors, raft=raft, config=config)

    yield open_db
    for name in names:
        drop_database(name)
