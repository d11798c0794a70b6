"""The embedded ``Connection``: SQL in, Arrow out, everything in the caller's process.

Entry point: ``laminardb.open()`` builds one. Each method takes the reactor's lock, so a
connection may be shared between threads; inserts are processed synchronously (the
reactor runs on the inserting thread), which is why ``flush()`` has nothing to wait for
in the embedded mode and a subscriber sees a batch's output as soon as ``insert`` returns.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.connectors import flink_tables
from laminardb.engine import catalog
from laminardb.engine.clock import ProcessingClock
from laminardb.engine.insert_batch import OnError, check_on_error
from laminardb.engine.reactor import Reactor
from laminardb.engine.source_runner import SourceRunner
from laminardb.engine.subscriptions import CallbackSubscription, Subscription
from laminardb.errors import ConnectionClosedError, EngineError, NotQueryableError
from laminardb.results import ExecuteResult, QueryResult
from laminardb.sql import ddl
from laminardb.sql.exceptions import UnsupportedSqlError
from laminardb.sql.planner import plan_query
from laminardb.sql.types import type_name
from laminardb.sql.udf import UdfRegistry

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from laminardb.checkpoint.local import LocalCoordinator
    from laminardb.dashboard.server import DashboardServer, DashboardSettings
    from laminardb.engine.writer import Writer

# How long close() waits for each callback subscription's thread to hand over what is queued.
_CALLBACK_JOIN_S = 5.0
# flush() raises once a polled source has failed (broker unreachable, polls raising) this long:
# long enough for a broker restart or a leader election, short enough to notice a dead broker.
_SOURCE_ERROR_TIMEOUT_S = 30.0


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

    def __init__(self, path: str = ":memory:", *, config: dict[str, Any] | None = None) -> None:
        self.path = os.fspath(path)
        self.config = dict(config or {})
        self.variables: dict[str, object] = dict(self.config.get("vars", {}))
        self._reactor = Reactor()
        self._setup_reactor()
        # Python UDFs (register_udf) and Flink table declarations: what parsing and planning of this
        # connection see (laminardb/sql/udf.py); datagen/filesystem tables are polled sources (flink_ddl.py)
        self._udfs = UdfRegistry.from_config(self.config.get("udfs"))
        # processing time (PROCTIME(), q12): config["clock"] returns epoch ms; stamped per ingested batch
        self._udfs.clock = self._reactor.clock = ProcessingClock(self.config.get("clock"))
        self._reactor.make_source_connector = flink_tables.source_connectors(self._reactor.make_source_connector)
        self._closed = False
        self._started = False
        self._runners: dict[str, SourceRunner] = {}
        self._callbacks: list[CallbackSubscription] = []
        self._durable: LocalCoordinator | None = None
        if self.config.get("log_format"):
            from laminardb.logs import configure

            configure(str(self.config["log_format"]))
        self._dashboard: DashboardServer | None = None
        dashboard = _dashboard_settings(self.config)  # checked before anything starts
        self._metrics_server = None
        metrics_settings = _metrics_settings(self.config)
        if self.path != ":memory:":
            from laminardb.checkpoint.local import LocalCoordinator
            from laminardb.checkpoint.recovery import recover

            if os.path.exists(self.path) and not os.path.isdir(self.path):
                from laminardb.errors import ConfigError

                raise ConfigError(f"{self.path!r} is a file: laminardb.open() takes a directory for a durable "
                                  "database (it is created if missing), or ':memory:'", code="LDB-9004")
            os.makedirs(self.path, exist_ok=True)
            self._lock_directory()
            try:
                self._durable = LocalCoordinator(self.path, self._reactor, config=self.config)
                with self._reactor.lock, self._udfs.active():
                    report = recover(self)
            except BaseException:  # a directory that cannot be recovered stays free for the next try
                if self._durable is not None:
                    self._durable.wal.close()
                os.close(self._lock_fd)
                raise
            self._reactor.journal = self._durable
            if self._reactor.finished and report["wal_records_replayed"]:
                self._durable.checkpoint()  # finish() ran but its checkpoint did not: commit the end
            self._durable.start_timer()
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

    def _setup_reactor(self) -> None:
        """Hook for subclasses, before a durable directory is recovered into the reactor
        (the cluster connection installs its operator and connector factories here)."""

    def _lock_directory(self) -> None:
        """One open Connection per directory: a second writer would corrupt the WAL."""
        import fcntl

        fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EngineError(f"database directory {self.path!r} is open in another connection or process; "
                              "close that one first (one writer per directory)", code="LDB-3005") from None
        self._lock_fd = fd

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        """Run one or more ``;``-separated statements; returns the last one's result.

        A script applies all of its statements or none: it is rehearsed on a scratch copy of
        the catalog first, and what it created is dropped again if a statement still fails.
        """
        self._check_open()
        with self._udfs.active():
            statements = ddl.parse_script_with_text(sql, self.variables, written=True)
        with self._reactor.lock, self._udfs.active():
            if len(statements) > 1:
                catalog.rehearse(self, statements)
            results: list[ExecuteResult] = []
            created: list[tuple[str, str]] = []
            logged: list[str] = []
            try:
                for stmt, text in statements:
                    name = getattr(stmt, "name", None)
                    existed = name is not None and name in self._reactor.nodes
                    results.append(self._apply_ddl(stmt, text, log=logged))
                    if name is not None and not existed and name in self._reactor.nodes:
                        created.append((name, self._reactor.nodes[name].kind))
            except Exception:
                catalog.undo(self, created)
                raise
            if self._durable is not None:
                for text in logged:  # the WAL sees the script once it applied whole
                    self._durable.log_ddl(text)
        if not results:
            return ExecuteResult("empty")
        last = results[-1]
        last.statements = results
        return last

    def _apply_ddl(self, stmt, text: str, *, log: list[str] | None = None) -> ExecuteResult:
        """Run one statement and keep the catalog in step; DDL that changed the catalog is
        appended to ``log`` (the WAL of a durable database)."""
        name = getattr(stmt, "name", None)
        existed = name is not None and name in self._reactor.nodes
        result = self._execute_one(stmt)
        if catalog.record(self._reactor.catalog, stmt, text, existed) and log is not None:
            log.append(text)
        return result

    def _execute_one(self, stmt) -> ExecuteResult:
        r = self._reactor
        if isinstance(stmt, ddl.CreateSource):
            r.create_source(stmt)
            return ExecuteResult("create_source", stmt.name)
        if isinstance(stmt, ddl.CreateStream):
            r.create_stream(stmt)
            return ExecuteResult("create_view" if stmt.materialized else "create_stream", stmt.name)
        if isinstance(stmt, ddl.CreateSink):
            return self._create_sink(stmt)
        if isinstance(stmt, ddl.Drop):
            r.drop(stmt)
            return ExecuteResult("drop", stmt.name)
        if isinstance(stmt, ddl.Show):
            return ExecuteResult("show", table=self._show(stmt.kind))
        if isinstance(stmt, ddl.Describe):
            return ExecuteResult("describe", stmt.name, table=self._describe(stmt.name))
        if isinstance(stmt, ddl.Explain):
            return ExecuteResult("explain", table=pa.table({"plan": self._explain(stmt.statement)}))
        if isinstance(stmt, ddl.Query):
            return ExecuteResult("select", table=r.run_batch_query(stmt))
        raise UnsupportedSqlError(f"unsupported statement {stmt!r}")

    def _make_sink(self, stmt: ddl.CreateSink, schema: pa.Schema):
        from laminardb.connectors.sinks import make_sink

        stage_root = None if self._durable is None else os.path.join(self.path, "sinks")
        return make_sink(stmt, schema, durable=self._durable is not None, stage_root=stage_root)

    def _create_sink(self, stmt: ddl.CreateSink) -> ExecuteResult:
        r = self._reactor
        if getattr(stmt, "if_not_exists", False) and stmt.name in r.nodes:
            return ExecuteResult("create_sink", stmt.name)
        source_name = stmt.from_name
        hidden_created = False
        if stmt.query is not None:
            source_name = f"{stmt.name}__query"
            if source_name not in r.nodes:
                r._check_new(stmt.name)
                r.create_stream(ddl.CreateStream(source_name, stmt.query))
                hidden_created = True
        schema = r._node(source_name).schema
        try:
            sink = self._make_sink(stmt, schema)
        except Exception:
            if hidden_created:  # the sink's own query goes with the sink that was refused
                r.drop(ddl.Drop("STREAM", source_name, if_exists=True))
            raise
        r.add_sink(stmt.name, source_name, sink)
        return ExecuteResult("create_sink", stmt.name)

    def _show(self, kind: str) -> pa.Table:
        kinds = {"SOURCES": ("source",), "STREAMS": ("stream", "late"), "MATERIALIZED VIEWS": ("view",),
                 "SINKS": ("sink",), "ALL": ("source", "stream", "late", "view", "sink")}[kind]
        nodes = [n for n in self._reactor.nodes.values() if n.kind in kinds and not n.name.endswith("__query")]
        return pa.table({
            "name": [n.name for n in nodes],
            "kind": [n.kind for n in nodes],
            "sql": [n.sql for n in nodes],
        })

    def _describe(self, name: str) -> pa.Table:
        node = self._reactor._node(name)
        notes = self._reactor.event_time_notes(node.name)  # event-time column -> how its watermark is made
        rows = [(f.name, type_name(f.type), f.nullable and f.name not in node.not_null,
                 f.name in notes) for f in node.schema]
        return pa.table({
            "column": [r[0] for r in rows],
            "type": [r[1] for r in rows],
            "nullable": [r[2] for r in rows],
            "event_time": [r[3] for r in rows],
            "watermark": pa.array([notes.get(r[0]) for r in rows], pa.string()),
        })

    def _explain(self, stmt) -> list[str]:
        if isinstance(stmt, ddl.CreateStream):
            return plan_query(stmt.query, self._reactor.relation).explain()
        if isinstance(stmt, ddl.Query):
            try:
                return plan_query(stmt, self._reactor.relation, batch=True).explain()
            except Exception:
                raise
        raise UnsupportedSqlError("EXPLAIN takes a SELECT or CREATE STREAM/MATERIALIZED VIEW statement")

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
        check_on_error(on_error)
        return self._insert(source, data, on_error=on_error)

    def _insert(self, source: str, data: Any, *, on_error: str = "raise", index=None, rejected=None,
                strict_text: bool = True) -> int:
        self._check_open()
        with self._reactor.lock:
            n = self._reactor.insert(source, data, on_error=on_error, index=index, rejected=rejected,
                                     strict_text=strict_text)
            lsn = self._reactor.last_lsn
        if self._durable is not None and n:
            self._durable.durable(lsn)  # group commit: fsync outside the lock (wal_sync='always')
        return n

    def insert_json(self, source: str, data: str | bytes | list[str], *, on_error: OnError = "raise") -> int:
        """Insert JSON text: an array of objects, one object, or one object per line (or a list
        of such lines). Values convert as in ``insert()``; a record's index is its position."""
        self._check_open()
        check_on_error(on_error)
        from laminardb.engine.text_rows import parse_json_text

        parsed = parse_json_text(data, source=source)
        return self._insert(source, parsed.data, on_error=on_error, index=parsed.index, rejected=parsed.rejected,
                            strict_text=False)

    def insert_csv(self, source: str, data: str | bytes, *, on_error: OnError = "raise") -> int:
        """Insert CSV text with a header row (values read as text, converted as CSV files are
        by ``laminardb run``); a record's index is its position after the header."""
        self._check_open()
        check_on_error(on_error)
        from laminardb.engine.text_rows import parse_csv_text

        with self._reactor.lock:
            schema = self._reactor._node(source).schema
        parsed = parse_csv_text(data, schema, source=source)
        return self._insert(source, parsed.data, on_error=on_error, index=parsed.index, rejected=parsed.rejected,
                            strict_text=False)

    def writer(self, source: str, *, on_error: OnError = "raise") -> Writer:
        """A ``Writer`` into ``source``: buffered inserts, ``flush()``, ``watermark(ts)``."""
        self._check_open()
        from laminardb.engine.writer import Writer

        return Writer(self, source, on_error=on_error)

    def _advance_watermark(self, source: str, timestamp: Any) -> int | None:
        self._check_open()
        with self._reactor.lock:
            wm = self._reactor.advance_watermark(source, timestamp)
            lsn = self._reactor.last_lsn
        if self._durable is not None:
            self._durable.durable(lsn)
        return wm

    def offset(self, source: str) -> int:
        """Rows durably accepted into ``source`` so far, across restarts: resume from here."""
        self._check_open()
        with self._reactor.lock:
            node = self._reactor._node(source)
            if node.kind != "source":
                raise NotQueryableError(f"{source!r} is a {node.kind}; offset() counts rows of sources")
            return node.accepted

    def checkpoint(self) -> int:
        """Checkpoint now (durable databases); returns the epoch, the commit point of sinks."""
        self._check_open()
        if self._durable is None:
            from laminardb.checkpoint.exceptions import CheckpointUnsupportedError

            raise CheckpointUnsupportedError("an in-memory database keeps no checkpoints: "
                                             "use laminardb.open('./data') for durability")
        return self._durable.checkpoint()

    def subscribe_stream(self, name: str, *, history_rows: int | None = None) -> Subscription:
        """Every row ``name`` emits from now on (streams, views, late-data streams, sources).

        ``history_rows`` bounds what ``to_arrow()`` keeps (0: keep nothing, for consumers
        that only take batches with ``try_next``/``next_timeout``/iteration).
        """
        self._check_open()
        opts = {} if history_rows is None else {"history_rows": history_rows}
        with self._reactor.lock:
            return self._reactor.subscribe(name, **opts)

    subscribe = subscribe_stream

    def subscribe_callback(self, name: str, on_data, on_error=None) -> CallbackSubscription:
        """Call ``on_data(batch)`` for every batch ``name`` emits from now on, on a thread this
        connection owns; ``on_error(exc)`` when it raises (without one, delivery stops and the
        error is kept in ``.error`` and raised by ``.wait()``). Stop with ``.cancel()``."""
        sub = self.subscribe_stream(name, history_rows=0)
        cb = CallbackSubscription(sub, on_data, on_error)
        self._callbacks = [c for c in self._callbacks if c.is_active] + [cb]
        return cb

    subscribe_stream_callback = subscribe_callback

    def query(self, sql: str) -> QueryResult:
        """A consistent snapshot of materialized views, or an ad-hoc SELECT over them."""
        self._check_open()
        with self._udfs.active():
            statements = ddl.parse_script(sql, self.variables)
        if len(statements) != 1 or not isinstance(statements[0], ddl.Query):
            raise UnsupportedSqlError("query() takes one SELECT; use execute() for DDL")
        with self._reactor.lock, self._udfs.active():
            return QueryResult(self._reactor.run_batch_query(statements[0]))

    sql = query

    def register_udf(self, name: str, fn, return_type: str | pa.DataType) -> None:
        """Register a Python scalar function for SQL: ``fn(*arrays) -> pyarrow.Array``.

        ``fn`` is vectorized: per batch it gets one pyarrow Array per argument and returns one
        Array of ``return_type`` (a SQL type such as ``'VARCHAR'``, or a pyarrow DataType) with a
        value per row. Queries planned from now on can call ``name(…)`` in SELECT, WHERE,
        GROUP BY and aggregates; an error inside it is a ``UdfError`` (LDB-1010), a result of
        the wrong length or type a ``UdfResultError`` (LDB-1011). See ``laminardb/sql/udf.py``.
        """
        self._check_open()
        self._udfs.register(name, fn, return_type)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start polling connector sources (Kafka). Inserts run synchronously and need no start."""
        self._check_open()
        with self._reactor.lock:
            for node in self._reactor.nodes.values():
                if node.connector is not None and node.name not in self._runners:
                    runner = SourceRunner(self._reactor, node)
                    self._runners[node.name] = runner
                    runner.start()
        self._started = True

    def flush(self, timeout_s: float = 30.0) -> None:
        """Return when all input so far is processed and delivered.

        Inserts are processed on the inserting thread, so only connector sources are
        waited for (bounded by ``timeout_s``, after which an EngineError says which lag).
        """
        self._check_open()
        bound = float(self.config.get("source_error_timeout", _SOURCE_ERROR_TIMEOUT_S))
        for name, runner in list(self._runners.items()):
            if runner.wait_caught_up(timeout_s, error_timeout_s=bound):
                continue
            if runner.status == "error":
                from laminardb.connectors.exceptions import SourceFailingError

                raise SourceFailingError(
                    f"flush(): source {name!r} has been failing for {runner.failing_for():.1f} s "
                    f"({runner.errors} failed polls), last error: {runner.last_error}; check that "
                    "its brokers are up and reachable (metrics()['sources'] shows its status)")
            raise EngineError(
                f"flush(): source {name!r} did not catch up within {timeout_s}s "
                f"(lag {_lag_or_error(runner.node.connector)}, last error: {runner.last_error})"
            )
        with self._reactor.lock:
            for node in self._reactor.nodes.values():
                for s in node.sinks:
                    s.flush()

    def finish(self) -> None:
        """End of input: every watermark to +∞, every window emitted and delivered."""
        self._check_open()
        self._warn_unstarted("finish()")
        self._stop_runners()
        with self._reactor.lock:
            if self._reactor.finished:
                return  # finishing twice (also across a restart) is a no-op
            if self._durable is not None:
                self._durable.log_finish()
            self._reactor.finish()
        if self._durable is not None:
            self._durable.checkpoint()  # commit every sink's final output

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Graceful stop, then ``close()``: connector sources catch up and stop, callback
        subscriptions hand over every batch, a durable database takes a last checkpoint.
        Open windows stay open (durable: in the checkpoint) — for end of input use ``finish()``."""
        self._check_open()
        try:
            self.flush(timeout_s)
            self._stop_runners()
            for cb in list(self._callbacks):
                cb._drain(timeout_s)
        finally:
            self.close()

    def _warn_unstarted(self, when: str) -> None:
        """Connector sources never started: say so once (``laminardb/engine/unstarted.py``)."""
        if self._started or self._reactor.finished or getattr(self, "_warned_unstarted", False):
            return
        from laminardb.engine.unstarted import unstarted_sources_message

        msg = unstarted_sources_message(self._reactor, when)
        if msg is not None:
            self._warned_unstarted = True
            warnings.warn(msg, UserWarning, stacklevel=3)  # shown once by default; logging.captureWarnings logs it

    def _stop_runners(self) -> None:
        for runner in self._runners.values():
            runner.stop()
        self._runners.clear()

    def close(self) -> None:
        """Stop sources; a durable database takes a last checkpoint so sinks hold everything."""
        if self._closed:
            return
        self._warn_unstarted("close()")
        if self._dashboard is not None:
            self._dashboard.stop()
            self._dashboard = None
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        self._stop_runners()
        if self._durable is not None:
            try:
                if not self._durable._idle():
                    self._durable.checkpoint()
            except Exception as exc:  # noqa: BLE001 - close() must release; the WAL keeps everything
                log.warning("close(): the last checkpoint failed (recovery replays the WAL instead): %s", exc)
            finally:
                self._durable.close()
                os.close(self._lock_fd)
        with self._reactor.lock:
            for node in self._reactor.nodes.values():
                if node.connector is not None:
                    node.connector.close()
                for sub in node.subscribers:
                    sub._end()
                if node.kind == "sink":
                    for s in node.sinks:
                        s.close()
            self._closed = True
        for cb in self._callbacks:  # they hand over what is queued, then end (outside the lock)
            cb._join(_CALLBACK_JOIN_S)

    def metrics(self) -> dict[str, Any]:
        """Counters and state of every part, pulled from the live objects now: totals,
        each source's watermark, per stream ``rows_emitted``/``kind``/``late_dropped``,
        checkpoints (durable), and ``sources``/``queries``/``sinks``/``process`` — the shape
        is documented in :mod:`laminardb.metrics.registry` and ``docs/operations.md``."""
        from laminardb.metrics.registry import collect

        return collect(self._reactor, runners=dict(self._runners), durable=self._durable)

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
        return [n.name for n in self._reactor.nodes.values() if n.kind in ("stream", "view", "late")]

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionClosedError("this connection is closed; call laminardb.open() for a new one")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Connection({self.path!r})"


def _lag_or_error(connector: Any) -> object:
    try:
        return connector.lag()
    except Exception as exc:  # noqa: BLE001 - only for the message
        return f"unknown ({type(exc).__name__})"


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
