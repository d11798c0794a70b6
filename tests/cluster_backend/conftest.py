"""A real local Ray instance for the Delta data-plane tests, and pooled actor clusters.

Actors are expensive to start (a process each, ~1-2 s), so one cluster of each size is
started per module and reset between tests (``cluster_connection`` resets its actors).
"""

from __future__ import annotations

import pytest

from tests._services.ray_local import start_local_ray

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_local(request):
    """A local Ray for one module; the module may set ``RAY_CPUS`` (default 3)."""
    start_local_ray(num_cpus=getattr(request.module, "RAY_CPUS", 3), include_dashboard=False,
                    log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def clusters(ray_local):
    from laminardb.cluster.actor_pool import ActorPool

    pool = {1: ActorPool(1, 64), 2: ActorPool(2, 64)}
    yield pool
    for c in pool.values():
        c.shutdown()
