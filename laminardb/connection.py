"""The ``Connection``: the facade users hold over one database's ``Engine``.

Entry point: ``laminardb.open()`` builds one over an engine that runs in this process
(``engine/local_backend.py``); the Delta mode's database head builds one over Ray actors
(``laminardb.cluster.backend``). The SQL, the inserts, the reads and the lifecycle are the
engine's (``laminardb/engine/engine.py``); this class adds what serves a database from
outside — the web dashboard and the Prometheus endpoint — and the user-facing docstrings.
Each method takes the engine's lock, so a connection may be shared between threads; inserts
are processed synchronously (the reactor runs on the inserting thread), which is why a
subscriber sees a batch's output as soon as ``insert`` returns.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.engine.engine import Engine
from laminardb.engine.insert_batch import OnError
from laminardb.engine.subscriptions import CallbackSubscription, Subscription
from laminardb.results import ExecuteResult, QueryResult

if TYPE_CHECKING:
    from laminardb.dashboard.server import DashboardServer, DashboardSettings
    from laminardb.engine.contracts import ExecutionBackend
    from laminardb.engine.writer import Writer


def _metrics_settings(config: dict[str, Any]) -> dict[str, Any] | None:
    """The Prometheus endpoint's settings when ``config["metrics_port"]`` is set; a
    non-loopback ``metrics_host`` without ``allow_remote`` is refused here, before anything starts."""
    if config.get("metrics_port") is None:
        return None
    from laminardb.metrics.prometheus import check_host

    host = str(config.get("metrics_host", "127.0.0.1"))
    allow = bool(config.get("allow_remote", False))
    check_host(host, allow_remote=allow)
    return {"port": config["metrics_port"], "host": host, "allow_remote": allow}


def _dashboard_settings(config: dict[str, Any]) -> DashboardSettings | None:
    """The web dashboard's settings when ``config["dashboard_port"]`` is set (``laminardb.dashboard``)."""
    if config.get("dashboard_port") is None:
        return None
    from laminardb.dashboard.server import DashboardSettings

    return DashboardSettings.from_config(config)


class Connection:
    """An embedded laminardb database; see ``laminardb.open``.

    With a directory it is durable: the catalog, a WAL every insert reaches before it
    returns, periodic checkpoints and exactly-once sinks (``laminardb/checkpoint``); opening
    the directory again recovers the state an unbroken run would have.
    """

    def __init__(self, path: str = ":memory:", *, config: dict[str, Any] | None = None,
                 backend: ExecutionBackend | None = None) -> None:
        config = dict(config or {})
        if config.get("log_format"):
            from laminardb.logs import configure

            configure(str(config["log_format"]))
        dashboard = _dashboard_settings(config)  # checked before anything starts
        metrics_settings = _metrics_settings(config)
        self._dashboard: DashboardServer | None = None
        self._metrics_server = None
        #: the engine this connection is a facade over (``laminardb/engine/engine.py``)
        self.engine = Engine(path, config=config, backend=backend)
        if dashboard is not None:  # last: a failure above leaves no server behind
            from laminardb.dashboard.server import DashboardServer

            try:
                self._dashboard = DashboardServer(self, dashboard).start()
            except BaseException:
                self.close()  # the port is taken, say: release the directory and the timer
                raise
        if metrics_settings is not None:  # the Prometheus endpoint (laminardb.metrics.prometheus)
            from laminardb.metrics.prometheus import start_server

            try:
                self._metrics_server = start_server(self.metrics, **metrics_settings)
            except BaseException:
                self.close()
                raise

    @property
    def path(self) -> str:
        return self.engine.path

    @property
    def config(self) -> dict[str, Any]:
        return self.engine.config

    @property
    def variables(self) -> dict[str, object]:
        """``${NAME}`` substitutions for SQL (config ``vars``); may be changed in place."""
        return self.engine.variables

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        """Run one or more ``;``-separated statements; returns the last one's result.

        A script applies all of its statements or none: it is rehearsed on a scratch copy of
        the catalog first, and what it created is dropped again if a statement still fails.
        """
        return self.engine.execute(sql)

    # ------------------------------------------------------------------ data
    def insert(self, source: str, data: Any, *, on_error: OnError = "raise") -> int:
        """Insert one batch (dict, list of dicts, RecordBatch, Table or DataFrame); returns an
        ``InsertResult``: the int of rows accepted, with ``.rejected``/``.rejected_rows`` (index,
        raw, error) and ``.late``/``.late_by_query`` (accepted rows a query dropped as late).

        Rows that do not fit (a value of the wrong type, NULL in a NOT NULL column, an
        implausible event time): ``on_error='raise'`` refuses the whole call with the error of
        the first such row, named by its index (``LDB-2001`` … ``LDB-2005``); ``'skip'`` leaves
        them out and lists them in the result; ``'dead_letter'`` also emits them on the stream
        ``<source>__rejected``.
        """
        return self.engine.insert(source, data, on_error=on_error)

    def insert_json(self, source: str, data: str | bytes | list[str], *, on_error: OnError = "raise") -> int:
        """Insert JSON text: an array of objects, one object, or one object per line (or a list
        of such lines). Values convert as in ``insert()``; a record's index is its position."""
        return self.engine.insert_json(source, data, on_error=on_error)

    def insert_csv(self, source: str, data: str | bytes, *, on_error: OnError = "raise") -> int:
        """Insert CSV text with a header row (values read as text, converted as CSV files are
        by ``laminardb run``); a record's index is its position after the header."""
        return self.engine.insert_csv(source, data, on_error=on_error)

    def writer(self, source: str, *, on_error: OnError = "raise") -> Writer:
        """A ``Writer`` into ``source``: buffered inserts, ``flush()``, ``watermark(ts)``."""
        self.engine.check_open()
        from laminardb.engine.writer import Writer

        return Writer(self, source, on_error=on_error)

    def _advance_watermark(self, source: str, timestamp: Any) -> int | None:
        return self.engine.advance_watermark(source, timestamp)

    def _writer_source(self, source: str) -> tuple[str, pa.Schema]:
        from laminardb.engine.writer import not_a_source

        with self.engine.lock:
            node = self.engine.node(source)
            if node.kind != "source":
                raise not_a_source(source, node.kind)
            return node.name, node.schema

    def _source_watermark(self, source: str) -> int | None:
        return self.engine.watermark(source)

    @property
    def _closed(self) -> bool:
        return self.engine.closed

    def offset(self, source: str) -> int:
        """Rows durably accepted into ``source`` so far, across restarts: resume from here."""
        return self.engine.offset(source)

    def checkpoint(self) -> int:
        """Checkpoint now (durable databases); returns the epoch, the commit point of sinks."""
        return self.engine.checkpoint()

    def subscribe_stream(self, name: str, *, history_rows: int | None = None) -> Subscription:
        """Every row ``name`` emits from now on (streams, views, late-data streams, sources).

        ``history_rows`` bounds what ``to_arrow()`` keeps (0: keep nothing, for consumers
        that only take batches with ``try_next``/``next_timeout``/iteration).
        """
        return self.engine.subscribe(name, history_rows=history_rows)

    subscribe = subscribe_stream

    def subscribe_callback(self, name: str, on_data, on_error=None) -> CallbackSubscription:
        """Call ``on_data(batch)`` for every batch ``name`` emits from now on, on a thread this
        connection owns; ``on_error(exc)`` when it raises (without one, delivery stops and the
        error is kept in ``.error`` and raised by ``.wait()``). Stop with ``.cancel()``."""
        return self.engine.subscribe_callback(name, on_data, on_error)

    subscribe_stream_callback = subscribe_callback

    def query(self, sql: str) -> QueryResult:
        """A consistent snapshot of materialized views, or an ad-hoc SELECT over them."""
        return self.engine.query(sql)

    sql = query

    def register_udf(self, name: str, fn, return_type: str | pa.DataType) -> None:
        """Register a Python scalar function for SQL: ``fn(*arrays) -> pyarrow.Array``.

        ``fn`` is vectorized: per batch it gets one pyarrow Array per argument and returns one
        Array of ``return_type`` (a SQL type such as ``'VARCHAR'``, or a pyarrow DataType) with a
        value per row. Queries planned from now on can call ``name(…)`` in SELECT, WHERE,
        GROUP BY and aggregates; an error inside it is a ``UdfError`` (LDB-1010), a result of
        the wrong length or type a ``UdfResultError`` (LDB-1011). See ``laminardb/sql/udf.py``.
        """
        self.engine.register_udf(name, fn, return_type)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start polling connector sources (Kafka). Inserts run synchronously and need no start."""
        self.engine.start()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Return when all input so far is processed and delivered.

        Inserts are processed on the inserting thread, so only connector sources are
        waited for (bounded by ``timeout_s``, after which an EngineError says which lag).
        """
        self.engine.flush(timeout_s)

    def finish(self) -> None:
        """End of input: every watermark to +∞, every window emitted and delivered."""
        self.engine.finish()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Graceful stop, then ``close()``: connector sources catch up and stop, callback
        subscriptions hand over every batch, a durable database takes a last checkpoint.
        Open windows stay open (durable: in the checkpoint) — for end of input use ``finish()``."""
        try:
            self.engine.shutdown(timeout_s)
        finally:
            self.close()

    def close(self) -> None:
        """Stop sources; a durable database takes a last checkpoint so sinks hold everything."""
        if self._dashboard is not None:
            self._dashboard.stop()
            self._dashboard = None
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        self.engine.close()

    def metrics(self) -> dict[str, Any]:
        """Counters and state of every part, pulled from the live objects now: totals,
        each source's watermark, per stream ``rows_emitted``/``kind``/``late_dropped``,
        checkpoints (durable), and ``sources``/``queries``/``sinks``/``process`` — the shape
        is documented in :mod:`laminardb.metrics.registry` and ``docs/operations.md``."""
        return self.engine.metrics()

    @property
    def metrics_url(self) -> str | None:
        """Where the Prometheus endpoint is served (``config["metrics_port"]``), or None."""
        return None if self._metrics_server is None else self._metrics_server.url

    @property
    def dashboard_url(self) -> str | None:
        """Where the web dashboard is served (``config["dashboard_port"]``), or None."""
        return None if self._dashboard is None else self._dashboard.url

    def list_streams(self) -> list[str]:
        """Names of the streams, materialized views and late-data streams."""
        return self.engine.list_streams()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Connection({self.path!r})"


def open(path: str | os.PathLike[str] = ":memory:", *, config: dict[str, Any] | None = None) -> Connection:  # noqa: A001
    """Open an embedded database: in memory by default, durable in a directory.

    Durable config keys: ``checkpoint_interval`` (default ``"10s"``; ``"off"``),
    ``checkpoint_retain`` (3), ``wal_sync`` (``"none"``: survives a process crash;
    ``"always"``: an fsync per insert, with group commit, survives a power loss).
    Metrics: ``metrics_port`` (serve Prometheus metrics; 0 = a free port, see
    ``Connection.metrics_url``), ``metrics_host`` (``"127.0.0.1"``; another host needs
    ``allow_remote = True``), ``source_error_timeout`` (seconds, default 30: ``flush()`` raises
    once a Kafka source has failed this long).
    """
    from laminardb.operators.warmup import warm_kernels

    warm_kernels()  # once per process: no query waits on numba compilation
    return Connection(path, config=config)
