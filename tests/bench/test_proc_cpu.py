"""bench/proc_cpu.py: the arithmetic behind bench_scale's table — CPU used between two
samples, processes grouped by kind (a JVM under the coordinator is the coordinator's, a
process under the client is Ray's), and the scale ceiling."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proc_cpu import (  # noqa: E402
    ACTOR,
    BROKER,
    CLIENT,
    COORDINATOR,
    HEAD,
    OUTSIDE,
    RAY,
    Proc,
    classify,
    locate,
    summarize,
    used,
)

CLIENT_PID, RAYLET, HEAD_PID, A1, A2, COORD, JVM, BROKER_PID, IDLE = 10, 11, 12, 13, 14, 15, 16, 17, 18
ROLES = {CLIENT_PID: CLIENT, HEAD_PID: HEAD, A1: ACTOR, A2: ACTOR, COORD: COORDINATOR, BROKER_PID: BROKER}


def proc(pid: int, ppid: int, cpu: float, started: float = 1.0, name: str = "p") -> Proc:
    return Proc(pid, ppid, started, name, cpu)


def tree(cpu: dict[int, float]) -> list[Proc]:
    parent = {CLIENT_PID: 1, RAYLET: CLIENT_PID, HEAD_PID: RAYLET, A1: RAYLET, A2: RAYLET, COORD: RAYLET,
              JVM: COORD, BROKER_PID: CLIENT_PID, IDLE: RAYLET}
    return [proc(pid, parent[pid], cpu.get(pid, 0.0), name="java" if pid == JVM else "p") for pid in parent]


def test_classify_inherits_from_coordinator_not_from_client():
    kinds = classify(tree({}), ROLES)
    assert kinds[JVM] == COORDINATOR
    assert kinds[RAYLET] == RAY and kinds[IDLE] == RAY
    assert kinds[CLIENT_PID] == CLIENT and kinds[A1] == ACTOR and kinds[BROKER_PID] == BROKER


def test_used_counts_a_new_process_from_zero_and_a_reused_pid_as_new():
    before = {(A1, 1.0): proc(A1, 1, 5.0), (A2, 1.0): proc(A2, 1, 7.0)}
    after = {(A1, 1.0): proc(A1, 1, 6.5), (A2, 2.0): proc(A2, 1, 0.25, started=2.0), (IDLE, 3.0): proc(IDLE, 1, 0.5)}
    got = {p.pid: p.cpu_s for p in used(before, after)}
    assert got == {A1: pytest.approx(1.5), A2: 0.25, IDLE: 0.5}


def test_summarize_ceiling_is_actors_over_the_busiest_single_non_actor_process():
    # 2M rows: actors 4 + 2 s, head 1.5 s, coordinator 0.5 s + its JVM 1.0 s, Ray 0.25 s
    procs = tree({A1: 4.0, A2: 2.0, HEAD_PID: 1.5, COORD: 0.5, JVM: 1.0, RAYLET: 0.25, CLIENT_PID: 0.5})
    s = summarize(2_000_000, 4.0, procs, ROLES, embedded_cpu_s=1.0, embedded_rows=1_000_000)
    assert s["cpu_s_per_mrow"][ACTOR] == pytest.approx(3.0)
    assert s["cpu_s_per_mrow"][COORDINATOR] == pytest.approx(0.75)
    assert s["cpu_s_per_mrow"][RAY] == pytest.approx(0.125)
    assert s["busiest"]["pid"] == HEAD_PID and s["busiest"]["cpu_s_per_mrow"] == pytest.approx(0.75)
    assert s["scale_ceiling"] == pytest.approx(6.0 / 1.5)
    assert s["rows_per_s"] == pytest.approx(500_000)
    assert s["actors"] == 2
    assert s["actors_over_embedded"] == pytest.approx(3.0 / 1.0)


def test_summarize_without_a_busy_non_actor_has_no_ceiling():
    s = summarize(1_000_000, 1.0, tree({A1: 1.0}), ROLES)
    assert s["scale_ceiling"] is None and "actors_over_embedded" not in s


def test_locate_takes_the_nearest_node_root_and_leaves_the_rest_outside():
    # two Ray nodes under the client: the head node's gcs_server (RAYLET stands for it) and a
    # worker node's raylet (A2's parent here) — a worker is on its raylet's node, not the client's
    procs = [proc(CLIENT_PID, 1, 0), proc(RAYLET, CLIENT_PID, 0), proc(HEAD_PID, RAYLET, 0),
             proc(30, CLIENT_PID, 0), proc(A2, 30, 0), proc(JVM, A2, 0), proc(BROKER_PID, CLIENT_PID, 0)]
    where = locate(procs, {CLIENT_PID: "head", 30: "worker1"})
    assert where == {CLIENT_PID: "head", RAYLET: "head", HEAD_PID: "head", 30: "worker1", A2: "worker1",
                     JVM: "worker1", BROKER_PID: "head"}
    assert locate(procs, {CLIENT_PID: "head", 30: "worker1", BROKER_PID: OUTSIDE})[BROKER_PID] == OUTSIDE


def test_summarize_by_node_splits_each_kind_by_where_it_ran():
    # 1M rows; A1 under the head node's raylet, A2 moved under a worker raylet (pid 30)
    procs = [p if p.pid != A2 else proc(A2, 30, 3.0) for p in tree({A1: 1.0, HEAD_PID: 0.5, RAYLET: 0.25})]
    procs.append(proc(30, CLIENT_PID, 0.5, name="raylet"))
    s = summarize(1_000_000, 1.0, procs, ROLES, node_roots={CLIENT_PID: "head", 30: "worker1"})
    assert s["by_node"]["worker1"][ACTOR] == pytest.approx(3.0) and s["by_node"]["worker1"][RAY] == pytest.approx(0.5)
    assert s["by_node"]["head"][ACTOR] == pytest.approx(1.0) and s["by_node"]["head"][HEAD] == pytest.approx(0.5)
    assert s["by_node"]["head"][RAY] == pytest.approx(0.25)
    assert s["cpu_s_per_mrow"][ACTOR] == pytest.approx(4.0)  # the per-kind totals do not change
    assert "by_node" not in summarize(1_000_000, 1.0, procs, ROLES)
