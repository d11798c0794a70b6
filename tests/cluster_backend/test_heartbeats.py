"""``liveness.Heartbeats`` against real actors: a killed actor is named dead from its failed
heartbeat (the head's watchdog reads nothing else to notice it), a live one never is."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

RAY_CPUS = 2  # read by the ray_local fixture (tests/cluster_backend/conftest.py)


@pytest.mark.integration
def test_a_killed_actor_is_named_dead_by_its_heartbeat_and_a_live_one_is_not(ray_local):
    from laminardb.cluster.actor_pool import ActorPool
    from laminardb.cluster.liveness import Heartbeats

    pool = ActorPool(2, 16)
    try:
        beats = Heartbeats(pool, lost_after=60.0)
        for _ in range(5):  # heartbeats sent and answered
            assert beats.silent() == {}
            time.sleep(0.1)
        assert beats.dead == set()

        ray.kill(pool.actors[1], no_restart=True)
        deadline = time.monotonic() + 30
        while 1 not in beats.dead and time.monotonic() < deadline:
            assert beats.silent() == {}  # dead is not silent: nobody waits out lost_after for it
            time.sleep(0.1)
        assert beats.dead == {1}, "the killed actor's failed heartbeat should name it dead"
        assert ray.get(pool.actors[0].ready.remote(), timeout=30)["index"] == 0
        assert beats.silent() == {} and beats.dead == {1}
    finally:
        pool.shutdown()
