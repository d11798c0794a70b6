"""The Delta mode's checkpoint coordinator: a PySpark application in a detached Ray actor.

Entry points: :class:`CheckpointCoordinator` (plain Python: the registry of databases and
one checkpoint loop thread per database), :func:`coordinator_actor_class` (the same as a
Ray actor) and :func:`ensure_coordinator` (get-or-create the cluster's one coordinator).

Shape (issue 9; docs/coordinator.md): RayDP pins pyspark <= 3.5, so the coordinator is a
Spark application (``local[*]``, see ``spark_job.py``) inside one detached, restartable Ray actor
``"coordinator"`` in namespace ``"laminardb"`` on the head node. Every database registers
with it (``register``); each interval its thread runs one checkpoint through the database
head ``head:<database>`` (``_coord_db.CoordinatedDatabase``): intent → prepare → Spark job
per exactly-once sink (FILE and Delta Lake written by the executors, ``native_epoch.py``)
→ manifest (the commit point) → sink and head commits.

Restart: Ray restarts the actor with the same constructor arguments; the coordinator reads
``registry.json`` from its ``state_dir``, and each database first *settles* from its epoch
log (the recorded manifest is re-committed, a later intent aborted) before any new epoch.

Epoch logs: in Raft (``RaftEpochLog``, scoped by the database's name) when the database
was registered with voters, else a JSON file under ``<checkpoint_dir>/<database>/coordinator``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laminardb.checkpoint._coord_db import CoordinatedDatabase, DatabaseSpec
from laminardb.checkpoint._files import atomic_write
from laminardb.checkpoint.epoch_log import FileEpochLog, RaftEpochLog
from laminardb.checkpoint.exceptions import (
    CheckpointPrepareError,
    CoordinatorRetiredError,
    UnknownDatabaseError,
)
from laminardb.errors import ConfigError

__all__ = [
    "COORDINATOR_NAME",
    "NAMESPACE",
    "CheckpointCoordinator",
    "RayHead",
    "coordinator_actor_class",
    "ensure_coordinator",
]

log = logging.getLogger("laminardb.coordinator")

NAMESPACE = "laminardb"
COORDINATOR_NAME = "coordinator"
_REGISTRY = "registry.json"
# Bounded waits on a head. Prepare covers an aligned barrier across every actor plus the
# snapshot upload; the rest are small metadata calls.
_PREPARE_TIMEOUT_S = 60.0
_CALL_TIMEOUT_S = 30.0
# How long stop() waits for a loop thread inside a checkpoint (a Spark job, a Delta commit).
_JOIN_TIMEOUT_S = 120.0


class RayHead:
    """A database head reached as the named Ray actor ``name`` (namespace ``laminardb``),
    with the four checkpoint calls made synchronous and bounded."""

    def __init__(self, name: str, *, prepare_timeout_s: float = _PREPARE_TIMEOUT_S,
                 call_timeout_s: float = _CALL_TIMEOUT_S) -> None:
        self.name = name
        self._prepare_timeout = prepare_timeout_s
        self._timeout = call_timeout_s
        self._handle: Any = None

    def _call(self, method: str, *args: Any, timeout: float) -> Any:
        import ray

        if self._handle is None:
            self._handle = ray.get_actor(self.name, namespace=NAMESPACE)
        try:
            return ray.get(getattr(self._handle, method).remote(*args), timeout=timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            self._handle = None  # re-resolved next time: the head may have been restarted
            raise

    def prepare_checkpoint(self, epoch: int) -> dict[str, Any]:
        return self._call("prepare_checkpoint", epoch, timeout=self._prepare_timeout)

    def commit_checkpoint(self, epoch: int) -> None:
        self._call("commit_checkpoint", epoch, timeout=self._timeout)

    def abort_checkpoint(self, epoch: int) -> None:
        self._call("abort_checkpoint", epoch, timeout=self._timeout)

    def checkpoint_status(self) -> dict[str, Any]:
        return self._call("checkpoint_status", timeout=self._timeout)


class CheckpointCoordinator:
    """The registry of databases and their checkpoint loops (see the module docstring).

    Args:
        state_dir: where ``registry.json`` lives (on the head node; survives restarts).
        head_resolver: ``head_name -> head`` with the four checkpoint methods, called
            synchronously; default :class:`RayHead`. Tests pass plain objects.
        spark: ``() -> SparkSession``; default ``spark_job.spark_session`` (started on the
            first epoch that has rows).
        raft_secret: the control-plane secret for databases registered with voters and no
            secret file (never written to disk); default ``LAMINARDB_RAFT_SECRET``.
        prepare_timeout_s: bound on one ``prepare_checkpoint``.
    """

    def __init__(self, state_dir: str | os.PathLike[str], *,
                 head_resolver: Callable[[str], Any] | None = None,
                 spark: Callable[[], Any] | None = None, raft_secret: str | None = None,
                 prepare_timeout_s: float = _PREPARE_TIMEOUT_S) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._resolve = head_resolver or (lambda name: RayHead(name, prepare_timeout_s=prepare_timeout_s))
        if spark is None:
            from laminardb.checkpoint.spark_job import spark_session as spark
        self._spark = spark
        self._spark_lock = threading.Lock()  # one Spark job at a time: each uses every core
        self._secret = raft_secret or os.environ.get("LAMINARDB_RAFT_SECRET")
        self._secrets: dict[str, str] = {}  # per database, from register(); memory only
        self._lock = threading.RLock()
        self._dbs: dict[str, CoordinatedDatabase] = {}
        self._errors: dict[str, str] = {}  # registered databases whose runtime cannot start
        self._retired = False  # retire_if_idle: no database left, this coordinator is ending
        # Bumped by every register and every linger_token(): a lingering retire acts only if
        # nothing came or went since its token (an older drop's timer must not end the
        # coordinator a moment after a later database was dropped; each drop lingers in full).
        self._generation = 0

    @classmethod
    def from_config(cls, config: dict[str, Any], **kwargs: Any) -> CheckpointCoordinator:
        """From a plain dict (what the Ray actor receives): ``state_dir`` (required),
        ``raft_secret``, ``prepare_timeout_s``."""
        if not config.get("state_dir"):
            raise ConfigError("the checkpoint coordinator needs config['state_dir'], a directory on the head node")
        return cls(config["state_dir"], raft_secret=config.get("raft_secret"),
                   prepare_timeout_s=float(config.get("prepare_timeout_s", _PREPARE_TIMEOUT_S)),
                   **kwargs)

    # ------------------------------------------------------------------ registry
    def _read_registry(self) -> dict[str, DatabaseSpec]:
        try:
            doc = json.loads((self.state_dir / _REGISTRY).read_bytes())
        except FileNotFoundError:
            return {}
        return {name: DatabaseSpec.from_json(d) for name, d in doc.get("databases", {}).items()}

    def _write_registry(self, specs: dict[str, DatabaseSpec]) -> None:
        doc = {"version": 1, "databases": {n: s.to_json() for n, s in sorted(specs.items())}}
        atomic_write(self.state_dir / _REGISTRY, json.dumps(doc, sort_keys=True).encode(),
                     what="coordinator registry")

    def start(self) -> None:
        """Start a loop for every database of the registry (after a restart)."""
        with self._lock:
            for spec in self._read_registry().values():
                if spec.database not in self._dbs:
                    self._start(spec)

    def register(self, database: str, *, head_name: str | None = None,
                 interval_s: float | None, checkpoint_dir: str,
                 raft_voters: list[str] | tuple[str, ...] | None = None,
                 raft_secret: str | None = None, raft_secret_file: str | None = None) -> dict[str, Any]:
        """Add (or update) a database; its loop starts at once. Idempotent: a client
        registers on every connect. Returns the database's status."""
        spec = DatabaseSpec(database=database, head_name=head_name or f"head:{database}",
                            checkpoint_dir=os.path.abspath(checkpoint_dir),
                            interval_s=float(interval_s) if interval_s else None,
                            raft_voters=tuple(raft_voters or ()), raft_secret_file=raft_secret_file)
        with self._lock:
            if self._retired:
                raise CoordinatorRetiredError(
                    f"database {database!r}: the checkpoint coordinator is stopping (no database used "
                    "it); its head starts a new one and registers again")
            self._generation += 1
            if raft_secret:
                self._secrets[database] = raft_secret
            specs = self._read_registry()
            current = self._dbs.get(database)
            if specs.get(database) == spec and current is not None:
                return self.status(database)
            specs[database] = spec
            self._write_registry(specs)
            if current is not None:
                self._stop(self._dbs.pop(database))
            self._start(spec)
            return self.status(database)

    def unregister(self, database: str) -> None:
        """Stop checkpointing ``database`` (its epoch log and sink stages stay on disk)."""
        with self._lock:
            specs = self._read_registry()
            specs.pop(database, None)
            self._write_registry(specs)
            self._errors.pop(database, None)
            self._secrets.pop(database, None)
            db = self._dbs.pop(database, None)
        if db is not None:
            self._stop(db)

    def databases(self) -> list[str]:
        with self._lock:
            return sorted(self._read_registry())

    def linger_token(self) -> int:
        """A token for a retire decided later (``retire_if_idle(token)``); a later register
        or a later token voids it."""
        with self._lock:
            self._generation += 1
            return self._generation

    def retire_if_idle(self, token: int | None = None) -> bool:
        """True, and every later ``register`` refused, when no database is registered: the
        caller (the head dropping the last database) then ends this coordinator and its
        Spark JVM; the next database to register starts a new one. False while any is, and
        False for a ``token`` that a later register or token voided."""
        with self._lock:
            if token is not None and token != self._generation:
                return False
            if self._dbs or self._errors or self._read_registry():
                return False
            self._retired = True
            return True

    # ------------------------------------------------------------------ runtime
    def _epoch_log(self, spec: DatabaseSpec) -> Any:
        if not spec.raft_voters:
            return FileEpochLog(spec.root / "coordinator")
        from laminardb.raft.client import RaftClient

        secret = self._secrets.get(spec.database)
        if secret is None and spec.raft_secret_file:
            secret = Path(spec.raft_secret_file).read_text().strip()
        secret = secret or self._secret
        if not secret:
            msg = (f"database {spec.database!r} keeps its epochs in Raft but the coordinator has "
                   "no secret for the voters: register it again with raft_secret, or give the "
                   "coordinator raft_secret / LAMINARDB_RAFT_SECRET / a secret file")
            raise ConfigError(msg)
        return RaftEpochLog(RaftClient(list(spec.raft_voters), secret=secret), spec.database)

    def _start(self, spec: DatabaseSpec) -> None:
        try:
            db = CoordinatedDatabase(spec, epoch_log=self._epoch_log(spec),
                                     head=self._resolve(spec.head_name), spark=self._spark,
                                     spark_lock=self._spark_lock)
        except Exception as exc:  # noqa: BLE001 - shown by status(); register() again fixes it
            self._errors[spec.database] = f"{type(exc).__name__}: {exc}"
            log.warning("database %s: cannot start its checkpoints: %s", spec.database, exc)
            return
        self._errors.pop(spec.database, None)
        self._dbs[spec.database] = db
        db.thread = threading.Thread(target=self._loop, args=(db,), daemon=True,
                                     name=f"laminardb-coordinator-{spec.database}")
        db.thread.start()

    def _loop(self, db: CoordinatedDatabase) -> None:
        interval = db.spec.interval_s
        try:
            db.settle()  # before the first interval: a restart finishes what it left
        except Exception as exc:  # noqa: BLE001 - retried by the first checkpoint
            db.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("database %s: settling failed (retried): %s", db.spec.database, exc)
        # start to start, as Flink's interval: a checkpoint that took t waits interval − t
        # (at least a tenth of the interval, so a slow sink epoch cannot starve the engine)
        wait = interval
        while interval is not None and not db.stop.wait(wait):
            started = time.monotonic()
            try:
                db.checkpoint()
            except Exception:  # noqa: BLE001 - counted in status(); retried next interval
                pass
            wait = max(interval - (time.monotonic() - started), interval / 10)

    def _stop(self, db: CoordinatedDatabase) -> None:
        db.stop.set()
        if db.thread is not None and db.thread is not threading.current_thread():
            db.thread.join(_JOIN_TIMEOUT_S)
        with db.lock:
            db.close()

    def _db(self, database: str) -> CoordinatedDatabase:
        with self._lock:
            db = self._dbs.get(database)
            if db is not None:
                return db
            if database in self._errors:
                raise CheckpointPrepareError(f"database {database!r} cannot be checkpointed: "
                                             f"{self._errors[database]}")
        raise UnknownDatabaseError(f"database {database!r} is not registered with the "
                                   "checkpoint coordinator; connect to it first (it registers itself)")

    def checkpoint_now(self, database: str) -> int:
        """Run one checkpoint of ``database`` now (``conn.checkpoint()``); returns its epoch.

        Raises:
            UnknownDatabaseError: not registered.
            CheckpointError / ControlPlaneError: the checkpoint failed (nothing committed).
        """
        return self._db(database).checkpoint()

    def status(self, database: str | None = None) -> dict[str, Any]:
        """Per database: last epoch, durations (p50/p99 over the last 100), Spark share,
        failures, bytes; ``database`` given: only that one's entry."""
        with self._lock:
            dbs = dict(self._dbs)
            errors = dict(self._errors)
        out: dict[str, Any] = {}
        for name, db in dbs.items():
            out[name] = db.status()
        for name, err in errors.items():
            out[name] = {"database": name, "error": err}
        if database is not None:
            if database not in out:
                raise UnknownDatabaseError(f"database {database!r} is not registered with the "
                                           "checkpoint coordinator")
            return out[database]
        return out

    def stop(self) -> None:
        """Stop every loop (registry and logs stay: a new coordinator resumes them)."""
        with self._lock:
            dbs, self._dbs = list(self._dbs.values()), {}
        for db in dbs:
            self._stop(db)


# ---------------------------------------------------------------------- Ray actor


_ACTOR_CLASS: Any = None
# Threads for concurrent calls: status() must answer while checkpoint_now() runs a Spark job.
_ACTOR_CONCURRENCY = 8


def coordinator_actor_class() -> Any:
    """The Ray actor class wrapping :class:`CheckpointCoordinator` (defined once)."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is not None:
        return _ACTOR_CLASS
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1)
    class CoordinatorActor:
        """Ray re-runs ``__init__(config)`` after a crash: the registry is re-read."""

        def __init__(self, config: dict[str, Any]) -> None:
            logging.basicConfig(level=logging.INFO)
            self._c = CheckpointCoordinator.from_config(config)
            self._c.start()

        def ping(self) -> int:
            return os.getpid()

        def register(self, database: str, **kwargs: Any) -> dict[str, Any]:
            return self._c.register(database, **kwargs)

        def unregister(self, database: str) -> None:
            self._c.unregister(database)

        def checkpoint_now(self, database: str) -> int:
            return self._c.checkpoint_now(database)

        def status(self, database: str | None = None) -> dict[str, Any]:
            return self._c.status(database)

        def databases(self) -> list[str]:
            return self._c.databases()

        def retire_if_idle(self, linger_s: float = 0.0) -> bool:
            """``CheckpointCoordinator.retire_if_idle``; retired, Spark and its JVM stop
            now (the caller kills this actor next). ``linger_s`` > 0: decide that long from
            now instead, and end this actor itself if still idle then (False now) — a
            database created soon after the last one was dropped (a script, a test suite)
            finds the JVM still warm."""
            return self._retire(linger_s, None)

        def _retire(self, linger_s: float, token: int | None) -> bool:
            if linger_s > 0:
                threading.Thread(target=self._retire_later, args=(linger_s, self._c.linger_token()),
                                 daemon=True, name="laminardb-coordinator-linger").start()
                return False
            if not self._c.retire_if_idle(token):
                return False
            from laminardb.checkpoint.spark_job import kill_jvm, stop_spark

            try:
                stop_spark()
            finally:
                kill_jvm()
            return True

        def _retire_later(self, linger_s: float, token: int) -> None:
            time.sleep(linger_s)
            try:
                if self._retire(0.0, token):
                    import ray

                    log.warning("the checkpoint coordinator had no database for %.0f s; it stopped", linger_s)
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
            except Exception:  # noqa: BLE001 - a coordinator left running costs memory, not data
                log.exception("stopping the idle checkpoint coordinator failed")

    _ACTOR_CLASS = CoordinatorActor
    return _ACTOR_CLASS


def ensure_coordinator(config: dict[str, Any]) -> Any:
    """The cluster's coordinator actor, created (detached, on the head node) if missing.

    Safe when several clients race: creation uses Ray's ``get_if_exists``, so exactly one
    actor exists and every caller gets it. An existing actor keeps the configuration it was
    created with.
    """
    import ray

    try:
        return ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
    except ValueError:
        pass
    cls = coordinator_actor_class()
    return cls.options(
        name=COORDINATOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_concurrency=_ACTOR_CONCURRENCY,
        # the head node: where the checkpoint directory and the Spark driver live
        resources={"node:__internal_head__": 0.001},
    ).remote(dict(config))
