"""The engine: one database's catalog, DDL, inserts, reads and lifecycle over a reactor.

Why a class apart from ``Connection``: the embedded connection and the Delta mode's database
head run the same engine, each with its own ``ExecutionBackend`` (``contracts.py``): in this
process (``LocalBackend``) or on Ray actors (``laminardb.cluster.backend.ClusterBackend``).
The connection is a thin facade that adds the services around an engine (dashboard, metrics
endpoint); the head drives the engine through the public methods below.

Entry point: ``Engine(path, config=…, backend=…)``. Every method takes the reactor's lock
(``engine.lock``), so an engine may be shared between threads. With a directory it is durable
(``durable``: the WAL, checkpoints and exactly-once sinks of ``laminardb/checkpoint``), and
opening the directory again recovers the state an unbroken run would have.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.connectors import flink_tables
from laminardb.engine import catalog
from laminardb.engine.insert_batch import OnError, check_on_error
from laminardb.engine.local_backend import LocalBackend
from laminardb.engine.reactor import Node, Reactor
from laminardb.engine.source_runner import SourceRunner
from laminardb.engine.subscriptions import CallbackSubscription, Subscription
from laminardb.errors import ConnectionClosedError, EngineError, NotQueryableError
from laminardb.results import ExecuteResult, QueryResult
from laminardb.sql import ddl
from laminardb.sql.clock import ProcessingClock
from laminardb.sql.exceptions import UnsupportedSqlError
from laminardb.sql.planner import plan_query
from laminardb.sql.types import type_name
from laminardb.sql.udf import UdfRegistry

if TYPE_CHECKING:
    from laminardb.checkpoint.local import LocalCoordinator
    from laminardb.engine.contracts import ExecutionBackend

log = logging.getLogger(__name__)

# How long close() waits for each callback subscription's thread to hand over what is queued.
_CALLBACK_JOIN_S = 5.0
# flush() raises once a polled source has failed (broker unreachable, polls raising) this long:
# long enough for a broker restart or a leader election, short enough to notice a dead broker.
_SOURCE_ERROR_TIMEOUT_S = 30.0


class Engine:
    """One database's engine; see the module docstring."""

    def __init__(self, path: str = ":memory:", *, config: dict[str, Any] | None = None,
                 backend: ExecutionBackend | None = None, variables: dict[str, object] | None = None) -> None:
        self.path = os.fspath(path)
        self.config = dict(config or {})
        self.variables: dict[str, object] = dict(self.config.get("vars", {})) if variables is None else variables
        self.backend: ExecutionBackend = LocalBackend() if backend is None else backend
        # datagen/filesystem tables are polled sources too (connectors/flink_tables.py)
        self.reactor = Reactor(self.backend.make_operator, self.backend.make_plan_operator,
                               flink_tables.source_connectors(self.backend.make_source))
        self.lock = self.reactor.lock
        # Python UDFs (register_udf) and Flink table declarations: what parsing and planning of this
        # engine see (sql/udf.py)
        self.udfs = UdfRegistry.from_config(self.config.get("udfs"))
        # processing time (PROCTIME(), q12): config["clock"] returns epoch ms; stamped per ingested batch
        self.udfs.clock = self.reactor.clock = ProcessingClock(self.config.get("clock"))
        self.closed = False
        self.started = False
        self.runners: dict[str, SourceRunner] = {}
        self.callbacks: list[CallbackSubscription] = []
        self.durable: LocalCoordinator | None = None
        self._warned_unstarted = False
        self._lock_fd: int | None = None
        self.backend.attach(self)
        if self.path != ":memory:":
            self._open_durable()
        self.backend.opened()

    def _open_durable(self) -> None:
        """Recover the directory (catalog, checkpoint, WAL since) and start checkpointing."""
        from laminardb.checkpoint.local import LocalCoordinator
        from laminardb.checkpoint.recovery import recover

        if os.path.exists(self.path) and not os.path.isdir(self.path):
            from laminardb.errors import ConfigError

            raise ConfigError(f"{self.path!r} is a file: laminardb.open() takes a directory for a durable "
                              "database (it is created if missing), or ':memory:'", code="LDB-9004")
        os.makedirs(self.path, exist_ok=True)
        self._lock_directory()
        try:
            self.durable = LocalCoordinator(self.path, self.reactor, config=self.config)
            with self.lock, self.udfs.active():
                report = recover(self)
        except BaseException:  # a directory that cannot be recovered stays free for the next try
            if self.durable is not None:
                self.durable.wal.close()
            self._release_directory()
            raise
        self.reactor.journal = self.durable
        self.durable.before_barrier = self.backend.settle
        if self.reactor.finished and report["wal_records_replayed"]:
            self.durable.checkpoint()  # finish() ran but its checkpoint did not: commit the end
        self.durable.start_timer()

    def _lock_directory(self) -> None:
        """One open engine per directory: a second writer would corrupt the WAL."""
        import fcntl

        fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EngineError(f"database directory {self.path!r} is open in another connection or process; "
                              "close that one first (one writer per directory)", code="LDB-3005") from None
        self._lock_fd = fd

    def _release_directory(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ catalog
    def node(self, name: str) -> Node:
        """The catalog entry ``name`` (case-insensitive); ``UnknownObjectError`` lists the known ones."""
        return self.reactor._node(name)

    def list_streams(self) -> list[str]:
        """Names of the streams, materialized views and late-data streams."""
        return [n.name for n in self.reactor.nodes.values() if n.kind in ("stream", "view", "late")]

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        """Run one or more ``;``-separated statements, all or none; see ``Connection.execute``."""
        self.check_open()
        with self.udfs.active():
            statements = ddl.parse_script_with_text(sql, self.variables, written=True)
        with self.lock, self.udfs.active():
            self.backend.settle()  # a new query may read a stream whose outputs are still deferred
            if len(statements) > 1:
                self._rehearse(statements)
            results: list[ExecuteResult] = []
            created: list[tuple[str, str]] = []
            logged: list[str] = []
            try:
                for stmt, text in statements:
                    name = getattr(stmt, "name", None)
                    existed = name is not None and name in self.reactor.nodes
                    results.append(self.apply_ddl(stmt, text, log=logged))
                    if name is not None and not existed and name in self.reactor.nodes:
                        created.append((name, self.reactor.nodes[name].kind))
            except Exception:
                catalog.undo(self, created)
                raise
            if self.durable is not None:
                for text in logged:  # the WAL sees the script once it applied whole
                    self.durable.log_ddl(text)
        if not results:
            return ExecuteResult("empty")
        last = results[-1]
        last.statements = results
        return last

    def _rehearse(self, statements: list[tuple[object, str]]) -> None:
        """Raise what applying ``statements`` would raise, without touching this engine: they
        run on a scratch engine rebuilt from this catalog (no connectors polled, no sink files)."""
        from laminardb.engine.local_backend import RehearsalBackend

        shadow = Engine(":memory:", config=self.config, backend=RehearsalBackend(), variables=self.variables)
        shadow.udfs = self.udfs
        for text in self.reactor.catalog.values():
            for stmt, t in ddl.parse_script_with_text(text, {}):
                shadow.apply_ddl(stmt, t)
        for stmt, text in statements:
            if isinstance(stmt, catalog.CATALOG_KINDS):
                shadow.apply_ddl(stmt, text)

    def apply_ddl(self, stmt, text: str, *, log: list[str] | None = None) -> ExecuteResult:
        """Run one statement (through the backend, which may mirror it on its workers) and keep
        the catalog in step; DDL that changed the catalog is appended to ``log`` (the WAL)."""
        return self.backend.apply_ddl(stmt, text, lambda: self._apply_here(stmt, text, log))

    def _apply_here(self, stmt, text: str, log: list[str] | None) -> ExecuteResult:
        name = getattr(stmt, "name", None)
        existed = name is not None and name in self.reactor.nodes
        result = self._execute_one(stmt)
        if catalog.record(self.reactor.catalog, stmt, text, existed) and log is not None:
            log.append(text)
        return result

    def undo(self, created: list[tuple[str, str]]) -> None:
        """Drop, newest first, the objects (name, kind) a failed script created."""
        catalog.undo(self, created)

    def _execute_one(self, stmt) -> ExecuteResult:
        r = self.reactor
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

    def _create_sink(self, stmt: ddl.CreateSink) -> ExecuteResult:
        r = self.reactor
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
        stage_root = None if self.durable is None else os.path.join(self.path, "sinks")
        try:
            sink = self.backend.make_sink(stmt, schema, durable=self.durable is not None, stage_root=stage_root)
        except Exception:
            if hidden_created:  # the sink's own query goes with the sink that was refused
                r.drop(ddl.Drop("STREAM", source_name, if_exists=True))
            raise
        r.add_sink(stmt.name, source_name, sink)
        return ExecuteResult("create_sink", stmt.name)

    def _show(self, kind: str) -> pa.Table:
        kinds = {"SOURCES": ("source",), "STREAMS": ("stream", "late"), "MATERIALIZED VIEWS": ("view",),
                 "SINKS": ("sink",), "ALL": ("source", "stream", "late", "view", "sink")}[kind]
        nodes = [n for n in self.reactor.nodes.values() if n.kind in kinds and not n.name.endswith("__query")]
        return pa.table({
            "name": [n.name for n in nodes],
            "kind": [n.kind for n in nodes],
            "sql": [n.sql for n in nodes],
        })

    def _describe(self, name: str) -> pa.Table:
        node = self.reactor._node(name)
        notes = self.reactor.event_time_notes(node.name)  # event-time column -> how its watermark is made
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
            return plan_query(stmt.query, self.reactor.relation).explain()
        if isinstance(stmt, ddl.Query):
            return plan_query(stmt, self.reactor.relation, batch=True).explain()
        raise UnsupportedSqlError("EXPLAIN takes a SELECT or CREATE STREAM/MATERIALIZED VIEW statement")

    def query(self, sql: str) -> QueryResult:
        """A consistent snapshot of materialized views, or an ad-hoc SELECT over them."""
        self.check_open()
        self.backend.settle()
        with self.udfs.active():
            statements = ddl.parse_script(sql, self.variables)
        if len(statements) != 1 or not isinstance(statements[0], ddl.Query):
            raise UnsupportedSqlError("query() takes one SELECT; use execute() for DDL")
        with self.lock, self.udfs.active():
            return QueryResult(self.reactor.run_batch_query(statements[0]))

    def register_udf(self, name: str, fn, return_type: str | pa.DataType) -> None:
        """Register a Python scalar function for SQL (``sql/udf.py``)."""
        self.check_open()
        self.udfs.register(name, fn, return_type)

    # ------------------------------------------------------------------ data
    def insert(self, source: str, data: Any, *, on_error: OnError = "raise", index=None, rejected=None,
               strict_text: bool = True) -> int:
        """Insert one batch; returns an ``InsertResult`` (see ``Connection.insert``)."""
        self.check_open()
        check_on_error(on_error)
        self.backend.check_alive("insert")
        with self.lock:
            n = self.reactor.insert(source, data, on_error=on_error, index=index, rejected=rejected,
                                    strict_text=strict_text)
            lsn = self.reactor.last_lsn
        if self.durable is not None and n:
            self.durable.durable(lsn)  # group commit: fsync outside the lock (wal_sync='always')
        return n

    def insert_staged(self, source: str, rows: Any, ref: dict) -> int:
        """Ingest rows a reactor actor converted and logged already (the Delta mode's direct
        inserts, ``cluster/direct_insert.py``; ``Reactor.insert_staged``)."""
        self.check_open()
        self.backend.check_alive("insert")
        with self.lock:
            n = self.reactor.insert_staged(source, rows, ref)
            lsn = self.reactor.last_lsn
        if self.durable is not None and n:
            self.durable.durable(lsn)
        return n

    def insert_json(self, source: str, data: str | bytes | list[str], *, on_error: OnError = "raise") -> int:
        """Insert JSON text (an array, one object, or one object per line)."""
        self.check_open()
        check_on_error(on_error)
        from laminardb.engine.text_rows import parse_json_text

        parsed = parse_json_text(data, source=source)
        return self.insert(source, parsed.data, on_error=on_error, index=parsed.index, rejected=parsed.rejected,
                           strict_text=False)

    def insert_csv(self, source: str, data: str | bytes, *, on_error: OnError = "raise") -> int:
        """Insert CSV text with a header row."""
        self.check_open()
        check_on_error(on_error)
        from laminardb.engine.text_rows import parse_csv_text

        with self.lock:
            schema = self.reactor._node(source).schema
        parsed = parse_csv_text(data, schema, source=source)
        return self.insert(source, parsed.data, on_error=on_error, index=parsed.index, rejected=parsed.rejected,
                           strict_text=False)

    def advance_watermark(self, source: str, timestamp: Any) -> int | None:
        """Raise ``source`` 's watermark (never back); the watermark now in force, None: none yet."""
        self.check_open()
        with self.lock:
            wm = self.reactor.advance_watermark(source, timestamp)
            lsn = self.reactor.last_lsn
        if self.durable is not None:
            self.durable.durable(lsn)
        return wm

    def watermark(self, source: str) -> int | None:
        """``source`` 's watermark now (None: none yet)."""
        with self.lock:
            return self.reactor.watermarks().get(self.node(source).name)

    def offset(self, source: str) -> int:
        """Rows durably accepted into ``source`` so far, across restarts: resume from here."""
        self.check_open()
        with self.lock:
            node = self.reactor._node(source)
            if node.kind != "source":
                raise NotQueryableError(f"{source!r} is a {node.kind}; offset() counts rows of sources")
            return node.accepted

    def checkpoint(self) -> int:
        """Checkpoint now (durable databases); returns the epoch, the commit point of sinks."""
        self.check_open()
        if self.durable is None:
            from laminardb.checkpoint.exceptions import CheckpointUnsupportedError

            raise CheckpointUnsupportedError("an in-memory database keeps no checkpoints: "
                                             "use laminardb.open('./data') for durability")
        return self.durable.checkpoint()

    def subscribe(self, name: str, *, history_rows: int | None = None) -> Subscription:
        """Every row ``name`` emits from now on; see ``Connection.subscribe_stream``."""
        self.check_open()
        opts = {} if history_rows is None else {"history_rows": history_rows}
        with self.lock:
            sub = self.reactor.subscribe(name, **opts)
        self.backend.on_subscribe(sub)
        return sub

    def subscribe_callback(self, name: str, on_data, on_error=None) -> CallbackSubscription:
        """Call ``on_data(batch)`` for every batch ``name`` emits, on a thread this engine owns."""
        sub = self.subscribe(name, history_rows=0)
        cb = CallbackSubscription(sub, on_data, on_error)
        self.callbacks = [c for c in self.callbacks if c.is_active] + [cb]
        return cb

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start polling connector sources (Kafka). Inserts run synchronously and need no start."""
        self.check_open()
        with self.lock:
            for node in self.reactor.nodes.values():
                if node.connector is not None and node.name not in self.runners:
                    runner = SourceRunner(self.reactor, node)
                    self.runners[node.name] = runner
                    runner.start()
        self.started = True

    def flush(self, timeout_s: float = 30.0) -> None:
        """Return when all input so far is processed and delivered (``Connection.flush``)."""
        self.check_open()
        self.backend.settle()
        try:
            self._flush_sources(timeout_s)
        except Exception:
            self.backend.check_alive("flush")  # a source stopped on a lost worker: say that
            raise
        self.backend.settle()  # what connector sources ingested while flush waited

    def _flush_sources(self, timeout_s: float) -> None:
        bound = float(self.config.get("source_error_timeout", _SOURCE_ERROR_TIMEOUT_S))
        for name, runner in list(self.runners.items()):
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
        with self.lock:
            for node in self.reactor.nodes.values():
                for s in node.sinks:
                    s.flush()

    def finish(self) -> None:
        """End of input: every watermark to +∞, every window emitted and delivered."""
        self.check_open()
        self.warn_unstarted("finish()")
        self.stop_sources()
        self.backend.settle()
        with self.lock:
            if self.reactor.finished:
                return  # finishing twice (also across a restart) is a no-op
            if self.durable is not None:
                self.durable.log_finish()
            self.reactor.finish()
        if self.durable is not None:
            self.durable.checkpoint()  # commit every sink's final output

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Graceful stop, then ``close()`` (``Connection.shutdown``)."""
        self.check_open()
        try:
            self.flush(timeout_s)
            self.stop_sources()
            for cb in list(self.callbacks):
                cb._drain(timeout_s)
        finally:
            self.close()

    def warn_unstarted(self, when: str) -> None:
        """Connector sources never started: say so once (``engine/unstarted.py``)."""
        if self.started or self.reactor.finished or self._warned_unstarted:
            return
        from laminardb.engine.unstarted import unstarted_sources_message

        msg = unstarted_sources_message(self.reactor, when)
        if msg is not None:
            self._warned_unstarted = True
            warnings.warn(msg, UserWarning, stacklevel=4)  # shown once by default; logging.captureWarnings logs it

    def stop_sources(self) -> None:
        """Stop every polling thread (their sources stay open)."""
        for runner in self.runners.values():
            runner.stop()
        self.runners.clear()

    def close(self) -> None:
        """Stop sources; a durable database takes a last checkpoint so sinks hold everything."""
        if self.closed:
            return
        self.warn_unstarted("close()")
        self.backend.before_close()
        self.stop_sources()
        if self.durable is not None:
            try:
                if not self.durable._idle():
                    self.durable.checkpoint()
            except Exception as exc:  # noqa: BLE001 - close() must release; the WAL keeps everything
                log.warning("close(): the last checkpoint failed (recovery replays the WAL instead): %s", exc)
            finally:
                self.durable.close()
                self._release_directory()
        with self.lock:
            for node in self.reactor.nodes.values():
                if node.connector is not None:
                    node.connector.close()
                release = getattr(node.op, "release_connections", None)  # a lookup join's PostgreSQL
                if release is not None:
                    release()
                for sub in node.subscribers:
                    sub._end()
                if node.kind == "sink":
                    for s in node.sinks:
                        s.close()
            self.closed = True
        for cb in self.callbacks:  # they hand over what is queued, then end (outside the lock)
            cb._join(_CALLBACK_JOIN_S)
        self.backend.close()

    def abandon(self) -> None:
        """Let go of everything without a last checkpoint (a worker died, so the state is not
        whole): recovery from the directory replays the WAL instead."""
        if self.closed:
            return
        self.stop_sources()
        self.closed = True
        if self.durable is not None:
            self.durable.close_without_checkpoint()
            self._release_directory()
        with self.lock:
            for node in self.reactor.nodes.values():
                if node.connector is not None:
                    try:
                        node.connector.close()
                    except Exception:  # noqa: BLE001 - its worker may be the dead one
                        pass

    def metrics(self) -> dict[str, Any]:
        """Counters and state of every part (``laminardb.metrics.registry``), plus the backend's."""
        from laminardb.metrics.registry import collect

        if not self.closed:
            self.backend.before_metrics()  # bounded: metrics never wait long for a paused worker
        m = collect(self.reactor, runners=dict(self.runners), durable=self.durable)
        self.backend.add_metrics(m)
        return m

    def check_open(self) -> None:
        if self.closed:
            raise ConnectionClosedError("this connection is closed; call laminardb.open() for a new one")


def _lag_or_error(connector: Any) -> object:
    try:
        return connector.lag()
    except Exception as exc:  # noqa: BLE001 - only for the message
        return f"unknown ({type(exc).__name__})"
