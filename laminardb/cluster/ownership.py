"""Vnode ownership for a cluster connection: from Raft when voters are configured.

Entry point: ``acquire_routing(n_actors, vnodes, raft)``. With a control plane the actors
are registered as Raft nodes, a balanced plan is committed through the log, and the
routing plus every actor's ``FencingToken``s are read back *from the committed state*
(never computed locally and assumed). Without one (a laptop ``ray://local``), the same
rendezvous plan is computed in-process and epochs are 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from laminardb.cluster.routing import Routing

#: the ownership namespace of the Delta data plane in the Raft state (one vnode space)
OWNERSHIP_SOURCE = "laminardb"


@dataclass(frozen=True)
class RaftConfig:
    """Where the voters are and the shared secret of their control RPC."""

    voters: tuple[str, ...]
    secret: str
    #: where the secret is kept (a ``cluster up`` data dir): the checkpoint coordinator, which
    #: holds secrets in memory only, reads it again after a restart
    secret_file: str | None = None

    @classmethod
    def from_data_dir(cls, data_dir: str) -> RaftConfig:
        """Read ``cluster.json`` written by ``laminardb cluster up --data-dir``."""
        from laminardb.raft.launch import read_cluster_file

        info = read_cluster_file(data_dir)
        voters = tuple(v.rpc for v in info["voters"])
        if not info.get("secret_file"):
            return cls(voters, "")
        with open(info["secret_file"]) as f:
            return cls(voters, f.read().strip(), info["secret_file"])

    @classmethod
    def from_env(cls) -> RaftConfig | None:
        """``LAMINARDB_RAFT_DIR`` (a ``cluster up`` data dir) or ``LAMINARDB_RAFT_VOTERS`` + ``_SECRET``."""
        if os.environ.get("LAMINARDB_RAFT_DIR"):
            return cls.from_data_dir(os.environ["LAMINARDB_RAFT_DIR"])
        voters = os.environ.get("LAMINARDB_RAFT_VOTERS")
        if voters:
            return cls(tuple(v.strip() for v in voters.split(",") if v.strip()),
                       os.environ.get("LAMINARDB_RAFT_SECRET", ""))
        return None


@dataclass
class Ownership:
    routing: Routing
    epochs: np.ndarray  # int64[V]: committed epoch per vnode (0 without Raft)
    members: list[str]
    raft: object | None = None
    tokens: dict[int, list] = field(default_factory=dict)  # actor index → [FencingToken]

    def release(self) -> None:
        """Deregister the actors (their vnodes' epochs rise: old tokens are fenced)."""
        if self.raft is None:
            return
        try:
            for m in self.members:
                self.raft.deregister_node(m)
        finally:
            self.raft.close()


def acquire_routing(members: list[str], vnodes: int, raft: RaftConfig | None,
                    addresses: list[str], source: str = OWNERSHIP_SOURCE) -> Ownership:
    """The vnode → actor map, committed in Raft under ``source`` (one per database, so two
    databases on one control plane never take each other's vnodes)."""
    if raft is None:
        routing = Routing.from_members(len(members), vnodes)
        return Ownership(routing, np.zeros(vnodes, np.int64), members)
    from laminardb.raft.client import RaftClient

    client = RaftClient(list(raft.voters), secret=raft.secret)
    for m, addr in zip(members, addresses, strict=True):
        client.register_node(m, address=addr, cores=1, metadata={"kind": "reactor"})
    client.commit_plan(source, members=members, vnode_count=vnodes)
    snap = client.ownership(source, barrier=True)["sources"][source]
    index = {m: i for i, m in enumerate(members)}
    owners = snap["owner"]
    unowned = [v for v, o in enumerate(owners) if o not in index]
    if unowned:
        raise RuntimeError(f"Raft left vnodes {unowned[:8]} without a live actor")
    routing = Routing(np.array([index[o] for o in owners], dtype=np.int64))
    tokens = {i: client.tokens(source, m, barrier=False) for i, m in enumerate(members)}
    return Ownership(routing, np.array(snap["epoch"], dtype=np.int64), members, client, tokens)
