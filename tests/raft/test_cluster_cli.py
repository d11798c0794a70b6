"""``cluster status`` and ``cluster plan`` against a running 3-voter cluster (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests._services.procs import repo_env
from tests._services.raft import RaftCluster

pytestmark = pytest.mark.integration


def _cli(cluster: RaftCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laminardb.raft.cli", "cluster", *args,
         "--voters", ",".join(cluster.rpc_addresses)],
        env=repo_env(LAMINARDB_RAFT_SECRET=cluster.secret),
        capture_output=True, text=True, timeout=60,
    )


def test_status_and_plan(raft_cluster: Callable[..., RaftCluster]) -> None:
    cluster = raft_cluster(3)
    admin = cluster.client()
    for n in ("a", "b"):
        admin.register_node(n, address=f"{n}.host:9000", cores=2)
    admin.commit_plan("orders", vnode_count=16)

    out = _cli(cluster, "status")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    leader = cluster.voters[cluster.leader_index(admin)]
    assert f"raft: leader {leader.node_id} ({leader.raft}) term" in text
    for v in cluster.voters:
        assert v.node_id in text and v.rpc in text
    assert "source 'orders': 16 vnodes" in text
    assert "a                   8 vnodes  epochs 1..1" in text
    assert "b                   8 vnodes  epochs 1..1" in text

    status = json.loads(_cli(cluster, "status", "--json").stdout)
    assert status["state"]["sources"]["orders"]["epoch"] == [1] * 16

    # A third member: the plan moves 5 vnodes (16 // 3) to it and nothing else.
    admin.register_node("c", cores=2)
    plan = json.loads(_cli(cluster, "plan", "--source", "orders", "--json").stdout)
    assert len(plan["moves"]) == 5 and {m[2] for m in plan["moves"]} == {"c"}
    assert sorted(plan["load"].values()) == [5, 5, 6]
    # Preview only: nothing changed.
    assert admin.ownership("orders")["sources"]["orders"]["owner"].count("c") == 0

    out = _cli(cluster, "plan", "--source", "orders", "--commit")
    assert out.returncode == 0, out.stderr
    assert "5 vnodes move" in out.stdout and "committed at cluster epoch" in out.stdout
    snap = admin.ownership("orders", barrier=True)["sources"]["orders"]
    moved = [v for v, o in enumerate(snap["owner"]) if o == "c"]
    assert sorted(moved) == sorted(m[0] for m in plan["moves"])
    assert all(snap["epoch"][v] == 2 for v in moved)


def test_status_with_wrong_secret_fails_cleanly(raft_cluster: Callable[..., RaftCluster]) -> None:
    cluster = raft_cluster(3)
    out = subprocess.run(
        [sys.executable, "-m", "laminardb.raft.cli", "cluster", "status",
         "--voters", ",".join(cluster.rpc_addresses)],
        env=repo_env(LAMINARDB_RAFT_SECRET="nope"), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "LDB-6004" in out.stderr
