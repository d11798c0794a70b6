"""The database head: one detached Ray actor per named database, holding what a client held.

Why: a pipeline must outlive the notebook that started it. The head runs the engine of one
database — catalog, watermark coordination, merges, subscription fan-out, the WAL of inserts
since the last checkpoint — as an ``Engine`` over its own reactor actors (``backend.ClusterBackend``) (it owns
them: they die with it). Clients (``client.RemoteConnection``) attach and detach; the head
stays until ``drop_database``.

Entry points: ``head_name(database)``, ``get_or_create_head(database, …)``, ``list_databases()``,
``drop_database(name)``. Every method answers plain data — Arrow IPC bytes for rows, dicts
for the rest — and a ``LaminarError`` comes back as ``{"error": …}`` so the client raises
the same class with the same code (``client.raise_remote``).

Durability: the head's directory is ``<checkpoint_dir>/<database>`` (default under Ray's temp
dir on the head node). There it keeps the catalog, the WAL and checkpoints (with every
actor's state, ``DistributedOperator.snapshot``); a head whose actor died recovers from it
(``_recover``), and so does a head Ray restarted after its process died — which then also
registers with the coordinator again, restarts the sources that ran and re-attaches the
subscriptions (``head_state.py``; ``docs/cluster.md``, "When the head dies").
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time
import uuid
from typing import Any

from laminardb.cluster.actor_pool import NAMESPACE
from laminardb.cluster.remote_rows import RemoteBatch
from laminardb.cluster.wire import SharedIpc

log = logging.getLogger(__name__)

_PREFIX = "head:"
_WATCH_S = 0.5  # how often the head looks for a lost actor nobody is calling
_RECOVERY_ATTEMPTS = 3
_PREPARE_ATTEMPTS = 3  # a checkpoint the head refused to prepare, asked for again at most this often
_COORD_LINGER_S = 30.0  # an idle coordinator (no database left) stops this long after the last drop
_COORD_TIMEOUT_S = 120.0  # a checkpoint the coordinator runs for a client (JVM start on the first)
_STATUS_TIMEOUT_S = 2.0
# threads for subscription reads: each long-poll holds one up to 200 ms (a client's callback
# subscriptions share one read: cluster/subscription_pump.py); more readers wait for a thread
_READ_THREADS = 128
_LOST_AFTER_S = 10.0  # config "actor_lost_after": a slow actor silent this long more is replaced


def head_name(database: str) -> str:
    return _PREFIX + database


def reactor_prefix(database: str) -> str:
    """How the Ray names of a durable database's reactor actors start (they are detached: a
    restarted head takes over the live ones; ``drop_database`` stops them all)."""
    return f"reactor:{database}/"


SESSION_DIR = "session"  # config "checkpoint_dir" unset: the Ray session's directory, see below


def session_checkpoint_dir() -> str:
    """Where databases keep their state when ``config["checkpoint_dir"]`` is not given: the
    current Ray session's directory on the head node. It survives clients and head restarts
    but not a new Ray cluster, so a fresh cluster starts with no stale databases; set a
    shared path for state that must outlive the cluster (or span nodes)."""
    import ray

    return os.path.join(ray._private.worker.global_worker.node.get_session_dir_path(), "laminardb")


def _answer(method):
    """Run a head method; a LaminarError becomes ``{"error": …}`` (re-raised by the client)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        from laminardb.errors import ClusterError, LaminarError

        try:
            return {"ok": method(self, *args, **kwargs)}
        except Exception as raised:
            exc = getattr(raised, "cause", None) or raised  # an actor's error, wrapped by Ray
            if not isinstance(exc, LaminarError):  # a bug, or a process under us failed: typed all the same
                log.exception("database head: %s failed", method.__name__)
                exc = ClusterError(f"the database head's {method.__name__}() failed: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''} — the database keeps its "
                                   "last checkpoint and WAL; call again, and if it fails the same way, "
                                   "report it with the head's log (`ray logs`)")
            return {"error": {"module": type(exc).__module__, "class": type(exc).__qualname__,
                              "code": getattr(exc, "code", None),
                              "message": getattr(exc, "message", str(exc))}}

    return run


class DatabaseHead:
    """The actor body (``head_class`` wraps it with ``ray.remote``)."""

    def __init__(self, database: str, directory: str | None, n_actors: int, vnodes: int,
                 config: dict[str, Any], raft: dict | None, max_in_flight: int,
                 local_global: bool) -> None:
        from laminardb.cluster.head_state import HeadState
        from laminardb.cluster.metrics_view import BoundedRead, MonotonicCounters

        t0 = time.perf_counter()
        self.database = database
        #: where reactor actors on any node can write the database's files (direct inserts log
        #: there): a configured directory (shared, docs/cluster.md) or none at all
        self.files_everywhere = directory != SESSION_DIR
        if directory == SESSION_DIR:
            directory = os.path.join(session_checkpoint_dir(), database)
        self.directory = directory
        self.n_actors = n_actors
        self.vnodes = vnodes
        self.config = dict(config)
        self.raft = raft
        self.max_in_flight = max_in_flight
        self.local_global = local_global
        self.subs: dict[str, HeadSubscription] = {}  # id → subscription (history kept by clients)
        self.clients: dict[str, float] = {}  # client id → attach time
        # sources running, subscriptions and recoveries: what a restarted process needs again
        self.state = HeadState(directory)
        self.recoveries: list[dict] = list(self.state.recoveries)
        # Ray re-ran this constructor after the head's process died: recover, then resume
        self.restarted = _restarted_by_ray()
        self._owed_checkpoint = False  # a checkpoint asked for while the engine was opening
        self._counters = MonotonicCounters()  # metrics() never goes back across recoveries
        self._metrics_reader = BoundedRead(self._fresh_metrics)  # metrics() bounded in time
        self._heartbeats = None  # the actors' liveness, per pool (``_silent_actors``)
        self._lock = threading.RLock()  # data calls run one at a time; recovery swaps the engine under it
        self.generation = 0  # engines recovered so far
        self.dropped = False
        self.started_at = time.time()
        # the Delta checkpoint coordinator (a PySpark application, ``spark_coordinator.py``)
        # drives the checkpoints of a database with a directory unless config says "local"
        self.coordinated = bool(directory) and self.config.get("coordinator", "spark") == "spark"
        self.rescales: list[dict] = []  # every rescale: when, from, to, by whom, why, the pause
        self.udfs = self._load_udfs()  # register_udf: {name, "module:qualname", return type}
        self.coordinator = self._coordinator() if self.coordinated else None
        self.conn = self._open_after_restart() if self.restarted else self._open()
        self._registered = self._register() if self.coordinated else None
        if self.restarted:
            self._resume_after_restart(t0)
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="laminardb-head-watchdog", daemon=True)
        self._watchdog.start()
        self.autoscaler = self._start_autoscaler()
        self._pay_owed_checkpoint()

    # ------------------------------------------------------------------ lifecycle
    def _open_after_restart(self):
        """Recover after Ray restarted this process. The reactor actors the dead process left
        (detached, listed in the head state) are kept if alive — no new processes to wait
        for, which is most of a head restart's time; if opening on them fails, fresh ones."""
        from laminardb.cluster.actor_pool import ActorPool

        prefix = reactor_prefix(self.database)
        if self.directory and self.state.actors:
            try:
                return self._open(recovering=True, survivors=ActorPool.adopt(prefix, self.state.actors))
            except Exception as exc:  # noqa: BLE001 - e.g. an adopted actor died meanwhile
                log.warning("database %s: recovering on the actors the dead head left failed (%s); "
                            "starting fresh ones", self.database, exc)
        return self._open(recovering=True)

    def _open(self, *, recovering: bool = False, survivors=None):
        from laminardb.cluster.actor_pool import ActorPool, kill_named
        from laminardb.cluster.backend import ClusterBackend
        from laminardb.connection import Connection
        from laminardb.operators.warmup import warm_kernels

        warm_kernels()
        raft = self._raft_config()
        timeout = float(self.config.get("actor_call_timeout", 30.0))
        self._publish_recorded(raft, recovering=recovering)
        # a head Ray restarts (one with a directory) takes over its actors: they are detached
        prefix = reactor_prefix(self.database) if self.directory else None
        if prefix is not None:
            # every actor an earlier head left but the survivors kept here: they hold CPUs the
            # new actors need (e.g. one a dying head started to replace a lost actor, before it
            # could record it — the new pool would wait for its CPU until the start times out)
            kept = [] if survivors is None else [
                name for name, actor in zip(survivors.ray_names() or [], survivors.actors, strict=True)
                if actor is not None]
            kill_named(prefix, keep=frozenset(kept))
        cluster = ActorPool(self.n_actors, self.vnodes, raft, call_timeout=timeout,
                          ownership_source=f"db/{self.database}", survivors=survivors,
                          detached_prefix=prefix)
        if prefix is not None:  # survivors the pool did not keep, it killed itself
            self.state.set_actors(cluster.members)
        path = self.directory or ":memory:"
        try:
            config = self._engine_config()
            backend = ClusterBackend(cluster, config=config, max_in_flight=self.max_in_flight,
                                     local_global=self.local_global, on_restored=self._on_restored,
                                     coordinated=self.coordinated, shared_files=self.files_everywhere,
                                     subscribers_by_reference=True)
            conn = Connection(path, config=config, backend=backend)
            self._open_insert_logs(conn, cluster)
            if self.coordinated and conn.engine.durable is not None:
                # every checkpoint goes through the coordinator — also on a restarted head, whose
                # sinks only stage rows: a local checkpoint would drop them (nothing writes them)
                conn.engine.durable.external = self._external_checkpoint
            return conn
        except BaseException:
            cluster.shutdown()
            raise

    def _open_insert_logs(self, conn, cluster) -> None:
        """Every actor logs the rows clients insert through it in a WAL of its own in the
        database's directory (``direct_insert.py``); the checkpoints free what they cover."""
        import ray

        from laminardb.checkpoint.actor_wals import actor_wal_dir

        durable = conn.engine.durable
        sync = str(self.config.get("wal_sync", "none"))
        dirs = [None if durable is None else actor_wal_dir(durable.dir, m) for m in cluster.members]
        ray.get([a.open_insert_log.remote(d, sync) for a, d in zip(cluster.actors, dirs, strict=True)],
                timeout=cluster.call_timeout)
        if durable is not None:
            members = frozenset(cluster.members)
            durable.actor_wals.live = lambda: members

    def _raft_config(self):
        """The voters this database's ownership and epoch log live in: the ``raft`` it was
        connected with, else the environment's (``LAMINARDB_RAFT_DIR`` / ``_VOTERS``), else none."""
        from laminardb.cluster.ownership import RaftConfig

        if self.raft is None:
            return RaftConfig.from_env()
        if "data_dir" in self.raft:
            return RaftConfig.from_data_dir(self.raft["data_dir"])
        return RaftConfig(tuple(self.raft["voters"]), self.raft["secret"])

    def _epoch_log(self, raft):
        """The coordinator's epoch log of this database — the one ``_register`` told it to use."""
        from pathlib import Path

        from laminardb.checkpoint._coord_db import _safe
        from laminardb.checkpoint.epoch_log import FileEpochLog, RaftEpochLog

        if raft is not None:
            from laminardb.raft.client import RaftClient

            return RaftEpochLog(RaftClient(list(raft.voters), secret=raft.secret), self.database)
        return FileEpochLog(Path(os.path.dirname(self.directory)) / _safe(self.database) / "coordinator")

    def _publish_recorded(self, raft, *, recovering: bool) -> None:
        """Before restoring, fence the coordinator's epoch log (``epoch_log.fence``), then
        publish the checkpoint it recorded (its commit point — the sinks may hold its output
        already) if this head had not published it yet. After the fence no checkpoint in
        flight (prepared on the engine being replaced) can be recorded, so recovery starts
        from the last checkpoint whose output the sinks may hold, and never produces that
        output again. A head opening a database with nothing stored has nothing to fence."""
        if not self.coordinated:
            return
        from laminardb.checkpoint.epoch_log import fence
        from laminardb.checkpoint.store import CheckpointStore

        store = CheckpointStore(self.directory)
        if not recovering and not store.pending() and not store.complete():
            return
        log_ = self._epoch_log(raft)
        try:
            manifest = fence(log_)["manifest"]
        finally:
            log_.close()
        pending = store.pending()  # a prepare that finished meanwhile: its epoch is fenced
        if manifest is not None and int(manifest["epoch"]) in pending:
            store.publish(int(manifest["epoch"]))
            log.warning("database %s: published checkpoint %s, recorded by the coordinator before "
                        "this head's restart", self.database, manifest["epoch"])

    def _start_autoscaler(self):
        """The autoscaling loop (``autoscale/driver.py``) of a database with checkpoints (only
        those can move state). With ``autoscale`` off it still observes and decides, so
        ``metrics()`` shows what it would do."""
        from laminardb.autoscale import AutoscaleConfig
        from laminardb.autoscale.driver import AutoscaleDriver

        if not self.directory:
            return None
        driver = AutoscaleDriver(self, AutoscaleConfig.from_config(self.config))
        driver.start()
        return driver

    def _engine_config(self) -> dict[str, Any]:
        from laminardb.sql.udf import UdfRegistry

        config = {k: v for k, v in self.config.items() if k not in ("checkpoint_dir", "coordinator")}
        if self.coordinated:
            config["checkpoint_interval"] = "off"  # the coordinator's interval, not a local timer
        if self.udfs:  # before the catalog replays: its queries may call them
            reg = UdfRegistry.from_description(self.udfs)
            config["udfs"] = {u.name: (u.fn, u.return_type) for u in map(reg.get, reg.names())}
        return config

    # ------------------------------------------------------------------ UDFs
    def _udf_file(self) -> str | None:
        return os.path.join(self.directory, "udfs.json") if self.directory else None

    def _load_udfs(self) -> list[dict]:
        import json

        path = self._udf_file()
        if path is None or not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            return list(json.load(f))

    @_answer
    def register_udfs(self, items: list[dict]) -> None:
        """``register_udf`` of a client: each function by its ``"module:qualname"`` reference
        (imported here and on every actor; never a pickled function). Kept in the database's
        directory, so a recovered or restarted head registers them before replaying its catalog."""
        import json

        from laminardb.sql.udf import UdfRegistry

        reg = UdfRegistry.from_description(items)  # an unimportable one: UdfDefinitionError
        with self._lock:
            conn = self._conn()
            for u in map(reg.get, reg.names()):
                conn.register_udf(u.name, u.fn, u.return_type)
            names = {i["name"].lower() for i in items}
            self.udfs = [u for u in self.udfs if u["name"].lower() not in names] + list(items)
            path = self._udf_file()
            if path is not None:
                os.makedirs(self.directory, exist_ok=True)
                tmp = path + ".tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(self.udfs, f)
                os.replace(tmp, path)

    def _coordinator(self):
        """The cluster's checkpoint coordinator (started on first use)."""
        from laminardb.checkpoint.spark_coordinator import ensure_coordinator

        return ensure_coordinator({"state_dir": os.path.join(session_checkpoint_dir(), "_coordinator")})

    def _register(self):
        """Hand this database to the checkpoint coordinator (again, after a restart: the same
        registration, so its checkpoint loop goes on with this process). Not waited for here:
        the coordinator calls back into this head, which is still being constructed;
        ``ready()`` and the first checkpoint wait for it (``_await_registered``)."""
        from laminardb.checkpoint.local import parse_interval

        raft = self._raft_config()  # the same log the head fences and reads (``_epoch_log``)
        interval = parse_interval(self.config.get("checkpoint_interval", "10s"))
        return self.coordinator.register.remote(
            self.database, head_name=head_name(self.database), interval_s=interval,
            checkpoint_dir=os.path.dirname(self.directory),
            raft_voters=list(raft.voters) if raft is not None else None,
            raft_secret=raft.secret if raft is not None else None,
            raft_secret_file=raft.secret_file if raft is not None else None)

    def _register_anew(self) -> None:
        """The coordinator this head registered with ended: register with the one running
        now (started if none)."""
        self.coordinator = self._coordinator()
        self._registered = self._register()

    def _await_registered(self) -> None:
        """Wait for ``_register`` (a checkpoint asked for before would find this database
        unknown there); a coordinator that was ending meanwhile (the last other database
        dropped: ``CoordinatorRetiredError``, or already gone) is replaced by a new one,
        which this database registers with (bounded)."""
        if self._registered is None:
            return
        import ray
        from ray.exceptions import RayActorError

        from laminardb.checkpoint.exceptions import CoordinatorRetiredError

        deadline = time.monotonic() + _COORD_TIMEOUT_S
        while True:
            try:
                ray.get(self._registered, timeout=_COORD_TIMEOUT_S)
                self._registered = None
                return
            except Exception as exc:
                retired = isinstance(getattr(exc, "cause", None) or exc, CoordinatorRetiredError)
                if not (retired or isinstance(exc, RayActorError)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # until the ending coordinator is gone and a new one can start
                self._register_anew()

    def _external_checkpoint(self) -> int:
        """``checkpoint()`` through the coordinator. A coordinator that dies meanwhile is
        restarted by Ray and settles the epoch it left (commits it if its manifest was
        recorded, else aborts it); the checkpoint is then asked for again."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        from laminardb.checkpoint.exceptions import CheckpointPrepareError
        from laminardb.errors import CheckpointError

        self._await_registered()
        deadline = time.monotonic() + _COORD_TIMEOUT_S
        refused = 0
        while True:
            # an actor that died since the last call (one no batch has touched since: a batch
            # that closes no window calls only the actor holding its rows) raises
            # ActorLostError here, in the caller's ``_call``, which recovers and asks again;
            # met inside the coordinator's prepare it would only fail the epoch
            if self.conn is not None:
                self.conn.engine.backend.check_alive("checkpoint()")
            try:
                return int(ray.get(self.coordinator.checkpoint_now.remote(self.database), timeout=_COORD_TIMEOUT_S))
            except RayActorError:  # the coordinator restarts: it settles the epoch it left
                if time.monotonic() > deadline:
                    raise
                if self._coordinator()._actor_id != self.coordinator._actor_id:  # it ended (idle)
                    self._register_anew()
                    self._await_registered()
            except CheckpointPrepareError:
                # a restart race clears at once; a head that cannot write (store full) would
                # only fail the same way for two minutes: say so now
                refused += 1
                if refused >= _PREPARE_ATTEMPTS or time.monotonic() > deadline:
                    raise
            except RayTaskError as exc:  # the coordinator's job failed (its Spark JVM died, say)
                raise CheckpointError(
                    f"the checkpoint coordinator failed: {type(exc.cause).__name__ if exc.cause else 'error'}: "
                    f"{str(exc.cause or exc).splitlines()[0]} — the last checkpoint stays the recovery point "
                    "and nothing acknowledged is lost; the next checkpoint retries") from exc
            time.sleep(0.5)

    def _owe_checkpoint(self) -> int:
        """``durable.checkpoint()`` while the engine opens (recovery replayed a ``finish()``
        whose checkpoint had not run): the coordinator would call back into an engine not yet
        in place, so the checkpoint is owed and runs once it is (``_pay_owed_checkpoint``)."""
        self._owed_checkpoint = True
        return self.conn.engine.durable.epoch if self.conn is not None else 0

    def _pay_owed_checkpoint(self) -> None:
        if not self._owed_checkpoint:
            return
        self._owed_checkpoint = False

        def run() -> None:
            try:
                self._external_checkpoint()
            except Exception:  # noqa: BLE001 - the coordinator's next interval or finish() retries
                log.exception("database %s: the checkpoint owed after recovery failed", self.database)

        threading.Thread(target=run, name="laminardb-head-owed-checkpoint", daemon=True).start()

    def _on_restored(self, engine) -> None:
        """Recovery restored the checkpoint and is about to replay the WAL: checkpoints asked
        for meanwhile are owed, and every subscription (kept by this process, or listed in the
        head state by the process before a restart) is attached before the replay."""
        if self.coordinated and engine.durable is not None:
            engine.durable.external = self._owe_checkpoint
        self._resubscribe(engine)
        self._restore_subscriptions(engine)

    def _resume_after_restart(self, t0: float) -> None:
        """Ray restarted this head's process and the engine is recovered (checkpoint, WAL):
        connector sources that were running run again, from the checkpointed offsets, and
        the recovery is listed in ``metrics()`` as an actor loss's is."""
        conn = self.conn
        if self.state.sources_running and not conn.engine.reactor.finished:
            conn.start()
        self._record_recovery("head restarted", t0)

    def _record_recovery(self, cause: str, t0: float) -> None:
        report = dict(self.conn.engine.durable.stats.get("recovery") or {}) if self.conn.engine.durable else {}
        # "seconds": the whole recovery (new actors included); "restore_s": state and replay
        report["restore_s"] = report.pop("seconds", None)
        report.update(cause=cause, at=time.time(), seconds=round(time.perf_counter() - t0, 3))
        self.recoveries.append(report)
        self.state.add_recovery(report)
        log.warning("database %s: recovered in %.2f s (%s)", self.database, report["seconds"], cause)

    @_answer
    def ready(self) -> dict:
        self._await_registered()
        return {"database": self.database, "pid": os.getpid(), "directory": self.directory,
                "coordinated": self.coordinated, "config": self.config}

    # ------------------------------------------------------------------ the coordinator's calls
    # Plain results and exceptions (not ``_answer``): the coordinator is our own code. None of
    # these take the head's lock — a checkpoint must not wait behind a long insert's recovery,
    # and one that meets a replaced engine fails and is aborted by the coordinator.
    def prepare_checkpoint(self, epoch: int) -> dict:
        """Barrier, snapshots and a pending manifest for ``epoch``; each exactly-once sink's
        epoch staged for the coordinator's Spark job."""
        from laminardb.checkpoint.staged_sink import StagedSink

        conn = self._conn()
        ack = conn.engine.durable.prepare(epoch)
        ack["sinks"] = {name: s.describe(epoch) for name, s in ack["sinks"].items() if isinstance(s, StagedSink)}
        return ack

    def commit_checkpoint(self, epoch: int) -> None:
        """The manifest of ``epoch`` is recorded in Raft: it becomes the recovery point."""
        from laminardb.checkpoint.staged_sink import StagedSink

        conn = self._conn()
        conn.engine.durable.publish(epoch)
        for s in conn.engine.durable.sinks().values():
            if isinstance(s, StagedSink):
                s.release(epoch)

    def abort_checkpoint(self, epoch: int) -> None:
        self._conn().engine.durable.discard(epoch)

    def checkpoint_status(self) -> dict:
        d = self._conn().engine.durable
        return {"last_committed": d.epoch, "pending": d.store.pending()}

    @_answer
    def attach(self, client: str | None = None) -> str:
        """A new client; or, with its id, a client back after this head restarted."""
        client = client or uuid.uuid4().hex[:12]
        self.clients.setdefault(client, time.time())
        return client

    @_answer
    def detach(self, client: str) -> None:
        """A client left (``close()`` or garbage collection): its subscriptions end here, and
        the sequence number of its last insert is forgotten (it sends no more)."""
        self.clients.pop(client, None)
        for sid in [s for s in self.subs if s.startswith(client + ":")]:
            self._cancel(sid)
        self.state.drop_subscriptions([s for s in self.state.subscriptions if s.startswith(client + ":")])
        with self._lock:  # not while a checkpoint's barrier packs the table
            conn = self.conn
            if conn is not None and conn.engine.durable is not None:
                with conn.engine.lock:
                    conn.engine.durable.client_seqs.pop(client, None)

    @_answer
    def drop(self) -> None:
        """Stop the actors and remove the database's state (``drop_database``)."""
        self._stop.set()
        if self.autoscaler is not None:
            self.autoscaler.stop()
        if self.coordinated and getattr(self, "coordinator", None) is not None:
            import ray

            ray.get(self.coordinator.unregister.remote(self.database), timeout=_COORD_TIMEOUT_S)
            self._retire_coordinator()
        with self._lock:
            for sid in list(self.subs):
                self._cancel(sid)
            conn, self.conn = self.conn, None
            self.dropped = True
            if conn is not None:
                conn.engine.backend.abandon()
            if self.directory:
                from laminardb.cluster.actor_pool import kill_named

                kill_named(reactor_prefix(self.database))
            if self.directory and os.path.isdir(self.directory):
                shutil.rmtree(self.directory, ignore_errors=True)

    def _retire_coordinator(self) -> None:
        """End the coordinator (and its Spark JVM, ~670 MB) if this was the last database it
        checkpointed — ``coordinator_linger_s`` (30) later, if no database came meanwhile; a
        database registering as it ends is refused and starts a new one."""
        import ray

        linger = float(self.config.get("coordinator_linger_s", _COORD_LINGER_S))
        try:
            if ray.get(self.coordinator.retire_if_idle.remote(linger), timeout=_COORD_TIMEOUT_S):
                ray.kill(self.coordinator, no_restart=True)
                log.warning("database %s: the last database of the checkpoint coordinator; it stopped",
                            self.database)
        except Exception:  # noqa: BLE001 - a coordinator left running costs memory, not data
            log.exception("database %s: stopping the idle checkpoint coordinator failed", self.database)

    def _conn(self):
        from laminardb.errors import ConnectionClosedError

        if self.conn is None and not self.dropped:  # a recovery is swapping the engine: wait for it
            with self._lock:
                pass
        if self.conn is None:
            raise ConnectionClosedError(f"database {self.database!r} was dropped; connect() creates it again")
        return self.conn

    # ------------------------------------------------------------------ the Connection API
    @_answer
    def execute(self, sql: str) -> dict:
        from laminardb.cluster.wire import to_ipc_table

        res = self._call(lambda c: c.execute(sql))
        steps = res.statements or [res]
        return {"statements": [{"kind": r.kind, "name": r.name, "table": to_ipc_table(r.table)} for r in steps]}

    @_answer
    def insert(self, source: str, payload: dict, on_error: str, tag: list | None = None) -> dict:
        from laminardb.cluster.wire import decode_rows, to_ipc_table

        data = decode_rows(payload)
        n = self._call(lambda c: _insert_once(c, tag, lambda: c.insert(source, data, on_error=on_error)),
                       logged=lambda c: c.engine.durable.last_logged_rows)
        return _insert_answer(n, to_ipc_table)

    @_answer
    def insert_route(self, source: str) -> dict:
        """Where a client sends the rows of its inserts into ``source`` itself (``direct_insert.py``)."""
        return self._call(lambda c: self._insert_route(c, source))

    def _insert_route(self, conn, source: str) -> dict:
        from laminardb.checkpoint.local import config_flag
        from laminardb.cluster.direct_insert import DirectInserts

        backend = conn.engine.backend
        cluster = backend.cluster
        name = conn.engine.reactor._node(source).name
        actors = []
        if config_flag(self.config.get("direct_inserts", True)):
            for i, (actor, info) in enumerate(zip(cluster.actors, cluster.info, strict=True)):
                if actor is not None and i not in cluster.dead and backend.writes_files(info):
                    actors.append((i, actor))
        return {"token": _route_token(cluster), "actors": actors, "routed": backend._routed_queries(name),
                "min_bytes": int(self.config.get("direct_insert_min_bytes", DirectInserts.MIN_BYTES))}

    @_answer
    def insert_staged(self, source: str, token: str, desc: dict, tag: list | None = None) -> dict:
        """Ingest an insert a reactor actor converted, logged and kept (``direct_insert.py``);
        ``{"stale": True}`` when the actors changed since the client's route was made."""
        from laminardb.checkpoint.exceptions import StaleInsertRefError
        from laminardb.cluster.remote_rows import RemoteRows
        from laminardb.cluster.wire import to_ipc_table

        def run(c):
            cluster = c.engine.backend.cluster
            if _route_token(cluster) != token:
                return None
            actor = int(desc["actor"])
            node = c.engine.reactor._node(source)
            rows = RemoteRows.merge(node.schema, [(actor, desc)], cluster.n_actors)
            ref = {"w": cluster.members[actor], "l": desc["lsn"]}
            try:
                n = _insert_once(c, tag, lambda: c.engine.insert_staged(source, rows, ref))
            except StaleInsertRefError:
                return None
            # a keyed query created since the route was made: the client splits for it from now on
            return n, c.engine.backend._routed_queries(node.name)

        done = self._call(run, logged=lambda c: (c.engine.durable.last_logged_rows, None))
        if done is None:
            return {"stale": True}
        n, routed = done
        return {**_insert_answer(n, to_ipc_table), "routed": routed}

    @_answer
    def insert_text(self, kind: str, source: str, data, on_error: str, tag: list | None = None) -> dict:
        from laminardb.cluster.wire import to_ipc_table

        method = {"json": "insert_json", "csv": "insert_csv"}[kind]
        n = self._call(lambda c: _insert_once(c, tag, lambda: getattr(c, method)(source, data, on_error=on_error)),
                       logged=lambda c: c.engine.durable.last_logged_rows)
        return _insert_answer(n, to_ipc_table)

    @_answer
    def advance_watermark(self, source: str, timestamp) -> int | None:
        return self._call(lambda c: c.engine.advance_watermark(source, timestamp))

    @_answer
    def query(self, sql: str) -> bytes:
        from laminardb.cluster.wire import to_ipc_table

        return to_ipc_table(self._call(lambda c: c.query(sql)).to_arrow())

    @_answer
    def offset(self, source: str) -> int:
        return self._call(lambda c: c.offset(source))

    @_answer
    def checkpoint(self) -> int:
        return self._call(lambda c: c.checkpoint())

    @_answer
    def start(self) -> None:
        self._call(lambda c: c.start())
        self.state.set_running(True)  # a restarted head starts its sources again

    @_answer
    def flush(self, timeout_s: float) -> None:
        return self._call(lambda c: c.flush(timeout_s))

    @_answer
    def finish(self) -> None:
        self._call(lambda c: c.finish(), logged=lambda c: None)
        self.state.set_running(False)  # finish() stopped them

    @_answer
    def list_streams(self) -> list[str]:
        return self._conn().list_streams()  # waits out a recovery (``_conn``)

    @_answer
    def source_watermark(self, source: str) -> int | None:
        """``Writer.current_watermark`` in the cluster: the engine's own figure, never the
        metrics' (which may be stale, or lack it, while the engine is busy)."""
        return self._call(lambda c: c._source_watermark(source))

    @_answer
    def describe_source(self, source: str) -> dict:
        from laminardb.cluster.wire import schema_to_ipc

        with self._conn().engine.lock:
            node = self._conn().engine.node(source)
            return {"schema": schema_to_ipc(node.schema), "wm": node.wm}

    @_answer
    def metrics(self) -> dict:
        """The engine's metrics (``Connection.metrics``) with ``database``, ``autoscale`` and
        ``stale``: None, or — when the engine did not answer within ``METRICS_BUDGET_S`` (a
        paused actor, a recovery under way) — ``{"age_s", "reason"}`` over the last figures
        it gave. Counters never go back across recoveries (``metrics_view.py``)."""
        return self._metrics_reader.read(self._stale_metrics)

    def _fresh_metrics(self) -> dict:
        conn = self._conn()
        m = self._counters.apply(conn, conn.metrics())
        m["stale"] = None
        m["database"] = dict(self._database_status(), coordinator=self._coordinator_status())
        m["autoscale"] = self._autoscale_status()
        return m

    def _stale_metrics(self, last: dict | None, age_s: float | None) -> dict:
        """The last figures (None: none yet), with what is known now without waiting: the
        database, and each actor's state (its figures are ``stale_s`` old)."""
        from laminardb.cluster.metrics_view import METRICS_BUDGET_S

        m = last if last is not None else {}
        why = "a recovery is replacing the engine" if self.conn is None else "an actor or the engine is busy or paused"
        m["stale"] = {"age_s": age_s, "reason": f"the engine did not answer within {METRICS_BUDGET_S:g} s ({why}): "
                                                "these are the last figures it gave"}
        m["database"] = dict(self._database_status(), coordinator=(m.get("database") or {}).get("coordinator"))
        conn = self.conn
        if conn is not None:
            cluster = dict(m.get("cluster") or {})
            cluster.update(conn.engine.backend.cluster.status(raft=False))
            for member in cluster["members"]:
                member["stale_s"] = age_s
            m["cluster"] = cluster
        return m

    def _database_status(self) -> dict:
        return {"name": self.database, "directory": self.directory, "head_pid": os.getpid(),
                "clients": len(self.clients), "subscriptions": len(self.subs),
                "recoveries": list(self.recoveries), "uptime_s": round(time.time() - self.started_at, 1)}

    def _autoscale_status(self) -> dict:
        """The autoscaler's knobs, inputs, last decisions and why, and every rescale's pause."""
        out = self.autoscaler.metrics() if self.autoscaler is not None else {"enabled": False}
        out["actors_now"] = self.n_actors
        out["rescales_done"] = list(self.rescales[-32:])
        return out

    def _coordinator_status(self) -> dict | None:
        """The checkpoint coordinator's view of this database (epochs, barrier → manifest
        p50/p99, the Spark job's share), bounded: None when it does not answer in time."""
        if not self.coordinated or getattr(self, "coordinator", None) is None:
            return None
        import ray

        try:
            return ray.get(self.coordinator.status.remote(self.database), timeout=_STATUS_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - metrics never fail on a busy or restarting coordinator
            return None

    @_answer
    def scale(self, n: int) -> dict:
        """``db.scale(n)`` / ``laminardb cluster scale``: see ``rescale``."""
        done = self.rescale(int(n), by="manual", reason=f"asked for {int(n)} actor(s)")
        if self.autoscaler is not None:
            self.autoscaler.rescaled()
        return done

    def rescale(self, n: int, *, by: str, reason: str) -> dict:
        """Run on ``n`` actors: a checkpoint, then the engine rebuilt on ``n`` actors from it —
        the recovery path, so keyed state moves by vnode, partial aggregates are added up on
        the actors that stay, Kafka partitions follow, the old owners' epochs are fenced and
        every result stays exactly-once; the live actors are kept. Returns the record of the
        rescale with the pause it caused. If the new actors cannot start, the database goes
        back to its old count and the error is raised."""
        from laminardb.autoscale.driver import ask_ray_for_cpus
        from laminardb.autoscale.observe import free_cpus
        from laminardb.errors import ConfigError

        if n < 1:
            raise ConfigError(f"scale({n}): a database needs at least one actor")
        with self._lock:
            conn = self._conn()
            if conn.engine.durable is None:
                raise ConfigError(f"database {self.database!r} keeps no checkpoints (checkpoint_dir ':memory:'); "
                                  "it cannot move its state to another number of actors")
            old = self.n_actors
            if n == old:
                return {"actors": n, "previous": old, "pause_s": 0.0, "by": by, "reason": reason}
            free = free_cpus()
            if n > old and free is not None and free < n - old:
                ask_ray_for_cpus(n)
                from laminardb.autoscale.exceptions import ScaleCapacityError

                raise ScaleCapacityError(
                    f"scale({n}): {n - old} more actor(s) need {n - old} CPU(s); the Ray cluster has {free} free. "
                    "Ray's autoscaler was asked for them: try again once `ray status` shows them, or ask for fewer")
            t0, started = time.perf_counter(), time.time()
            self._call(lambda c: c.checkpoint())  # an actor lost meanwhile: recovered, then again
            self.n_actors = n
            try:
                self._recover(f"{by} scale {old} -> {n}")
            except Exception:
                self.n_actors = old
                self._recover(f"scale to {n} failed: back to {old}")
                raise
            record = {"at": started, "previous": old, "actors": n, "by": by, "reason": reason,
                      "pause_s": round(time.perf_counter() - t0, 3),
                      "restore_s": self.recoveries[-1].get("restore_s")}
            self.rescales.append(record)
            log.warning("database %s: rescaled %d -> %d in %.2f s (%s: %s)", self.database, old, n,
                        record["pause_s"], by, reason)
            return record

    @_answer
    def urls(self) -> dict:
        conn = self._conn()
        return {"metrics": conn.metrics_url, "dashboard": conn.dashboard_url}

    @_answer
    def status(self) -> dict:
        """What ``laminardb cluster status`` shows of this database: with each source's and
        sink's status, error and counters as ``metrics()`` has them (bounded as it is)."""
        conn = self.conn
        out = {"database": self.database, "directory": self.directory, "head_pid": os.getpid(),
               "clients": len(self.clients), "recoveries": len(self.recoveries), "dropped": conn is None}
        if conn is not None or not self.dropped:
            m = self._metrics_reader.read(self._stale_metrics)
            out["cluster"] = m.get("cluster")
            out["checkpoints"] = m.get("checkpoints")
            out["streams"] = conn.list_streams() if conn is not None else None
            out["sources"], out["sinks"], out["stale"] = m.get("sources"), m.get("sinks"), m.get("stale")
        auto = self._autoscale_status()
        out["autoscale"] = {"enabled": auto.get("enabled"), "last": auto.get("last"),
                            "inputs": auto.get("inputs"), "rescales": auto["rescales_done"][-5:],
                            "pending_rescale": auto.get("pending_rescale")}
        return out

    # ------------------------------------------------------------------ subscriptions
    @_answer
    def subscribe(self, client: str, name: str) -> dict:
        from laminardb.cluster.wire import schema_to_ipc

        def attach(conn):
            with conn.engine.lock:
                node = conn.engine.node(name)
                return HeadSubscription(node.name, conn.subscribe(name, history_rows=0), node.rows_out)

        sub = self._call(attach)
        sid = f"{client}:{uuid.uuid4().hex[:8]}"
        self.subs[sid] = sub
        self.state.add_subscription(sid, sub.name)  # a restarted head attaches it again
        return {"id": sid, "schema": schema_to_ipc(sub.engine.schema), "start": sub.position}

    @_answer
    def sub_read(self, sid: str, timeout_ms: float, position: int | None = None) -> dict:
        """The batches queued for subscription ``sid`` (waiting up to ``timeout_ms`` for one).
        ``position``: the absolute index of the next row the client expects — after a head
        restart the subscription starts at the checkpoint and skips what the client has."""
        return self._sub_read(sid, timeout_ms, position)

    @_answer
    def sub_read_many(self, reads: list[tuple[str, int | None]], timeout_ms: float) -> dict[str, dict]:
        """``sub_read`` for several subscriptions of one client in one call, waiting up to
        ``timeout_ms`` until any of them has a batch. Why: each long-poll holds a head thread;
        the client's pump reads all its callback subscriptions with one (subscription_pump.py).
        A subscription whose read fails answers ``{"error": …}`` and the others go on."""
        from laminardb.cluster.exceptions import ActorLostError
        from laminardb.engine.subscriptions import wait_any

        conn, generation = self.conn, self.generation
        if conn is not None:  # these reads drain nothing, so they would not meet a lost actor
            try:
                conn.engine.backend.check_alive("a subscription read")
            except ActorLostError as lost:
                self._recover_for_read(generation, lost)
                return {sid: {"batches": [], "ended": False} for sid, _ in reads}
        if timeout_ms > 0:
            engines = [sub.engine for sid, _ in reads if (sub := self.subs.get(sid)) is not None]
            if len(engines) == len(reads):  # else one has ended: answer at once
                wait_any(engines, timeout_ms / 1000.0)
        out: dict[str, dict] = {}
        for sid, position in reads:
            try:
                out[sid] = self._sub_read(sid, 0, position, settle=False)
            except Exception as exc:  # noqa: BLE001 - reported to that subscription only
                log.exception("database head: a read of subscription %s failed", sid)
                out[sid] = {"error": f"{type(exc).__name__}: {exc}"}
        return out

    # a read is a long-poll that holds a thread up to 200 ms: reads have threads of their own,
    # so however many subscriptions wait, inserts, DDL and metrics() never queue behind them
    # (what @ray.method(concurrency_group=…) sets; Ray reads it off the function _answer wraps)
    sub_read.__wrapped__.__ray_concurrency_group__ = "reads"  # type: ignore[attr-defined]
    sub_read_many.__wrapped__.__ray_concurrency_group__ = "reads"  # type: ignore[attr-defined]

    def _sub_read(self, sid: str, timeout_ms: float, position: int | None, *, settle: bool = True) -> dict:
        from laminardb.cluster.exceptions import ActorLostError

        sub = self.subs.get(sid)
        if sub is None:
            return {"batches": [], "ended": True}
        generation = self.generation
        try:
            return sub.read(timeout_ms, position, settle=settle)
        except ActorLostError as lost:
            # the read delivered batches still on the actors and one had died
            self._recover_for_read(generation, lost)
            return {"batches": [], "ended": False}

    def _recover_for_read(self, generation: int, lost: Exception) -> None:
        """A read met a lost actor: recover as a data call would (the subscriptions are attached
        to the new engine and skip what their client has), unless another call recovered since
        ``generation``; the client reads again. Not durable: raised to the client."""
        with self._lock:
            conn = self.conn
            if conn is None or conn.engine.durable is None:
                raise lost
            if self.generation == generation:
                self._recover("ActorLostError")

    @_answer
    def sub_cancel(self, sid: str) -> None:
        self._cancel(sid)

    def _cancel(self, sid: str) -> None:
        sub = self.subs.pop(sid, None)
        self.state.drop_subscriptions([sid])
        if sub is not None:
            sub.cancel()

    def _restore_subscriptions(self, engine) -> None:
        """After a restart: the subscriptions the head state lists, attached at the restored
        stream's position (the client's next read says how many rows it already has)."""
        reactor = engine.reactor
        for sid, name in self.state.subscriptions.items():
            node = reactor.nodes.get(name)
            if sid not in self.subs and node is not None:  # a stream the WAL creates: on its DDL
                sub = HeadSubscription(name, reactor.subscribe(name, history_rows=0), node.rows_out)
                sub.engine_of = engine
                self.subs[sid] = sub

    def _resubscribe(self, engine) -> None:
        """Recovery restored the last checkpoint and is about to replay what followed it: every
        subscription starts over here and skips the rows its client already has."""
        reactor = engine.reactor
        for sub in self.subs.values():
            node = reactor.nodes.get(sub.name)
            if node is not None and sub.engine_of is not engine:  # once per recovery, as soon as
                sub.reattach(reactor.subscribe(sub.name, history_rows=0), node.rows_out)  # it exists
                sub.engine_of = engine

    # ------------------------------------------------------------------ recovery
    def _watch(self) -> None:
        """Notice a lost actor nobody is calling (a Kafka pipeline with no client): Ray
        reports it dead, a source stops on it, or the drainer met it — then recover."""
        cause = "watchdog"
        while not self._stop.wait(_WATCH_S):
            conn = self.conn
            if conn is None or conn.engine.durable is None:
                continue
            silent = self._silent_actors(conn.engine.backend.cluster)
            if silent:
                from laminardb.cluster.liveness import give_up

                cause = give_up(conn.engine.backend.cluster, silent)
                log.warning("database %s: %s; replacing it", self.database, cause)
            lost = bool(conn.engine.backend.cluster.dead) or any(r.fatal is not None for r in conn.engine.runners.values()) \
                or (conn.engine.backend.drainer is not None and conn.engine.backend.drainer.error is not None) \
                or bool(self._heartbeats is not None and self._heartbeats.dead) \
                or (bool(conn.engine.backend.cluster.slow) and self._unresponsive(conn))
            if lost:
                try:
                    with self._lock:
                        if self.conn is conn:
                            self._recover(cause)
                except Exception:  # noqa: BLE001 - logged; the next call or tick tries again
                    log.exception("database %s: recovery failed", self.database)
                cause = "watchdog"

    def _silent_actors(self, pool) -> dict[int, float]:
        """The actors of ``pool`` whose heartbeat has been silent for ``actor_lost_after``
        seconds (``liveness.Heartbeats``; a new pool after a recovery starts afresh)."""
        from laminardb.cluster.liveness import Heartbeats

        if self._heartbeats is None or self._heartbeats.pool is not pool:
            self._heartbeats = Heartbeats(pool, float(self.config.get("actor_lost_after", _LOST_AFTER_S)))
        return self._heartbeats.silent()

    def _recover(self, cause: str) -> None:
        """Replace the engine: new actors, state restored from the last checkpoint, the WAL
        since replayed (deterministically: subscribers and exactly-once sinks see every
        result once). Runs under ``self._lock``, so data calls wait for it."""
        t0 = time.perf_counter()
        old = self.conn
        running = bool(old.engine.runners) if old is not None else False
        survivors = None
        if old is not None:
            old.engine.backend.abandon(keep_actors=True)
            survivors = old.engine.backend.cluster  # live actors are kept: only the lost ones restart
        self.conn = None
        error: Exception | None = None
        for _ in range(_RECOVERY_ATTEMPTS):
            try:
                self.conn = self._open(recovering=True, survivors=survivors)
                break
            except Exception as exc:  # noqa: BLE001 - e.g. CPUs of the dead actor not yet free
                error = exc
                log.warning("database %s: recovery attempt failed: %s", self.database, exc)
                if survivors is not None:  # start over with fresh actors
                    survivors.shutdown()
                    survivors = None
                time.sleep(1.0)
        if self.conn is None:
            raise error  # type: ignore[misc]
        if running:
            self.conn.start()  # Kafka sources resume from the checkpointed offsets
        self.generation += 1
        self._record_recovery(cause, t0)
        self._pay_owed_checkpoint()

    # ------------------------------------------------------------------ calls
    def _call(self, fn, *, logged=None):
        """Run ``fn(conn)`` with data calls serialized. An actor lost meanwhile is recovered
        from and ``fn`` runs again — unless the WAL already took it (``logged(conn)`` then
        gives the result: the replay applied it)."""
        from laminardb.cluster.exceptions import ActorLostError, ActorTimeoutError

        with self._lock:
            for attempt in range(_RECOVERY_ATTEMPTS):
                conn = self._conn()
                wal = conn.engine.durable.wal if conn.engine.durable is not None else None
                lsn = wal.next_lsn if wal is not None else None
                try:
                    return fn(conn)
                except (ActorLostError, ActorTimeoutError) as exc:
                    if wal is None or attempt == _RECOVERY_ATTEMPTS - 1:
                        raise
                    if isinstance(exc, ActorTimeoutError) and not self._unresponsive(conn):
                        raise  # slow but alive: the caller may retry
                    took = wal.next_lsn > lsn
                    self._recover(type(exc).__name__)
                    if took and logged is not None:
                        return logged(conn)
            raise AssertionError("unreachable")

    def _unresponsive(self, conn) -> bool:
        """A slow actor that still does not answer a ping within ``actor_lost_after`` seconds
        (paused, hung, or on a partitioned node) is given up: recovery replaces it, and its
        Raft tokens are fenced — if it ever resumes, nothing it sends is taken."""
        import ray

        if conn.engine.backend.cluster.dead:  # died, or given up by the heartbeats meanwhile
            return True
        slow = sorted(conn.engine.backend.cluster.slow)
        if not slow:
            return False
        wait = float(self.config.get("actor_lost_after", _LOST_AFTER_S))
        pings = [conn.engine.backend.cluster.actors[i].ready.remote() for i in slow]
        done, _ = ray.wait(pings, num_returns=len(pings), timeout=wait)
        try:
            ray.get(done, timeout=0)
        except Exception:  # noqa: BLE001 - a ping failed: the actor died or was given up
            return True
        answered = {f.hex() for f in done}
        silent = {i: wait for i, f in zip(slow, pings, strict=True) if f.hex() not in answered}
        if silent:  # killed: every other call waiting on it (a poll, a barrier) fails at once
            from laminardb.cluster.liveness import give_up

            log.warning("database %s: %s; replacing it", self.database,
                        give_up(conn.engine.backend.cluster, silent))
        return bool(silent)


_SUBSCRIBER_IPC = SharedIpc()  # subscribers of one stream take the same batches: encoded once


class HeadSubscription:
    """One client's subscription, kept by the head across recoveries: it knows the absolute
    position (rows the stream emitted before it) of every row it handed out, so after a
    recovery it skips the replayed rows its client already has. A plan tree's root rows come
    as ``RemoteBatch``es (references to the actors' output): counted and sliced as batches
    are, and handed on as they are, for the client to fetch."""

    def __init__(self, name: str, engine, start: int) -> None:
        self.name = name
        self.engine = engine
        self.position = start  # absolute index of the next row to hand out
        self.skip = 0  # replayed rows to drop before handing out more
        self.carry: list = []  # rows the lost engine delivered that the client has not taken yet
        #: the last answer's rows, kept until a read's position shows the client has them: a
        #: client that could not fetch rows it got by reference reads again from before them
        self.handed: list = []
        self.engine_of = None  # the recovered ``Engine`` this subscription is attached to
        self.emitted = 0  # the row the engine attached last starts at
        self.old_skip = 0  # what the engine given up then still had to skip
        self._lock = threading.Lock()

    def reattach(self, engine, emitted: int) -> None:
        """``engine`` delivers the stream's rows from absolute index ``emitted`` on."""
        with self._lock:
            old, self.engine = self.engine, engine
            self.carry += self._take(old, old.try_next())  # delivered before the loss: still valid
            self.emitted, self.old_skip = emitted, self.skip
            self.skip = max(0, self.position - emitted)
        try:
            old.cancel()
        except Exception:  # noqa: BLE001 - its connection is gone
            pass

    def _keep_late(self, batch) -> None:
        """A read took ``batch`` from the engine given up while a recovery attached a new one
        (under ``_lock``): it was delivered before the loss, so it is kept as ``reattach``
        keeps such rows (they may precede the checkpoint the new engine starts from, which
        would not deliver them again)."""
        if batch is None:
            return
        self.skip = self.old_skip
        self.carry += self._counted(batch)
        self.old_skip = self.skip
        self.skip = max(0, self.position - self.emitted)

    def _take(self, engine, batch, settle: bool = True) -> list:
        """``batch`` and what else ``engine`` has queued, less the rows to skip; counted."""
        out = []
        while batch is not None:
            out += self._counted(batch)
            batch = engine.try_next() if settle else engine._take_queued()
        return out

    def _counted(self, batch) -> list:
        """``batch`` less the rows to skip (as a list: empty when none is left); counted."""
        if self.skip:
            cut = min(self.skip, batch.num_rows)
            self.skip -= cut
            batch = batch.slice(cut)
        if not batch.num_rows:
            return []
        self.position += batch.num_rows
        return [batch]

    def catch_up(self, position: int) -> int:
        """The client has every row before absolute index ``position``: drop those still
        held (handed out, or carried), hand out again those it has not got, and skip those
        the engine has yet to deliver (a restarted head restores a subscription at the
        checkpoint, behind its client). Returns the rows the client can no longer get: those
        before the restored checkpoint that it had not read when the head's process died
        (they were held in that process only)."""
        with self._lock:
            held, self.handed = self.handed + self.carry, []
            drop = position - (self.position - sum(b.num_rows for b in held))
            lost = max(0, -drop)
            while drop > 0 and held:
                cut = min(drop, held[0].num_rows)
                drop -= cut
                rest = held[0].slice(cut)
                held = ([rest] if rest.num_rows else []) + held[1:]
            self.carry = held
            if position > self.position:
                self.skip += position - self.position
                self.position = position
            return lost

    def read(self, timeout_ms: float, position: int | None = None, *, settle: bool = True) -> dict:
        """What is queued for the client (waiting up to ``timeout_ms``). ``settle``: first
        deliver the outputs of batches still on the actors (``before_read``), so a read right
        after ``insert()`` sees them; a long-polling reader takes rows as they come instead."""
        lost = self.catch_up(position) if position is not None else 0
        if timeout_ms <= 0 and not settle:  # never blocks: taken under the lock, so a recovery
            with self._lock:                # cannot slip between this read and its carry
                engine = self.engine
                out = self.carry + self._take(engine, engine._take_queued(), settle)
                self.carry = []
                return self._reply(engine, out, lost)
        engine = self.engine
        batch = engine.next_timeout(timeout_ms) if timeout_ms > 0 else engine.try_next()
        with self._lock:
            if engine is not self.engine:  # recovered meanwhile
                self._keep_late(batch)
                return {"batches": [], "ended": False}
            out = self.carry + self._take(engine, batch)
            self.carry = []
            return self._reply(engine, out, lost)

    def _reply(self, engine, out: list, lost: int) -> dict:  # under _lock
        self.handed = out
        return {"batches": [b if isinstance(b, RemoteBatch) else _SUBSCRIBER_IPC(b) for b in out],
                "ended": engine.ended and not engine._queue,
                "lost": lost, "position": self.position - sum(b.num_rows for b in out)}

    def cancel(self) -> None:
        try:
            self.engine.cancel()
        except Exception:  # noqa: BLE001 - the connection may be closed already
            pass


def head_class():
    import ray

    # num_cpus=0: the head coordinates; the cores belong to the reactor actors. Threaded, so a
    # subscriber's blocking read or metrics() never waits behind a long insert; subscription
    # reads (long-polls) in a group of their own (_READ_THREADS)
    return ray.remote(num_cpus=0, max_concurrency=32, concurrency_groups={"reads": _READ_THREADS})(DatabaseHead)


def get_or_create_head(database: str, *, directory: str | None, n_actors: int, vnodes: int,
                       config: dict[str, Any], raft: dict | None, max_in_flight: int,
                       local_global: bool, start_timeout_s: float = 300.0):
    """The head of ``database``, started (detached, restarted by Ray if its process dies —
    it then recovers from its directory) when it does not exist yet."""
    import ray

    name = head_name(database)
    try:
        return ray.get_actor(name, namespace=NAMESPACE), False
    except ValueError:
        pass
    restarts = -1 if directory else 0
    # on the head node, beside the coordinator and the default checkpoint directory: losing a
    # worker node loses reactor actors (recovered), never the database's head
    handle = head_class().options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                                  max_restarts=restarts, max_task_retries=0,
                                  resources={"node:__internal_head__": 0.001}).remote(
        database, directory, n_actors, vnodes, config, raft, max_in_flight, local_global)
    return handle, True


def list_databases() -> list[str]:
    """Names of the databases with a live head in this Ray cluster."""
    from ray.util import list_named_actors

    return sorted(a["name"][len(_PREFIX):] for a in list_named_actors(all_namespaces=True)
                  if a.get("namespace") == NAMESPACE and a["name"].startswith(_PREFIX))


def drop_database(database: str, *, timeout_s: float = 120.0) -> bool:
    """Stop ``database``'s actors, remove its checkpoints, and end its head; False if absent."""
    import ray

    try:
        head = ray.get_actor(head_name(database), namespace=NAMESPACE)
    except ValueError:
        return False
    dropped = False
    try:
        _drop_when_up(head, database, timeout_s)  # the head stops its actors itself
        dropped = True
    finally:
        ray.kill(head, no_restart=True)
        if not dropped:  # the actors are detached: a head that failed to drop leaves them
            from laminardb.cluster.actor_pool import kill_named

            kill_named(reactor_prefix(database))
    return True


def _drop_when_up(head, database: str, timeout_s: float) -> None:
    """``head.drop()``, waiting (bounded) for a head Ray is restarting: dropping it in the
    middle of its recovery would leave the database's directory behind."""
    import ray
    from ray.exceptions import ActorUnavailableError

    from laminardb.cluster.exceptions import HeadUnavailableError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get(head.drop.remote(), timeout=max(0.001, deadline - time.monotonic()))
            return
        except ActorUnavailableError:
            if time.monotonic() >= deadline:
                raise HeadUnavailableError(
                    f"database {database!r}: its head did not come back within {timeout_s:.0f} s to be "
                    "dropped; it was stopped, but its checkpoint directory may remain: remove it by "
                    "hand") from None
            time.sleep(0.05)


def _restarted_by_ray() -> bool:
    """Is this actor's constructor running again, after its process died?"""
    import ray

    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not in an actor (a test builds DatabaseHead directly)
        return False


def _insert_once(conn, tag, insert):
    """Run ``insert()`` for a client's insert numbered ``tag`` = (client, sequence number),
    once: the WAL records the number with the rows (and a checkpoint keeps each client's
    last), so a client retrying an insert whose answer a head restart lost gets the rows
    counted then, and they are not applied twice."""
    durable = conn.engine.durable
    if tag is None or durable is None:
        return insert()
    client, seq = str(tag[0]), int(tag[1])
    done = durable.client_seqs.get(client)
    if done is not None and done[0] >= seq:
        return done[1] if done[0] == seq else 0
    durable.insert_tag = (client, seq)
    try:
        return insert()
    finally:
        durable.insert_tag = None


def _route_token(cluster) -> str:
    """Names the actors a direct insert's route was made for: rows a replaced actor kept,
    or split for another vnode routing, are refused (the client sends them again)."""
    return "|".join(cluster.members)


def _insert_answer(n, to_ipc_table) -> dict:
    """An insert's result for the client: the rows accepted, the refused ones (only when some
    were) and the late counts (``InsertResult``; see ``actors.remote._insert_result``)."""
    rejected = getattr(n, "rejected_rows", None)
    return {"accepted": int(n), "rejected": to_ipc_table(rejected) if getattr(n, "rejected", 0) else None,
            "result": rejected is not None, "late_by_query": dict(getattr(n, "late_by_query", {}))}
