"""Subscriptions: a bounded-wait queue of RecordBatches a stream emits after subscribing.

Entry points: ``Subscription`` (created by ``Connection.subscribe_stream``) and
``CallbackSubscription`` (``Connection.subscribe_callback``: a thread hands each batch to a
function). The engine calls ``_deliver`` and ``_end``; users call ``next_timeout``,
``try_next``, iterate, or read everything delivered so far with ``to_arrow()``.

Memory: ``to_arrow()`` returns every batch delivered so far, so a subscription keeps
them — up to ``history_rows`` (default ``_HISTORY_ROWS``); past that the oldest are released,
``history_truncated`` becomes True and a warning is logged once. A long-running consumer
that only uses ``try_next``/``next_timeout``/iteration should subscribe with
``history_rows=0`` and keep nothing beyond its queue.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator

import pyarrow as pa

from laminardb.errors import SubscriptionClosedError

log = logging.getLogger(__name__)

_HISTORY_ROWS = 5_000_000  # to_arrow() history bound: a consumer left running must not eat RAM


class Subscription:
    """Batches of one stream, in emission order, from the moment of subscribing."""

    def __init__(self, name: str, schema: pa.Schema, on_cancel: Callable[[Subscription], None], *,
                 history_rows: int = _HISTORY_ROWS) -> None:
        self.name = name
        self.schema = schema
        self._queue: collections.deque[pa.RecordBatch] = collections.deque()
        self._delivered: collections.deque[pa.RecordBatch] = collections.deque()
        self._held_rows = 0
        self.history_rows = history_rows
        self.history_truncated = False
        self._cond = threading.Condition()
        self._ended = False
        self._cancelled = False
        self._on_cancel = on_cancel
        #: called before every read: a cluster connection delivers the outputs of batches
        #: still on its actors here, so a read after insert() sees them as embedded
        self.before_read: Callable[[], None] | None = None
        #: events set on every delivery, end and cancel: ``wait_any`` waits on one for many
        self._wakers: set[threading.Event] = set()

    # engine side --------------------------------------------------------------
    def _deliver(self, batch: pa.RecordBatch) -> None:
        with self._cond:
            if self._cancelled:
                return
            self._queue.append(batch)
            if self.history_rows:
                self._delivered.append(batch)
                self._held_rows += batch.num_rows
                while self._held_rows > self.history_rows and len(self._delivered) > 1:
                    self._held_rows -= self._delivered.popleft().num_rows
                    if not self.history_truncated:
                        self.history_truncated = True
                        log.warning("subscription to %r: to_arrow() history over %d rows; oldest "
                                    "batches released (subscribe with history_rows=0 to keep none)",
                                    self.name, self.history_rows)
            self._notify()

    def _end(self) -> None:
        with self._cond:
            self._ended = True
            self._notify()

    def _notify(self) -> None:  # under _cond
        self._cond.notify_all()
        for waker in self._wakers:
            waker.set()

    def _ready(self) -> bool:
        return bool(self._queue) or self._ended or self._cancelled

    # user side ----------------------------------------------------------------
    def _take(self) -> pa.RecordBatch | None:
        return self._queue.popleft() if self._queue else None

    def try_next(self) -> pa.RecordBatch | None:
        """The next batch if one is waiting, else None (never blocks)."""
        self._sync()
        with self._cond:
            self._check()
            return self._take()

    def _take_queued(self) -> pa.RecordBatch | None:
        """``try_next`` without ``before_read``, and None once cancelled: for a cluster head's
        long-poll, which takes rows as they come (it must not drain the actors' rounds on every
        read) and may read a subscription a recovery has just replaced (and cancelled)."""
        with self._cond:
            return self._take()

    def next_timeout(self, timeout_ms: float) -> pa.RecordBatch | None:
        """The next batch, waiting at most ``timeout_ms``; None on timeout or end of stream."""
        self._sync()
        with self._cond:
            self._check()
            self._cond.wait_for(lambda: self._queue or self._ended or self._cancelled, timeout_ms / 1000.0)
            return self._take()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Blocking iteration; ends after ``finish()`` once every batch was taken."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._ended or self._cancelled)
                batch = self._take()
                if batch is None:
                    return
            yield batch

    def to_arrow(self) -> pa.Table:
        """Everything delivered so far, as one Table (never blocks); see the module docstring."""
        self._sync()
        with self._cond:
            return pa.Table.from_batches(list(self._delivered), schema=self.schema)

    def cancel(self) -> None:
        with self._cond:
            self._cancelled = True
            self._queue.clear()
            self._notify()
        self._on_cancel(self)

    @property
    def ended(self) -> bool:
        return self._ended

    def _sync(self) -> None:
        if self.before_read is not None and not self._cancelled:
            self.before_read()

    def _check(self) -> None:
        if self._cancelled:
            raise SubscriptionClosedError(f"the subscription to {self.name!r} was cancelled; subscribe again")

    def __repr__(self) -> str:
        return f"Subscription({self.name!r}, pending={len(self._queue)}, ended={self._ended})"


def wait_any(subs: list[Subscription], timeout_s: float) -> None:
    """Block until one of ``subs`` has a batch, has ended or was cancelled, or ``timeout_s``
    passed (without ``before_read``: rows come as they are delivered). Why: a cluster head
    answers one client's several subscriptions with one long-poll call (``sub_read_many``),
    so it waits for many queues on one thread."""
    waker = threading.Event()
    for sub in subs:
        with sub._cond:
            sub._wakers.add(waker)
    try:
        if not any(sub._ready() for sub in subs):
            waker.wait(timeout_s)
    finally:
        for sub in subs:
            with sub._cond:
                sub._wakers.discard(waker)


class CallbackSubscription:
    """Batches of one stream handed to ``on_data`` on a thread the connection owns.

    Created by ``Connection.subscribe_callback(name, on_data, on_error=None)``. ``on_data``
    gets each ``pyarrow.RecordBatch`` in emission order, one call at a time. When it raises,
    ``on_error(exc)`` is called and delivery goes on; without ``on_error`` (or when that raises
    too) delivery stops, the exception is kept in ``error``, logged, and raised by ``wait()``.
    ``cancel()`` stops delivery (batches not yet handed over are dropped); the stream's end
    (``finish()``, ``close()``, ``shutdown()``) lets the thread hand over what is queued, then end.
    """

    def __init__(self, sub: Subscription, on_data: Callable[[pa.RecordBatch], object],
                 on_error: Callable[[BaseException], object] | None = None) -> None:
        self.name = sub.name
        self.schema = sub.schema
        self.error: BaseException | None = None
        self._sub = sub
        self._on_data, self._on_error = on_data, on_error
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=f"laminardb-callback-{sub.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sub = self._sub
        while True:
            with sub._cond:
                sub._cond.wait_for(lambda: sub._queue or sub._ended or sub._cancelled)
                batch = None if sub._cancelled else sub._take()
                if batch is None:
                    sub._cond.notify_all()
                    return
                self._busy = True
            try:
                self._on_data(batch)
            except BaseException as exc:  # noqa: BLE001 - user code: reported through on_error / .error
                if not self._failed(exc):
                    return
            finally:
                with sub._cond:
                    self._busy = False
                    sub._cond.notify_all()

    def _failed(self, exc: BaseException) -> bool:
        """``on_data`` raised: True to go on delivering."""
        if self._on_error is not None:
            try:
                self._on_error(exc)
                return True
            except BaseException as again:  # noqa: BLE001 - stops delivery, kept in .error
                exc = again
        self.error = exc
        log.warning("callback subscription to %r stopped: its callback raised %s: %s",
                    self.name, type(exc).__name__, exc)
        self._sub.cancel()
        return False

    def cancel(self) -> None:
        """Stop delivery (idempotent); a callback already running finishes first (see ``wait``)."""
        if not self._sub._cancelled:
            self._sub.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until delivery has stopped (cancelled, failed, or the stream ended and every
        batch was handed over); True if it has. Raises the callback's error, if delivery stopped
        because of one."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self.error is not None:
            raise self.error
        return not self._thread.is_alive()

    def _join(self, timeout: float) -> None:
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _drain(self, timeout: float) -> bool:
        """Wait until every batch delivered so far was handed to the callback and it returned."""
        if threading.current_thread() is self._thread:
            return True
        sub = self._sub
        with sub._cond:
            return sub._cond.wait_for(lambda: (not sub._queue and not self._busy)
                                      or not self._thread.is_alive(), timeout)

    @property
    def is_active(self) -> bool:
        """True while delivery goes on."""
        return self._thread.is_alive() and not self._sub._cancelled

    @property
    def pending(self) -> int:
        """Batches delivered to the subscription and not yet handed to the callback."""
        return len(self._sub._queue)

    def __repr__(self) -> str:
        state = "active" if self.is_active else "finished"
        return f"CallbackSubscription(stream={self.name!r}, {state})"
