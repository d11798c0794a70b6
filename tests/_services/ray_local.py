"""A new local Ray for a test fixture: ``start_local_ray(**ray_init_kwargs)``.

Why not a bare ``ray.init(num_cpus=…)``: without an address, Ray first looks for a running
cluster to join (``RAY_ADDRESS``, the ``ray_current_cluster`` file), and having found one
refuses ``num_cpus`` ("When connecting to an existing cluster, num_cpus and num_gpus must
not be provided"). In one `make test` run a Ray start that failed left such a cluster
behind, and every Ray fixture after it failed the same way (47 errors from one timeout).
``address="local"`` always starts a new instance. Ray also waits only 30 s for its raylet to
register ("The current node timed out during startup"), which a 2-core machine busy with
Spark and database servers can miss: such a start is tried once more."""

from __future__ import annotations

_TIMED_OUT = "timed out during startup"


def start_local_ray(**kwargs):
    """``ray.init(address="local", **kwargs)``, tried twice if the node's start timed out."""
    import ray

    for attempt in range(2):
        try:
            return ray.init(address="local", **kwargs)
        except Exception as exc:
            if attempt or _TIMED_OUT not in str(exc):
                raise
            ray.shutdown()
    raise AssertionError("unreachable")
