"""``cluster status`` and ``cluster plan`` against a running 3-voter cluster (real processes),
including a paused (SIGSTOP) and a killed voter."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests._services.procs import repo_env, wait_until
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
        env=repo_env(LAMINARDB_RAFT_SECRET="not-the-cluster-secret-0123456789"),
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "LDB-6004" in out.stderr


def _status(cluster: RaftCluster, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t = time.monotonic()
    out = _cli(cluster, "status", *extra)
    return out, time.monotonic() - t


def _voter_line(text: str, node_id: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(f"  {node_id} "))


def test_status_marks_paused_and_dead_voters_fast(raft_cluster: Callable[..., RaftCluster]) -> None:
    cluster = raft_cluster(3)
    leader = cluster.leader_index(cluster.client())
    paused, dead = [i for i in range(3) if i != leader]
    # the voters' names reach the replicated state a moment after the cluster elects a leader
    # (on a loaded machine, after this point): status names a silent voter from that state
    wait_until(lambda: len(json.loads(_status(cluster, "--json")[0].stdout)["state"].get("voters", {})) == 3,
               timeout=30, interval=0.2, what="every voter registered in the replicated state")
    cluster.signal(paused, signal.SIGSTOP)
    try:
        # All voters are asked at once with a 1.5 s bound: a paused voter costs one bound,
        # not a 5 s wait (and the CLI's own start-up).
        out, took = _status(cluster)
        js, took_json = _status(cluster, "--json")
        print(f"status with a SIGSTOPped voter: text {took:.2f} s, --json {took_json:.2f} s")
        assert out.returncode == 0 and js.returncode == 0, out.stderr + js.stderr
        assert took < 3.0 and took_json < 3.0, (took, took_json)
        status = json.loads(js.stdout)
        liveness = {v["id"]: v["liveness"] for v in status["voters"]}
        p_id = cluster.voters[paused].node_id
        assert liveness[p_id] == "timeout"
        assert [liveness[v.node_id] for i, v in enumerate(cluster.voters) if i != paused] == \
            ["up", "up"]
        assert status["quorum"] is True and status["leader"]["id"] == cluster.voters[leader].node_id
        # The text shows the same content, voter by voter.
        assert "(2/3 voters answered within 1.5 s)" in out.stdout
        for v in status["voters"]:
            line = _voter_line(out.stdout, v["id"])
            assert v["rpc"] in line and v["raft"] in line and f" {v['liveness']} " in line + " "
            if v["liveness"] == "up":
                assert f" {v['role']} " in line and f"term {v['term']} " in line
                assert f"commit {v['commit_idx']} " in line
            else:
                assert "paused (SIGSTOP)" in line and v["error"] in line

        # Also kill a second voter: no quorum left; status still answers at once, exit code 1.
        cluster.signal(dead, signal.SIGKILL)

        def no_quorum() -> dict:
            out, took = _status(cluster, "--json")
            assert took < 3.0, took
            return json.loads(out.stdout) if out.returncode == 1 else {}

        status = wait_until(no_quorum, timeout=15, interval=0.2, what="status to report no quorum")
        liveness = {v["id"]: v["liveness"] for v in status["voters"]}
        assert liveness == {cluster.voters[leader].node_id: "up", p_id: "timeout",
                            cluster.voters[dead].node_id: "unreachable"}
        text, _ = _status(cluster)
        assert text.returncode == 1 and "quorum NO" in text.stdout
        assert " unreachable " in _voter_line(text.stdout, cluster.voters[dead].node_id)
    finally:
        cluster.signal(paused, signal.SIGCONT)
