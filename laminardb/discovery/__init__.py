"""Membership discovery for the Delta mode: who is alive (Raft decides who owns what).

Re-exports only. Backends: ``ray`` (Ray GCS node table), ``gossip`` (SWIM over UDP),
``kafka`` (heartbeats on a compacted membership topic), ``static`` (fixed list); build one with
:func:`make_discovery`. Names resolve lazily so that importing this package does not import
Ray or kafka-python unless that backend is used.
"""

from __future__ import annotations

from typing import Literal

from laminardb._lazy import lazy_exports

__all__ = [
    "Discovery",
    "DiscoveryConfigError",
    "DiscoveryNotStartedError",
    "DiscoveryUnavailableError",
    "EventKind",
    "GossipConfig",
    "GossipDiscovery",
    "KafkaDiscovery",
    "Member",
    "MemberEvent",
    "RayDiscovery",
    "StaticDiscovery",
    "UnknownDiscoveryKindError",
    "make_discovery",
]

DiscoveryKind = Literal["ray", "gossip", "kafka", "static"]

_WHERE = {
    "Discovery": "base",
    "EventKind": "base",
    "Member": "base",
    "MemberEvent": "base",
    "DiscoveryConfigError": "exceptions",
    "DiscoveryNotStartedError": "exceptions",
    "DiscoveryUnavailableError": "exceptions",
    "UnknownDiscoveryKindError": "exceptions",
    "GossipConfig": "gossip",
    "GossipDiscovery": "gossip",
    "KafkaDiscovery": "kafka",
    "RayDiscovery": "ray",
    "StaticDiscovery": "static",
    "make_discovery": "factory",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
