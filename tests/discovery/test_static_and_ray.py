"""Static discovery, the factory, and Ray discovery against a real two-node Ray cluster."""

from __future__ import annotations

import pytest

from laminardb.discovery import (
    DiscoveryConfigError,
    EventKind,
    Member,
    MemberEvent,
    StaticDiscovery,
    UnknownDiscoveryKindError,
    make_discovery,
)
from tests._services.procs import wait_until


def test_static_lists_members_and_emits_joins() -> None:
    d = make_discovery("static", members=["b=10.0.0.2:7000", Member("a", "10.0.0.1:7000")])
    assert isinstance(d, StaticDiscovery)
    seen: list[MemberEvent] = []
    d.subscribe(seen.append)
    with d:
        assert [(m.id, m.address) for m in d.members()] == [("a", "10.0.0.1:7000"),
                                                             ("b", "10.0.0.2:7000")]
    assert [(e.kind, e.member.id) for e in seen] == [(EventKind.JOIN, "a"), (EventKind.JOIN, "b")]


def test_static_refuses_duplicate_ids() -> None:
    with pytest.raises(DiscoveryConfigError) as err:
        StaticDiscovery(["a", "a"])
    assert err.value.code == "LDB-7001"


def test_unknown_kind() -> None:
    with pytest.raises(UnknownDiscoveryKindError):
        make_discovery("zookeeper")  # type: ignore[arg-type]


@pytest.mark.integration
def test_ray_discovery_follows_the_node_table() -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    disc = make_discovery("ray", poll_interval=0.5)
    events: list[MemberEvent] = []
    try:
        disc.subscribe(events.append)
        disc.start()
        assert len(disc.members()) == 1 and disc.members()[0].metadata["head"]
        worker = cluster.add_node(num_cpus=1)
        wait_until(lambda: len(disc.members()) == 2, timeout=60, what="the second Ray node")
        cluster.remove_node(worker)
        wait_until(lambda: len(disc.members()) == 1, timeout=60, what="the Ray node to leave")
        kinds = [e.kind for e in events]
        assert kinds == [EventKind.JOIN, EventKind.JOIN, EventKind.LEAVE]
        assert events[1].member.id == events[2].member.id == worker.node_id
    finally:
        if getattr(disc, "_thread", None) is not None:
            disc.stop()
        import ray

        ray.shutdown()
        cluster.shutdown()
