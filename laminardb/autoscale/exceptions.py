"""Errors of the autoscaler (LDB-801x, in the cluster range)."""

from __future__ import annotations

from laminardb.errors import ClusterError

__all__ = ["AutoscaleConfigError", "ScaleCapacityError"]


class AutoscaleConfigError(ClusterError, ValueError):
    """An autoscaling key of the database config has a wrong type or value (``min_actors`` above
    ``max_actors``, a ``catch_up_time`` that is not a duration, a utilization outside (0, 1], …).
    Raised when the config is read, before any actor is started or moved."""

    code = "LDB-8010"


class ScaleCapacityError(ClusterError):
    """``db.scale(n)`` / ``laminardb cluster scale`` asked for more actors than the Ray cluster
    has free CPUs (one each). Nothing moved; Ray's autoscaler (a ``ray up`` cluster with
    ``max_workers``) has been asked for the CPUs: try again once ``ray status`` shows them, or
    ask for fewer actors."""

    code = "LDB-8011"
