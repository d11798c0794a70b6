"""The cluster client: ``laminardb.connect("ray://…")`` → a ``Connection`` over Ray actors.

Entry point: ``connect(address, *, actors=None, vnodes=256)``. Addresses:
``ray://auto`` (inside a Ray cluster, or reuse this process's ``ray.init``),
``ray://host:port`` (Ray Client), ``ray://local`` (start Ray on this machine).
The connection has exactly the embedded API: DDL is planned once here and installed on
every actor; stateful work runs on the actors (``DistributedOperator``); subscriptions,
views and sinks are served here. A dead actor raises ``ActorLostError`` on the next call
and shows in ``metrics()["cluster"]``.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from laminardb.actors.distributed import COALESCE_MAX, DEFAULT_MAX_IN_FLIGHT, DistributedOperator
from laminardb.actors.exceptions import ActorLostError, ClusterStartError
from laminardb.actors.ownership import RaftConfig, acquire_routing
from laminardb.actors.routing import DEFAULT_VNODES
from laminardb.actors.shm_ring import ShmRing
from laminardb.connection import Connection, ExecuteResult
from laminardb.operators.warmup import warm_kernels
from laminardb.sql import ddl

_START_ATTEMPTS = 3  # actor starts cancelled by a raylet still cleaning up are retried
_FREE_CPU_WAIT_S = 10.0  # connect(): CPUs of actors killed by a close() just before come back
_CALL_TIMEOUT_S = 300.0  # one batch on one actor; generous, but a hung actor must not hang the client


class Cluster:
    """The actors of one connection and how to call them."""

    def __init__(self, n_actors: int, vnodes: int, raft: RaftConfig | None = None) -> None:
        import ray

        from laminardb.actors.reactor_actor import actor_class

        self.n_actors = n_actors
        self.dead: dict[int, str] = {}
        self.actors, self.info = self._start_actors(actor_class(), n_actors)
        tag = uuid.uuid4().hex[:8]  # several connections may share one control plane
        self.members = [f"reactor-{tag}-{i}" for i in range(n_actors)]
        addresses = [f"{i['node_id'][:12]}/pid{i['pid']}/core{i['core']}" for i in self.info]
        try:
            self.ownership = acquire_routing(self.members, vnodes, raft, addresses)
        except Exception:
            self.shutdown()
            raise
        self.routing = self.ownership.routing
        ray.get([a.set_ownership.remote(self.routing.owner.tobytes(), self.ownership.epochs.tobytes())
                 for a in self.actors], timeout=_CALL_TIMEOUT_S)

    @staticmethod
    def _start_actors(cls, n_actors: int):
        """Start the actors; a start the raylet cancelled (it happens while another Ray
        session on the machine is still shutting down) is retried, a bounded number of times."""
        import ray
        from ray.exceptions import ActorDiedError

        for attempt in range(_START_ATTEMPTS):
            actors = [cls.remote(i, n_actors) for i in range(n_actors)]
            try:
                return actors, ray.get([a.ready.remote() for a in actors], timeout=_CALL_TIMEOUT_S)
            except ActorDiedError:
                for a in actors:
                    ray.kill(a)
                if attempt == _START_ATTEMPTS - 1:
                    raise ClusterStartError(
                        f"the {n_actors} reactor actors died before starting {_START_ATTEMPTS} times; "
                        "check `ray status` for free CPUs and the raylet logs"
                    ) from None
        raise AssertionError("unreachable")

    def single_owner(self) -> int:
        return int(self.routing.owner[0])

    def call_each(self, targets: list[int], method: str, *args) -> list[Any]:
        return self.gather(targets, self.submit(targets, method, *args), method)

    def submit(self, targets: list[int], method: str, *args) -> list[Any]:
        """Start ``method`` on each target actor; Ray runs one caller's calls to an actor in
        submission order, so later calls see the effects of earlier ones."""
        return [getattr(self.actors[i], method).remote(*args) for i in targets]

    def gather(self, targets: list[int], futures: list[Any], method: str) -> list[Any]:
        """The results of ``submit``; a dead or hung actor becomes ``ActorLostError``."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(futures, timeout=_CALL_TIMEOUT_S)
        except (RayActorError, GetTimeoutError) as e:
            for i, f in zip(targets, futures, strict=True):
                try:
                    ray.get(f, timeout=0.01)
                except Exception as inner:  # noqa: BLE001 - classify which actor failed
                    if isinstance(inner, RayActorError | GetTimeoutError):
                        self.dead[i] = type(inner).__name__
            lost = ", ".join(f"actor {i} (pid {self.info[i]['pid']})" for i in sorted(self.dead)) or "an actor"
            raise ActorLostError(
                f"{lost} died or stopped answering during {method}(); its partitions' state is lost "
                "until checkpoint recovery is available — reconnect to start fresh actors"
            ) from e

    @staticmethod
    def ready(futures: list[Any]) -> bool:
        import ray

        done, _ = ray.wait(futures, num_returns=len(futures), timeout=0)
        return len(done) == len(futures)

    def broadcast(self, method: str, *args) -> list[Any]:
        return self.call_each(list(range(self.n_actors)), method, *args)

    def status(self) -> dict:
        return {
            "actors": self.n_actors,
            "dead": dict(self.dead),
            "raft": self.ownership.raft is not None,
            "members": [dict(i, member=self.members[i["index"]],
                             vnodes=int((self.routing.owner == i["index"]).sum()),
                             max_epoch=int(self.ownership.epochs[self.routing.owner == i["index"]].max(initial=0)))
                        for i in self.info],
        }

    def shutdown(self) -> None:
        import ray

        ownership = getattr(self, "ownership", None)
        if ownership is not None:
            try:
                ownership.release()
            except Exception:  # noqa: BLE001 - the voters may be gone; the actors still stop
                pass
        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass


class ClusterConnection(Connection):
    """A ``Connection`` whose queries run on Ray actors (same methods, same results).

    Inserts are pipelined (see ``distributed.py``): up to ``max_in_flight`` batches per query
    are on the actors while ``insert()`` returns; a drainer thread delivers their outputs to
    subscribers as they finish, and ``flush``/``query``/``finish``/``metrics``/``execute``
    deliver everything first. ``max_in_flight=0`` makes every insert wait for its outputs.
    """

    def __init__(self, cluster: Cluster, *, config: dict[str, Any] | None = None,
                 shutdown_on_close: bool = True, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 local_global: bool = True) -> None:
        super().__init__(":memory:", config=config)
        self.cluster = cluster
        self._shutdown_on_close = shutdown_on_close
        self._max_in_flight = max_in_flight
        self._local_global = local_global
        self._reactor.make_operator = self._operator
        self._reactor.make_source_connector = self._source_connector
        cluster.broadcast("reset")  # actors start from an empty catalog
        slots = (max_in_flight + 1) * COALESCE_MAX + 4  # rounds in flight, batches held back
        self._ring = ShmRing.open(slots=slots)
        if self._ring is not None:  # which actors share this machine's /dev/shm: ask them
            self._ring.readers = cluster.broadcast("can_read_shm", self._ring.path)
            if not any(self._ring.readers):
                self._ring.close()
                self._ring = None
        self._drainer = _Drainer(self) if max_in_flight > 0 else None

    def _operator(self, name: str, plan) -> DistributedOperator:
        op = DistributedOperator(name, plan, self.cluster, max_in_flight=self._max_in_flight,
                                 local_global=self._local_global, ring=self._ring)
        if self._max_in_flight > 0:
            op.deliver = lambda outs, late: self._reactor.deliver(name, outs, late)
            op.can_defer = lambda: self._reactor.feeds_no_query(name)
        return op

    def _operators(self) -> list[DistributedOperator]:
        return [n.op for n in self._reactor.nodes.values() if isinstance(n.op, DistributedOperator)]

    def _drain(self) -> None:
        """Deliver every batch still on the actors (under the reactor's lock); an error the
        drainer thread met (an actor died) is raised here, on the caller's thread."""
        if self._drainer is not None and self._drainer.error is not None:
            error, self._drainer.error = self._drainer.error, None
            raise error
        with self._reactor.lock:
            for op in self._operators():
                op.drain()

    def _source_connector(self, kind: str, node, options: dict[str, str]):
        if kind != "kafka":
            from laminardb.reactor import make_source_connector

            return make_source_connector(kind, node, options)
        from laminardb.actors.kafka_ingest import ClusterKafkaSource

        return ClusterKafkaSource(self.cluster, node, options, lambda: self._routed_queries(node.name))

    def _routed_queries(self, source: str) -> list[str]:
        """The keyed queries reading ``source`` that take rows split by owner."""
        if self.cluster.n_actors < 2:
            return []
        with self._reactor.lock:
            node = self._reactor.nodes.get(source)
            ops = [self._reactor.nodes[d].op for d in (node.downstream if node else [])]
        return [op.name for op in ops if isinstance(op, DistributedOperator) and op.mode == "keyed"]

    def execute(self, sql: str) -> ExecuteResult:
        self._check_open()
        results = []
        with self._reactor.lock:
            self._drain()  # a new query may read a stream whose outputs are still deferred
            for stmt, text in ddl.parse_script_with_text(sql, self.variables):
                self._install_on_actors(stmt, text)
                results.append(self._execute_one(stmt))
        if not results:
            return ExecuteResult("empty")
        results[-1].statements = results
        return results[-1]

    def _install_on_actors(self, stmt, text: str) -> None:
        """Actors hold the same catalog; sinks and connector polling stay on the client."""
        if isinstance(stmt, ddl.CreateSource | ddl.CreateStream):
            self.cluster.broadcast("execute", text)
        elif isinstance(stmt, ddl.CreateSink) and stmt.query is not None:
            self.cluster.broadcast("execute", f"CREATE STREAM {stmt.name}__query AS {stmt.query.text}")
        elif isinstance(stmt, ddl.Drop) and stmt.kind != "SINK":
            self.cluster.broadcast("execute", text)

    def insert(self, source: str, data: Any, **options: Any) -> int:
        self._check_open()
        if self._drainer is not None and self._drainer.error is not None:
            self._drain()  # raises it
        return super().insert(source, data, **options)

    def finish(self) -> None:
        self._check_open()
        self._stop_runners()
        self._drain()
        super().finish()

    def subscribe_stream(self, name: str, *, history_rows: int | None = None):
        sub = super().subscribe_stream(name, history_rows=history_rows)
        if self._drainer is not None:
            sub.before_read = self._drain_open
        return sub

    subscribe = subscribe_stream

    def _drain_open(self) -> None:
        if not self._closed:
            self._drain()

    def flush(self, timeout_s: float = 30.0) -> None:
        self._check_open()
        self._drain()
        super().flush(timeout_s)
        self._drain()  # what connector sources ingested while flush waited

    def query(self, sql: str):
        self._check_open()
        self._drain()
        return super().query(sql)

    sql = query

    def metrics(self) -> dict[str, Any]:
        if not self._closed:
            try:
                self._drain()
            except ActorLostError:
                pass  # metrics() is where a lost actor is reported, below: never raise here
        m = super().metrics()
        m["cluster"] = self.cluster.status()
        if not self.cluster.dead:
            per_actor = self.cluster.broadcast("metrics")
            m["cluster"]["rows_per_actor"] = [a["rows_in"] for a in per_actor]
            m["cluster"]["busy_s_per_actor"] = [round(a["busy_s"], 4) for a in per_actor]
            m["cluster"]["cpu_s_per_actor"] = [round(a["cpu_s"], 4) for a in per_actor]
            m["cluster"]["rss_bytes_per_actor"] = [(a.get("process") or {}).get("rss_bytes") for a in per_actor]
        return m

    def close(self) -> None:
        if self._closed:
            return
        if self._drainer is not None:
            self._drainer.stop()
        try:
            self._drain()
        except ActorLostError:
            pass  # closing a connection whose actor died must still release everything
        super().close()
        if self._ring is not None:
            self._ring.close()
        if self._shutdown_on_close:
            self.cluster.shutdown()


class _Drainer:
    """Delivers finished rounds to subscribers while nobody calls the connection."""

    _IDLE_S = 0.005
    _WAIT_S = 0.05

    def __init__(self, conn: ClusterConnection) -> None:
        self.conn = conn
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laminardb-drainer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import ray

        lock = self.conn._reactor.lock
        while not self._stop.is_set():
            with lock:
                for op in self.conn._operators():
                    if op.open and not op.pending:
                        op.collect_ready()  # sends the batches held back
                waiting = [f for op in self.conn._operators() for f in op.oldest_futures()]
            if not waiting:
                self._stop.wait(self._IDLE_S)
                continue
            ray.wait(waiting, num_returns=1, timeout=self._WAIT_S)
            try:
                with lock:
                    for op in self.conn._operators():
                        op.collect_ready()
            except Exception as e:  # noqa: BLE001 - the next call on the connection raises it
                self.error = e
                self._stop.wait(self._WAIT_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def connect(address: str = "ray://auto", *, actors: int | None = None, vnodes: int = DEFAULT_VNODES,
            raft: RaftConfig | str | None = None, config: dict[str, Any] | None = None,
            max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, local_global: bool = True) -> ClusterConnection:
    """Connect to (or start) a Ray cluster and start one reactor actor per core.

    ``raft``: the control plane that owns the vnodes — a ``RaftConfig``, or the data dir of
    ``laminardb cluster up``; by default ``LAMINARDB_RAFT_DIR`` / ``LAMINARDB_RAFT_VOTERS``,
    else ownership is planned in-process (single-user development clusters).
    ``max_in_flight``: batches per query that may be on the actors while ``insert()``
    returns (pipelining; 0 = every insert waits for its outputs, like the embedded engine).
    ``local_global``: keyed window aggregates emitted on close aggregate on every actor and
    merge the closed windows (no exchange of rows); False routes every row to its key's owner.
    """
    try:
        import ray
    except ImportError:
        raise ClusterStartError(
            "connect() needs Ray: pip install 'laminardb[cluster]'"
        ) from None
    if not address.startswith("ray://"):
        raise ClusterStartError(f"connect({address!r}): use ray://auto, ray://local or ray://host:port")
    target = address[len("ray://"):]
    if not ray.is_initialized():
        if target == "local":
            ray.init(num_cpus=actors or None, include_dashboard=False, log_to_driver=False)
        elif target == "auto":
            ray.init(address="auto", log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
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
    return ClusterConnection(Cluster(n, vnodes, raft), config=config, max_in_flight=max_in_flight,
                             local_global=local_global)
