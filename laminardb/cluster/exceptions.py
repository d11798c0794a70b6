"""Errors of the Delta data plane: Ray actors and the cluster client (LDB-80xx)."""

from __future__ import annotations

from laminardb.errors import ClusterError

__all__ = ["ClusterUnavailableError", "ActorLostError", "ClusterStartError", "ActorTimeoutError",
           "HeadUnavailableError", "AttachConfigError", "RayAuthError"]


class ClusterUnavailableError(ClusterError):
    """The cluster client is not available in this build."""

    code = "LDB-8001"


class ActorLostError(ClusterError, ConnectionError):
    """A reactor actor died (Ray says so); its partitions' state and output are missing."""

    code = "LDB-8002"
    #: retrying cannot help (the source runner stops polling and logs it once): reconnect
    permanent = True


class ClusterStartError(ClusterError):
    """Ray could not be reached or has too few CPUs for the requested actors."""

    code = "LDB-8003"


class ActorTimeoutError(ClusterError, TimeoutError):
    """A live reactor actor did not answer within ``actor_call_timeout`` (paused, swapping,
    or stuck in a long call). It is not declared lost: the call may be retried, and the
    outputs of the batches it was running are delivered once it answers."""

    code = "LDB-8004"


class HeadUnavailableError(ClusterError, ConnectionError):
    """The database's head did not answer: it was restarting (its process died) for longer
    than the client's ``reconnect_timeout``, it is gone (the database was dropped), or a call
    that cannot be repeated safely (``execute``) was cut off by its restart. The message says
    which, and what to do."""

    code = "LDB-8005"


class AttachConfigError(ClusterError, ValueError):
    """``connect()`` to a running database gave config values that differ from the ones it
    runs with: the first connect decided them and an attach cannot change them, so they
    are refused rather than silently ignored; the message names each key."""

    code = "LDB-8006"


class RayAuthError(ClusterError, PermissionError):
    """The Ray cluster asks for token authentication and this process has none set up
    (``RAY_AUTH_MODE=token`` and the cluster's token in the environment)."""

    code = "LDB-8007"
