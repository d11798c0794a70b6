"""Delta mode: Ray reactor actors, key routing and the cluster client (``connect``)."""

from __future__ import annotations

__all__ = ["connect"]


def __getattr__(name: str):
    if name == "connect":
        from laminardb.cluster.client import connect

        return connect
    raise AttributeError(name)
