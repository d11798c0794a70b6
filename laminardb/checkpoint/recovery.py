"""Recovery on open: restore the latest complete checkpoint, settle sinks, replay the WAL.

Entry point: ``recover(engine)``, called by ``Engine`` when it opens a directory.

1. The newest checkpoint whose manifest and snapshot files verify (a partial or corrupt one
   is skipped for the one before; a corrupt one is renamed ``_skipped-ckpt-<e>``). The WAL
   is judged against it: damage only in records before its position is set aside, damage
   in records it needs is refused before anything on disk changes.
2. Its catalog: every live object is created again from its DDL; Kafka sources are built
   to resume from the checkpointed offsets and partition watermarks.
3. Every operator, view and source gets its state back.
4. Every exactly-once sink settles: staged epochs up to the manifest's are committed
   (idempotently: what is already visible stays once), later ones aborted.
5. The WAL after the checkpoint's position is replayed — DDL, inserts and finish() in their
   original order. Replay is deterministic, so the output it regenerates is what the
   unbroken run produced; sinks stage it again and the next checkpoint commits it.
6. The next checkpoint takes an epoch above every epoch number seen on disk or in a sink,
   never the number of a checkpoint recovery skipped: that epoch's output may be visible
   already (its sinks committed before its files were damaged), and a reused number would
   collide with it (FILE) or be taken for it and dropped (Kafka marker, Delta app version).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgpack

from laminardb.checkpoint.exceptions import ManifestError, RecoveryError
from laminardb.sql import ddl

log = logging.getLogger(__name__)


def recover(conn) -> dict[str, Any]:
    """Bring ``conn`` (a fresh ``Engine`` over a durable directory) to its last state."""
    coord = conn.durable
    reactor = conn.reactor
    t0 = time.perf_counter()
    manifest, skipped = coord.store.latest()
    first_lsn = coord.wal.first_lsn
    if manifest is None and first_lsn > 0:
        raise ManifestError(
            f"no usable checkpoint in {coord.dir} ({'; '.join(skipped) or 'none found'}) and the WAL "
            f"starts at record {first_lsn}, so the rows before it cannot be rebuilt; nothing was "
            "changed. Put undamaged copies of the checkpoint files back into its checkpoints "
            "directory (from a backup, or from where they were moved), keeping the wal directory "
            "as it is (it holds the writes since), and open the database again")
    epoch = manifest.epoch if manifest is not None else 0
    # judge WAL damage against this checkpoint (raises before anything on disk changes)
    wal_set_aside = coord.wal.settle(manifest.wal_lsn if manifest is not None else 0, after_checkpoint=epoch)
    ckpt_set_aside = [n for n in map(coord.store.set_aside, coord.store.corrupt) if n]
    for name in ckpt_set_aside:
        log.warning("recovery: a corrupt checkpoint was skipped and kept as %s (its output is "
                    "rebuilt from the WAL)", name)
    coord.journaling = False
    replayed = 0
    try:
        connectors: dict[str, Any] = {}
        sink_info: dict[str, Any] = {}
        if manifest is not None:
            connectors = msgpack.unpackb(coord.store.read_file(manifest, "connectors.msgpack"),
                                         raw=False, strict_map_key=False)
            sink_info = msgpack.unpackb(coord.store.read_file(manifest, "sinks.msgpack"),
                                        raw=False, strict_map_key=False)
            if "clients.msgpack" in manifest.files:  # cluster clients' last inserts (head retries)
                coord.client_seqs = {c: (int(q), int(n)) for c, (q, n) in msgpack.unpackb(
                    coord.store.read_file(manifest, "clients.msgpack"), raw=False).items()}
        reactor.connector_restore = connectors
        for sql in manifest.catalog if manifest is not None else []:
            _apply(conn, sql)
        if manifest is not None:
            _restore_state(coord, reactor, manifest)
        for name, sink in coord.sinks().items():
            sink.recover(epoch, sink_info.get(name))
        settled = set(coord.sinks())
        restored = conn.backend.restored  # the database head re-attaches its subscribers here
        restored()
        for rec in coord.wal.replay(manifest.wal_lsn if manifest is not None else 0):
            replayed += 1
            if rec.kind == "ddl":
                _apply(conn, rec.header["sql"])
                restored()  # a stream created after the checkpoint: attach now
                for name, sink in coord.sinks().items():
                    if name not in settled:  # created after the checkpoint: drop what it staged
                        sink.recover(epoch, None)
                        settled.add(name)
            elif rec.kind in ("insert", "insert_ref"):
                node = reactor._node(rec.header["s"])
                if rec.kind == "insert":
                    batch = rec.batch()
                else:  # rows a reactor actor logged in its own WAL (the Delta mode's direct inserts)
                    h = rec.header
                    batch = coord.actor_wals.batch(h["w"], int(h["l"]), int(h["n"]))
                    coord.actor_wals.note(rec.lsn, h["w"], int(h["l"]))
                node.accepted += batch.num_rows
                if "c" in rec.header:  # a cluster client's numbered insert
                    coord.client_seqs[rec.header["c"]] = (int(rec.header["q"]), batch.num_rows)
                try:
                    reactor.ingest(node, batch)
                except Exception as exc:  # noqa: BLE001 - the original insert raised the same
                    log.info("replay: insert into %s raised again: %s", node.name, exc)
            elif rec.kind == "watermark":  # writer(source).watermark(ts)
                reactor.ingest(reactor._node(rec.header["s"]), None, watermark=rec.header["wm"])
            elif rec.kind == "finish":
                reactor.finish()
        reactor.connector_restore = {}
        coord.actor_wals.replayed()
    except (ManifestError, RecoveryError):
        raise
    except Exception as exc:
        raise RecoveryError(
            f"cannot restore {coord.dir} from checkpoint {epoch} and {replayed} WAL records: "
            f"{type(exc).__name__}: {exc}. Nothing was deleted: the checkpoints and the WAL still "
            "hold every acknowledged row; keep the directory as it is and report this error") from exc
    finally:
        coord.journaling = True
    coord.epoch = epoch
    highest = max([epoch, coord.store.highest_epoch()] + [s.highest_epoch() for s in coord.sinks().values()])
    if highest > epoch:
        log.info("recovery: restored checkpoint %d, but epochs up to %d were used before; the next "
                 "checkpoint is %d", epoch, highest, highest + 1)
    coord._next_epoch = highest + 1
    if manifest is not None and replayed == 0:
        coord._last_marks = coord._marks()  # nothing new since that checkpoint: the timer may idle
    report = {"epoch": epoch, "wal_records_replayed": replayed, "skipped_checkpoints": skipped,
              "checkpoints_set_aside": ckpt_set_aside, "wal_segments_set_aside": wal_set_aside,
              "next_epoch": highest + 1,
              "torn_wal_bytes": coord.wal.torn_bytes, "seconds": time.perf_counter() - t0}
    coord.stats["recovery"] = report
    # damaged files the last open tolerated (set aside, or skipped for an older checkpoint)
    coord.stats["recovery_skipped_checkpoints"] = len(skipped)
    coord.stats["recovery_wal_segments_set_aside"] = len(wal_set_aside)
    return report


def _apply(conn, sql: str) -> None:
    for stmt, text in ddl.parse_script_with_text(sql, {}):
        conn.apply_ddl(stmt, text)


def _restore_state(coord, reactor, manifest) -> None:
    c = manifest.counters
    reactor.events_ingested = c.get("events_ingested", 0)
    reactor.events_emitted = c.get("events_emitted", 0)
    reactor.late_routed = c.get("late_routed", 0)
    reactor.finished = manifest.finished
    for name, meta in manifest.nodes.items():
        node = reactor.nodes.get(name)
        if node is None:
            raise RecoveryError(f"checkpoint {manifest.epoch} has state for {name!r}, which its catalog "
                                "does not create: the checkpoint is inconsistent. Rename its directory "
                                f"{manifest.path.name} to start with '_' (do not delete it): recovery "
                                "then uses the checkpoint before and replays the WAL kept since it, "
                                "so no acknowledged row is lost")
        node.wm, node.max_ts = meta["wm"], meta["max_ts"]
        node.rows_out, node.accepted = meta["rows_out"], meta["accepted"]
        # counters metrics() reports (checkpoints written before they were kept: from zero)
        node.rows_in, node.bytes_in = meta.get("rows_in", 0), meta.get("bytes_in", 0)
        node.rejected = meta.get("rejected", 0)
        if meta.get("op_deltas"):  # a whole snapshot and the deltas after it (``state_chains``)
            node.op.restore_chain([coord.store.read_file(manifest, f) for f in (meta["op"], *meta["op_deltas"])])
        elif "op" in meta:
            node.op.restore(coord.store.read_file(manifest, meta["op"]))
        if "view" in meta:
            node.view.restore(coord.store.read_file(manifest, meta["view"]))
