"""Control-plane benchmark: Raft ownership commits, failover, gossip convergence/detection.

Run from the repository root::

    .venv/bin/python bench/bench_control_plane.py            # full run (~2-3 min)
    .venv/bin/python bench/bench_control_plane.py --quick    # fewer samples

Prints one table. Every process it starts (voters, gossip members) is real and on loopback,
and is killed before the script exits. Numbers are for the machine it runs on; never used as
a CI gate.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.raft import RaftClient  # noqa: E402
from tests._services.gossip import start_gossip_members  # noqa: E402
from tests._services.procs import wait_until  # noqa: E402
from tests._services.raft import RaftCluster, start_raft_cluster  # noqa: E402


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench_commits(cluster: RaftCluster, n: int) -> dict[str, float]:
    """Sequential assigns (each changes the owner, so each is a real epoch bump)."""
    c = cluster.client()
    for o in ("a", "b"):
        c.register_node(o)
    c.assign("bench", [0], owner="a", vnode_count=256)  # warm up connection + leader hint
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        c.assign("bench", [i % 256], owner="ab"[(i // 256) % 2])
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    tok = c.tokens("bench", "a")[0] if c.tokens("bench", "a") else c.tokens("bench", "b")[0]
    fence = []
    for _ in range(n // 2):
        s = time.perf_counter()
        c.check_fence(tok, barrier=True)
        fence.append(time.perf_counter() - s)
    local = []
    for _ in range(n // 2):
        s = time.perf_counter()
        c.check_fence(tok, barrier=False)
        local.append(time.perf_counter() - s)
    return {"commits_per_s": n / total, "p50_ms": _pct(lat, 50) * 1e3, "p99_ms": _pct(lat, 99) * 1e3,
            "fence_barrier_p50_ms": _pct(fence, 50) * 1e3,
            "fence_local_p50_ms": _pct(local, 50) * 1e3}


def bench_failover(cluster: RaftCluster, rounds: int) -> dict[str, float]:
    """kill -9 the leader; time until a new leader and until a write through a client succeeds."""
    elected, serving = [], []
    for _ in range(rounds):
        admin = cluster.client(deadline=5)
        admin.allocate_checkpoint_epoch()
        old = cluster.leader_index(admin)
        others = [cluster.voters[i].rpc for i in range(len(cluster.voters)) if i != old]
        probe = RaftClient(others, secret=cluster.secret, deadline=0.5)
        writer = RaftClient(others, secret=cluster.secret, deadline=10)
        t0 = time.monotonic()
        cluster.signal(old, signal.SIGKILL)
        old_raft = cluster.voters[old].raft

        def new_leader(p: RaftClient = probe, dead: str = old_raft) -> bool:
            return p.status()["raft"]["leader"] not in (None, dead)

        wait_until(new_leader, timeout=10, interval=0.01, what="new leader")
        elected.append(time.monotonic() - t0)
        writer.allocate_checkpoint_epoch()
        serving.append(time.monotonic() - t0)
        probe.close()
        writer.close()
        cluster.start(old)
        cluster.wait_ready()
        time.sleep(1.0)  # let the restarted voter catch up before the next round
    return {"elected_p50_ms": statistics.median(elected) * 1e3, "elected_max_ms": max(elected) * 1e3,
            "serving_p50_ms": statistics.median(serving) * 1e3, "serving_max_ms": max(serving) * 1e3}


def bench_gossip(n: int, base: Path) -> dict[str, float]:
    """Convergence after the last member is up, and kill -9 → SUSPECT / LEAVE everywhere."""
    group = start_gossip_members(base, n, suspicion_timeout=3.0)
    try:
        t_spawned = time.monotonic()
        everyone = sorted(m.node_id for m in group.members)
        wait_until(lambda: all(group.records(i) for i in range(n)), timeout=120, interval=0.1,
                   what="all members up")
        t_up = max(group.records(i)[0]["t"] for i in range(n))
        wait_until(lambda: all(group.view(i) == everyone for i in range(n)), timeout=120,
                   interval=0.1, what="convergence")
        t_conv = max(next(r["t"] for r in group.records(i) if r.get("members") == everyone)
                     for i in range(n))
        victim = n - 1
        t_kill = time.monotonic()
        group.signal(victim, signal.SIGKILL)
        survivors = range(n - 1)
        wait_until(lambda: all(group.events(i, "leave", f"g{victim}") for i in survivors),
                   timeout=60, interval=0.1, what="detection")
        first_suspect = min(r["t"] for i in survivors
                            for r in group.events(i, "suspect", f"g{victim}"))
        all_leave = max(group.events(i, "leave", f"g{victim}")[0]["t"] for i in survivors)
        return {"spawn_to_up_s": t_up - t_spawned, "converge_after_up_s": max(0.0, t_conv - t_up),
                "first_suspect_s": first_suspect - t_kill, "all_declared_dead_s": all_leave - t_kill}
    finally:
        group.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples")
    args = ap.parse_args()
    n_commits, rounds = (300, 2) if args.quick else (2000, 5)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for label, extra in (("3 voters, encrypted Raft port", ()),
                             ("3 voters, --insecure-dev (loopback)", ("--insecure-dev",))):
            d = base / ("dev" if extra else "encrypted")
            d.mkdir()
            cluster = start_raft_cluster(d, n=3, extra_args=extra)
            try:
                r = bench_commits(cluster, n_commits)
                rows += [
                    (f"ownership commits/s, 1 client ({label})", f"{r['commits_per_s']:.0f}"),
                    ("  commit latency p50 / p99 ms", f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}"),
                    ("  check_fence p50 ms, barrier / local read",
                     f"{r['fence_barrier_p50_ms']:.2f} / {r['fence_local_p50_ms']:.2f}"),
                ]
                if not extra:
                    f = bench_failover(cluster, rounds)
                    rows += [
                        (f"leader failover, kill -9 -> new leader (p50 / max of {rounds})",
                         f"{f['elected_p50_ms']:.0f} / {f['elected_max_ms']:.0f} ms"),
                        ("leader failover, kill -9 -> write committed (p50 / max)",
                         f"{f['serving_p50_ms']:.0f} / {f['serving_max_ms']:.0f} ms"),
                    ]
            finally:
                cluster.stop()
        for n in (10, 30):
            d = base / f"gossip{n}"
            d.mkdir()
            g = bench_gossip(n, d)
            rows += [
                (f"gossip {n} members: spawn -> all processes up", f"{g['spawn_to_up_s']:.2f} s"),
                (f"gossip {n} members: convergence after last member up",
                 f"{g['converge_after_up_s']:.2f} s"),
                (f"gossip {n} members: kill -9 -> first SUSPECT", f"{g['first_suspect_s']:.2f} s"),
                (f"gossip {n} members: kill -9 -> declared dead by all (suspicion 3 s)",
                 f"{g['all_declared_dead_s']:.2f} s"),
            ]
    width = max(len(k) for k, _ in rows)
    print(f"{'metric':<{width}}  value")
    print("-" * (width + 20))
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
