"""Gossip membership drives Raft ownership: join → plan over everyone, leave → moved away."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from laminardb.discovery import GossipConfig, GossipDiscovery
from laminardb.raft import RaftClient
from laminardb.raft.rebalance import Rebalancer
from tests._services.procs import free_port, wait_until
from tests._services.raft import RaftCluster

pytestmark = pytest.mark.integration


def _owners(client: RaftClient, source: str) -> dict[str, int]:
    src = client.ownership(source, barrier=True)["sources"].get(source)
    out: dict[str, int] = {}
    for o in (src or {}).get("owner", []):
        out[o] = out.get(o, 0) + 1
    return out


def test_gossip_join_and_leave_rebalance_through_raft(
    raft_cluster: Callable[..., RaftCluster],
) -> None:
    cluster = raft_cluster(3)
    client = cluster.client()
    binds = [f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}" for _ in range(3)]
    members = [
        GossipDiscovery(GossipConfig(node_id=f"m{i}", bind=b, key="k", seeds=(binds[0],),
                                     metadata={"cores": 2}))
        for i, b in enumerate(binds)
    ]
    rebalancer = Rebalancer(client, members[0], sources=["orders"], vnode_count=30)
    started = []
    try:
        for m in members:
            m.start()
            started.append(m)
        rebalancer.start()
        wait_until(lambda: _owners(client, "orders") == {"m0": 10, "m1": 10, "m2": 10},
                   timeout=20, what="30 vnodes spread over m0..m2")
        before = client.ownership("orders")["sources"]["orders"]

        members[2].stop()  # graceful leave
        started.remove(members[2])
        wait_until(lambda: _owners(client, "orders") == {"m0": 15, "m1": 15}, timeout=20,
                   what="m2's vnodes moved to m0/m1")
        after = client.ownership("orders")["sources"]["orders"]
        for v in range(30):
            if before["owner"][v] == "m2":
                assert after["epoch"][v] == before["epoch"][v] + 1  # moved: fenced
            else:
                assert (after["owner"][v], after["epoch"][v]) == (before["owner"][v],
                                                                  before["epoch"][v])
    finally:
        rebalancer.stop()
        for m in started:
            m.stop()
