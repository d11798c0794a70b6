"""Discovery → Raft: recompute and commit the vnode plan when members join or leave.

Entry point: :class:`Rebalancer`. Discovery only says who is alive; this turns JOIN / LEAVE
into committed Raft commands: register newly seen members, then ``commit_plan`` per source
over the live members. The plan itself is computed *inside* the state machine from committed
state, so two rebalancers racing cannot commit conflicting assignments — the later one simply
finds nothing (or less) to move. SUSPECT does nothing: a suspect still owns its vnodes until
discovery declares it gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from laminardb.discovery.base import Discovery, EventKind, MemberEvent
from laminardb.errors import ControlPlaneError
from laminardb.raft.client import RaftClient

__all__ = ["Rebalancer"]

_log = logging.getLogger(__name__)

# Joins often come in bursts (a cluster starting); wait this long after the last event so one
# plan covers the burst instead of one plan per member.
_DEBOUNCE_S = 0.3
# Retry period after a failed reconcile (no quorum, voter restarting).
_RETRY_S = 1.0


class Rebalancer:
    """Keeps ownership planned over the live members of ``discovery``.

    Args:
        client: Raft client.
        discovery: a started (or to-be-started) membership backend.
        sources: sources whose vnodes to plan.
        vnode_count: vnode count for sources that do not exist yet (``None`` = default).
    """

    def __init__(self, client: RaftClient, discovery: Discovery, *, sources: Sequence[str],
                 vnode_count: int | None = None, debounce: float = _DEBOUNCE_S) -> None:
        self.client = client
        self.discovery = discovery
        self.sources = list(sources)
        self.vnode_count = vnode_count
        self.debounce = debounce
        self.commits = 0
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._unsubscribe = None
        self._thread = threading.Thread(target=self._run, name="rebalancer", daemon=True)

    def start(self) -> None:
        """Subscribe and plan once for the current members."""
        self._unsubscribe = self.discovery.subscribe(self._on_event)
        self._dirty.set()
        self._thread.start()

    def stop(self) -> None:
        """Unsubscribe and stop the worker."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._stop.set()
        self._dirty.set()
        self._thread.join(timeout=10)

    def _on_event(self, event: MemberEvent) -> None:
        if event.kind in (EventKind.JOIN, EventKind.LEAVE):
            self._dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            # Debounce: wait until no new event arrived for `debounce` seconds.
            self._dirty.clear()
            while self._stop.wait(self.debounce) is False and self._dirty.is_set():
                self._dirty.clear()
            try:
                self.reconcile()
            except ControlPlaneError:
                _log.warning("rebalance failed; retrying", exc_info=True)
                self._stop.wait(_RETRY_S)
                self._dirty.set()

    def reconcile(self) -> list[dict]:
        """Register unknown live members and commit a plan per source; returns the results."""
        live = self.discovery.members()
        registered = set(self.client.ownership(barrier=True)["nodes"])
        for m in live:
            if m.id not in registered:
                cores = m.metadata.get("cores", 1)
                self.client.register_node(m.id, address=m.address,
                                          cores=int(cores) if isinstance(cores, int) else 1,
                                          metadata={k: v for k, v in m.metadata.items()
                                                    if isinstance(v, str | int | float | bool)})
        ids = [m.id for m in live]
        results = [self.client.commit_plan(src, members=ids, vnode_count=self.vnode_count)
                   for src in self.sources]
        self.commits += 1
        return results
