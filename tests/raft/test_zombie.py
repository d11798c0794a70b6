"""Zombie fencing: a SIGSTOPped owner loses its vnodes and can never write again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests._services.procs import kill_proc, repo_env, wait_until
from tests._services.raft import RaftCluster

pytestmark = pytest.mark.integration

_VNODES = [0, 1, 2, 3]


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_paused_owner_is_fenced_after_reassignment(
    raft_cluster: Callable[..., RaftCluster], tmp_path: Path
) -> None:
    cluster = raft_cluster(3)
    log, sink = tmp_path / "zombie.log", tmp_path / "sink.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_zombie_owner.py")),
         ",".join(cluster.rpc_addresses), "orders", "zombie", ",".join(map(str, _VNODES)),
         str(log), str(sink), "60"],
        env=repo_env(LAMINARDB_RAFT_SECRET=cluster.secret),
    )
    try:
        wait_until(lambda: sum(r.get("ok", False) for r in _records(log)) >= 5, timeout=20,
                   what="the owner's first accepted writes")
        old_tokens = _records(log)[0]["tokens"]

        os.kill(proc.pid, signal.SIGSTOP)
        t_stop = time.monotonic()

        admin = cluster.client()
        admin.register_node("successor")
        new = admin.assign("orders", _VNODES, owner="successor")
        assert [t.epoch for t in new] == [t["epoch"] + 1 for t in old_tokens]

        t_cont = time.monotonic()
        os.kill(proc.pid, signal.SIGCONT)

        def refused_after_resume() -> list[dict]:
            after = [r for r in _records(log)[1:] if r["t"] >= t_cont]
            return after if sum(not r["ok"] for r in after) >= 20 else []

        after = wait_until(refused_after_resume, timeout=20, what="20 attempts after SIGCONT")
    finally:
        kill_proc(proc)

    # Every write the zombie attempted after waking up was refused as stale (LDB-6001).
    assert after and all(not r["ok"] and r["code"] == "LDB-6001" for r in after), after[:5]
    # Nothing begun after the pause reached the sink. (An attempt whose check passed just
    # before SIGSTOP may land right after SIGCONT: a client-side check cannot close that
    # window; the resource-side Fence, which remembers the highest epoch it wrote, does.)
    late = [r for r in _records(sink) if r["t"] >= t_stop]
    assert late == [], late
    assert len(_records(sink)) >= 5
    # The successor's tokens are the live ones.
    for tok in new:
        assert admin.check_fence(tok, barrier=True) == tok.epoch
