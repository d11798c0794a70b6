"""The autoscaler inside a database head: every ``evaluation_interval`` observe, decide, rescale.

Entry point: ``AutoscaleDriver(head, config)``; ``start()`` runs it on a thread of the head
(``cluster/head.py``), ``stop()`` ends it. Each tick:

1. ``LoadObserver.observe`` samples Kafka offsets and the actors' busy time (no engine lock);
2. ``Autoscaler.evaluate`` decides (pure; the reason says why, in words);
3. a changed decision calls ``head.rescale(n, by="autoscaler", reason=…)``: a checkpoint, then the
   engine rebuilt on n actors from it (the recovery path: vnodes move with their state, Kafka
   partitions follow, the old actors' epochs are fenced, output stays exactly-once).

When the decision is capped by the cluster's free CPUs, the driver asks Ray's autoscaler for
them (``ray.autoscaler.sdk.request_resources``): on a ``ray up`` cluster with ``max_workers``
Ray adds nodes and a later evaluation finds the CPUs free; without one the request does
nothing and the status keeps saying "capped at M: no free CPUs". Never an error loop.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from laminardb.autoscale.config import AutoscaleConfig
from laminardb.autoscale.observe import LoadObserver
from laminardb.autoscale.policy import Autoscaler, Decision

__all__ = ["AutoscaleDriver"]

log = logging.getLogger(__name__)


class AutoscaleDriver:
    """One database's autoscaling loop (observation → policy → rescale)."""

    def __init__(self, head, config: AutoscaleConfig) -> None:
        self.head = head
        self.config = config
        self.policy = Autoscaler(config)
        self.observer = LoadObserver(config.metrics_window)
        self.errors = 0
        self.last_error: str | None = None
        self._cpus_asked: int | None = None  # CPUs last asked of Ray's autoscaler
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="laminardb-autoscaler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self.observer.close()

    def _run(self) -> None:
        while not self._stop.wait(self.config.evaluation_interval):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - logged and shown; the next tick tries again
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("database %s: autoscale evaluation failed: %s", self.head.database, exc)

    def tick(self) -> Decision | None:
        """One evaluation (the thread's body; tests and benches may call it directly)."""
        conn = self.head.conn
        if conn is None:
            return None  # a recovery or rescale is swapping the engine: next time
        obs = self.observer.observe(conn, vnodes=self.head.vnodes)
        if obs is None:
            return None  # the first sample of a window
        decision = self.policy.evaluate(obs)
        self._ask_ray_for_cpus(decision)
        if decision.changed and self.config.enabled:
            self.head.rescale(decision.actors, by="autoscaler", reason=decision.reason)
            self.observer.reset()
        return decision

    def rescaled(self) -> None:
        """The actor count changed by other means (``db.scale``): the rates start over."""
        self.observer.reset()

    def metrics(self) -> dict[str, Any]:
        out = self.policy.metrics()
        out.update(inputs=self.observer.last, errors=self.errors, last_error=self.last_error,
                   cpus_asked_of_ray=self._cpus_asked)
        return out

    def _ask_ray_for_cpus(self, decision: Decision) -> None:
        """Capped by free CPUs: ask Ray's autoscaler for one CPU per wanted actor; once not
        capped any more, withdraw the request (so idle nodes can go)."""
        # the count every other limit allows (max_actors, partitions, vnodes), not the raw wish:
        # a node the database could never use is never asked for
        wanted = decision.inputs.get("without_cpu_cap")
        if not self.config.enabled:
            return
        ask = int(wanted) if decision.capped_by == "free_cpus" and wanted else None
        if ask != self._cpus_asked and ask_ray_for_cpus(ask or 0):
            self._cpus_asked = ask


def ask_ray_for_cpus(n: int) -> bool:
    """Ask Ray's autoscaler for ``n`` one-CPU bundles (0: withdraw the request); False when no
    autoscaler can be reached (the status then keeps saying "capped")."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[{"CPU": 1}] * n)
        return True
    except Exception as exc:  # noqa: BLE001 - no autoscaler reachable
        log.info("could not ask Ray's autoscaler for %d CPUs: %s", n, exc)
        return False
