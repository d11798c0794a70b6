"""Start a cluster of real Raft voter processes on loopback for tests and the bench.

Entry point: :func:`start_raft_cluster` → :class:`RaftCluster` (``kill``, ``restart``,
``leader``, ``client``, ``stop``). Voters run ``python -m laminardb.raft.cli raft-node``
exactly as an operator would, with the secret passed through the environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from laminardb.raft.client import RaftClient
from tests._services.procs import free_port, kill_proc, repo_env, wait_until

__all__ = ["RaftCluster", "TEST_SECRET", "Voter", "start_raft_cluster"]

# Voters refuse secrets shorter than 16 bytes (LDB-9030); tests share this 32-byte one.
TEST_SECRET = "test-secret-0123456789abcdefghij"

# Cold start of a voter process (imports, cryptography key derivation) plus first election.
_START_TIMEOUT_S = 20.0


@dataclass
class Voter:
    """One voter process and its addresses."""

    node_id: str
    raft: str
    rpc: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None


@dataclass
class RaftCluster:
    """Handle on running voters; ``stop()`` kills them all."""

    voters: list[Voter]
    secret: str
    extra_args: tuple[str, ...] = ()
    _clients: list[RaftClient] = field(default_factory=list)

    @property
    def rpc_addresses(self) -> list[str]:
        """RPC addresses of all voters."""
        return [v.rpc for v in self.voters]

    def client(self, *, deadline: float = 10.0) -> RaftClient:
        """A new authenticated client (closed by ``stop()``)."""
        c = RaftClient(self.rpc_addresses, secret=self.secret, deadline=deadline)
        self._clients.append(c)
        return c

    def start(self, i: int) -> None:
        """(Re)start voter ``i`` with its existing data dir."""
        v = self.voters[i]
        peers = ",".join(x.raft for x in self.voters)
        cmd = [sys.executable, "-m", "laminardb.raft.cli", "raft-node", "--id", v.node_id,
               "--bind", v.raft, "--peers", peers, "--data-dir", str(v.data_dir),
               "--rpc-bind", v.rpc, *self.extra_args]
        log = open(v.log_path, "ab")  # noqa: SIM115 - owned by the child from here on
        try:
            v.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      env=repo_env(LAMINARDB_RAFT_SECRET=self.secret))
        finally:
            log.close()

    def signal(self, i: int, sig: int) -> None:
        """Send ``sig`` to voter ``i``; ``SIGKILL`` also reaps it."""
        proc = self.voters[i].proc
        assert proc is not None
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=5)

    def leader_index(self, client: RaftClient | None = None, *, wait: float = 5.0) -> int:
        """Index of the current leader, polled for up to ``wait`` s.

        A voter that answers may not have heard from the leader yet (on a loaded machine, a
        moment after ``wait_ready``): it reports no leader, so ask again until one is named.
        """
        c = client or self.client(deadline=3.0)
        end = time.monotonic() + wait
        while True:
            status = c.status()["raft"]
            for i, v in enumerate(self.voters):
                if v.raft == status["leader"]:
                    return i
            if time.monotonic() >= end:
                msg = f"no leader yet (status {status})"
                raise LookupError(msg)
            time.sleep(0.1)

    def wait_ready(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Wait until a leader committed an entry (a write through the RPC succeeds)."""
        c = self.client(deadline=2.0)
        # A barrier read is a committed no-op: proves leader + quorum without changing state.
        wait_until(lambda: c.ownership(barrier=True) and self.leader_index(c) >= 0,
                   timeout=timeout, interval=0.2, what="a Raft leader committing entries")

    def logs(self) -> str:
        """All voter logs (for assertion messages)."""
        return "\n".join(f"--- {v.node_id}\n{v.log_path.read_text(errors='replace')[-3000:]}"
                         for v in self.voters if v.log_path.exists())

    def stop(self) -> None:
        """Close clients and kill every voter process."""
        for c in self._clients:
            c.close()
        for v in self.voters:
            if v.proc is not None:
                kill_proc(v.proc)


def start_raft_cluster(base_dir: Path, *, n: int = 3, secret: str = TEST_SECRET,
                       extra_args: tuple[str, ...] = (), wait: bool = True) -> RaftCluster:
    """Start ``n`` voters on free loopback ports under ``base_dir``.

    The caller must call ``stop()`` (the ``raft_cluster`` fixture does) — also on failure.
    """
    voters = [
        Voter(node_id=f"v{i + 1}", raft=f"127.0.0.1:{free_port()}", rpc=f"127.0.0.1:{free_port()}",
              data_dir=base_dir / f"v{i + 1}", log_path=base_dir / f"v{i + 1}.log")
        for i in range(n)
    ]
    cluster = RaftCluster(voters, secret, tuple(extra_args))
    try:
        for i in range(n):
            cluster.start(i)
        if wait:
            try:
                cluster.wait_ready()
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}\n{cluster.logs()}") from exc
    except BaseException:
        cluster.stop()
        raise
    return cluster
