"""The checkpoint store of one database directory: snapshot files and manifests.

Entry point: ``CheckpointStore(directory)``. A checkpoint of epoch e is the directory
``checkpoints/ckpt-<e>/`` holding one snapshot file per stateful object and, written last
and atomically (temp file, fsync, rename, fsync dir), its ``MANIFEST`` — the commit point.
A directory without a valid manifest is a partial checkpoint: ignored, then removed.

The manifest is JSON (readable with any tool) with a CRC32C over its canonical body, and
names every snapshot file with its size and CRC, so a corrupt or missing file disqualifies
the checkpoint and recovery falls back to the one before; a corrupt one is then renamed
``_skipped-ckpt-<e>`` (``set_aside``), and its epoch number is never given out again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from laminardb.checkpoint._files import atomic_write, fsync_dir, write_error
from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.checkpoint.state_chains import STATE_DIR, STATE_PREFIX

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "laminardb.manifest"
MANIFEST_VERSION = 1
_PREFIX = "ckpt-"
_SKIPPED = "_skipped-"  # a checkpoint recovery could not use, kept for inspection
_EPOCH_NAME = re.compile(r"^_*(?:skipped-)?ckpt-(\d+)")
_PENDING = "MANIFEST.pending"  # prepared for the Delta coordinator, not yet recorded in Raft


@dataclass
class Manifest:
    """What one committed checkpoint holds; the unit recovery restores."""

    epoch: int
    wal_lsn: int  # replay the WAL from here
    catalog: list[str]  # DDL of the live objects, in creation order
    finished: bool = False
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # per object: scalars, state file
    sinks: dict[str, Any] = field(default_factory=dict)  # per sink: what pre_commit returned
    counters: dict[str, int] = field(default_factory=dict)
    created: float = 0.0
    files: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> {bytes, crc}
    path: Path | None = None

    def body(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "epoch": self.epoch,
                "wal_lsn": self.wal_lsn, "catalog": self.catalog, "finished": self.finished,
                "nodes": self.nodes, "sinks": self.sinks, "counters": self.counters,
                "created": self.created, "files": self.files}


def write_snapshot(path: str | os.PathLike[str], data: bytes) -> dict[str, int]:
    """Write one snapshot file durably; returns what its manifest entry holds (size and CRC).
    The head writes its own; in the Delta mode each reactor actor writes its part of a query's
    state with it too (``ClusterImage.write_parts``)."""
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise write_error("snapshot file", path, exc) from exc
    return {"bytes": len(data), "crc": crc32c(data)}


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


class CheckpointStore:
    """Snapshot files and manifests under ``<directory>/checkpoints``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = Path(directory) / "checkpoints"
        self.root.mkdir(parents=True, exist_ok=True)
        #: files several checkpoints share (``state_chains``: whole snapshots and deltas),
        #: made when the first one is written
        self.state_dir = self.root / STATE_DIR
        #: epochs ``latest()`` skipped although they have a manifest (corrupt, not partial)
        self.corrupt: list[int] = []

    def dir_of(self, epoch: int) -> Path:
        return self.root / f"{_PREFIX}{epoch:012d}"

    def epochs_on_disk(self) -> list[int]:
        out = []
        for p in self.root.iterdir():
            if p.name.startswith(_PREFIX) and p.name[len(_PREFIX):].isdigit():
                out.append(int(p.name[len(_PREFIX):]))
        return sorted(out)

    # ------------------------------------------------------------------ write
    def begin(self, epoch: int) -> Path:
        d = self.dir_of(epoch)
        if d.exists():  # a partial attempt of the same epoch number (before a restart)
            shutil.rmtree(d, ignore_errors=True)
        try:
            d.mkdir(parents=True)
        except OSError as exc:
            raise write_error("checkpoint directory", d, exc) from exc
        return d

    def write_file(self, epoch: int, name: str, data: bytes) -> dict[str, int]:
        if name.startswith(STATE_PREFIX):
            self.state_dir.mkdir(exist_ok=True)
        return write_snapshot(self.dir_of(epoch) / name, data)

    def commit(self, manifest: Manifest, *, pending: bool = False) -> Path:
        """Write the manifest: from here on the checkpoint is the one recovery uses — or,
        ``pending``, once ``publish`` renames it (the Delta coordinator records it in Raft
        between the two: its commit point)."""
        d = self.dir_of(manifest.epoch)
        fsync_dir(d)
        manifest.created = manifest.created or time.time()
        body = manifest.body()
        doc = dict(body, checksum=crc32c(_canonical(body)))
        name = _PENDING if pending else "MANIFEST"
        atomic_write(d / name, json.dumps(doc, indent=1, sort_keys=True).encode(), what="manifest")
        manifest.path = d
        return d

    def publish(self, epoch: int) -> bool:
        """Make a pending manifest the one recovery uses (idempotent). False: nothing to
        publish (never prepared, or aborted)."""
        d = self.dir_of(epoch)
        if (d / "MANIFEST").exists():
            return True
        if not (d / _PENDING).exists():
            return False
        os.replace(d / _PENDING, d / "MANIFEST")
        fsync_dir(d)
        return True

    def discard(self, epoch: int) -> None:
        """Drop a pending checkpoint (its epoch was aborted); a published one stays."""
        d = self.dir_of(epoch)
        if d.exists() and not (d / "MANIFEST").exists():
            self._drop(epoch)

    def pending(self) -> list[int]:
        return [e for e in self.epochs_on_disk()
                if (self.dir_of(e) / _PENDING).exists() and not (self.dir_of(e) / "MANIFEST").exists()]

    # ------------------------------------------------------------------ read
    def load(self, epoch: int) -> Manifest:
        """The manifest of ``epoch``, verified with every file it names; raises if unusable."""
        d = self.dir_of(epoch)
        try:
            doc = json.loads((d / "MANIFEST").read_bytes())
        except FileNotFoundError as exc:
            raise ValueError("no MANIFEST (a partial checkpoint)") from exc
        except (OSError, ValueError) as exc:
            raise ValueError(f"unreadable MANIFEST: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
            raise ValueError("not a laminardb manifest")
        if doc.get("version") != MANIFEST_VERSION:
            raise SnapshotFormatError(
                f"checkpoint {d} has manifest version {doc.get('version')!r}; this laminardb reads "
                f"version {MANIFEST_VERSION}: open the directory with the laminardb that wrote it")
        want = doc.pop("checksum", None)
        if want != crc32c(_canonical(doc)):
            raise ValueError("MANIFEST checksum mismatch (corrupt)")
        for name, meta in doc["files"].items():
            p = d / name
            try:
                data = p.read_bytes()
            except OSError as exc:
                raise ValueError(f"snapshot file {name} unreadable: {exc}") from exc
            if len(data) != meta["bytes"] or crc32c(data) != meta["crc"]:
                raise ValueError(f"snapshot file {name} is corrupt (size or CRC mismatch)")
        return Manifest(epoch=doc["epoch"], wal_lsn=doc["wal_lsn"], catalog=doc["catalog"],
                        finished=doc["finished"], nodes=doc["nodes"], sinks=doc["sinks"],
                        counters=doc["counters"], created=doc["created"], files=doc["files"], path=d)

    def read_file(self, manifest: Manifest, name: str) -> bytes:
        assert manifest.path is not None
        return (manifest.path / name).read_bytes()

    def latest(self) -> tuple[Manifest | None, list[str]]:
        """The newest usable checkpoint, and why newer ones were skipped (their epochs with a
        manifest — corrupt, not merely partial — are left in ``self.corrupt``)."""
        skipped: list[str] = []
        self.corrupt = []
        for epoch in reversed(self.epochs_on_disk()):
            try:
                return self.load(epoch), skipped
            except SnapshotFormatError:
                raise
            except (ValueError, KeyError, TypeError) as exc:
                skipped.append(f"checkpoint {epoch}: {exc}")
                if (self.dir_of(epoch) / "MANIFEST").exists():
                    self.corrupt.append(epoch)
                log.warning("skipping checkpoint %d: %s", epoch, exc)
        return None, skipped

    def set_aside(self, epoch: int) -> str | None:
        """Rename a checkpoint recovery skipped (corrupt or partial) to ``_skipped-ckpt-<e>``:
        it no longer counts for retention or recovery, and its epoch number stays known, so
        it is never given to a later checkpoint (whose sink output would take the abandoned
        epoch's names). Idempotent; returns the new name, or None if it was gone."""
        d = self.dir_of(epoch)
        if not d.exists():
            return None
        target = self.root / f"{_SKIPPED}{d.name}"
        n = 1
        while target.exists():
            target = self.root / f"{_SKIPPED}{d.name}.{n}"
            n += 1
        os.replace(d, target)
        fsync_dir(self.root)
        return target.name

    def highest_epoch(self) -> int:
        """The highest epoch number any checkpoint directory on disk used (0: none), skipped
        ones included: a new checkpoint takes a number above it."""
        best = 0
        for p in self.root.iterdir():
            m = _EPOCH_NAME.match(p.name)  # ckpt-<e>, _skipped-ckpt-<e>, a renamed _ckpt-<e>
            if m:
                best = max(best, int(m.group(1)))
        return best

    def complete(self) -> list[int]:
        """Epochs with a manifest, oldest first (not verified: for retention)."""
        return [e for e in self.epochs_on_disk() if (self.dir_of(e) / "MANIFEST").exists()]

    def prune(self, keep: int, newest: int) -> int | None:
        """Keep the newest ``keep`` complete checkpoints; drop older ones and partial ones
        older than ``newest``, then the state files no manifest names any more. Returns the
        oldest kept epoch (its WAL position bounds truncation), or None to keep the whole WAL.

        Checkpoints that share a whole snapshot (``state_chains``) all fail together if that
        one file is damaged. So the newest checkpoint that shares none with the newest one is
        kept too, with the WAL since it: one damaged file never loses an acknowledged row.
        While no such checkpoint exists yet, the WAL is kept whole."""
        complete = [e for e in self.complete() if e <= newest]
        kept = complete[-keep:] if keep > 0 else complete[-1:]
        oldest_needed = kept[0] if kept else None
        docs = {e: self._manifest_doc(e) for e in self.epochs_on_disk()}  # each read once
        if kept:
            shared = _whole_snapshots(docs[kept[-1]])
            if shared:
                fallback = next((e for e in reversed(complete[:-1]) if not _whole_snapshots(docs[e]) & shared), None)
                if fallback is None:
                    oldest_needed = None
                elif fallback not in kept:
                    kept = [fallback, *kept]
                    oldest_needed = fallback
                else:
                    oldest_needed = kept[0]
        for e in list(docs):
            if e in kept or e > newest:
                continue
            self._drop(e)
            del docs[e]
        self._prune_state(docs.values())
        return oldest_needed

    def _drop(self, epoch: int) -> None:
        """Delete checkpoint ``epoch``, its manifests first: a process killed halfway through
        the rest leaves a partial checkpoint (skipped, and dropped by the next prune), never
        a manifest — published or pending — that names files already gone."""
        d = self.dir_of(epoch)
        try:
            for name in ("MANIFEST", _PENDING):
                (d / name).unlink(missing_ok=True)
            fsync_dir(d)
        except OSError:  # gone meanwhile, or unwritable: rmtree does what it can
            pass
        shutil.rmtree(d, ignore_errors=True)

    def _manifest_doc(self, epoch: int) -> dict[str, Any]:
        """Checkpoint ``epoch``'s manifest, published or pending, unverified ({}: none)."""
        d = self.dir_of(epoch)
        for name in ("MANIFEST", _PENDING):
            try:
                return json.loads((d / name).read_bytes())
            except (OSError, ValueError):
                continue
        return {}

    def _prune_state(self, docs) -> None:
        """Delete the files of ``state/`` that none of the manifests ``docs`` names."""
        named: set[str] = set()
        for doc in docs:
            named.update(f[len(STATE_PREFIX):] for f in doc.get("files") or {} if f.startswith(STATE_PREFIX))
        if not self.state_dir.exists():
            return
        for p in self.state_dir.iterdir():
            if p.name not in named:
                p.unlink(missing_ok=True)

    def wal_lsn_of(self, epoch: int) -> int | None:
        try:
            doc = json.loads((self.dir_of(epoch) / "MANIFEST").read_bytes())
            return int(doc["wal_lsn"])
        except (OSError, ValueError, KeyError):
            return None

    def disk_bytes(self) -> int:
        """Bytes of every checkpoint on disk now. A checkpoint pruned while this walks the
        directory is skipped (metrics() must never fail on a concurrent prune)."""
        total = 0
        for top, _, files in os.walk(self.root):  # os.walk ignores directories gone meanwhile
            for name in files:
                try:
                    total += os.stat(os.path.join(top, name)).st_size
                except FileNotFoundError:
                    pass
        return total


def _whole_snapshots(doc: dict[str, Any]) -> set[str]:
    """The shared whole snapshots (``state/…snap``) a checkpoint's manifest is built on."""
    return {f for f in doc.get("files") or {} if f.startswith(STATE_PREFIX) and f.endswith(".snap")}
