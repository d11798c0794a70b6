"""The local checkpoint coordinator of an embedded durable database (``open(directory)``).

Entry point: ``LocalCoordinator(directory, reactor, ...)``, owned by the ``Connection``.
It keeps the WAL (inserts, DDL, finish) and runs checkpoints — periodically on a
timer thread, on ``conn.checkpoint()``, after ``finish()`` and on ``close()``:

1. **Barrier** (under the engine lock). The embedded reactor runs every batch through the
   whole DAG under one lock, so taking that lock *is* an aligned barrier: every operator
   has seen exactly the same input. Under it: the WAL moves to a new segment (its lsn is the
   checkpoint's replay position), every operator and view takes a fast copy of its state
   (``snapshot()``), source positions are copied (rows accepted, watermarks, Kafka offsets
   as of the last ingested poll), and every exactly-once sink pre-commits the epoch.
2. **Write** (lock released, ingest continues): snapshots are encoded and written, fsynced.
3. **Commit point**: the manifest is written atomically.
4. **Sink commit** of the epoch (retried by the next checkpoint and by recovery if it fails),
   then old checkpoints beyond ``checkpoint_retain`` and the WAL behind the oldest kept
   one are deleted, so disk use stays bounded.

The Delta coordinator drives the same snapshots, manifest fields and sink contract across
actors; only the barrier differs (it travels with the data between actors).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import msgpack

from laminardb.checkpoint.actor_wals import ActorWals
from laminardb.checkpoint.sink import TwoPhaseSink
from laminardb.checkpoint.state_chains import DEFAULT_MAX_DELTAS, StateChains
from laminardb.checkpoint.store import CheckpointStore, Manifest
from laminardb.checkpoint.wal import Wal
from laminardb.errors import CheckpointError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
DEFAULT_RETAIN = 3
# Fault injection for the crash tests: the process SIGKILLs itself at the named step of a
# checkpoint ("after_pre_commit", "after_manifest"). Unset in normal use.
_CRASH_AT = os.environ.get("LAMINARDB_TEST_CRASH_AT", "")


def _crash_point(step: str) -> None:
    if _CRASH_AT == step:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def parse_interval(value: Any) -> float | None:
    """``"10s"``, ``"500ms"``, ``"2m"``, a number of seconds; 0/``"off"``/None: no timer."""
    from laminardb.errors import ConfigError

    if value is None:
        return DEFAULT_INTERVAL_S
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    text = str(value).strip().lower()
    if text in ("off", "none", "0", ""):
        return None
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            try:
                v = float(text[: -len(suffix)]) * scale
            except ValueError:
                break
            return v if v > 0 else None
    try:
        v = float(text)
        return v if v > 0 else None
    except ValueError:
        pass
    raise ConfigError(f"checkpoint_interval {value!r} is not a duration: write e.g. '10s', '500ms', '2m' or 'off'",
                      code="LDB-9010")


def config_flag(value: Any) -> bool:
    return str(value).strip().lower() not in ("false", "0", "off", "no")


class LocalCoordinator:
    """WAL, catalog and checkpoints of one database directory; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str], reactor, *, config: dict[str, Any]) -> None:
        self.dir = Path(directory)
        self.reactor = reactor
        self.interval_s = parse_interval(config.get("checkpoint_interval"))
        self.retain = int(config.get("checkpoint_retain", DEFAULT_RETAIN))
        #: incremental checkpoints of joins (``state_chains``); ``checkpoint_incremental=False``
        #: writes every operator's whole state every time
        self.chains = StateChains(max_deltas=int(config.get("checkpoint_max_deltas", DEFAULT_MAX_DELTAS)),
                                  enabled=config_flag(config.get("checkpoint_incremental", True)))
        self.wal = Wal(self.dir / "wal", sync=str(config.get("wal_sync", "none")))
        #: the Delta mode's direct inserts: rows logged in reactor actors' WALs, referenced here
        self.actor_wals = ActorWals(self.dir)
        self.store = CheckpointStore(self.dir)
        self.journaling = True  # off while recovery replays the WAL
        #: called under the engine lock as a barrier starts (``ClusterBackend.settle``: deliver
        #: the outputs of batches still on the actors, so counters and state agree)
        self.before_barrier = None
        #: set when the Delta coordinator drives this database: ``checkpoint()`` asks it
        #: (it allocates the epoch in Raft and calls ``prepare``/``publish`` back)
        self.external = None
        self.epoch = 0  # last committed checkpoint
        self._next_epoch = 1
        self._ckpt_lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._last_marks: tuple[int, int, bool] | None = None
        self.last_logged_rows = 0
        #: cluster clients' inserts (the database head): client id → (sequence number, rows) of
        #: its last insert in the WAL or a checkpoint, so a retry across a head restart is
        #: answered instead of applied twice; ``insert_tag`` numbers the insert being logged
        self.client_seqs: dict[str, tuple[int, int]] = {}
        self.insert_tag: tuple[str, int] | None = None
        self._prepared: dict[int, tuple] = {}  # epoch → (sinks, seconds, bytes) until published
        self._sources_at: dict[int, dict] = {}  # epoch → connector positions, until committed
        #: the connector positions (Kafka offsets) of the last committed checkpoint: what a
        #: restore resumes from (the autoscaler shows end − these as the checkpoint lag)
        self.source_positions: dict[str, Any] = {}
        self._kept_positions: dict[int, dict[str, Any]] = {}  # kept checkpoints' connector positions
        self.stats: dict[str, Any] = {
            "checkpoints": 0, "failures": 0, "last_epoch": 0, "last_duration_s": None,
            "last_stall_s": None, "max_stall_s": 0.0, "last_bytes": 0, "bytes_written": 0, "last_error": None,
            "sink_commit_failures": 0, "recovery": None,
            "recovery_skipped_checkpoints": 0, "recovery_wal_segments_set_aside": 0,
        }

    # ------------------------------------------------------------------ journal
    def log_insert(self, source: str, batch) -> int:
        self.last_logged_rows = batch.num_rows  # what replay will apply (the cluster head's retry rule)
        tag = self.insert_tag
        lsn = self.wal.append_insert(source, batch, tag)
        if tag is not None:
            self.client_seqs[tag[0]] = (tag[1], batch.num_rows)
        return lsn

    def log_insert_ref(self, source: str, ref: dict, rows: int) -> int:
        """An insert a reactor actor logged in its own WAL (``ref``: its member ``w`` and lsn
        ``l``): this WAL records where, not the rows (``actor_wals.py``)."""
        self.last_logged_rows = rows
        tag = self.insert_tag
        header: dict[str, Any] = {"s": source, "w": str(ref["w"]), "l": int(ref["l"]), "n": int(rows)}
        if tag is not None:
            header["c"], header["q"] = tag
        lsn = self.actor_wals.reference(header["w"], header["l"], lambda: self.wal.append("insert_ref", header))
        if tag is not None:
            self.client_seqs[tag[0]] = (tag[1], rows)
        return lsn

    def log_ddl(self, sql: str) -> None:
        if self.journaling:
            self.wal.append("ddl", {"sql": sql})

    def log_finish(self) -> None:
        if self.journaling:
            self.wal.append("finish")

    def durable(self, lsn: int) -> None:
        """Called outside the engine lock after an insert: fsync when ``wal_sync='always'``."""
        if self.wal.sync_mode == "always":
            self.wal.sync(lsn)

    # ------------------------------------------------------------------ checkpoints
    def sinks(self) -> dict[str, TwoPhaseSink]:
        out = {}
        for node in self.reactor.nodes.values():
            if node.kind == "sink":
                for s in node.sinks:
                    if isinstance(s, TwoPhaseSink):
                        out[node.name] = s
        return out

    def checkpoint(self) -> int:
        """Run one checkpoint; returns its epoch. Raises a CheckpointError if it failed
        (the previous checkpoint stays the one recovery uses)."""
        if self.external is not None:
            return self.external()
        with self._ckpt_lock:
            t0 = time.perf_counter()
            try:
                epoch, images, manifest, sinks = self._barrier()
                _crash_point("after_pre_commit")
                nbytes = self._write(epoch, images, manifest)
                _crash_point("after_manifest")
            except Exception as exc:
                self.chains.forget()  # its delta is lost: the next checkpoint writes whole snapshots
                self.stats["failures"] += 1
                self.stats["last_error"] = f"{type(exc).__name__}: {exc}"
                log.warning("checkpoint failed: %s", exc)
                raise
            self.epoch = epoch
            self.source_positions = self._sources_at.pop(epoch, {})
            self._commit_sinks(epoch, sinks)
            self._prune(epoch)
            self._sources_committed(epoch)
            dt = time.perf_counter() - t0
            self.stats.update(checkpoints=self.stats["checkpoints"] + 1, last_epoch=epoch,
                              last_duration_s=dt, last_bytes=nbytes, last_error=None,
                              bytes_written=self.stats["bytes_written"] + nbytes)
            return epoch

    def _barrier(self) -> tuple[int, dict[str, Any], Manifest, dict[str, TwoPhaseSink]]:
        r = self.reactor
        with r.lock:
            t0 = time.perf_counter()
            if self.before_barrier is not None:
                self.before_barrier()  # the cluster delivers outputs still on its actors first
            epoch = self._next_epoch
            self._next_epoch += 1
            lsn = self.wal.rotate()
            images: dict[str, Any] = {}
            nodes: dict[str, dict[str, Any]] = {}
            connectors: dict[str, Any] = {}
            for i, node in enumerate(r.nodes.values()):
                meta: dict[str, Any] = {"kind": node.kind, "wm": int(node.wm), "max_ts": int(node.max_ts),
                                        "rows_out": node.rows_out, "accepted": node.accepted,
                                        # metrics' counters: a recovery goes on from these
                                        "rows_in": node.rows_in, "bytes_in": node.bytes_in,
                                        "rejected": node.rejected}
                if node.op is not None and node.op.incremental:
                    name, images[name], planned = self.chains.take(epoch, node.name, i, node.op)
                    chain = [*planned.earlier, name]
                    meta["op"], meta["op_deltas"] = chain[0], chain[1:]
                elif node.op is not None:
                    meta["op"] = f"op-{i}.snap"
                    images[meta["op"]] = node.op.snapshot()
                if node.view is not None:
                    meta["view"] = f"view-{i}.snap"
                    images[meta["view"]] = node.view.snapshot()
                if node.connector_state is not None:
                    connectors[node.name] = node.connector_state
                nodes[node.name] = meta
            sinks = self.sinks()
            sink_info = {name: s.pre_commit(epoch) for name, s in sinks.items()}
            manifest = Manifest(
                epoch=epoch, wal_lsn=lsn, catalog=list(r.catalog.values()), finished=r.finished,
                nodes=nodes, counters={"events_ingested": r.events_ingested,
                                       "events_emitted": r.events_emitted, "late_routed": r.late_routed})
            images["connectors.msgpack"] = msgpack.packb(connectors, use_bin_type=True)
            self._sources_at[epoch] = connectors
            images["sinks.msgpack"] = msgpack.packb(sink_info, use_bin_type=True)
            if self.client_seqs:  # the WAL before this checkpoint goes: keep each client's last insert
                images["clients.msgpack"] = msgpack.packb(self.client_seqs, use_bin_type=True)
            self._last_marks = self._marks()
            stall = time.perf_counter() - t0
        self.stats["last_stall_s"] = stall
        self.stats["max_stall_s"] = max(self.stats["max_stall_s"], stall)
        return epoch, images, manifest, sinks

    def _write(self, epoch: int, images: dict[str, Any], manifest: Manifest, *, pending: bool = False) -> int:
        self.store.begin(epoch)
        total = 0
        for name, image in images.items():
            parts = None
            if hasattr(image, "write_parts"):  # the Delta mode: actors write their own parts
                parts = image.write_parts(self.store.dir_of(epoch), name)
            if parts is not None:
                data, part_files = parts
                manifest.files.update(part_files)
                total += sum(m["bytes"] for m in part_files.values())
            else:
                data = image if isinstance(image, bytes | bytearray) else image.encode()
            manifest.files[name] = self.store.write_file(epoch, name, data)
            total += len(data)
        manifest.files.update(self.chains.earlier_files(epoch))
        self.store.commit(manifest, pending=pending)
        self.chains.written(epoch, manifest.files)
        return total

    # ------------------------------------------------------------------ driven by the Delta coordinator
    def prepare(self, epoch: int) -> dict[str, Any]:
        """Phase one of a checkpoint the Delta coordinator drives: the barrier, snapshots and
        a *pending* manifest for ``epoch`` (allocated in Raft by the coordinator), and every
        sink's epoch staged. Nothing is visible until ``publish(epoch)``."""
        with self._ckpt_lock:
            if epoch <= self.epoch:
                raise CheckpointError(f"checkpoint {epoch} is not after the last one ({self.epoch}); "
                                      "allocate a later epoch")
            t0 = time.perf_counter()
            self._next_epoch = epoch
            try:
                epoch, images, manifest, sinks = self._barrier()
                nbytes = self._write(epoch, images, manifest, pending=True)
            except Exception as exc:
                self.chains.forget()
                self.stats["failures"] += 1
                self.stats["last_error"] = f"{type(exc).__name__}: {exc}"
                raise
            self._prepared[epoch] = (sinks, time.perf_counter() - t0, nbytes)
            return {"epoch": epoch, "manifest_ref": str(self.store.dir_of(epoch)), "bytes": nbytes,
                    "stall_s": self.stats["last_stall_s"], "sinks": sinks}

    def publish(self, epoch: int) -> bool:
        """Phase two, after the coordinator recorded ``epoch``'s manifest: it becomes the
        recovery point; sinks commit; older checkpoints and the WAL behind them go.
        Idempotent; False when ``epoch`` is unknown here (aborted, or never prepared)."""
        with self._ckpt_lock:
            if not self.store.publish(epoch):
                return False
            sinks, took, nbytes = self._prepared.pop(epoch, (self.sinks(), None, 0))
            if epoch > self.epoch:
                self.epoch = epoch
                self.source_positions = self._sources_at.pop(epoch, self.source_positions)
                self._commit_sinks(epoch, sinks)
                self._prune(epoch)
                self._sources_committed(epoch)
                self.stats.update(checkpoints=self.stats["checkpoints"] + 1, last_epoch=epoch,
                                  last_duration_s=took, last_bytes=nbytes, last_error=None,
                                  bytes_written=self.stats["bytes_written"] + nbytes)
            return True

    def discard(self, epoch: int) -> None:
        """The coordinator aborted ``epoch``: its pending checkpoint and staged sink rows go."""
        with self._ckpt_lock:
            sinks, _, _ = self._prepared.pop(epoch, (self.sinks(), None, 0))
            self._sources_at.pop(epoch, None)
            self.chains.forget()  # later checkpoints must not extend the aborted one's deltas
            if epoch > self.epoch:
                self.store.discard(epoch)
                with self.reactor.lock:  # sinks take rows under it: roll the epoch back in between
                    for s in sinks.values():
                        s.abort(epoch)

    def _commit_sinks(self, epoch: int, sinks: dict[str, TwoPhaseSink]) -> None:
        # a sink whose commit could race the writes of the next epoch commits under the lock
        with self.reactor.lock:
            for name, s in sinks.items():
                if not s.commit_outside_lock:
                    self._commit_one(name, s, epoch)
        for name, s in sinks.items():
            if s.commit_outside_lock:
                self._commit_one(name, s, epoch)

    def _commit_one(self, name: str, sink: TwoPhaseSink, epoch: int) -> None:
        try:
            sink.commit(epoch)
        except Exception as exc:  # noqa: BLE001 - staged output stays; retried next time
            self.stats["sink_commit_failures"] += 1
            log.warning("sink %s: commit of epoch %d failed (retried at the next checkpoint): %s",
                        name, epoch, exc)

    def _sources_committed(self, epoch: int) -> None:
        """Tell each polled source how far a recovery can no longer go back
        (``contracts.Source.checkpoint_committed``): a CDC source lets its server discard changes
        up to there. That is the position in the *oldest* checkpoint kept on disk, not the newest:
        recovery falls back to an older checkpoint when the newer ones are damaged, and must
        find the changes since it still upstream. Called after the manifest is durable and old
        checkpoints are pruned (the caller's order). A failure is logged; the next checkpoint
        calls again with its newer position."""
        nodes = self.reactor.nodes
        for name, state in self._fallback_positions(epoch).items():
            node = nodes.get(name)
            hook = getattr(node.connector, "checkpoint_committed", None) if node is not None else None
            if hook is None:  # optional in contracts.Source
                continue
            try:
                hook(state)
            except Exception as exc:  # noqa: BLE001 - the checkpoint stands; retried at the next one
                log.warning("source %s: releasing changes up to checkpoint %d failed (retried at the next "
                            "checkpoint): %s", name, epoch, exc)

    def _fallback_positions(self, epoch: int) -> dict[str, Any]:
        """The connector positions of the oldest complete checkpoint on disk. Each committed
        epoch's are remembered here; one from before this process started is read from its
        ``connectors.msgpack`` once (unreadable: nothing is released this time)."""
        kept = [e for e in self.store.complete() if e <= epoch]
        self._kept_positions[epoch] = self.source_positions
        self._kept_positions = {e: p for e, p in self._kept_positions.items() if e in kept or e == epoch}
        oldest = kept[0] if kept else epoch
        if oldest not in self._kept_positions:
            try:
                data = (self.store.dir_of(oldest) / "connectors.msgpack").read_bytes()
                self._kept_positions[oldest] = msgpack.unpackb(data, raw=False, strict_map_key=False)
            except Exception as exc:  # noqa: BLE001 - unknown: release nothing this time
                log.warning("checkpoint %d: cannot read the source positions of checkpoint %d (%s); "
                            "sources keep their upstream changes", epoch, oldest, exc)
                return {}
        return self._kept_positions[oldest]

    def _prune(self, epoch: int) -> None:
        oldest = self.store.prune(self.retain, epoch)
        if oldest is not None:
            lsn = self.store.wal_lsn_of(oldest)
            if lsn is not None:
                self.wal.truncate_before(lsn)
                self.actor_wals.truncate(lsn)

    # ------------------------------------------------------------------ timer
    def start_timer(self) -> None:
        if self.interval_s is None or self._timer is not None:
            return
        self._timer = threading.Thread(target=self._run_timer, name="laminardb-checkpoint", daemon=True)
        self._timer.start()

    def _run_timer(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._idle():
                continue
            try:
                self.checkpoint()
            except Exception:  # noqa: BLE001 - counted in stats and logged; retried next interval
                pass

    def _marks(self) -> tuple[int, int, bool]:
        r = self.reactor
        return self.wal.next_lsn, r.events_ingested, r.finished

    def _idle(self) -> bool:
        """Nothing arrived since the last checkpoint: skip this one."""
        return self._last_marks == self._marks()

    def metrics(self) -> dict[str, Any]:
        out = dict(self.stats)
        out.update(wal_bytes=self.wal.disk_bytes(), wal_next_lsn=self.wal.next_lsn,
                   checkpoint_bytes_on_disk=self.store.disk_bytes(), interval_s=self.interval_s)
        return out

    def close_without_checkpoint(self) -> None:
        """Stop the timer and release the WAL, leaving sinks' staged epochs for recovery to
        settle (the database head abandons an engine whose actor died)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join(30.0)
            self._timer = None
        with self._ckpt_lock:
            self.wal.close()

    def close(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join(30.0)
            self._timer = None
        for s in self.sinks().values():
            s.close()
        self.wal.close()
