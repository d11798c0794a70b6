"""What the engine expects of the parts it runs, as ``typing.Protocol`` s.

Why: the reactor runs operators, sources and sinks built by different code — in-process
operators here, actor-backed ones in the Delta mode (``laminardb/cluster``), Kafka, file and
datagen sources, FILE/Kafka/Delta Lake sinks. These protocols are the whole of what it relies
on; the reactor dispatches on what they declare, never on ``getattr``/``hasattr`` probes.

The four contracts:

- ``Operator``: one continuous query's state machine.
- ``Source``: a polled connector (Kafka, datagen, filesystem tables).
- ``Sink``: where a stream's rows go; exactly-once sinks add the two-phase contract of
  ``laminardb.checkpoint.sink.TwoPhaseSink``.
- ``ExecutionBackend``: where operators, plan trees, sources and sinks are placed, and the
  hooks a backend whose work runs elsewhere needs (deliver what is pending, install DDL on its
  workers, check they are alive). It is passed to the ``Engine``; nothing subclasses the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import pyarrow as pa

if TYPE_CHECKING:
    from laminardb.engine.engine import Engine
    from laminardb.engine.reactor import Node
    from laminardb.engine.subscriptions import Subscription
    from laminardb.results import ExecuteResult
    from laminardb.sql import ddl
    from laminardb.sql.plan import QueryPlan

#: what ``process`` returns: the output batches, and the late rows (None: none) it dropped
Output = tuple[list[pa.RecordBatch], "pa.RecordBatch | None"]


@runtime_checkable
class DeferredRows(Protocol):
    """Rows of a source batch left where they were read (the Delta mode's actors), standing
    in for a ``pyarrow.RecordBatch``: the reactor passes them to operators unchanged and asks
    for the rows themselves only where it needs them here (``materialize()``, subscribers)."""

    num_rows: int
    max_event_time: int
    nbytes: int  # the decoded rows' Arrow bytes where they were read (a source's bytes_in)

    def materialize(self) -> pa.RecordBatch: ...


class Operator(Protocol):
    """One continuous query: it is fed batches in order and watermarks that never go back.

    Invariants:
    - calls never overlap (the reactor holds its lock) and come in arrival order;
    - ``process(batch, wm_before)`` judges lateness against ``wm_before``, the watermark as it
      stood *before* the batch; rows it drops as late are counted in ``late_dropped`` and
      returned as the second item (so LATE DATA TO can route them);
    - ``on_watermark(wm)`` emits what ``wm`` closes; ``wm`` never decreases;
    - with ``changelog`` its output carries a ``__weight`` column (+1 insert / -1 retract);
    - ``snapshot()`` captures all of its state as bytes at a batch boundary, and ``restore()``
      of those bytes in a fresh operator continues exactly as the original would have.

    ``accepts_next_watermark``: ``process`` also takes ``wm_next``, the watermark the batch
    will advance to, and applies it in the same step (actors: one round trip, order kept).
    A plan tree (a join, a union; ``QueryPlan.tree``) additionally has
    ``process_input(upstream, batch, wm)`` and takes the query's root watermark unmapped.

    ``incremental``: ``snapshot_delta()`` gives the changes since the last ``snapshot()`` or
    ``snapshot_delta()`` (None: only a whole snapshot can follow), and
    ``restore_chain([whole, delta, …])`` loads them (``checkpoint/state_chains.py``).
    """

    schema: pa.Schema
    late_dropped: int
    accepts_next_watermark: ClassVar[bool]
    incremental: bool

    @property
    def changelog(self) -> bool: ...

    def process(self, batch: Any, wm_before: int, **kwargs: Any) -> Output: ...

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]: ...

    def snapshot(self) -> bytes: ...

    def restore(self, state: bytes) -> None: ...


class Source(Protocol):
    """A polled source connector, driven by a ``SourceRunner`` thread.

    Invariants:
    - ``poll`` returns ``(rows or None, watermark or None)``; None as watermark means "not
      placed yet" (a partition has delivered nothing): the source's watermark holds;
    - ``checkpoint_state()`` right after a poll is the position that resumes exactly after the
      rows that poll returned (never ahead of ingested data); the constructor's
      ``restore_state`` takes it back;
    - ``lag()`` is the rows still to read (autoscaling and ``flush()`` use it);
    - ``fetch_failure()`` is ``(since monotonic, why)`` while reads fail without raising, else None;
    - an exception with ``permanent = True`` stops the runner (retrying cannot help);
    - optional ``take_warnings()``: ``LaminarError`` s the runner shows (``errors``,
      ``last_error``, a WARNING) without stopping, each once — e.g. an offset reset;
    - optional ``checkpoint_committed(state)``: called after a checkpoint commits, with the
      ``checkpoint_state()`` recorded for this source in the oldest checkpoint a recovery may
      still restore (the newest one, or an older one kept by ``checkpoint_retain`` that recovery
      falls back to when newer ones are damaged), so a source can release upstream what no
      recovery will replay (a CDC source confirms its replication slot up to there). Called outside the engine lock, from the checkpointing
      thread; an error is logged and the next checkpoint calls it again with its newer state. A
      database without checkpoints (in memory) calls it from the source's poller right after each
      poll's rows are ingested: nothing there can replay them.
    """

    def poll(self, timeout_ms: int = 100) -> tuple[Any, int | None]: ...

    def checkpoint_state(self) -> dict[str, Any]: ...

    def lag(self) -> int: ...

    def fetch_failure(self) -> tuple[float, str] | None: ...

    def close(self) -> None: ...


class Sink(Protocol):
    """Where a stream's rows go. ``write`` may buffer; ``flush`` makes what was written visible
    (best-effort sinks) and ``close`` releases. Exactly-once sinks also implement the two-phase
    phases of ``laminardb.checkpoint.sink.TwoPhaseSink`` (``pre_commit``/``commit``/``abort``/
    ``recover``), which the checkpoint coordinator drives: rows become visible only when the
    checkpoint that holds them commits, and a repeated commit never duplicates output."""

    def write(self, batch: pa.RecordBatch) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class ExecutionBackend(Protocol):
    """Where an engine's work runs: the engine asks it for every operator, plan tree, polled
    source and sink, and calls its hooks at fixed points. ``LocalBackend`` runs everything in
    this process; ``laminardb.cluster.backend.ClusterBackend`` places operators on Ray actors.

    Invariants:
    - ``attach(engine)`` is called once, before a durable directory is recovered, and
      ``opened()`` once the engine is recovered and ready;
    - every factory runs under the engine's lock;
    - ``settle()`` returns once every output the backend still holds has been delivered to
      the reactor (pipelined actor rounds); the engine calls it before it reads results,
      applies DDL, finishes or checkpoints, so results never depend on pipelining;
    - ``apply_ddl`` runs ``here()`` (the engine's own change) and may mirror the statement on
      its workers; if they refuse, it undoes ``here()`` and raises;
    - ``check_alive`` raises the backend's typed error when a worker is lost.
    """

    def attach(self, engine: Engine) -> None: ...

    def opened(self) -> None: ...

    def make_operator(self, name: str, plan: QueryPlan) -> Operator: ...

    def make_plan_operator(self, name: str, plan: QueryPlan) -> Operator: ...

    def make_source(self, kind: str, node: Node, options: dict[str, str],
                    restore_state: dict | None = None) -> Source: ...

    def make_sink(self, stmt: ddl.CreateSink, schema: pa.Schema, *, durable: bool,
                  stage_root: str | None) -> Sink: ...

    def apply_ddl(self, stmt: Any, text: str, here: Callable[[], ExecuteResult]) -> ExecuteResult: ...

    def settle(self, timeout: float | None = None) -> None: ...

    def check_alive(self, what: str) -> None: ...

    def on_subscribe(self, sub: Subscription) -> None: ...

    def restored(self) -> None: ...

    def before_metrics(self) -> None: ...

    def add_metrics(self, metrics: dict[str, Any]) -> None: ...

    def before_close(self) -> None: ...

    def close(self) -> None: ...
