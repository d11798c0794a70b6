"""The Delta mode's ``ExecutionBackend``: an engine whose queries run on Ray actors.

Entry points: ``ClusterBackend`` (passed to the engine, never subclassing it),
``cluster_connection(pool, …)`` (a ``Connection`` over it: the database head runs one, see
``head.py``), or ``connect_in_process(address, *, actors=None, vnodes=256)`` for one in this
process. Users connect with ``laminardb.connect`` (``client.py``) instead. Addresses:
``ray://auto`` (inside a Ray cluster, or reuse this process's ``ray.init``),
``ray://host:port`` (Ray Client), ``ray://local`` (start Ray on this machine).
The connection has exactly the embedded API: DDL is planned once here and installed on
every actor; stateful work runs on the actors (``DistributedOperator``); subscriptions,
views and sinks are served here. A dead actor raises ``ActorLostError`` on the next call
and shows in ``metrics()["cluster"]``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.checkpoint.local import config_flag
from laminardb.cluster.actor_pool import _CALL_TIMEOUT_S, _PROBE_TIMEOUT_S, ActorPool
from laminardb.cluster.distributed_operator import (
    COALESCE_MAX,
    DEFAULT_MAX_IN_FLIGHT,
    MERGE_WAIT_S,
    DistributedOperator,
)
from laminardb.cluster.exceptions import ActorLostError, ActorTimeoutError, ClusterStartError
from laminardb.cluster.ownership import RaftConfig
from laminardb.cluster.routing import DEFAULT_VNODES
from laminardb.cluster.shm_ring import ShmRing
from laminardb.connection import Connection
from laminardb.operators.group_aggregate import NO_WATERMARK
from laminardb.operators.query_operator import QueryOperator
from laminardb.operators.warmup import warm_kernels
from laminardb.results import ExecuteResult
from laminardb.sql import ddl

if TYPE_CHECKING:
    from laminardb.engine.engine import Engine

_SETTLE_FOR_METRICS_S = 0.3  # metrics(): outputs still on the actors, delivered if this quick
_FREE_CPU_WAIT_S = 10.0  # connect(): CPUs of actors killed by a close() just before come back


class ClusterBackend:
    """The ``ExecutionBackend`` that places an engine's operators on Ray actors (same SQL,
    same results as in process).

    Inserts are pipelined (see ``distributed_operator.py``): up to ``max_in_flight`` batches
    per query are on the actors while ``insert()`` returns; a drainer thread delivers their
    outputs to subscribers as they finish, and the engine settles (delivers everything first)
    before it reads, applies DDL, finishes or checkpoints. ``max_in_flight=0`` makes every
    insert wait for its outputs.
    """

    def __init__(self, cluster: ActorPool, *, config: dict[str, Any] | None = None,
                 shutdown_on_close: bool = True, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 local_global: bool = True, on_restored=None, coordinated: bool = False,
                 shared_files: bool = True, subscribers_by_reference: bool = False) -> None:
        self.cluster = cluster
        #: every actor can write the database's directory wherever it runs (a configured
        #: directory; False: the head node's Ray session directory, see ``writes_files``)
        self._shared_files = shared_files
        #: the key owners of a local-global aggregate stage its only sink's rows themselves
        #: (``checkpoint/actor_stages.py``); config ``actor_stages=False``: the head stages them
        self._actor_stages = config_flag((config or {}).get("actor_stages", True))
        #: each actor writes its own part of a checkpoint (False: the head collects the parts)
        self._actor_snapshots = config_flag((config or {}).get("actor_snapshots", True))
        #: local-global aggregates merge on the key owners (``owner_merge.py``); False: here
        self._owner_merge = config_flag((config or {}).get("owner_merge", True))
        #: the owners' merges of closes whose rows they stage ride with their next batch call
        #: (``DistributedOperator._defer_merges``); False: one call per owner per close
        self._fold_merges = config_flag((config or {}).get("fold_merges", True))
        #: set by the database head, whose subscribers take rows by reference: their clients
        #: fetch the rows (``HeadSubscription``) — else subscribers in this process read them
        #: (config ``rows_by_reference=False``: every subscriber's rows are decoded here, and a
        #: subscriber makes the head stage the only sink, as before — kept to measure the two)
        self.subscribers_by_reference = subscribers_by_reference and config_flag(
            (config or {}).get("rows_by_reference", True))
        #: set by the database head when the Delta checkpoint coordinator drives this database:
        #: exactly-once sinks are then written by the coordinator, and only staged here
        self.coordinated = coordinated
        #: recovery calls ``on_restored(engine)`` once the checkpoint is restored, before the
        #: WAL is replayed (the database head re-attaches its subscribers there)
        self._on_restored = on_restored
        self._shutdown_on_close = shutdown_on_close
        self._max_in_flight = max_in_flight
        self._local_global = local_global
        #: opt-in: local-global aggregates whose only consumer is a FILE / Delta Lake sink are
        #: merged in the coordinator's epoch job, not here (``checkpoint/partial_stage.py``)
        self._spark_merge = str((config or {}).get("spark_merge", "")).lower() in ("1", "true", "on", "yes")
        self.drainer: _Drainer | None = None
        cluster.call_timeout = float((config or {}).get("actor_call_timeout", cluster.call_timeout))
        cluster.broadcast("reset")  # actors start from an empty catalog
        slots = (max_in_flight + 1) * COALESCE_MAX + 4  # rounds in flight, batches held back
        self.ring = ShmRing.open(slots=slots)
        if self.ring is not None:  # which actors share this machine's /dev/shm: ask them
            self.ring.readers = cluster.broadcast("can_read_shm", self.ring.path)
            if not any(self.ring.readers):
                self.ring.close()
                self.ring = None

    # ------------------------------------------------------------------ engine hooks
    def attach(self, engine: Engine) -> None:
        self.engine = engine
        self.reactor = engine.reactor

    def opened(self) -> None:
        self.drainer = _Drainer(self) if self._max_in_flight > 0 else None

    def restored(self) -> None:
        if self._on_restored is not None:
            self._on_restored(self.engine)

    def make_sink(self, stmt: ddl.CreateSink, schema, *, durable: bool, stage_root: str | None):
        from laminardb.connectors.sinks import is_two_phase

        if self.coordinated and durable and is_two_phase(stmt):
            from laminardb.checkpoint.staged_sink import StagedSink
            from laminardb.connectors.sinks import sink_class_name

            directory = os.path.join(self.engine.path, "staged", _safe(stmt.name))
            if self._spark_merge:
                from laminardb.checkpoint.partial_stage import PartialStagedSink, executors_write

                return PartialStagedSink(stmt.name, _sink_sql(stmt), schema, directory,
                                         connector_name=sink_class_name(stmt, durable=True),
                                         executors_write=executors_write(stmt.connector, stmt.options))
            sink = StagedSink(stmt.name, _sink_sql(stmt), schema, directory,
                              connector_name=sink_class_name(stmt, durable=True))
            sink.seal_actors = lambda epoch: self._seal_actor_stages(directory, epoch)
            return sink
        from laminardb.connectors.sinks import make_sink

        return make_sink(stmt, schema, durable=durable, stage_root=stage_root)

    def writes_files(self, info: dict | None) -> bool:
        """Whether an actor (its ``cluster.info`` entry) can write this database's directory:
        a configured (shared) one anywhere, the Ray session directory only on this node. Such
        actors log direct inserts and stage sink rows themselves."""
        if self._shared_files:
            return True
        import ray

        return info is not None and info.get("node_id") == ray.get_runtime_context().get_node_id()

    def _seal_actor_stages(self, stage_dir: str, epoch: int) -> list[tuple[str, int]]:
        """The barrier of checkpoint ``epoch`` for the rows the actors staged for one sink."""
        from laminardb.checkpoint.actor_stages import actor_stage_dir

        targets = [i for i, a in enumerate(self.cluster.actors) if a is not None]
        futures = [self.cluster.actors[i].seal_stage.remote(actor_stage_dir(stage_dir, self.cluster.members[i]), epoch)
                   for i in targets]
        return [r for r in self.cluster.gather(targets, futures, "seal_stage") if r is not None]

    def make_operator(self, name: str, plan) -> DistributedOperator | _AtClient:
        if _reads_processing_time(plan):
            # PROCTIME() is stamped here, by this engine's clock (config "clock"), as rows
            # enter: actors would read their own wall clocks, each a different time. Such a
            # query is stateless (a projection; windows over its column run on the actors,
            # their watermarks driven from here) or a plan tree, which runs here anyway.
            return _AtClient(plan)
        op = DistributedOperator(name, plan, self.cluster, max_in_flight=self._max_in_flight,
                                 local_global=self._local_global, ring=self.ring,
                                 scalable=self.engine.path != ":memory:")
        if self.coordinated and self._spark_merge and op.mode == "local_global":
            from laminardb.cluster.partial import spark_mergeable

            if spark_mergeable(plan):
                from laminardb.checkpoint.partial_stage import spark_route

                op.merger.route = spark_route(self.reactor, name, op.merger)
        self._actors_write_snapshots(op)
        self._rows_by_reference(name, op)
        op.wake = self._wake_drainer
        op.owner_merge = self._owner_merge
        op.fold_merges = self._fold_merges
        if op.mode == "local_global" and op.owner_merge and (
                route := self._actor_stage_route(name, beside_subscribers=self.subscribers_by_reference)) is not None:
            op.merger.stage_route = route
            op.emitted_elsewhere = lambda rows: self.reactor.emitted_elsewhere(name, rows)
        if self._max_in_flight > 0:
            op.deliver = lambda outs, late: self.reactor.deliver(name, outs, late)
            op.can_defer = lambda: self.reactor.feeds_no_query(name)
        return op

    def make_plan_operator(self, name: str, plan):
        """A plan tree: its stateful nodes on the actors, each partitioned by its own key —
        unless it calls PROCTIME() (stamped by this engine's clock, as ``make_operator`` says)."""
        from laminardb.cluster.distributed_plan import DistributedPlanOperator
        from laminardb.operators.plan_operator import PlanOperator

        if _tree_reads_processing_time(plan):
            return PlanOperator(plan)
        op = DistributedPlanOperator(name, plan, self.cluster, ring=self.ring)
        self._actors_write_snapshots(op)
        self._rows_by_reference(name, op)
        if (route := self._actor_stage_route(name, beside_subscribers=self.subscribers_by_reference)) is not None:
            op.stage_route = route
            op.emitted_elsewhere = lambda rows: self.reactor.emitted_elsewhere(name, rows)
        return op

    def _rows_by_reference(self, name: str, op) -> None:
        """How ``op`` hands rows to the subscribers by reference (``RowsByReference``)."""
        op.has_subscribers = lambda: bool(self.reactor.nodes[name].subscribers)
        op.subscribers_alone = lambda: self.subscribers_alone(name)
        op.emit_to_subscribers = lambda batches: self.reactor.emitted_to_subscribers(name, batches)

    def subscribers_alone(self, name: str) -> bool:
        """Whether query ``name``'s rows go to subscribers alone, and those take rows by
        reference (the database head's: their clients fetch the rows from Ray's object
        store): no view, query or sink here needs the rows decoded."""
        node = self.reactor.nodes.get(name)
        return self.subscribers_by_reference and node is not None and bool(node.subscribers) and (
            not node.downstream and node.view is None and not node.sinks)

    def _actors_write_snapshots(self, op) -> None:
        """A durable database's actors write their own parts of ``op``'s checkpoints when
        each of them can write its directory (``ClusterImage.write_parts``), and read them
        back (whatever ``actor_snapshots`` says now: a checkpoint may hold parts)."""
        if self.engine.path != ":memory:":
            op.checkpoint_root = os.path.join(self.engine.path, "checkpoints")
            op.parts_writable = self._actors_write_files
            op.actors_write_parts = self._actor_snapshots

    def _actor_stage_route(self, name: str, *, beside_subscribers: bool = False):
        """For query ``name`` of a coordinated database: a callable giving its only consumer
        when that is a sink the actors may stage for themselves (``staged_sink.stage_route``)
        and every actor can write the database's directory, else None; None when actors never
        stage (``config={"actor_stages": False}``)."""
        if not (self.coordinated and self._actor_stages):
            return None
        from laminardb.checkpoint.staged_sink import stage_route

        route = stage_route(self.reactor, name, beside_subscribers=beside_subscribers)
        return lambda: route() if self._actors_write_files() else None

    def _actors_write_files(self) -> bool:
        """Whether every actor can write (and read) the database's directory now."""
        return all(map(self.writes_files, self.cluster.info))

    def make_source(self, kind: str, node, options: dict[str, str], restore_state: dict | None = None):
        from laminardb.sql.changelog_kinds import native_kind

        if native_kind(kind) is not None:  # a CDC log: one actor reads it (actor_source.py)
            from laminardb.cluster.actor_source import ClusterActorSource

            return ClusterActorSource(self.cluster, node, kind, options, lambda: self._routed_queries(node.name),
                                      restore_state=restore_state)
        if kind != "kafka":
            from laminardb.engine.reactor import make_source_connector

            return make_source_connector(kind, node, options, restore_state)
        from laminardb.cluster.kafka_ingest import ClusterKafkaSource

        return ClusterKafkaSource(self.cluster, node, options, lambda: self._routed_queries(node.name),
                                  restore_state=restore_state)

    def _wake_drainer(self) -> None:
        if self.drainer is not None:
            self.drainer.wake()

    def operators(self) -> list[DistributedOperator]:
        """The engine's queries that run on the actors."""
        return [n.op for n in self.reactor.nodes.values() if isinstance(n.op, DistributedOperator)]

    def settle(self, timeout: float | None = None) -> None:
        """Deliver every batch still on the actors (under the engine's lock); an error the
        drainer thread met (an actor died) is raised here, on the caller's thread, and so is
        an actor's death seen anywhere else (a Kafka poll): every call raises it from then on.

        ``timeout``: deliver only the rounds that finish within it (``metrics()``: never
        wait for a paused actor), else each round waits up to ``actor_call_timeout``.
        """
        if self.drainer is not None and self.drainer.error is not None:
            error, self.drainer.error = self.drainer.error, None
            raise error
        self.cluster.check_alive("an earlier call")
        if timeout is not None:
            import ray

            with self.reactor.lock:
                waiting = [f for op in self.operators() for rnd in op.pending for f in rnd.futures]
            if waiting:
                ray.wait(waiting, num_returns=len(waiting), timeout=timeout)
        with self.reactor.lock:
            for op in self.operators():
                if timeout is None:
                    op.drain()
                else:
                    op.collect_ready()

    def check_alive(self, what: str) -> None:
        if self.drainer is not None and self.drainer.error is not None:
            self.settle()  # raises it
        self.cluster.check_alive(what)

    def on_subscribe(self, sub) -> None:
        if self.drainer is not None:
            sub.before_read = self._settle_open

    def _settle_open(self) -> None:
        if not self.engine.closed:
            self.settle()

    def _routed_queries(self, source: str) -> list[str]:
        """The keyed queries reading ``source`` that take rows split by owner."""
        if self.cluster.n_actors < 2:
            return []
        with self.reactor.lock:
            node = self.reactor.nodes.get(source)
            ops = [self.reactor.nodes[d].op for d in (node.downstream if node else [])]
        return [op.name for op in ops if isinstance(op, DistributedOperator) and op.mode == "keyed"]

    def apply_ddl(self, stmt, text: str, here) -> ExecuteResult:
        """Here first (so errors are this engine's), then on the actors — except a source,
        which the actors need first (a Kafka source starts reading on them)."""
        if isinstance(stmt, ddl.CreateSource):
            self._install_on_actors(stmt, text)
            return here()
        name = getattr(stmt, "name", None)
        existed = name is not None and name in self.reactor.nodes
        result = here()
        try:
            self._install_on_actors(stmt, text)
        except Exception:
            # the actors refused what this engine accepted (a UDF they cannot import): take it
            # back here too, or batches would reach a query the actors do not have
            if name is not None and not existed and name in self.reactor.nodes:
                self.engine.undo([(name, self.reactor.nodes[name].kind)])
                self._drop_on_actors(stmt)
            raise
        return result

    def _install_on_actors(self, stmt, text: str) -> None:
        """Actors hold the same catalog; sinks and connector polling stay on the client."""
        if isinstance(stmt, ddl.CreateSource | ddl.CreateStream):
            self._broadcast_ddl(text)
        elif isinstance(stmt, ddl.CreateSink) and stmt.query is not None:
            self._broadcast_ddl(f"CREATE STREAM {stmt.name}__query AS {stmt.query.text}")
        elif isinstance(stmt, ddl.Drop) and stmt.kind != "SINK":
            self.cluster.broadcast("execute", text)

    def _broadcast_ddl(self, text: str) -> None:
        """``text`` on every actor, with this engine's Python UDFs: each goes as its
        importable ``"module:qualname"`` reference (``sql/udf.py``); the actors import
        it before planning. A UDF that cannot be imported by name (a lambda, a function of
        ``__main__``) stays here, and a query calling it is refused with the reason."""
        described = self.engine.udfs.describe()
        shipped = [u for u in described if u["function"]]
        try:
            self.cluster.broadcast("execute", text, shipped)
        except (ActorLostError, ActorTimeoutError):
            raise
        except Exception as e:
            local = [u["name"] for u in described if not u["function"]
                     and re.search(rf"(?i)\b{re.escape(str(u['name']))}\s*\(", text)]
            if local:
                from laminardb.sql.exceptions import UdfDefinitionError

                raise UdfDefinitionError(
                    f"UDF {local[0]!r} is a lambda or a function of __main__, which the cluster's actors "
                    "cannot import; define it at module level in an importable module and register "
                    "that function") from e
            raise

    def _drop_on_actors(self, stmt) -> None:
        """Best effort: the actors that did install ``stmt`` forget it again."""
        kind = "SINK" if isinstance(stmt, ddl.CreateSink) else (
            "MATERIALIZED VIEW" if getattr(stmt, "materialized", False) else "STREAM")
        name = f"{stmt.name}__query" if kind == "SINK" else stmt.name
        kind = "STREAM" if kind == "SINK" else kind
        try:
            self.cluster.broadcast("execute", f"DROP {kind} IF EXISTS {name}")
        except Exception:  # noqa: BLE001 - an actor that never had it: nothing to drop
            pass

    def before_metrics(self) -> None:
        try:
            self.settle(timeout=_SETTLE_FOR_METRICS_S)
        except (ActorLostError, ActorTimeoutError):
            pass  # metrics() is where a lost actor is reported (add_metrics): never raise here

    def add_metrics(self, m: dict[str, Any]) -> None:
        """``cluster``: every member with its ``pid``, ``state`` (``ok`` | ``slow``: did not
        answer within ~0.6 s | ``dead``: Ray reports it gone) and ``stale_s`` (None: its figures
        are fresh, else how old the last ones it gave are), ``dead``, ``slow`` and per-actor
        counters (an actor not answering: the last it gave; None if it never did). The queries
        whose state lives on the actors get its size summed over them. Bounded: it never waits
        long for a paused actor."""
        if not self.engine.closed:
            self.cluster.probe("metrics", timeout=_PROBE_TIMEOUT_S)
        m["cluster"] = self.cluster.status()
        self._add_actor_figures(m)

    def _add_actor_figures(self, m: dict[str, Any]) -> None:
        """Per-actor counters and state sizes from each actor's last answer (``probe``)."""
        now = time.monotonic()
        answered = self.cluster.answered.get("metrics", {})
        fresh = set(range(self.cluster.n_actors)) - self.cluster.slow - set(self.cluster.dead)
        per_actor = [answered.get(i, (None, None))[1] for i in range(self.cluster.n_actors)]
        for member in m["cluster"]["members"]:
            i = member["index"]
            seen = answered.get(i)
            member["stale_s"] = None if i in fresh or seen is None else round(now - seen[0], 3)

        def each(key: str, f=lambda v: v) -> list[Any]:
            return [None if a is None else f(a[key]) for a in per_actor]

        m["cluster"]["rows_per_actor"] = each("rows_in")
        m["cluster"]["busy_s_per_actor"] = each("busy_s", lambda v: round(v, 4))
        m["cluster"]["cpu_s_per_actor"] = each("cpu_s", lambda v: round(v, 4))
        # and of reading their sources (Kafka fetch and decode, on the actors' source threads)
        m["cluster"]["poll_cpu_s_per_actor"] = each("poll_cpu_s", lambda v: round(v, 4))
        m["cluster"]["rss_bytes_per_actor"] = [None if a is None else (a.get("process") or {}).get("rss_bytes")
                                               for a in per_actor]
        for name, q in m.get("queries", {}).items():
            if q.get("state_rows") is not None:
                continue
            parts = [(a.get("queries") or {}).get(name) for a in per_actor if a is not None]
            rows = [p.get("state_rows") for p in parts if p is not None]
            if rows and all(r is not None for r in rows):  # the embedded figure, summed over actors
                q["state_rows"] = sum(rows)
                q["state_bytes"] = sum(int(p.get("state_bytes") or 0) for p in parts if p is not None)
        # local-global aggregates: partial rows merged here, on the key owners, or by the epoch job
        m["cluster"]["partial_merge"] = {
            name: {"merged_at_head": op.merger.rows_merged,
                   "merged_on_actors": op.merger.rows_merged_on_actors,
                   "staged_on_actors": op.merger.rows_staged_on_actors, "to_spark": op.merger.rows_routed,
                   "merges_folded": op.merges_folded}
            for name, node in self.reactor.nodes.items()
            if (op := node.op) is not None and hasattr(getattr(op, "merger", None), "rows_routed")}
        # plan trees: the head's scheduling work, and where the root's rows went
        from dataclasses import asdict

        from laminardb.cluster.distributed_plan import DistributedPlanOperator

        m["cluster"]["plan_exchange"] = {name: asdict(node.op.counts) for name, node in self.reactor.nodes.items()
                                         if isinstance(node.op, DistributedPlanOperator)}
        # the other queries: output rows handed to subscribers by reference (never decoded here)
        m["cluster"]["rows_by_ref"] = {name: node.op.rows_by_ref for name, node in self.reactor.nodes.items()
                                       if isinstance(node.op, DistributedOperator)}

    def final_counters(self) -> dict[str, Any] | None:
        """The counters as this engine leaves them (``abandon``: set before it lets go),
        without asking an actor: the database head carries them into the next engine's."""
        return getattr(self, "_final", None)

    def before_close(self) -> None:
        if self.drainer is not None:
            self.drainer.stop()
        try:
            self.settle()
        except (ActorLostError, ActorTimeoutError):
            pass  # closing a connection whose actor died must still release everything

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
        if self._shutdown_on_close:
            self.cluster.shutdown()

    def abandon(self, *, keep_actors: bool = False) -> None:
        """Let go of everything without a last checkpoint: an actor died, so the state on
        the actors is not whole; the database head recovers from the directory instead.
        ``keep_actors``: leave the actors running (the next engine keeps the live ones,
        ``ActorPool(survivors=…)``)."""
        if self.engine.closed:
            return
        if self.drainer is not None:
            self.drainer.stop()
        try:  # what metrics() read last goes on from here (the head's MonotonicCounters)
            from laminardb.metrics.registry import collect

            final = collect(self.reactor, runners=dict(self.engine.runners), durable=None)
            final["cluster"] = self.cluster.status(raft=False)
            self._add_actor_figures(final)
            self._final = final
        except Exception:  # noqa: BLE001 - a figure missing here only makes a counter carry less
            pass
        self.engine.abandon()
        if self.ring is not None:
            self.ring.close()
        if not keep_actors:
            self.cluster.shutdown()


def cluster_connection(cluster: ActorPool, *, config: dict[str, Any] | None = None, path: str = ":memory:",
                       **backend_options: Any) -> Connection:
    """A ``Connection`` whose engine runs its queries on ``cluster`` 's actors (``ClusterBackend``;
    ``backend_options`` are its keywords). A durable ``path`` (the database head's directory)
    recovers here: catalog, actor state and the WAL of inserts since the checkpoint."""
    return Connection(path, config=config, backend=ClusterBackend(cluster, config=config, **backend_options))


class _Drainer:
    """Delivers finished rounds to subscribers while nobody calls the connection. It sleeps
    while no round is in flight (an operator that queues one wakes it), so an idle database
    costs it nothing per second."""

    _WAIT_S = 0.05
    _NAP_S = 1.0  # with nothing in flight: a wake is expected; this only bounds a missed one

    def __init__(self, backend: ClusterBackend) -> None:
        self.backend = backend
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._work = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laminardb-drainer", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._work.set()

    def _run(self) -> None:
        import ray

        lock = self.backend.reactor.lock
        while not self._stop.is_set():
            self._work.clear()  # before looking: a round queued after this line wakes the wait below
            due = False
            with lock:
                for op in self.backend.operators():
                    if op.open and not op.pending:
                        op.collect_ready()  # sends the batches held back
                    try:
                        due = op.flush_stale_merges() or due
                    except Exception as e:  # noqa: BLE001 - as below: the next call raises it
                        self.error = e
                rounds = [r for op in self.backend.operators() if (r := op.oldest_futures())]
            if not rounds:
                self._work.wait(MERGE_WAIT_S if due else self._NAP_S)
                continue
            # wait until a round has every answer: waiting for any one answer would return at
            # once, again and again, while one actor of a round has answered and another not
            waiting = [f for r in rounds for f in r]
            done = set(ray.wait(waiting, num_returns=len(waiting), timeout=0)[0])
            if not any(all(f in done for f in r) for r in rounds):
                ray.wait([f for f in waiting if f not in done], num_returns=1, timeout=self._WAIT_S)
            try:
                with lock:
                    for op in self.backend.operators():
                        op.collect_ready()
            except Exception as e:  # noqa: BLE001 - the next call on the connection raises it
                self.error = e
                self._stop.wait(self._WAIT_S)

    def stop(self) -> None:
        self._stop.set()
        self._work.set()
        self._thread.join(timeout=5)


def connect_in_process(address: str = "ray://auto", *, actors: int | None = None, vnodes: int = DEFAULT_VNODES,
                       raft: RaftConfig | str | None = None, config: dict[str, Any] | None = None,
                       max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, local_global: bool = True) -> Connection:
    """Run a database's engine in this process over reactor actors it starts and owns.

    ``laminardb.connect`` (``client.py``) is the public entry: it runs this engine inside the
    database head in the cluster. This in-process form serves the head's own tests and
    benchmarks that look at the engine's internals (pipelining, shared memory).

    ``raft``: the control plane that owns the vnodes — a ``RaftConfig``, or the data dir of
    ``laminardb cluster up``; by default ``LAMINARDB_RAFT_DIR`` / ``LAMINARDB_RAFT_VOTERS``,
    else ownership is planned in-process (single-user development clusters).
    ``max_in_flight``: batches per query that may be on the actors while ``insert()``
    returns (pipelining; 0 = every insert waits for its outputs, like the embedded engine).
    ``local_global``: keyed window aggregates emitted on close aggregate on every actor and
    merge the closed windows (no exchange of rows); False routes every row to its key's owner.
    """
    from laminardb.cluster.ray_env import init_ray

    ray = init_ray(address, actors)
    n = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    # the actors of a connection closed just before are released asynchronously: wait a little
    deadline = time.monotonic() + _FREE_CPU_WAIT_S
    while (free := int(ray.available_resources().get("CPU", 0))) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    if free < n:
        raise ClusterStartError(
            f"connect(): {n} actors need {n} free CPUs but the Ray cluster has {free}; "
            "pass actors=… or add nodes"
        )
    warm_kernels()
    if isinstance(raft, str):
        raft = RaftConfig.from_data_dir(raft)
    elif raft is None:
        raft = RaftConfig.from_env()
    timeout = float((config or {}).get("actor_call_timeout", _CALL_TIMEOUT_S))
    return cluster_connection(ActorPool(n, vnodes, raft, call_timeout=timeout), config=config,
                              max_in_flight=max_in_flight, local_global=local_global)


class _AtClient(QueryOperator):
    """A query this client runs itself (one that calls ``PROCTIME()``): rows a Kafka source
    left on the actors that read them (``RemoteRows``) are fetched first."""

    def process(self, batch, wm_before: int = NO_WATERMARK, **kwargs):
        if not isinstance(batch, pa.RecordBatch):  # contracts.DeferredRows
            batch = batch.materialize()
        return super().process(batch, wm_before, **kwargs)


def _reads_processing_time(plan) -> bool:
    """Whether one of the query's own expressions calls ``PROCTIME()`` (a window over a
    PROCTIME column of its input only reads that column, and runs on the actors)."""
    agg = plan.aggregate
    exprs = [plan.where, plan.having, *plan.projections]
    if agg is not None:
        exprs += [*agg.keys, *agg.args]
    return any(e is not None and _PROCTIME.search(e.sql) for e in exprs)


def _tree_reads_processing_time(node) -> bool:
    """``_reads_processing_time`` over every SELECT block, filter and join condition of a tree."""
    from laminardb.sql.plan import QueryPlan

    if isinstance(node, QueryPlan) and _reads_processing_time(node):
        return True
    texts = [getattr(getattr(node, "predicate", None), "sql", ""), getattr(node, "condition_sql", "")]
    if any(t and _PROCTIME.search(t) for t in texts):
        return True
    return any(_tree_reads_processing_time(c) for c in getattr(node, "children", []) or [])


_PROCTIME = re.compile(r"(?i)\bPROCTIME\s*\(")


def _sink_sql(stmt: ddl.CreateSink) -> str:
    """A CREATE SINK the coordinator can build the same sink from (connector and options)."""
    opts = ", ".join(f"{k} = '{str(v).replace(chr(39), chr(39) * 2)}'" for k, v in stmt.options.items())
    return f"CREATE SINK {stmt.name} FROM {stmt.name}__query INTO {stmt.connector} ({opts})"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
