"""``make_discovery(kind, **cfg)``: build a membership backend by name.

Entry point: :func:`make_discovery`. ``cfg`` is passed to the backend's constructor (for
``gossip``: the fields of :class:`GossipConfig`).
"""

from __future__ import annotations

from typing import Any, Literal

from laminardb.discovery.base import Discovery
from laminardb.discovery.exceptions import UnknownDiscoveryKindError

__all__ = ["make_discovery"]


def make_discovery(kind: Literal["ray", "gossip", "kafka", "static"], **cfg: Any) -> Discovery:
    """Build (not start) the discovery backend ``kind``.

    Args:
        kind: ``"ray"``, ``"gossip"``, ``"kafka"`` or ``"static"``.
        **cfg: backend settings, e.g. ``members=[...]`` for static,
            ``node_id=, bind=, key=, seeds=`` for gossip,
            ``bootstrap=, node_id=`` for kafka.

    Raises:
        UnknownDiscoveryKindError: ``kind`` is none of the four.
    """
    if kind == "static":
        from laminardb.discovery.static import StaticDiscovery

        return StaticDiscovery(**cfg)
    if kind == "gossip":
        from laminardb.discovery.gossip import GossipConfig, GossipDiscovery

        return GossipDiscovery(GossipConfig(**cfg))
    if kind == "kafka":
        from laminardb.discovery.kafka import KafkaDiscovery

        return KafkaDiscovery(**cfg)
    if kind == "ray":
        from laminardb.discovery.ray import RayDiscovery

        return RayDiscovery(**cfg)
    msg = f"unknown discovery kind {kind!r}; use one of ray, gossip, kafka, static"
    raise UnknownDiscoveryKindError(msg)
