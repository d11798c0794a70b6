"""Errors of the Delta data plane: Ray actors and the cluster client (LDB-80xx)."""

from __future__ import annotations

from laminardb.errors import ClusterError

__all__ = ["ClusterUnavailableError", "ActorLostError", "ClusterStartError"]


class ClusterUnavailableError(ClusterError):
    """The cluster client is not available in this build."""

    code = "LDB-8001"


class ActorLostError(ClusterError, ConnectionError):
    """A reactor actor died or stopped answering; its partitions' output is missing."""

    code = "LDB-8002"


class ClusterStartError(ClusterError):
    """Ray could not be reached or has too few CPUs for the requested actors."""

    code = "LDB-8003"
