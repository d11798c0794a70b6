"""Joining Ray: ``init_ray(address, actors)`` for ``ray://auto``, ``ray://local`` and ``ray://host:port``.

Why apart: the remote client, the in-process engine and the CLI all join Ray the same way, and
the Ray Client's transient start failures are retried here once for all of them.
"""

from __future__ import annotations

import logging
import time

from laminardb.cluster.exceptions import ClusterStartError
from laminardb.cluster.ray_auth import check_token_auth

log = logging.getLogger(__name__)


def init_ray(address: str, actors: int | None):
    """``ray.init`` for a ``ray://`` address (unless this process is connected already)."""
    from laminardb._extras import require

    ray = require("ray", extra="cluster", for_what=f"connect({address!r})")
    if not address.startswith("ray://"):
        raise ClusterStartError(f"connect({address!r}): use ray://auto, ray://local or ray://host:port")
    target = address[len("ray://"):]
    if not ray.is_initialized():
        if target == "local":
            ray.init(num_cpus=actors or None, include_dashboard=False, log_to_driver=False)
        elif target == "auto":
            check_token_auth("auto")  # a token-auth cluster and no token: fail now, not in 20 s
            ray.init(address="auto", log_to_driver=False)
        else:
            _init_ray_client(ray, address)
    return ray


# Ray's client proxy starts one server process per connecting job; on a loaded node that start
# sometimes fails ("Starting Ray client server failed"), or outlasts the client's own ~35 s of
# connection attempts ("ray client connection timeout"), and succeeds when asked again.
_CLIENT_START_TRIES = 3
_CLIENT_RETRYABLE = ("Starting Ray client server failed", "ray client connection timeout")


def _init_ray_client(ray, address: str) -> None:
    for attempt in range(_CLIENT_START_TRIES):
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except ConnectionError as exc:  # ConnectionAbortedError too
            if not any(m in str(exc) for m in _CLIENT_RETRYABLE) or attempt == _CLIENT_START_TRIES - 1:
                raise
            log.warning("ray client could not connect to %s (%s; try %d of %d); trying again",
                        address, exc, attempt + 1, _CLIENT_START_TRIES)
            time.sleep(2.0)
