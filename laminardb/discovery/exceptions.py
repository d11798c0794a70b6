"""Errors of the membership backends: codes LDB-7001…LDB-7099.

Each leaf subclasses :class:`~laminardb.errors.DiscoveryError` and the matching builtin.
"""

from __future__ import annotations

from laminardb.errors import DiscoveryError

__all__ = [
    "DiscoveryConfigError",
    "DiscoveryUnavailableError",
    "DiscoveryNotStartedError",
    "UnknownDiscoveryKindError",
]


class DiscoveryConfigError(DiscoveryError, ValueError):
    """A backend was configured with missing or contradictory settings (LDB-7001)."""

    code = "LDB-7001"


class DiscoveryUnavailableError(DiscoveryError, ConnectionError):
    """The backend's service (Ray GCS, Kafka broker, gossip seeds) cannot be reached (LDB-7002)."""

    code = "LDB-7002"


class DiscoveryNotStartedError(DiscoveryError, RuntimeError):
    """``members()`` or ``stop()`` was called on a backend that is not running (LDB-7003)."""

    code = "LDB-7003"


class UnknownDiscoveryKindError(DiscoveryError, ValueError):
    """``make_discovery`` was given a kind other than ray, gossip, kafka or static (LDB-7004)."""

    code = "LDB-7004"
