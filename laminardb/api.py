"""The connection API, written down once: ``ConnectionAPI``.

Two classes implement it — the embedded ``Connection`` (``laminardb.open``, everything in the
caller's process) and the cluster client ``RemoteConnection`` (``laminardb.connect``, the
database lives in a Ray cluster). Code written against ``ConnectionAPI`` runs on either.
mypy checks both against it (``tests/typing_checks/connection_api.py``, run by ``make lint``
and ``tests/test_architecture.py``): a method added to one connection and not the other, or
given another signature, fails that check.

This module imports nothing at run time beyond ``typing``: it loads without Ray, numba or
pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:
    import pyarrow as pa

    from laminardb.engine.insert_batch import OnError
    from laminardb.engine.subscriptions import CallbackSubscription, Subscription
    from laminardb.engine.writer import Writer
    from laminardb.results import ExecuteResult, QueryResult

__all__ = ["ConnectionAPI"]


class ConnectionAPI(Protocol):
    """What every laminardb connection offers, embedded or in a cluster.

    Invariants both modes keep (the tests compare the two over the same rows):

    * The same SQL: every statement ``execute`` and ``query`` take in one mode they take in
      the other, with the same meaning (a cluster may refuse only what needs this process,
      such as a Python clock: ``ConfigError``).
    * The same results: the same rows, columns and types in ``ExecuteResult``, ``QueryResult``
      and every subscription's batches; ``insert`` returns the rows accepted (an ``int``, or an
      ``InsertResult`` with the refused and late rows) with the same counts.
    * The same errors: a failure raises the same ``LaminarError`` subclass with the same
      ``LDB-NNNN`` code in both modes (``docs/errors.md``); a closed connection raises
      ``ConnectionClosedError``.
    * ``close()`` is idempotent. Embedded, it stops the database; a cluster client only
      detaches (the database keeps running until ``drop_database``).

    Where a mode returns a subclass (``RemoteSubscription`` for ``Subscription``), it is used
    through the base class's methods only.
    """

    @property
    def config(self) -> dict[str, Any]:
        """The configuration the connection was opened with."""
        ...

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        """Run one or more ``;``-separated statements (all or none); the last one's result."""
        ...

    def query(self, sql: str) -> QueryResult:
        """One SELECT: a consistent snapshot of materialized views, or an ad-hoc query."""
        ...

    def sql(self, sql: str) -> QueryResult:
        """Alias of ``query``."""
        ...

    def register_udf(self, name: str, fn: Callable[..., Any], return_type: str | pa.DataType) -> None:
        """A vectorized Python scalar function for SQL (in a cluster: a module-level function)."""
        ...

    # ------------------------------------------------------------------ data
    def insert(self, source: str, data: Any, *, on_error: OnError = "raise") -> int:
        """Insert one batch (dicts, Arrow, DataFrame); the rows accepted (``InsertResult``)."""
        ...

    def insert_json(self, source: str, data: str | bytes | list[str], *, on_error: OnError = "raise") -> int:
        """Insert JSON text (an array, one object, or one object per line)."""
        ...

    def insert_csv(self, source: str, data: str | bytes, *, on_error: OnError = "raise") -> int:
        """Insert CSV text with a header row."""
        ...

    def writer(self, source: str, *, on_error: OnError = "raise") -> Writer:
        """A buffered ``Writer`` into ``source``, with an explicit ``watermark(ts)``."""
        ...

    def offset(self, source: str) -> int:
        """Rows durably accepted into ``source`` so far: where a producer resumes."""
        ...

    def checkpoint(self) -> int:
        """Checkpoint now; the epoch (``CheckpointUnsupportedError`` without durability)."""
        ...

    # ------------------------------------------------------------------ streams
    def subscribe_stream(self, name: str, *, history_rows: int | None = None) -> Subscription:
        """Every batch ``name`` emits from now on."""
        ...

    def subscribe(self, name: str, *, history_rows: int | None = None) -> Subscription:
        """Alias of ``subscribe_stream``."""
        ...

    def subscribe_callback(self, name: str, on_data: Callable[[pa.RecordBatch], object],
                           on_error: Callable[[BaseException], object] | None = None) -> CallbackSubscription:
        """``on_data(batch)`` for every batch ``name`` emits, on a thread the connection owns."""
        ...

    def subscribe_stream_callback(self, name: str, on_data: Callable[[pa.RecordBatch], object],
                                  on_error: Callable[[BaseException], object] | None = None
                                  ) -> CallbackSubscription:
        """Alias of ``subscribe_callback``."""
        ...

    def list_streams(self) -> list[str]:
        """Names of the streams, materialized views and late-data streams."""
        ...

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start polling connector sources (Kafka)."""
        ...

    def flush(self, timeout_s: float = 30.0) -> None:
        """Return when all input so far is processed and delivered (bounded by ``timeout_s``)."""
        ...

    def finish(self) -> None:
        """End of input: every watermark to +∞, every window emitted and delivered."""
        ...

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Graceful stop: flush, callback subscriptions hand over every batch, then ``close()``."""
        ...

    def close(self) -> None:
        """Embedded: stop the database. Cluster: detach (idempotent in both)."""
        ...

    def metrics(self) -> dict[str, Any]:
        """Counters and state of every part (``laminardb.metrics.registry``)."""
        ...

    @property
    def metrics_url(self) -> str | None:
        """Where the Prometheus endpoint is served (``config["metrics_port"]``), or None."""
        ...

    @property
    def dashboard_url(self) -> str | None:
        """Where the web dashboard is served (``config["dashboard_port"]``), or None."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
