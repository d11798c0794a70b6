"""``ray`` discovery: members are the alive nodes of the Ray cluster (its GCS node table).

Entry point: :class:`RayDiscovery` — the default inside a Ray cluster. Ray's GCS already runs
health checks, so this backend only polls ``ray.nodes()`` every ``poll_interval`` and turns
changes into JOIN / LEAVE events. Member id = Ray node id; address = the node's IP;
metadata = node name and resources.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from laminardb.discovery.base import Discovery, Member
from laminardb.discovery.exceptions import DiscoveryNotStartedError, DiscoveryUnavailableError

__all__ = ["RayDiscovery"]

_log = logging.getLogger(__name__)

# GCS marks a node dead after its own health-check timeout (seconds); polling faster than 1 s
# adds load on the GCS without detecting anything sooner.
_POLL_S = 1.0


def _members_from(nodes: list[dict[str, Any]]) -> list[Member]:
    return [
        Member(
            str(n["NodeID"]),
            str(n.get("NodeManagerAddress", "")),
            {"name": n.get("NodeName", ""), "resources": dict(n.get("Resources") or {}),
             "head": bool((n.get("Resources") or {}).get("node:__internal_head__"))},
        )
        for n in nodes
        if n.get("Alive")
    ]


class RayDiscovery(Discovery):
    """Members from the Ray cluster this process is connected to.

    Args:
        address: Ray cluster address to ``ray.init`` if not connected yet (``"auto"`` finds a
            local cluster); ``None`` requires an existing connection.
        poll_interval: seconds between reads of the node table.
    """

    def __init__(self, *, address: str | None = None, poll_interval: float = _POLL_S) -> None:
        super().__init__()
        self.address = address
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Read the node table once, then poll it in the background.

        Raises:
            DiscoveryUnavailableError: Ray is not initialized and no ``address`` was given.
        """
        import ray

        if not ray.is_initialized():
            if self.address is None:
                msg = ("ray discovery needs a Ray connection: call ray.init() first or pass "
                       "address='auto'")
                raise DiscoveryUnavailableError(msg)
            ray.init(address=self.address)
        self._update(_members_from(ray.nodes()))
        self._thread = threading.Thread(target=self._poll, name="ray-discovery", daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        """Read the node table now (also done every ``poll_interval``)."""
        import ray

        self._update(_members_from(ray.nodes()))

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception:  # GCS briefly unreachable: keep the last view
                _log.warning("reading the Ray node table failed", exc_info=True)

    def stop(self) -> None:
        """Stop polling (the Ray connection is left as it was)."""
        if self._thread is None:
            raise DiscoveryNotStartedError("ray discovery is not running; call start() first")
        self._stop.set()
        self._thread.join(timeout=self.poll_interval + 2)
        self._thread = None
