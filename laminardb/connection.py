"""The embedded ``Connection``: SQL in, Arrow out, everything in the caller's process.

Entry point: ``laminardb.open()`` builds one. Each method takes the reactor's lock, so a
connection may be shared between threads; inserts are processed synchronously (the
reactor runs on the inserting thread), which is why ``flush()`` has nothing to wait for
in the embedded mode and a subscriber sees a batch's output as soon as ``insert`` returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from laminardb.errors import ConnectionClosedError, EngineError
from laminardb.reactor import Reactor
from laminardb.source_runner import SourceRunner
from laminardb.sql import ddl
from laminardb.sql.exceptions import UnsupportedSqlError
from laminardb.sql.planner import plan_query
from laminardb.sql.types import type_name
from laminardb.subscription import Subscription


@dataclass
class QueryResult:
    """Rows of a query: ``to_arrow()``, ``to_pandas()``, ``to_polars()``."""

    table: pa.Table

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return self.table.to_pandas()

    def to_polars(self):
        import polars as pl

        return pl.from_arrow(self.table)

    def to_pylist(self) -> list[dict]:
        return self.table.to_pylist()

    def __len__(self) -> int:
        return self.table.num_rows


@dataclass
class ExecuteResult:
    """What ``execute()`` did: the kind of the last statement, the object it named, rows if any."""

    kind: str
    name: str | None = None
    table: pa.Table = field(default_factory=lambda: pa.table({}))
    statements: list[ExecuteResult] = field(default_factory=list)

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return self.table.to_pandas()

    def __repr__(self) -> str:
        return f"ExecuteResult(kind={self.kind!r}, name={self.name!r}, rows={self.table.num_rows})"


class Connection:
    """An embedded laminardb database; see ``laminardb.open``."""

    def __init__(self, path: str = ":memory:", *, config: dict[str, Any] | None = None) -> None:
        self.path = path
        self.config = dict(config or {})
        self.variables: dict[str, object] = dict(self.config.get("vars", {}))
        if path != ":memory:":
            os.makedirs(path, exist_ok=True)
        self._reactor = Reactor()
        self._closed = False
        self._started = False
        self._runners: dict[str, SourceRunner] = {}

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        """Run one or more ``;``-separated statements; returns the last one's result."""
        self._check_open()
        with self._reactor.lock:
            results = [self._execute_one(s) for s in ddl.parse_script(sql, self.variables)]
        if not results:
            return ExecuteResult("empty")
        last = results[-1]
        last.statements = results
        return last

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

    def _create_sink(self, stmt: ddl.CreateSink) -> ExecuteResult:
        if stmt.connector not in ("file", "kafka"):
            raise UnsupportedSqlError(
                f"sink connector {stmt.connector.upper()} is not available; use FILE (path = '…', format = 'jsonl') "
                "or KAFKA (brokers = '…', topic = '…')"
            )
        r = self._reactor
        source_name = stmt.from_name
        if stmt.query is not None:
            hidden = f"{stmt.name}__query"
            r.create_stream(ddl.CreateStream(hidden, stmt.query))
            source_name = hidden
        schema = r._node(source_name).schema
        if stmt.connector == "kafka":
            from laminardb.connectors.kafka import KafkaSink

            sink = KafkaSink(schema=schema, options=stmt.options)
        else:
            from laminardb.connectors.files import FileSink

            path = stmt.options.get("path")
            if not path:
                raise UnsupportedSqlError(f"sink {stmt.name!r} needs path = '…'")
            sink = FileSink(path, format=stmt.options.get("format"), schema=schema)
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
        rows = [(f.name, type_name(f.type), f.nullable and f.name not in node.not_null,
                 f.name == node.time_col) for f in node.schema]
        return pa.table({
            "column": [r[0] for r in rows],
            "type": [r[1] for r in rows],
            "nullable": [r[2] for r in rows],
            "event_time": [r[3] for r in rows],
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
    def insert(self, source: str, data: Any) -> int:
        """Insert one batch (dict, list of dicts, RecordBatch, Table or DataFrame); returns rows."""
        self._check_open()
        with self._reactor.lock:
            return self._reactor.insert(source, data)

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

    def query(self, sql: str) -> QueryResult:
        """A consistent snapshot of materialized views, or an ad-hoc SELECT over them."""
        self._check_open()
        statements = ddl.parse_script(sql, self.variables)
        if len(statements) != 1 or not isinstance(statements[0], ddl.Query):
            raise UnsupportedSqlError("query() takes one SELECT; use execute() for DDL")
        with self._reactor.lock:
            return QueryResult(self._reactor.run_batch_query(statements[0]))

    sql = query

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
        for name, runner in list(self._runners.items()):
            if not runner.wait_caught_up(timeout_s):
                raise EngineError(
                    f"flush(): source {name!r} did not catch up within {timeout_s}s "
                    f"(lag {runner.node.connector.lag()}, last error: {runner.last_error})"
                )
        with self._reactor.lock:
            for node in self._reactor.nodes.values():
                for s in node.sinks:
                    s.flush()

    def finish(self) -> None:
        """End of input: every watermark to +∞, every window emitted and delivered."""
        self._check_open()
        self._stop_runners()
        with self._reactor.lock:
            self._reactor.finish()

    def _stop_runners(self) -> None:
        for runner in self._runners.values():
            runner.stop()
        self._runners.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._stop_runners()
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

    def metrics(self) -> dict[str, Any]:
        r = self._reactor
        with r.lock:
            return {
                "events_ingested": r.events_ingested,
                "events_emitted": r.events_emitted,
                "late_events_dropped": r.late_dropped(),
                "late_events_routed": r.late_routed,
                "watermarks": r.watermarks(),
                "streams": {n.name: {"rows_emitted": n.rows_out, "kind": n.kind}
                            for n in r.nodes.values() if n.kind != "source"},
            }

    def list_streams(self) -> list[str]:
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


def open(path: str = ":memory:", *, config: dict[str, Any] | None = None) -> Connection:  # noqa: A001
    """Open an embedded database (in memory by default)."""
    from laminardb.operators.warmup import warm_kernels

    warm_kernels()  # once per process: no query waits on numba compilation
    return Connection(path, config=config)
