"""One thread per client connection that reads all its callback subscriptions at once.

Why: every read is a long-poll that holds one of the head's threads for up to 200 ms. With
a thread and a call per subscription, 40 callback subscriptions held all 32 of the head's
threads, and every other call waited for one (bench/bench_subscribers.py: ``list_streams()``
p50 40 ms against 1 ms). The pump sends one ``sub_read_many`` for every subscription it
serves. (The head's CPU per row does not change measurably: bench_scale ``kafka-subs``.)
Iterated subscriptions (``next_timeout``, ``for batch in sub``) still read on the caller's
thread, one call each.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laminardb.cluster.client import RemoteConnection, RemoteSubscription

log = logging.getLogger(__name__)


class SubscriptionPump:
    """Moves the head's batches into the local queues of the subscriptions ``add``ed to it.

    The thread runs while any of them is live and exits when the last ends, is cancelled or
    the connection closes (a later ``add`` starts a new one). A failed call ends every
    subscription it read, as a lost connection does; a failure the head reports for one
    subscription ends only that one."""

    def __init__(self, conn: RemoteConnection, poll_ms: float) -> None:
        self._conn = conn
        self._poll_ms = poll_ms
        self._lock = threading.Lock()
        self._subs: list[RemoteSubscription] = []
        self._thread: threading.Thread | None = None

    def add(self, sub: RemoteSubscription) -> None:
        with self._lock:
            self._subs.append(sub)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="laminardb-subscriptions", daemon=True)
                self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait (bounded) for the thread to end; it does within one poll of ``close()``."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _live(self) -> list[RemoteSubscription]:
        """The subscriptions to read now; none (and the thread ends) once the connection
        closed, which ends them: their callbacks hand over what is queued, then stop."""
        with self._lock:
            self._subs = [s for s in self._subs if not (s._cancelled or s._ended)]
            if self._subs and not self._conn._closed:
                return list(self._subs)
            closed, self._subs, self._thread = self._subs, [], None
        for sub in closed:
            sub._end()
        return []

    def _run(self) -> None:
        try:
            self._pump()
        finally:  # also when a bug raised: a later add() must start a new thread
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _pump(self) -> None:
        while subs := self._live():
            with contextlib.ExitStack() as held:
                for sub in subs:  # one reader at a time per subscription: batches stay in order
                    held.enter_context(sub._pull_lock)
                try:
                    got: dict[str, Any] = self._conn._read_subscriptions(
                        "sub_read_many", [(s._sid, s._next) for s in subs], self._poll_ms)
                except Exception as exc:  # noqa: BLE001 - the connection closed or the head is gone
                    if not self._conn._closed:
                        log.warning("subscriptions of database %s ended: %s: %s",
                                    self._conn.database, type(exc).__name__, exc)
                    for sub in subs:
                        sub._end()
                    continue
                for sub in subs:
                    answer = got.get(sub._sid)
                    try:
                        if answer is not None:
                            sub._apply(answer)
                    except Exception:  # noqa: BLE001 - this subscription ends; the others go on
                        log.exception("subscription to %s ended: its read could not be delivered", sub.name)
                        sub._end()
