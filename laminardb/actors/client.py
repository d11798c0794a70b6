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

import uuid
from typing import Any

from laminardb.actors.distributed import DistributedOperator
from laminardb.actors.exceptions import ActorLostError, ClusterStartError
from laminardb.actors.ownership import RaftConfig, acquire_routing
from laminardb.actors.routing import DEFAULT_VNODES
from laminardb.connection import Connection, ExecuteResult
from laminardb.operators.warmup import warm_kernels
from laminardb.sql import ddl

_START_ATTEMPTS = 3  # actor starts cancelled by a raylet still cleaning up are retried
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
        ray.get([a.set_ownership.remote(self.routing.owned_mask(i).tobytes(), self.ownership.epochs.tobytes())
                 for i, a in enumerate(self.actors)], timeout=_CALL_TIMEOUT_S)

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
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        futures = [getattr(self.actors[i], method).remote(*args) for i in targets]
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
    """A ``Connection`` whose queries run on Ray actors (same methods, same results)."""

    def __init__(self, cluster: Cluster, *, config: dict[str, Any] | None = None,
                 shutdown_on_close: bool = True) -> None:
        super().__init__(":memory:", config=config)
        self.cluster = cluster
        self._shutdown_on_close = shutdown_on_close
        self._reactor.make_operator = lambda name, plan: DistributedOperator(name, plan, cluster)
        self._reactor.make_source_connector = self._source_connector
        cluster.broadcast("reset")  # actors start from an empty catalog

    def _source_connector(self, kind: str, node, options: dict[str, str]):
        if kind != "kafka":
            from laminardb.reactor import make_source_connector

            return make_source_connector(kind, node, options)
        from laminardb.actors.kafka_ingest import ClusterKafkaSource

        return ClusterKafkaSource(self.cluster, node, options)

    def execute(self, sql: str) -> ExecuteResult:
        self._check_open()
        results = []
        with self._reactor.lock:
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

    def metrics(self) -> dict[str, Any]:
        m = super().metrics()
        m["cluster"] = self.cluster.status()
        if not self.cluster.dead:
            per_actor = self.cluster.broadcast("metrics")
            m["cluster"]["rows_per_actor"] = [a["rows_in"] for a in per_actor]
        return m

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if self._shutdown_on_close:
            self.cluster.shutdown()


def connect(address: str = "ray://auto", *, actors: int | None = None, vnodes: int = DEFAULT_VNODES,
            raft: RaftConfig | str | None = None, config: dict[str, Any] | None = None) -> ClusterConnection:
    """Connect to (or start) a Ray cluster and start one reactor actor per core.

    ``raft``: the control plane that owns the vnodes — a ``RaftConfig``, or the data dir of
    ``laminardb cluster up``; by default ``LAMINARDB_RAFT_DIR`` / ``LAMINARDB_RAFT_VOTERS``,
    else ownership is planned in-process (single-user development clusters).
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
    free = int(ray.available_resources().get("CPU", 0))
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
    return ClusterConnection(Cluster(n, vnodes, raft), config=config)
