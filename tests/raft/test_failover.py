"""Three real voters: kill -9 the leader mid-flow, then kill and restart all of them."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminardb.errors import ControlPlaneError
from tests._services.procs import wait_until
from tests._services.raft import RaftCluster

pytestmark = pytest.mark.integration

_SOURCE = "orders"
_VNODES = 16
_OWNERS = ("n1", "n2", "n3")
# A new leader within this bound proves failover works; how fast it is (issue 3's 2 s budget) is
# measured by bench/bench_control_plane.py, not asserted here: a loaded CI machine starves the
# voters' event loops and split votes repeat (6.8 s seen once, 0.2-0.5 s on an idle machine).
_ELECTION_BOUND_S = 10.0


class _Writer(threading.Thread):
    """Sequential assigns that always change the owner; records acknowledged tokens in order."""

    def __init__(self, cluster: RaftCluster) -> None:
        super().__init__(daemon=True)
        self.client = cluster.client(deadline=8.0)
        self.stop = threading.Event()
        self.acked: list[tuple[float, int, int, str]] = []  # (t_done, vnode, epoch, owner)
        self.failed: list[tuple[int, str]] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            v, owner = i % _VNODES, _OWNERS[(i // _VNODES) % len(_OWNERS)]
            try:
                (tok,) = self.client.assign(_SOURCE, [v], owner=owner, vnode_count=_VNODES)
                self.acked.append((time.monotonic(), tok.vnode, tok.epoch, tok.owner))
            except ControlPlaneError as exc:
                self.failed.append((v, repr(exc)))
            i += 1


def _check_history(acked: list[tuple[float, int, int, str]], final: dict) -> None:
    by_vnode: dict[int, list[int]] = {}
    owner_at: dict[tuple[int, int], str] = {}
    for _, v, e, o in acked:
        by_vnode.setdefault(v, []).append(e)
        # One owner per (vnode, epoch), ever.
        assert owner_at.setdefault((v, e), o) == o, f"two owners for vnode {v} epoch {e}"
    for v, epochs in by_vnode.items():
        assert all(a < b for a, b in zip(epochs, epochs[1:], strict=False)), (v, epochs)
        # No acknowledged entry lost: the final state is at least the last acknowledged epoch.
        assert final["epoch"][v] >= epochs[-1]
        last = [(e, o) for _, vv, e, o in acked if vv == v][-1]
        if final["epoch"][v] == last[0]:
            assert final["owner"][v] == last[1]


def test_kill_leader_then_restart_all(raft_cluster: Callable[..., RaftCluster],
                                      tmp_path: Path) -> None:
    # Small compaction threshold: the restart below must come back from dump + journal.
    cluster = raft_cluster(3, extra_args=("--compaction-min-entries", "40"))
    admin = cluster.client()
    for n in _OWNERS:
        admin.register_node(n, address=f"{n}.local:1", cores=1)

    writer = _Writer(cluster)
    writer.start()
    try:
        wait_until(lambda: len(writer.acked) >= 100, timeout=20, what="100 commits before the kill")
        old = cluster.leader_index(admin)
        survivors = [i for i in range(3) if i != old]
        probe = cluster.client(deadline=1.0)
        probe._voters = [cluster.voters[i].rpc for i in survivors]
        probe._current = probe._voters[0]
        acked_before = len(writer.acked)

        t_kill = time.monotonic()
        cluster.signal(old, signal.SIGKILL)

        def new_leader() -> int | None:
            idx = cluster.leader_index(probe, wait=0)
            return idx + 1 if idx != old else None  # +1: index 0 is a valid leader

        try:
            wait_until(new_leader, timeout=_ELECTION_BOUND_S, interval=0.02, what="a new leader")
        except TimeoutError as e:  # keep the voters' own account for whoever reads the failure
            raise TimeoutError(f"{e}\n{cluster.logs()}") from None
        elected_s = time.monotonic() - t_kill
        wait_until(lambda: any(t > t_kill for t, *_ in writer.acked[acked_before:]), timeout=10,
                   what="a commit after the kill")
        serving_s = min(t for t, *_ in writer.acked[acked_before:] if t > t_kill) - t_kill

        # Old leader comes back as a follower while writes continue.
        cluster.start(old)
        n = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= n + 100, timeout=20, what="100 more commits")
    finally:
        writer.stop.set()
        writer.join(timeout=15)
    assert not writer.is_alive()
    assert not writer.failed, writer.failed[:3]

    final = admin.ownership(_SOURCE, barrier=True)
    _check_history(writer.acked, final["sources"][_SOURCE])
    print(f"failover: elected {elected_s * 1000:.0f} ms, serving writes {serving_s * 1000:.0f} ms")

    # Everybody down hard, back up in random order: the same state.
    wait_until(lambda: all(_applied(cluster, i) for i in range(3)), timeout=10,
               what="all voters caught up")
    before = admin.ownership(barrier=True)
    for i in range(3):
        cluster.signal(i, signal.SIGKILL)
    assert any((v.data_dir / "raft.dump").exists() for v in cluster.voters), "no compaction happened"
    order = random.sample(range(3), 3)
    for i in order:
        cluster.start(i)
        time.sleep(random.uniform(0.0, 0.3))
    cluster.wait_ready()
    after = admin.ownership(barrier=True)
    for key in ("nodes", "sources", "cluster_epoch", "checkpoint_epoch", "manifest", "changes"):
        assert after[key] == before[key], f"{key} differs after restart in order {order}"


def _applied(cluster: RaftCluster, i: int) -> bool:
    from laminardb.raft import RaftClient

    with RaftClient([cluster.voters[i].rpc], secret=cluster.secret, deadline=1.0) as c:
        st = c.status()["raft"]
        return st["last_applied"] >= st["commit_idx"] > 0 and st["state"] == 2 or (
            st["leader"] is not None and st["last_applied"] >= st["commit_idx"]
        )
