"""The in-process ``ExecutionBackend``: every operator, source and sink runs in this process.

Why a class at all: the engine never knows where its work runs; this is the plain answer,
the one ``laminardb.open()`` uses. Its hooks have nothing to wait for — inserts are processed
synchronously on the inserting thread — so they are no-ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.operators.plan_operator import PlanOperator
from laminardb.operators.query_operator import QueryOperator

if TYPE_CHECKING:
    from laminardb.engine.engine import Engine
    from laminardb.engine.reactor import Node
    from laminardb.engine.subscriptions import Subscription
    from laminardb.results import ExecuteResult
    from laminardb.sql import ddl
    from laminardb.sql.plan import QueryPlan


class LocalBackend:
    """Runs an engine's work in this process (``contracts.ExecutionBackend``)."""

    def attach(self, engine: Engine) -> None:
        self.engine = engine

    def opened(self) -> None:
        pass

    def make_operator(self, name: str, plan: QueryPlan) -> QueryOperator:
        return QueryOperator(plan)

    def make_plan_operator(self, name: str, plan: QueryPlan) -> PlanOperator:
        return PlanOperator(plan)

    def make_source(self, kind: str, node: Node, options: dict[str, str], restore_state: dict | None = None):
        from laminardb.engine.reactor import make_source_connector

        return make_source_connector(kind, node, options, restore_state)

    def make_sink(self, stmt: ddl.CreateSink, schema: pa.Schema, *, durable: bool, stage_root: str | None):
        from laminardb.connectors.sinks import make_sink

        return make_sink(stmt, schema, durable=durable, stage_root=stage_root)

    def apply_ddl(self, stmt: Any, text: str, here: Callable[[], ExecuteResult]) -> ExecuteResult:
        return here()

    def settle(self, timeout: float | None = None) -> None:
        pass

    def check_alive(self, what: str) -> None:
        pass

    def on_subscribe(self, sub: Subscription) -> None:
        pass

    def restored(self) -> None:
        pass

    def before_metrics(self) -> None:
        pass

    def add_metrics(self, metrics: dict[str, Any]) -> None:
        pass

    def before_close(self) -> None:
        pass

    def close(self) -> None:
        pass


class _NullSink:
    """Stands in for a sink during a rehearsal: no files, no brokers."""

    def write(self, batch: pa.RecordBatch) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class RehearsalBackend(LocalBackend):
    """A scratch engine's backend (``catalog.rehearse``): no connectors polled, no sink files."""

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        engine.reactor.connectors_enabled = False

    def make_sink(self, stmt: ddl.CreateSink, schema: pa.Schema, *, durable: bool, stage_root: str | None):
        return _NullSink()
