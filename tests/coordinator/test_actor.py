"""The coordinator as a detached Ray actor: created once (racing clients get the same one),
checkpoints a database through a head that is itself a named Ray actor, and after being
killed is restarted by Ray and resumes the database from its registry."""

from __future__ import annotations

import pytest

from tests._services.procs import REPO_ROOT, wait_until
from tests._services.ray_local import start_local_ray

ray = pytest.importorskip("ray")


class EmptyHead:
    """A head with no sinks: checkpoints commit without a Spark job."""

    def __init__(self) -> None:
        self.committed = 0
        self.pending: set[int] = set()

    def prepare_checkpoint(self, epoch: int) -> dict:
        self.pending.add(epoch)
        return {"epoch": epoch, "manifest_ref": f"m/{epoch}", "bytes": 0, "stall_s": 0.0,
                "sinks": {}, "sources": {}}

    def commit_checkpoint(self, epoch: int) -> None:
        self.committed = max(self.committed, epoch)
        self.pending = {e for e in self.pending if e > epoch}

    def abort_checkpoint(self, epoch: int) -> None:
        self.pending.discard(epoch)

    def checkpoint_status(self) -> dict:
        return {"last_committed": self.committed, "pending": sorted(self.pending)}


@pytest.fixture
def local_ray():
    # workers import this test package (the head class) from the checkout
    # address="local": a fresh instance of our own, never a cluster another process started
    start_local_ray(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False,
                    runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
    try:
        yield
    finally:
        ray.shutdown()


def test_detached_coordinator_restarts_and_rereads_its_registry(local_ray, tmp_path) -> None:
    from laminardb.checkpoint.spark_coordinator import (
        COORDINATOR_NAME,
        NAMESPACE,
        ensure_coordinator,
    )

    head = ray.remote(num_cpus=0)(EmptyHead).options(
        name="head:db1", namespace=NAMESPACE, lifetime="detached").remote()
    assert ray.get(head.checkpoint_status.remote(), timeout=60)["last_committed"] == 0
    config = {"state_dir": str(tmp_path / "state")}
    coord = ensure_coordinator(config)
    try:
        assert ensure_coordinator(config)._actor_id == coord._actor_id  # get, not create
        ray.get(coord.register.remote("db1", interval_s=0.3, checkpoint_dir=str(tmp_path / "ckpt")),
                timeout=60)
        assert ray.get(coord.checkpoint_now.remote("db1"), timeout=60) >= 1
        wait_until(lambda: ray.get(coord.status.remote("db1"), timeout=10)["checkpoints"] >= 3,
                   timeout=60, what="timed checkpoints in the actor")
        pid = ray.get(coord.ping.remote(), timeout=10)
        last = ray.get(coord.status.remote("db1"), timeout=10)["last_epoch"]

        ray.kill(coord, no_restart=False)  # a crash: Ray restarts it (max_restarts=-1)
        again = ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
        wait_until(lambda: ray.get(again.ping.remote(), timeout=10) != pid, timeout=60,
                   what="the restarted coordinator")
        assert ray.get(again.databases.remote(), timeout=10) == ["db1"]
        wait_until(lambda: ray.get(again.status.remote("db1"), timeout=10)["last_epoch"] > last,
                   timeout=60, what="a checkpoint by the restarted coordinator")
        assert ray.get(head.checkpoint_status.remote(), timeout=10)["last_committed"] > last
    finally:
        for name in (COORDINATOR_NAME, "head:db1"):
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            except ValueError:
                pass
