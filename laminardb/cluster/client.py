"""The client of a database that lives in the cluster: ``laminardb.connect("ray://…", database=…)``.

Why: a pipeline must keep running when the process that started it exits. So ``connect``
attaches to the database's head (``head.py``: a detached Ray actor, created on first use)
and ``RemoteConnection`` forwards the embedded ``Connection`` API to it — rows as Arrow IPC,
errors re-raised as the same ``LaminarError`` class and code. ``close()`` only detaches;
``drop_database()`` stops the database. Several clients may attach to one database.

Subscriptions pull: the head queues a stream's batches for each subscription, and the
client takes them on ``try_next``/``next_timeout``/iteration/``to_arrow`` (it keeps the
``to_arrow`` history, as the embedded ``Subscription`` does). Callback subscriptions are read
by the connection's one pump thread, all with one long-poll per read (``subscription_pump.py``).

Both connections satisfy ``laminardb.api.ConnectionAPI``; mypy checks it
(``tests/typing_checks/connection_api.py``), so a method added to one and not the other fails
``make lint`` and ``tests/test_architecture.py``.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from laminardb.cluster.direct_insert import DirectInserts
from laminardb.cluster.exceptions import ClusterStartError, HeadUnavailableError
from laminardb.cluster.ray_env import init_ray
from laminardb.cluster.remote_rows import decode_batches, fetch_remote
from laminardb.cluster.subscription_pump import SubscriptionPump
from laminardb.cluster.wire import encode_rows, from_ipc_table, schema_from_ipc
from laminardb.engine.insert_batch import InsertResult, OnError, check_on_error
from laminardb.engine.subscriptions import _HISTORY_ROWS, CallbackSubscription, Subscription
from laminardb.errors import ConnectionClosedError, LaminarError
from laminardb.results import ExecuteResult, QueryResult

if TYPE_CHECKING:
    from laminardb.engine.writer import Writer

log = logging.getLogger(__name__)

_CALL_TIMEOUT_S = 600.0  # a call may wait while the head recovers a lost actor: bounded, generous
_READY_TIMEOUT_S = 300.0  # a new head starts its actors (numba kernels load, Raft commits)
_SUB_POLL_MS = 200.0  # how long one blocking subscription read waits inside the head
_READ_ATTEMPTS = 3  # a subscription read whose rows were lost before they were fetched: repeated
_FETCH_TIMEOUT_S = 120.0  # fetching a read's rows from the object store (spilled ones included)
# how often a client asks a restarting head whether it is back: a refused call costs the
# head nothing and the restart itself takes about a second, so a short poll is most of the win
_RESTART_POLL_S = 0.05
# config "reconnect_timeout": how long a call waits for a head Ray is restarting (its process
# died). Measured on a 2-core machine: 10 s from SIGKILL to answering (new reactor actors,
# the checkpoint restored, the WAL replayed); a loaded machine takes longer
_RECONNECT_TIMEOUT_S = 60.0
#: calls not repeated after a head restart cut them off: a DDL statement may have been logged
#: (repeating it fails, or does it twice). Every other call is repeated as it was: reads and
#: settings change nothing when run twice, and an insert carries a sequence number the head
#: answers a repeat of from its WAL (``head._insert_once``)
_NOT_REPEATED = frozenset({"execute"})


def raise_remote(answer: dict) -> Any:
    """The value of a head method's answer, or its LaminarError raised here."""
    if "ok" in answer:
        return answer["ok"]
    err = answer["error"]
    cls: type[LaminarError] = LaminarError
    try:
        found = importlib.import_module(err["module"])
        for part in err["class"].split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, LaminarError):
            cls = found
    except (ImportError, AttributeError):
        pass
    exc = cls.__new__(cls)
    LaminarError.__init__(exc, err["message"], code=err["code"])
    raise exc


class RemoteConnection:
    """A ``Connection`` to a named database in the cluster; same methods, same results
    (``laminardb.api.ConnectionAPI``), plus the cluster's own: ``status``, ``scale``,
    ``drop_database``."""

    def __init__(self, head, database: str, *, config: dict[str, Any] | None = None) -> None:
        self._head = head
        self.database = database
        self.config = dict(config or {})
        self._closed = False
        self._callbacks: list[CallbackSubscription] = []
        self._client: str | None = None
        self._client = self._call("attach")
        self._insert_lock = threading.Lock()  # one numbered insert at a time (the head dedups by number)
        self._insert_seq = 0
        self._direct = DirectInserts(self)
        self._pump: SubscriptionPump | None = None
        self._pump_lock = threading.Lock()
        # a Connection dropped without close() still detaches (its subscriptions end)
        self._finalizer = weakref.finalize(self, _detach, head, self._client)

    def _call(self, method: str, *args, timeout: float = _CALL_TIMEOUT_S) -> Any:
        """Call the head. If its process died (Ray restarts it; it recovers from its
        directory), wait up to ``reconnect_timeout`` for it and repeat the call — except
        ``execute`` (``_NOT_REPEATED``). Only ``LaminarError``s reach the caller."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        if self._closed and method not in ("detach",):
            raise ConnectionClosedError("this connection is closed; call laminardb.connect() again")
        deadline = None
        while True:
            try:
                return raise_remote(ray.get(getattr(self._head, method).remote(*args), timeout=timeout))
            except GetTimeoutError:
                raise HeadUnavailableError(
                    f"database {self.database!r}: {method}() got no answer from the head within {timeout:.0f} s; "
                    "check `ray status` and the head's log (`laminardb cluster status --ray`)") from None
            except RayActorError as exc:
                wait = _reconnect_timeout(self.config)
                deadline = deadline if deadline is not None else time.monotonic() + wait
                log.warning("database %s: the head is unavailable (%s); waiting up to %.0f s for it",
                            self.database, type(exc).__name__, max(0.0, deadline - time.monotonic()))
                _await_head(self._head, self.database, deadline, wait, method)
                if self._client is not None:  # known again to the restarted head (metrics' client count)
                    try:
                        raise_remote(ray.get(self._head.attach.remote(self._client), timeout=_CALL_TIMEOUT_S))
                    except RayActorError:
                        pass  # down again: the repeated call meets it and waits once more
                if method in _NOT_REPEATED:
                    raise HeadUnavailableError(
                        f"database {self.database!r}: the head restarted during {method}(); the statement may or "
                        "may not have taken effect (it is not repeated by itself): check with SHOW ALL, then "
                        "run it again if it did not") from None

    def _read_subscriptions(self, method: str, *args) -> Any:
        """``_call`` of a subscription read (``sub_read``, ``sub_read_many``), each answer's
        rows decoded. A plan tree's root rows come by reference (``RemoteBatch``: the head
        never decodes them) and are fetched here, with one ``ray.get`` for the whole read. If
        they are gone — the head that owned them died after answering, or the node that held
        them — the read is repeated: no subscription's position moved, and the head keeps
        what it handed out until a read's position shows the client has it, so it answers
        again from there (a restarted head counts what it no longer has in ``rows_lost``).
        An answer that does not decode ends only its own subscription."""
        from ray.exceptions import GetTimeoutError, ObjectLostError

        for _ in range(_READ_ATTEMPTS):
            got = self._call(method, *args)
            answers = [got] if method == "sub_read" else list(got.values())
            try:
                fetched = fetch_remote([b for a in answers for b in a.get("batches", ())], _FETCH_TIMEOUT_S)
            except ObjectLostError as exc:  # OwnerDiedError is one
                log.warning("database %s: rows of a subscription read are gone (%s); reading again",
                            self.database, type(exc).__name__)
                continue
            except GetTimeoutError:
                raise HeadUnavailableError(
                    f"database {self.database!r}: a subscription's rows could not be fetched within "
                    f"{_FETCH_TIMEOUT_S:.0f} s; check `ray status`") from None
            for answer in answers:
                try:
                    answer["batches"] = decode_batches(answer.get("batches", []), fetched)
                except Exception as exc:  # noqa: BLE001 - reported by _apply, which ends this one
                    answer.clear()
                    answer["error"] = f"its rows did not decode: {type(exc).__name__}: {exc}"
            return got
        raise HeadUnavailableError(f"database {self.database!r}: {_READ_ATTEMPTS} subscription reads in a row "
                                   "lost their rows before this client could fetch them (a node died?); "
                                   "check `ray status`")

    # ------------------------------------------------------------------ SQL
    def execute(self, sql: str) -> ExecuteResult:
        steps = [ExecuteResult(s["kind"], s["name"], from_ipc_table(s["table"]))
                 for s in self._call("execute", sql)["statements"]]
        last = steps[-1]
        last.statements = steps
        return last

    def query(self, sql: str) -> QueryResult:
        return QueryResult(from_ipc_table(self._call("query", sql)))

    sql = query

    # ------------------------------------------------------------------ data
    def insert(self, source: str, data: Any, *, on_error: OnError = "raise") -> int:
        check_on_error(on_error)
        payload = encode_rows(data)
        return self._numbered(source, payload, ("insert", source, payload, on_error))

    def insert_json(self, source: str, data: str | bytes | list[str], *, on_error: OnError = "raise") -> int:
        check_on_error(on_error)
        return self._numbered(source, {"text": "json", "data": data},
                              ("insert_text", "json", source, data, on_error))

    def insert_csv(self, source: str, data: str | bytes, *, on_error: OnError = "raise") -> int:
        check_on_error(on_error)
        return self._numbered(source, {"text": "csv", "data": data}, ("insert_text", "csv", source, data, on_error))

    def _numbered(self, source: str, payload: dict, through_head: tuple) -> int:
        """An insert with this client's next sequence number: repeated after a head restart,
        it is applied once (the head's WAL records the number; ``head._insert_once``). The
        rows go to a reactor actor and the head only hears of them (``direct_insert.py``); an
        insert that path cannot take goes through the head (``through_head``: its method and
        arguments), answered the same way. One at a time, so the numbers reach the head in
        order (the head runs inserts one at a time anyway)."""
        with self._insert_lock:
            self._insert_seq += 1
            tag = [self._client, self._insert_seq]
            answer = self._direct.insert(source, payload, tag)
            if answer is None:
                answer = self._call(*through_head, tag)
        return _insert_result(answer)

    def writer(self, source: str, *, on_error: OnError = "raise") -> Writer:
        """A ``Writer`` into ``source``, as ``Connection.writer``: rows buffered here, each
        ``flush()`` one insert call to the head; ``watermark(ts)`` raises the source's watermark
        in the database."""
        from laminardb.engine.writer import Writer

        return Writer(self, source, on_error=on_error)

    def _advance_watermark(self, source: str, timestamp: Any) -> int | None:
        return self._call("advance_watermark", source, timestamp)

    def _writer_source(self, source: str) -> tuple[str, pa.Schema]:
        """For ``Writer``: the source's name as the catalog spells it and its schema; the same
        errors as the embedded writer (an unknown name, LDB-3003 for a stream, view or sink)."""
        from laminardb.engine.writer import not_a_source

        shown = self.execute("SHOW ALL").table.select(["name", "kind"]).to_pylist()
        found = next((r for r in shown if r["name"] == source), None) or next(
            (r for r in shown if r["name"].lower() == source.lower()), None)
        if found is not None and found["kind"] != "source":
            raise not_a_source(source, found["kind"])
        got = self._call("describe_source", source if found is None else found["name"])
        if found is None:  # not shown, yet it exists: the hidden stream of a sink's query
            raise not_a_source(source, "stream")
        return found["name"], schema_from_ipc(got["schema"])

    def _source_watermark(self, name: str) -> int | None:
        """For ``Writer.current_watermark``: the head's engine's figure, as the embedded one's."""
        return self._call("source_watermark", name)

    def offset(self, source: str) -> int:
        return self._call("offset", source)

    def checkpoint(self) -> int:
        return self._call("checkpoint")

    def register_udf(self, name: str, fn, return_type: str | pa.DataType) -> None:
        """As ``Connection.register_udf``; the function travels by its ``"module:qualname"``
        reference — define it at module level in a module the cluster can import (a lambda or
        a function of ``__main__`` is refused with ``UdfDefinitionError``)."""
        items = udf_references({name: (fn, return_type)})
        self._call("register_udfs", items)

    # ------------------------------------------------------------------ streams
    def subscribe_stream(self, name: str, *, history_rows: int | None = None) -> RemoteSubscription:
        got = self._call("subscribe", self._client, name)
        return RemoteSubscription(self, got["id"], name, schema_from_ipc(got["schema"]),
                                  history_rows=_HISTORY_ROWS if history_rows is None else history_rows,
                                  start=got.get("start"))

    subscribe = subscribe_stream

    def subscribe_callback(self, name: str, on_data: Callable[[pa.RecordBatch], object],
                           on_error: Callable[[BaseException], object] | None = None) -> CallbackSubscription:
        sub = self.subscribe_stream(name, history_rows=0)
        sub.start_pump()  # a thread moves the head's batches into the local queue
        cb = CallbackSubscription(sub, on_data, on_error)
        self._callbacks = [c for c in self._callbacks if c.is_active] + [cb]
        return cb

    subscribe_stream_callback = subscribe_callback

    def list_streams(self) -> list[str]:
        return self._call("list_streams")

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._call("start")

    def flush(self, timeout_s: float = 30.0) -> None:
        self._call("flush", timeout_s, timeout=timeout_s + _CALL_TIMEOUT_S)

    def finish(self) -> None:
        self._call("finish")

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """As ``Connection.shutdown`` for this client: the database processes all input so far
        (``flush``), this client's callback subscriptions hand over every batch and end, then
        ``close()`` detaches. The database keeps running (``drop_database`` stops it)."""
        if self._closed:
            raise ConnectionClosedError("this connection is closed; call laminardb.connect() again")
        try:
            self.flush(timeout_s)
            for cb in list(self._callbacks):
                sub = cb._sub
                if isinstance(sub, RemoteSubscription):
                    sub._pull(0)  # what the head queued up to the flush
                cb._drain(timeout_s)
        finally:
            self.close()
            for cb in self._callbacks:  # detached: their streams end here, after what is queued
                cb._sub._end()
                cb._join(timeout_s)

    def metrics(self) -> dict[str, Any]:
        return self._call("metrics")

    def status(self) -> dict[str, Any]:
        return self._call("status")

    def scale(self, actors: int) -> dict[str, Any]:
        """Move the database to ``actors`` reactor actors (state and Kafka partitions follow
        the vnodes; output stays exactly-once). Returns the rescale's record: ``actors``,
        ``previous``, ``pause_s`` (checkpoint to running again), ``by``, ``reason``. Raises
        ``ScaleCapacityError`` (LDB-8011) when the cluster lacks the CPUs, moving nothing."""
        return self._call("scale", actors)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus endpoint the head serves (``config["metrics_port"]``), or None."""
        return self._call("urls")["metrics"]

    @property
    def dashboard_url(self) -> str | None:
        """The web dashboard the head serves (``config["dashboard_port"]``), or None."""
        return self._call("urls")["dashboard"]

    def _subscription_pump(self) -> SubscriptionPump:
        with self._pump_lock:
            if self._pump is None:
                self._pump = SubscriptionPump(self, _SUB_POLL_MS)
            return self._pump

    def close(self) -> None:
        """Detach: the database and its pipelines keep running (``drop_database`` stops them)."""
        if self._closed:
            return
        self._finalizer()
        self._closed = True
        if self._pump is not None:
            self._pump.join(timeout=2 * _SUB_POLL_MS / 1000.0 + 5.0)

    def drop_database(self) -> None:
        """Stop this database's actors and remove its checkpoints and state."""
        from laminardb.cluster.head import drop_database

        self.close()
        drop_database(self.database)

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteConnection(database={self.database!r})"


def _detach(head, client: str) -> None:
    try:
        import ray

        if not ray.is_initialized():  # Ray shut down first: a call would start a new local Ray
            return
        head.detach.remote(client)  # fire and forget: a finalizer must never block or raise
    except Exception:  # noqa: BLE001 - Ray may be shut down already
        pass


def _reconnect_timeout(config: dict[str, Any]) -> float:
    from laminardb.checkpoint.local import parse_interval

    value = config.get("reconnect_timeout")
    return _RECONNECT_TIMEOUT_S if value is None else (parse_interval(value) or 0.0)


def _await_head(head, database: str, deadline: float, wait: float, method: str) -> None:
    """Return once ``head`` answers ``ready()`` again (Ray restarted it and it recovered);
    ``HeadUnavailableError`` when it is gone or ``deadline`` passes."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    from laminardb.cluster.head import NAMESPACE, head_name

    while True:
        try:
            ray.get_actor(head_name(database), namespace=NAMESPACE)
        except ValueError:
            raise HeadUnavailableError(
                f"database {database!r} is gone (dropped, or its head could not be restarted) during "
                f"{method}(); laminardb.connect() creates it again") from None
        left = deadline - time.monotonic()
        if left <= 0:
            raise HeadUnavailableError(
                f"database {database!r}: its head did not come back within reconnect_timeout ({wait:.0f} s) "
                f"after its process died, so {method}() was not run again; check `ray status` and the head's "
                "log, then call again (or raise config['reconnect_timeout'])")
        try:
            raise_remote(ray.get(head.ready.remote(), timeout=left))
            return
        except (RayActorError, GetTimeoutError):
            time.sleep(min(_RESTART_POLL_S, max(0.0, deadline - time.monotonic())))


def _insert_result(answer: dict) -> int:
    if not answer["result"]:
        return answer["accepted"]
    rejected = None if answer["rejected"] is None else from_ipc_table(answer["rejected"])
    return InsertResult(answer["accepted"], rejected, late_by_query=answer.get("late_by_query"))


class RemoteSubscription(Subscription):
    """A ``Subscription`` whose batches are taken from the head on each read."""

    def __init__(self, conn: RemoteConnection, sid: str, name: str, schema: pa.Schema, *,
                 history_rows: int, start: int | None = None) -> None:
        super().__init__(name, schema, lambda _sub: conn._call("sub_cancel", sid), history_rows=history_rows)
        self._conn = conn
        self._sid = sid
        # absolute index of the next row of the stream this subscription expects: sent with
        # every read, so a restarted head skips the rows this client already has
        self._next = start
        #: rows of the stream this subscription never received: queued in a head process that
        #: died before this client read them, and before the checkpoint it restarted from
        self.rows_lost = 0
        self._pull_lock = threading.Lock()
        self._pumped = False  # read by the connection's SubscriptionPump, not by next_timeout

    def _pull(self, timeout_ms: float) -> None:
        """Move what the head has queued (waiting up to ``timeout_ms`` for it) into the queue."""
        if self._cancelled or self._ended or self._conn._closed:
            return
        with self._pull_lock:  # delivered under it too: two readers never reorder batches
            self._apply(self._conn._read_subscriptions("sub_read", self._sid, timeout_ms, self._next))

    def _apply(self, got: dict) -> None:
        """Deliver one read's answer, its rows decoded (under ``_pull_lock``)."""
        if got.get("error"):
            log.warning("subscription to %s ended: the head could not read it: %s", self.name, got["error"])
            self._end()
            return
        if got.get("lost"):
            self.rows_lost += got["lost"]
            log.warning("subscription to %s: %d rows were lost with the head's process (queued there, "
                        "not yet read, before the checkpoint it restarted from); read subscriptions "
                        "continuously (subscribe_callback) to keep this window small", self.name, got["lost"])
        if self._next is not None and got.get("position") is not None:
            self._next = got["position"]  # past a gap: the first row of this answer
        for batch in got["batches"]:  # decoded by _read_subscriptions
            if self._next is not None:
                self._next += batch.num_rows
            self._deliver(batch)
        if got["ended"]:
            self._end()

    def _sync(self) -> None:
        self._pull(0)

    def next_timeout(self, timeout_ms: float) -> pa.RecordBatch | None:
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            with self._cond:
                self._check()
                if self._queue or self._ended:
                    return self._take()
            left = (deadline - time.monotonic()) * 1000.0
            if left <= 0:
                return None
            if not self._pumped:
                self._pull(min(left, _SUB_POLL_MS))
            else:
                with self._cond:
                    self._cond.wait_for(lambda: self._queue or self._ended or self._cancelled, left / 1000.0)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            batch = self.next_timeout(_SUB_POLL_MS)
            if batch is not None:
                yield batch
            elif self._ended or self._cancelled:
                return

    def start_pump(self) -> None:
        """Pull continuously (callback subscriptions wait on the local queue): the connection's
        one pump thread reads every such subscription with one head call (``SubscriptionPump``)."""
        self._pumped = True
        self._conn._subscription_pump().add(self)


def connect(address: str = "ray://auto", *, database: str = "default", actors: int | None = None,
            vnodes: int | None = None, raft=None, config: dict[str, Any] | None = None,
            max_in_flight: int | None = None, local_global: bool = True) -> RemoteConnection:
    """Attach to the database ``database`` in a Ray cluster, creating it on first use.

    ``address``: ``ray://auto`` (inside a cluster, or this process's ``ray.init``),
    ``ray://host:port`` (Ray Client), ``ray://local`` (start Ray here). The first connect
    decides the database's shape: ``actors`` (default: one per CPU), ``vnodes`` (256),
    ``raft`` (a ``laminardb cluster up`` data dir; default ``LAMINARDB_RAFT_DIR``/``_VOTERS``)
    and ``config`` — ``checkpoint_dir`` (default: the Ray session's directory on the head
    node, gone with the cluster; a shared path outlives it; ``":memory:"`` keeps no state), ``checkpoint_interval`` (``"10s"``; ``"off"``), ``actor_call_timeout``.
    Later connects attach to it as it is: config they give that differs from the running
    database's raises ``AttachConfigError`` (LDB-8006) naming the keys — never dropped unseen.
    ``close()`` detaches; ``drop_database()`` stops it.
    """
    import os

    from laminardb.autoscale import AutoscaleConfig
    from laminardb.cluster.distributed_operator import DEFAULT_MAX_IN_FLIGHT
    from laminardb.cluster.head import SESSION_DIR, get_or_create_head
    from laminardb.cluster.routing import DEFAULT_VNODES
    from laminardb.errors import ConfigError

    config = dict(config or {})
    udfs = _config_udfs(config)  # functions never ride in the config (it is pickled by Ray)
    if AutoscaleConfig.from_config(config).enabled and config.get("checkpoint_dir") == ":memory:":
        raise ConfigError("autoscale needs checkpoints (a rescale moves the state through one): "
                          "drop checkpoint_dir=':memory:' or autoscale=True")
    root = config.get("checkpoint_dir")
    raft_spec = _raft_spec(raft)
    if address == "ray://local":  # the cluster runs from this environment: check it before starting Ray
        from laminardb._extras import require

        if root != ":memory:":  # the checkpoint coordinator is a PySpark application
            require("pyspark", extra="cluster", for_what="connect('ray://local') with checkpoints")
        if raft_spec is not None:
            require("pysyncobj", extra="cluster", for_what="connect(…, raft=…)")
    ray = init_ray(address, actors)
    directory: str | None
    if root is None:
        directory = SESSION_DIR  # the head resolves it: the Ray session's directory on its node
    else:
        directory = None if root == ":memory:" else os.path.join(os.path.abspath(root), database)
    n = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    head, created = get_or_create_head(
        database, directory=directory, n_actors=n, vnodes=vnodes or DEFAULT_VNODES, config=config,
        raft=raft_spec, max_in_flight=DEFAULT_MAX_IN_FLIGHT if max_in_flight is None else max_in_flight,
        local_global=local_global)
    try:
        running = raise_remote(_ready(head, _READY_TIMEOUT_S))
    except LaminarError:
        if created:
            ray.kill(head, no_restart=True)
        raise
    except Exception as exc:
        if created:
            ray.kill(head, no_restart=True)
        raise ClusterStartError(f"database {database!r} did not start: {type(exc).__name__}: {exc}; "
                                "check `ray status` for free CPUs") from exc
    if not created and "config" in running:  # (a head of an older laminardb does not say)
        _check_attach_config(database, config, running.get("config") or {})
    conn = RemoteConnection(head, database, config=config)
    if udfs:
        conn._call("register_udfs", udfs)  # by "module:qualname", kept by the head
    return conn


def _ready(head, timeout_s: float) -> dict:
    """``head.ready()``, waited for (bounded) while Ray restarts the head: a head whose process
    died is unavailable until it has recovered, which is not a reason to fail."""
    import ray
    from ray.exceptions import ActorUnavailableError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(head.ready.remote(), timeout=max(0.001, deadline - time.monotonic()))
        except ActorUnavailableError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(_RESTART_POLL_S)


#: config each client keeps for itself (a client may attach with its own value)
CLIENT_CONFIG = frozenset({"reconnect_timeout"})


def _check_attach_config(database: str, given: dict[str, Any], running: dict[str, Any]) -> None:
    """Refuse config an attach cannot apply: the database runs with the config of the
    connect that created it, and a value that differs (``metrics_port`` included: the
    head serves its endpoint from the first config) would otherwise be dropped unseen."""
    from laminardb.cluster.exceptions import AttachConfigError

    missing = object()
    differ = {k: v for k, v in given.items() if k not in CLIENT_CONFIG and running.get(k, missing) != v}
    if differ:
        keys = "; ".join(f"{k}={v!r} (it runs with {running[k]!r})" if k in running else f"{k}={v!r} (not set)"
                         for k, v in sorted(differ.items()))
        raise AttachConfigError(
            f"database {database!r} is running and keeps the config its first connect gave; an attach "
            f"cannot change {keys}. Connect without these keys (or with the running values), or "
            "drop_database() and connect again with the new config")


def _config_udfs(config: dict[str, Any]) -> list[dict]:
    """``config["udfs"]`` ({name: (function, return type)}, as ``laminardb.open`` takes it),
    taken out of ``config`` and checked before anything starts, to be registered by reference
    once connected (``register_udf``'s rule: a lambda or a function of ``__main__`` is refused
    with ``UdfDefinitionError``). A ``config["clock"]`` is refused: in a cluster PROCTIME() is
    the database head's wall clock, and a function cannot travel to the head."""
    from laminardb.errors import ConfigError

    if "clock" in config:
        raise ConfigError("config['clock'] (a processing-time clock) is for the embedded engine: in a "
                          "cluster PROCTIME() reads the database head's wall clock; drop the key")
    udfs = config.pop("udfs", None) or {}
    if not isinstance(udfs, dict) or not all(isinstance(v, tuple | list) and len(v) == 2 for v in udfs.values()):
        raise ConfigError("config['udfs'] must map each name to (function, return type), e.g. "
                          "{'twice': (twice, 'BIGINT')}")
    return udf_references(udfs)


def udf_references(udfs: dict[str, tuple]) -> list[dict]:
    """``{name: (function, return type)}`` as the head and the actors take UDFs: each function by
    its ``"module:qualname"`` reference (names and types checked here). A lambda or a function
    of ``__main__`` has none the cluster could import: ``UdfDefinitionError``."""
    from laminardb.sql.exceptions import UdfDefinitionError
    from laminardb.sql.udf import UdfRegistry

    reg = UdfRegistry()
    for name, (fn, return_type) in udfs.items():
        reg.register(str(name), fn, return_type)
    items = reg.describe()
    if bad := [i["name"] for i in items if not i["function"]]:
        raise UdfDefinitionError(f"UDF(s) {', '.join(map(repr, bad))} are lambdas or functions of __main__, "
                                 "which the cluster cannot import; define them at module level in an "
                                 "importable module")
    return items


def _raft_spec(raft) -> dict | None:
    """The control plane for the head: a ``RaftConfig``, a ``laminardb cluster up`` data dir,
    or None (the head reads ``LAMINARDB_RAFT_DIR``/``_VOTERS`` where it runs)."""
    if raft is None:
        return None
    if isinstance(raft, str):
        return {"data_dir": raft}
    return {"voters": list(raft.voters), "secret": raft.secret}
