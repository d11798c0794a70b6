"""CPU seconds per process, grouped by kind: how a bench measures the cluster on 2 cores.

Wall-clock speed-up cannot show scale on a 2-core machine, but CPU per row can
(``/work/shared/DESIGN.md``, "Measuring the cluster on 2 cores"). ``sample()`` reads the
CPU time (user + system, every thread) of this process and of every process under it — a
local Ray started by ``ray.init()`` (gcs_server, raylet, workers, the actors), a broker
started with ``subprocess`` — before and after a run; ``used()`` is the difference.
``summarize()`` groups it by kind and computes the **scale ceiling**: the actors' CPU per row
÷ the largest per-row CPU of any single non-actor process, i.e. how many actors' worth of
work the cluster could feed before that process saturates a core.

Pure functions apart from ``sample()``; ``tests/bench/test_proc_cpu.py`` checks the
arithmetic. psutil is Ray's vendored copy (``ray/thirdparty_files``, on ``sys.path`` once
``ray`` is imported): the project does not depend on psutil itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CLIENT, HEAD, ACTOR, COORDINATOR, BROKER, RAY = "client", "head", "actors", "coordinator+spark", "broker", "ray"
KINDS = (CLIENT, HEAD, ACTOR, COORDINATOR, BROKER, RAY)
OUTSIDE = "outside"  # a process on no Ray node (the broker)
# a process under one of these is counted with it (the coordinator's Spark JVM, the broker's
# helpers); a process under the client is Ray's (ray.init starts the local cluster from here)
_INHERITED = frozenset({HEAD, ACTOR, COORDINATOR, BROKER})


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    started: float  # create time: a reused pid is another process
    name: str
    cpu_s: float  # user + system of every thread


def sample(root: int | None = None) -> dict[tuple[int, float], Proc]:
    """Every live process at or under ``root`` (default: this one), keyed by (pid, start)."""
    import importlib

    importlib.import_module("ray")  # puts Ray's vendored psutil on sys.path
    import psutil

    top = psutil.Process(root or os.getpid())
    out: dict[tuple[int, float], Proc] = {}
    for p in [top, *top.children(recursive=True)]:
        try:
            with p.oneshot():
                t = p.cpu_times()
                proc = Proc(p.pid, p.ppid(), p.create_time(), _label(p), t.user + t.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between the listing and the read
        out[(proc.pid, proc.started)] = proc
    return out


def _label(p) -> str:
    name = p.name()
    if name.startswith("python"):  # Ray's own helpers: name them by their script
        script = next((a for a in p.cmdline()[1:] if a.endswith(".py")), None)
        return os.path.basename(script) if script else name
    return name


def used(before: Mapping[tuple[int, float], Proc], after: Mapping[tuple[int, float], Proc]) -> list[Proc]:
    """CPU each process spent between two samples. A process started in between counts from 0;
    one that ended in between is lost (sample before dropping what you measure)."""
    out = []
    for key, p in after.items():
        b = before.get(key)
        out.append(Proc(p.pid, p.ppid, p.started, p.name, max(0.0, p.cpu_s - (b.cpu_s if b else 0.0))))
    return out


def classify(procs: Iterable[Proc], roles: Mapping[int, str]) -> dict[int, str]:
    """pid → kind. ``roles`` names the known pids (client, head, actors, coordinator, broker);
    any other process takes the kind of its nearest ancestor in ``_INHERITED``, else it is Ray's."""
    parent = {p.pid: p.ppid for p in procs}
    kinds = {}
    for pid in parent:
        kind, cur, seen = roles.get(pid), pid, set()
        while kind is None and cur in parent and cur not in seen:
            seen.add(cur)
            cur = parent[cur]
            if roles.get(cur) in _INHERITED:
                kind = roles[cur]
        kinds[pid] = kind or RAY
    return kinds


def locate(procs: Iterable[Proc], roots: Mapping[int, str], default: str = OUTSIDE) -> dict[int, str]:
    """pid → node: the node of its nearest ancestor-or-self in ``roots`` (pid → node name).

    Why roots: the nodes of ``ray.cluster_utils.Cluster`` all run under this process, so the
    tree alone cannot tell them apart; a node's own processes (raylet, gcs_server, agents)
    are the roots, and the workers a raylet starts are under it."""
    parent = {p.pid: p.ppid for p in procs}
    out = {}
    for pid in parent:
        cur, seen = pid, set()
        while cur not in roots and cur in parent and cur not in seen:
            seen.add(cur)
            cur = parent[cur]
        out[pid] = roots.get(cur, default)
    return out


def summarize(rows: int, wall_s: float, procs: Iterable[Proc], roles: Mapping[int, str],
              embedded_cpu_s: float | None = None, embedded_rows: int | None = None,
              node_roots: Mapping[int, str] | None = None) -> dict:
    """Per kind CPU s per million rows, rows/s, the busiest non-actor process and the ceiling;
    with ``node_roots`` (see :func:`locate`) the same per node, under ``by_node``.

    The ceiling counts each process alone (a JVM apart from the coordinator that started it):
    one process, whatever its threads, is where a single-threaded part of it saturates."""
    procs = list(procs)
    kinds = classify(procs, roles)
    where = locate(procs, node_roots or {})
    mrows = rows / 1e6
    per_kind = {k: 0.0 for k in KINDS}
    for p in procs:
        per_kind[kinds[p.pid]] += p.cpu_s
    busiest = max((p for p in procs if kinds[p.pid] != ACTOR), key=lambda p: p.cpu_s, default=None)
    actor_s = per_kind[ACTOR]
    out = {
        "rows": rows, "wall_s": wall_s, "rows_per_s": rows / wall_s if wall_s > 0 else None,
        "cpu_s": per_kind, "cpu_s_per_mrow": {k: v / mrows for k, v in per_kind.items()},
        "actors": sum(1 for p in procs if kinds[p.pid] == ACTOR and roles.get(p.pid) == ACTOR),
        "busiest": None if busiest is None else {
            "pid": busiest.pid, "kind": kinds[busiest.pid], "name": busiest.name,
            "cpu_s_per_mrow": busiest.cpu_s / mrows},
        "scale_ceiling": (actor_s / busiest.cpu_s) if busiest is not None and busiest.cpu_s > 0 else None,
        "processes": sorted(({"pid": p.pid, "kind": kinds[p.pid], "node": where[p.pid], "name": p.name,
                              "cpu_s": round(p.cpu_s, 4)} for p in procs if p.cpu_s > 0), key=lambda d: -d["cpu_s"]),
    }
    if node_roots is not None:
        by_node: dict[str, dict[str, float]] = {}
        for p in procs:
            per = by_node.setdefault(where[p.pid], {k: 0.0 for k in KINDS})
            per[kinds[p.pid]] += p.cpu_s / mrows
        out["by_node"] = dict(sorted(by_node.items()))
    if embedded_cpu_s is not None:
        e = embedded_cpu_s / ((embedded_rows or rows) / 1e6)
        out["embedded_cpu_s_per_mrow"] = e
        out["actors_over_embedded"] = out["cpu_s_per_mrow"][ACTOR] / e if e > 0 else None
    return out
