"""Start N real gossip member processes on loopback UDP ports (tests and bench).

Entry point: :func:`start_gossip_members` → :class:`GossipGroup` (``kill``, ``pause``,
``resume``, ``view``, ``events``, ``stop``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests._services.procs import free_port, kill_proc, repo_env

__all__ = ["GossipGroup", "start_gossip_members"]


@dataclass
class GossipProc:
    """One member process."""

    node_id: str
    bind: str
    log: Path
    proc: subprocess.Popen


@dataclass
class GossipGroup:
    """Handle on member processes; ``stop()`` kills them all."""

    members: list[GossipProc]
    key: str

    def records(self, i: int) -> list[dict]:
        """All JSON lines member ``i`` wrote so far."""
        path = self.members[i].log
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written
        return out

    def view(self, i: int) -> list[str]:
        """Member ``i``'s latest member list."""
        views = [r["members"] for r in self.records(i) if "members" in r]
        return views[-1] if views else []

    def events(self, i: int, kind: str, about: str) -> list[dict]:
        """Events of ``kind`` member ``i`` saw about member ``about``."""
        return [r for r in self.records(i) if r.get("ev") == kind and r.get("id") == about]

    def signal(self, i: int, sig: int) -> None:
        """Send ``sig`` to member ``i`` (reaps it on SIGKILL)."""
        os.kill(self.members[i].proc.pid, sig)
        if sig == signal.SIGKILL:
            self.members[i].proc.wait(timeout=5)

    def stop(self) -> None:
        """Kill every member process."""
        for m in self.members:
            kill_proc(m.proc)


def start_member(base: Path, node_id: str, *, seeds: str, key: str,
                 suspicion_timeout: float = 3.0, bind: str | None = None) -> GossipProc:
    """Start one member process logging to ``base/<node_id>.jsonl``."""
    bind = bind or f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
    log = base / f"{node_id}.jsonl"
    with open(base / f"{node_id}.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests._services.gossip_member", node_id, bind, seeds,
             str(log), str(suspicion_timeout)],
            env=repo_env(LAMINARDB_GOSSIP_KEY=key), stdout=subprocess.DEVNULL, stderr=err,
        )
    return GossipProc(node_id, bind, log, proc)


def start_gossip_members(base: Path, n: int, *, key: str = "gossip-test-key",
                         suspicion_timeout: float = 3.0, seeds: int = 2) -> GossipGroup:
    """Start ``n`` members ``g0..g{n-1}``; the first ``seeds`` are everyone's seeds."""
    binds = [f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}" for _ in range(n)]
    seed_list = ",".join(binds[:seeds])
    group = GossipGroup([], key)
    try:
        for i, bind in enumerate(binds):
            group.members.append(start_member(base, f"g{i}", seeds=seed_list, key=key,
                                              suspicion_timeout=suspicion_timeout, bind=bind))
    except BaseException:
        group.stop()
        raise
    return group
