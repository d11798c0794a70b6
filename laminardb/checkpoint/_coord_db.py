"""One database as the Delta checkpoint coordinator drives it: its epoch log, its head, the
sinks the coordinator writes for it, and the checkpoint step. Entry point:
:class:`CoordinatedDatabase` (built by ``spark_coordinator.CheckpointCoordinator``).

One checkpoint (``checkpoint()``), with ``log`` the database's epoch log::

    e = log.allocate(); log.intent(e)                      -- intent record first
    ack = head.prepare_checkpoint(e)                       -- barrier, snapshots, sink stage
    per sink with rows: a Spark job whose executors read the staged files and write the
        sink's output (native_epoch.write_epoch); the driver stages what they wrote
    log.record_manifest(e, ack.manifest_ref, sink infos)   -- the commit point
    sink.commit(e) for each sink (in a Spark task for a sink whose commit reads its staged
        rows: Kafka, PostgreSQL, Iceberg, a remote Delta table); head.commit_checkpoint(e)

``settle()`` runs before the first checkpoint and after anything left the outcome of an
epoch unknown (a restart, a failed manifest write, a head that missed its commit): every
sink ``recover(m)`` from the recorded manifest ``m`` (commits staged epochs <= m, drops the
rest), the intent above ``m`` and every pending epoch of the head above ``m`` are aborted,
and ``head.commit_checkpoint(m)`` is re-driven. A new epoch is never prepared while the
head may lag the manifest: its prepare would stage rows the sinks already hold.

Sinks are built from the CREATE SINK text and stream schema the head sends with each ack.
Their specs are written to ``sinks.json`` *before* the first rows go to a new sink, so a
restarted coordinator rebuilds every sink that may hold staged output, and recovers it.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.checkpoint._files import atomic_write
from laminardb.checkpoint.exceptions import CheckpointPrepareError, EpochLogError
from laminardb.checkpoint.sink import TwoPhaseSink
from laminardb.checkpoint.sink_tasks import NotASinkError

log = logging.getLogger("laminardb.coordinator")

_SINKS_FILE = "sinks.json"
# Durations kept for the p50/p99 in status(): the last 100 checkpoints, as the brief asks;
# enough for a stable p99 at a 10 s interval (~17 minutes of history).
_HISTORY = 100


_RAISED = re.compile(r"^\s*[\w.]*(Error|Exception): ")


def _short(exc: BaseException) -> str:
    """What a Spark task raised, without the JVM's stack (py4j wraps the task's traceback):
    its last ``SomeError: message`` line, else the first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    raised = [ln for ln in lines if _RAISED.match(ln) and not ln.startswith(("py4j", "org.apache"))]
    return raised[-1] if raised else (lines[0] if lines else type(exc).__name__)


def crash_point(step: str, epoch: int) -> None:
    """Fault injection for the crash tests: ``LAMINARDB_TEST_COORD_CRASH_AT`` names a step
    (``after_intent``, ``after_prepare``, ``after_manifest``) where the process exits at
    once; ``LAMINARDB_TEST_COORD_CRASH_EPOCH`` (optional) limits it to one epoch."""
    if os.environ.get("LAMINARDB_TEST_COORD_CRASH_AT", "") != step:
        return
    only = os.environ.get("LAMINARDB_TEST_COORD_CRASH_EPOCH", "")
    if only and int(only) != epoch:
        return
    os._exit(1)


@dataclass(frozen=True)
class DatabaseSpec:
    """What the coordinator persists about a registered database (``registry.json``).

    A Raft secret is never written here: it comes from ``raft_secret_file``, the
    coordinator's configuration or ``LAMINARDB_RAFT_SECRET``.
    """

    database: str
    head_name: str
    checkpoint_dir: str
    interval_s: float | None = None  # None: only checkpoint_now()
    raft_voters: tuple[str, ...] = ()
    raft_secret_file: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["raft_voters"] = list(self.raft_voters)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DatabaseSpec:
        return cls(database=doc["database"], head_name=doc["head_name"],
                   checkpoint_dir=doc["checkpoint_dir"], interval_s=doc.get("interval_s"),
                   raft_voters=tuple(doc.get("raft_voters") or ()),
                   raft_secret_file=doc.get("raft_secret_file"))

    @property
    def root(self) -> Path:
        return Path(self.checkpoint_dir) / _safe(self.database)


def _safe(name: str) -> str:
    from laminardb.connectors.sinks import _dir_name

    return _dir_name(name)


@dataclass
class _SinkSlot:
    sql: str
    schema: pa.Schema
    sink: Any


@dataclass
class _Stats:
    checkpoints: int = 0
    failures: int = 0
    sink_commit_failures: int = 0
    last_epoch: int = 0
    last_error: str | None = None
    last_bytes: int = 0
    last_rows: int = 0
    #: checkpoints that took longer than the interval: the next one started late and took
    #: every row since this one's barrier (epochs merge; none is skipped or queued twice)
    overruns: int = 0
    merged_in_spark: int = 0  # partial rows of local-global aggregates the epoch jobs merged
    last_duration_s: float | None = None
    last_done: float | None = None  # monotonic time the last checkpoint was recorded
    history: collections.deque = field(default_factory=lambda: collections.deque(maxlen=_HISTORY))


class CoordinatedDatabase:
    """The coordinator's runtime for one database; every public call holds ``lock``."""

    def __init__(self, spec: DatabaseSpec, *, epoch_log: Any, head: Any, spark: Any,
                 spark_lock: threading.Lock) -> None:
        self.spec = spec
        self.log = epoch_log
        self.head = head
        self._spark = spark  # () -> SparkSession, started on the first epoch with rows
        self._spark_lock = spark_lock
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.stage_root = spec.root / "coordinator-sinks"
        self.stage_root.mkdir(parents=True, exist_ok=True)
        self.sinks: dict[str, _SinkSlot] = {}
        self.manifest_epoch = 0
        self.needs_settle = True
        self.stats = _Stats()
        self._stats_lock = threading.Lock()

    # ------------------------------------------------------------------ sinks
    def _read_specs(self) -> dict[str, dict[str, str]]:
        try:
            doc = json.loads((self.stage_root / _SINKS_FILE).read_bytes())
        except FileNotFoundError:
            return {}
        return dict(doc.get("sinks", {}))

    def _write_specs(self, specs: dict[str, dict[str, str]]) -> None:
        data = json.dumps({"version": 1, "sinks": specs}, sort_keys=True).encode()
        atomic_write(self.stage_root / _SINKS_FILE, data, what="coordinator sink specs")

    def _build(self, name: str, sql: str, schema: pa.Schema) -> Any:
        from laminardb.checkpoint.sink_tasks import SinkSpec, build_sink

        try:
            return build_sink(SinkSpec(name, sql, schema.serialize().to_pybytes(), str(self.stage_root)))
        except NotASinkError as exc:
            raise CheckpointPrepareError(str(exc)) from exc

    def _recover_sink(self, slot: _SinkSlot, epoch: int, info: dict[str, Any] | None) -> None:
        """``recover`` of a sink: in a Spark task when it reads staged rows (``native_epoch``)."""
        from laminardb.checkpoint.native_epoch import commits_on_executor, run_on_executor

        if commits_on_executor(slot.sink):
            with self._spark_lock:
                run_on_executor(self._spark(), slot.sink, "recover", epoch, info)
        else:
            slot.sink.recover(epoch, info)

    def _sink(self, name: str, sql: str, schema: pa.Schema) -> _SinkSlot:
        slot = self.sinks.get(name)
        if slot is not None and slot.sql == sql and slot.schema.equals(schema):
            return slot
        if slot is not None:  # re-created under the same name: its old epochs are settled
            slot.sink.close()
        sink = self._build(name, sql, schema)  # a bad spec fails here, before it is kept
        specs = self._read_specs()
        specs[name] = {"sql": sql, "schema": base64.b64encode(schema.serialize().to_pybytes()).decode()}
        self._write_specs(specs)  # write-ahead: a restart must find every sink that staged rows
        slot = _SinkSlot(sql, schema, sink)
        self.sinks[name] = slot
        return slot

    def _load_sinks(self) -> None:
        for name, spec in self._read_specs().items():
            if name in self.sinks:
                continue
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec["schema"])))
            self.sinks[name] = _SinkSlot(spec["sql"], schema, self._build(name, spec["sql"], schema))

    def _forget_sinks(self, keep: set[str]) -> None:
        """Close sinks the head no longer sends (DROP SINK) once their last commit succeeded:
        nothing of theirs is staged any more."""
        gone = [n for n in self.sinks if n not in keep]
        if not gone:
            return
        for n in gone:
            self.sinks.pop(n).sink.close()
        specs = self._read_specs()
        self._write_specs({n: s for n, s in specs.items() if n not in gone})

    # ------------------------------------------------------------------ settle
    def settle(self) -> None:
        """Bring sinks and head to the recorded manifest (see the module docstring)."""
        with self.lock:
            st = self.log.state()
            manifest = st.get("manifest") or {}
            epoch = int(manifest.get("epoch") or 0)
            infos = manifest.get("sinks") or {}
            self._load_sinks()
            for name, slot in self.sinks.items():
                if isinstance(slot.sink, TwoPhaseSink):
                    self._recover_sink(slot, epoch, (infos.get(name) or {}).get("info"))
            intent = st.get("intent")
            doomed = {int(intent)} if intent and int(intent) > epoch else set()
            doomed |= {int(p) for p in self.head.checkpoint_status().get("pending", []) if int(p) > epoch}
            for e in sorted(doomed):
                for slot in self.sinks.values():
                    if isinstance(slot.sink, TwoPhaseSink):
                        slot.sink.abort(e)
                self.head.abort_checkpoint(e)
            if epoch:
                self.head.commit_checkpoint(epoch)  # re-drive: idempotent
            self.manifest_epoch = epoch
            self.stats.last_epoch = max(self.stats.last_epoch, epoch)
            self.needs_settle = False
            if doomed or epoch:
                log.info("database %s settled at checkpoint %d (aborted %s)",
                         self.spec.database, epoch, sorted(doomed) or "nothing")

    # ------------------------------------------------------------------ one checkpoint
    def checkpoint(self) -> int:
        """Run one checkpoint; returns its epoch. Raises when it did not commit (counted in
        ``stats``; the previous manifest stays the recovery point)."""
        with self.lock:
            try:
                if self.needs_settle:
                    self.settle()
                return self._checkpoint()
            except Exception as exc:
                self.stats.failures += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("database %s: checkpoint failed: %s", self.spec.database, exc)
                raise

    def _checkpoint(self) -> int:
        epoch = self.log.allocate()
        self.log.intent(epoch)
        crash_point("after_intent", epoch)
        t0 = time.perf_counter()
        try:
            ack = self.head.prepare_checkpoint(epoch)
            if int(ack.get("epoch", epoch)) != epoch:
                raise ValueError(f"it acknowledged epoch {ack.get('epoch')} instead")
        except Exception as exc:
            self._abort(epoch, sinks=False)  # no sink saw a row of this epoch yet
            msg = (f"database {self.spec.database!r}: the head did not prepare checkpoint "
                   f"{epoch}: {exc}; the epoch is aborted and retried at the next interval")
            raise CheckpointPrepareError(msg) from exc
        crash_point("after_prepare", epoch)
        t_prepared = time.perf_counter()
        try:
            infos, rows, spark_s = self._stage_sinks(epoch, ack.get("sinks") or {})
        except Exception:
            self._abort(epoch)
            raise
        try:
            self.log.record_manifest(epoch, str(ack.get("manifest_ref") or ""), {"sinks": infos})
        except EpochLogError:
            self._abort(epoch)  # refused, so certainly not recorded
            raise
        except Exception:
            self.needs_settle = True  # recorded or not: settle() reads which and finishes it
            raise
        t_manifest = time.perf_counter()
        crash_point("after_manifest", epoch)
        self.manifest_epoch = epoch
        failed = self._commit(epoch)
        self._forget_sinks(set(ack.get("sinks") or {}) | failed)
        try:
            self.head.commit_checkpoint(epoch)
        except Exception as exc:  # noqa: BLE001 - committed already; settle() re-drives it
            self.needs_settle = True
            log.warning("database %s: head missed the commit of checkpoint %d (re-driven "
                        "before the next one): %s", self.spec.database, epoch, exc)
        st = self.stats
        st.checkpoints += 1
        st.last_epoch, st.last_error = epoch, None
        st.last_bytes, st.last_rows = int(ack.get("bytes") or 0), rows
        st.last_duration_s, st.last_done = time.monotonic() - t0, time.monotonic()
        if self.spec.interval_s and st.last_duration_s > self.spec.interval_s:
            st.overruns += 1
        with self._stats_lock:  # status() copies the history from another thread
            st.history.append((t_manifest - t0, spark_s, float(ack.get("stall_s") or 0.0),
                               t_prepared - t0))
        return epoch

    def _stage_sinks(self, epoch: int, sinks: dict[str, Any]) -> tuple[dict[str, Any], int, float]:
        """Stage every sink's epoch: a Spark job per sink with rows, whose executors read the
        staged files and write the sink's output (``native_epoch``); no row reaches the driver."""
        from laminardb.checkpoint.native_epoch import native_kind, write_epoch

        infos: dict[str, Any] = {}
        rows, spark_s = 0, 0.0
        for name in sorted(sinks):
            desc = sinks[name]
            schema = pa.ipc.read_schema(pa.py_buffer(desc["schema"]))
            slot = self._sink(name, desc["sql"], schema)
            n = 0
            if desc.get("merge"):  # a local-global aggregate's partials: merged by the epoch job
                from laminardb.checkpoint.spark_merge import merge_epoch

                with self._spark_lock:
                    t = time.perf_counter()
                    kind = native_kind(slot.sink)
                    info, n = merge_epoch(self._spark(), kind, slot.sink, desc["merge"], epoch, schema)
                    spark_s += time.perf_counter() - t
                self.stats.merged_in_spark += int(desc["merge"]["rows"])
                infos[name] = {"info": info, "rows": n}
                rows += n
                continue
            staged = desc.get("stages") or ([desc["stage"]] if desc.get("stage") else [])
            staged = staged if desc.get("rows", 1) != 0 else []
            if staged:
                kind = native_kind(slot.sink)
                with self._spark_lock:
                    t = time.perf_counter()
                    info, n = write_epoch(self._spark(), kind, slot.sink, staged, epoch, schema)
                    spark_s += time.perf_counter() - t
            elif isinstance(slot.sink, TwoPhaseSink):
                info = slot.sink.pre_commit(epoch)  # no rows: nothing is staged or written
            else:
                info = {}
            infos[name] = {"info": info, "rows": n}
            rows += n
        return infos, rows, spark_s

    def _commit(self, epoch: int) -> set[str]:
        """Commit every sink's staged epochs <= ``epoch``; returns the sinks that failed. A sink
        whose commit reads its staged rows commits in a Spark task (``native_epoch``)."""
        from laminardb.checkpoint.native_epoch import commits_on_executor, run_on_executor

        failed = set()
        for name, slot in self.sinks.items():
            if not isinstance(slot.sink, TwoPhaseSink):
                continue
            try:
                if commits_on_executor(slot.sink):
                    with self._spark_lock:
                        run_on_executor(self._spark(), slot.sink, "commit", epoch)
                else:
                    slot.sink.commit(epoch)
            except Exception as exc:  # noqa: BLE001 - stays staged; the next commit retries
                self.stats.sink_commit_failures += 1
                failed.add(name)
                log.warning("database %s: sink %s could not commit checkpoint %d (retried "
                            "at the next one): %s", self.spec.database, name, epoch, _short(exc))
        return failed

    def _abort(self, epoch: int, *, sinks: bool = True) -> None:
        """Undo a checkpoint that will never be recorded: the head's pending epoch and
        anything the sinks staged or hold open for it (recover() resets their open epoch)."""
        try:
            self.head.abort_checkpoint(epoch)
        except Exception as exc:  # noqa: BLE001 - settle() aborts it from checkpoint_status()
            self.needs_settle = True
            log.warning("database %s: head did not abort checkpoint %d: %s",
                        self.spec.database, epoch, exc)
        if not sinks:
            return
        for name, slot in self.sinks.items():
            if not isinstance(slot.sink, TwoPhaseSink):
                continue
            try:
                slot.sink.abort(epoch)
                self._recover_sink(slot, self.manifest_epoch, None)
            except Exception as exc:  # noqa: BLE001 - settle() retries from the manifest
                self.needs_settle = True
                log.warning("database %s: sink %s did not abort checkpoint %d: %s",
                            self.spec.database, name, epoch, exc)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        st = self.stats
        with self._stats_lock:
            hist = list(st.history)
        out: dict[str, Any] = {
            "database": self.spec.database, "head": self.spec.head_name,
            "interval_s": self.spec.interval_s, "last_epoch": st.last_epoch,
            "manifest_epoch": self.manifest_epoch, "checkpoints": st.checkpoints,
            "failures": st.failures, "sink_commit_failures": st.sink_commit_failures,
            "last_error": st.last_error, "last_bytes": st.last_bytes, "last_rows": st.last_rows,
            "settled": not self.needs_settle, "sinks": sorted(self.sinks),
            "duration_p50_s": None, "duration_p99_s": None, "spark_share": None,
            "spark_p50_s": None, "stall_p50_s": None, "prepare_p50_s": None,
            "overruns": st.overruns, "merged_in_spark": st.merged_in_spark, "last_duration_s": st.last_duration_s,
            "behind_s": self._behind(st),
        }
        if hist:
            dur, spark, stall, prep = (np.array(c, dtype=np.float64) for c in zip(*hist, strict=True))
            out.update(
                duration_p50_s=float(np.percentile(dur, 50)), duration_p99_s=float(np.percentile(dur, 99)),
                spark_share=float(spark.sum() / dur.sum()) if dur.sum() > 0 else 0.0,
                spark_p50_s=float(np.percentile(spark, 50)), stall_p50_s=float(np.percentile(stall, 50)),
                prepare_p50_s=float(np.percentile(prep, 50)))
        return out

    def _behind(self, st: _Stats) -> float:
        """How long the next checkpoint is overdue (0 when on time): the backlog of a Spark
        job, sink or head slower than the interval."""
        if not self.spec.interval_s or st.last_done is None:
            return 0.0
        return max(0.0, time.monotonic() - st.last_done - self.spec.interval_s)

    def close(self) -> None:
        for slot in self.sinks.values():
            try:
                slot.sink.close()
            except Exception:  # noqa: BLE001 - closing must not stop the others
                log.debug("closing sink failed", exc_info=True)
        try:
            self.log.close()
        except Exception:  # noqa: BLE001
            log.debug("closing epoch log failed", exc_info=True)
