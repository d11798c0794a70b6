"""The write-ahead log: every accepted insert, DDL statement and finish(), in order.

Entry point: ``Wal(directory, sync=...)``. ``insert()`` appends its (already validated) batch
here before it is processed and before it returns, so a crash never loses an accepted row:
recovery restores the latest checkpoint and replays the records after its position.

Layout: segment files ``<first lsn:020d>.wal`` in one directory. A record is::

    magic u32 | header length u32 | body length u32 | lsn u64 | crc32c u32 | header | body

with a msgpack header (``{"k": kind, ...}``) and an Arrow IPC stream as the body of inserts.
The CRC covers lsn, header and body. A damaged record with no valid record after it, at the
end of the last segment, is a torn tail (a crash mid-write): it is cut off on open. Other
damage — a bad record with valid ones after it, a damaged earlier segment, a gap between
segments, a missing segment — is found when the WAL is opened and judged by ``settle()``
once recovery knows which checkpoint it restores: damage only in records before that
checkpoint's position is set aside (the segment renamed ``*.wal.damaged``) and reported;
damage in records recovery needs is ``WalCorruptError`` and nothing is changed, because
those records hold acknowledged rows that exist nowhere else.

Durability: by default a record is handed to the OS (``os.write``) before ``insert()``
returns, which survives a crash of the process. ``sync="always"`` also fsyncs, with group
commit: threads whose records were written while one fsync ran share the next one.
Checkpoints ``rotate()`` to a new segment, so ``truncate_before(lsn)`` can delete whole
segments that only hold records the retained checkpoints already cover. Once the new segment
exists, the old one gets a 16-byte seal naming it, so a deleted newest segment is found too.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgpack
import pyarrow as pa
import pyarrow.ipc as ipc
from crc32c import crc32c

from laminardb.checkpoint._files import fsync_dir, write_error
from laminardb.checkpoint.exceptions import WalCorruptError

log = logging.getLogger(__name__)

SyncMode = Literal["none", "always"]

_MAGIC = 0x4C57414C  # "LWAL"
_HEAD = struct.Struct("<IIIQI")
# the seal that ends a rotated segment: magic, the next segment's first lsn, crc of that lsn
_SEAL_MAGIC = 0x53574C4C
_SEAL = struct.Struct("<IQI")
_LSN = struct.Struct("<Q")
_SEGMENT_BYTES = 64 << 20  # roll to a new segment past this: bounds the work of one truncation
_SUFFIX = ".wal"


@dataclass
class _Segment:
    """What opening found in one segment file."""

    first: int
    path: Path
    good_end: int  # bytes of valid records from the start
    next_lsn: int  # the lsn after its last valid record
    size: int
    damage: str | None  # None: whole (a torn tail of the last segment is not damage)


@dataclass
class WalRecord:
    lsn: int
    kind: str  # "insert" | "ddl" | "finish"
    header: dict[str, Any]
    body: memoryview | bytes

    def batch(self) -> pa.RecordBatch:
        """The inserted batch of an ``insert`` record."""
        reader = ipc.open_stream(pa.py_buffer(self.body))
        batches = list(reader)
        if len(batches) == 1:
            return batches[0]
        return pa.Table.from_batches(batches, schema=reader.schema).combine_chunks().to_batches()[0]


def encode_batch(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


class Wal:
    """Append-only log of one database directory; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str], *, sync: SyncMode = "none",
                 segment_bytes: int = _SEGMENT_BYTES) -> None:
        if sync not in ("none", "always"):
            raise ValueError(f"wal_sync must be 'none' (default: survives a process crash) or "
                             f"'always' (fsync per batch: survives a power loss), not {sync!r}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sync_mode = sync
        self.segment_bytes = segment_bytes
        self.next_lsn = 0
        self.bytes_written = 0
        self.syncs = 0
        self._fd = -1
        self._seg_bytes = 0
        self._cv = threading.Condition()
        self._synced = -1  # every record with lsn <= this is on stable storage
        self._syncing = False
        self.torn_bytes = 0
        #: segments set aside by ``settle()`` (damage in records no checkpoint needs)
        self.set_aside: list[str] = []
        self._settled = False
        self._scan = self._scan_all()

    # ------------------------------------------------------------------ open / scan
    def segments(self) -> list[tuple[int, Path]]:
        return _segments(self.dir)

    @property
    def first_lsn(self) -> int:
        """The oldest lsn still in the log (``next_lsn`` when it is empty)."""
        segs = self.segments()
        return segs[0][0] if segs else self.next_lsn

    def _scan_all(self) -> list[_Segment]:
        """Read every segment once: where its good records end and what follows them."""
        scan = []
        segs = self.segments()
        for i, (first, path) in enumerate(segs):
            last = i == len(segs) - 1
            good_end, next_lsn, bad, valid_after, sealed = _scan_segment(path, first)
            size = path.stat().st_size
            if sealed is not None:
                good_end = size  # the seal is part of the segment, not a tail to cut
            damage = None
            if bad and not last and not valid_after and size - good_end < _HEAD.size:
                bad = False  # a seal torn by a crash while rotating: nothing lost
            if bad and (not last or valid_after):
                damage = f"damaged at byte {good_end} of {size}"
            elif last and sealed is not None:
                damage = (f"was followed by {sealed:020d}{_SUFFIX} (its seal says so), which is "
                          "missing")
            elif not last and next_lsn != segs[i + 1][0]:
                damage = (f"ends at record {next_lsn} but the next segment starts at {segs[i + 1][0]} "
                          "(truncated, or a segment is missing)")
            scan.append(_Segment(first, path, good_end, next_lsn, size, damage))
        if scan:
            tail = scan[-1]
            self.next_lsn = tail.next_lsn
            if tail.damage is None:
                self.torn_bytes = tail.size - tail.good_end
        return scan

    def settle(self, needed_from: int = 0, *, after_checkpoint: int = 0) -> list[str]:
        """Judge the damage found on open against what recovery needs — every record with
        lsn >= ``needed_from`` (the replay position of the checkpoint it restores) — then open
        the log for appends. Returns the segments set aside.

        Raises:
            WalCorruptError: a record recovery needs is damaged or missing. Nothing was
                changed; the message names the file to put back.
        """
        if self._settled:
            return self.set_aside
        scan = self._scan
        needed: list[str] = []
        aside: list[_Segment] = []
        for i, seg in enumerate(scan):
            if seg.damage is None:
                continue
            upto = scan[i + 1].first if i + 1 < len(scan) else None  # its records are < upto
            if upto is not None and upto <= needed_from:
                aside.append(seg)
            else:
                needed.append(f"{seg.path.name} {seg.damage}")
        if needed_from > 0 and not any(seg.first == needed_from for seg in scan):
            # a checkpoint's position is always the first record of a segment of that name
            needed.append(f"{needed_from:020d}{_SUFFIX} is missing")
        if needed:
            what = f"checkpoint {after_checkpoint}" if after_checkpoint else "the start of the log"
            raise WalCorruptError(
                f"the write-ahead log in {self.dir} cannot be replayed: {'; '.join(needed)}. Recovery "
                f"needs every record from {needed_from} on (the writes acknowledged after {what}), "
                "so the database was not opened and nothing was changed. Put an undamaged copy of "
                "that file back into the wal directory (from a backup, or from where it was moved) "
                "and open the database again; do not delete WAL segments or checkpoints: they hold "
                "acknowledged rows that exist nowhere else")
        for seg in aside:
            target = seg.path.with_name(seg.path.name + ".damaged")
            os.replace(seg.path, target)
            self.set_aside.append(f"{seg.path.name}: {seg.damage}")
            log.warning("WAL segment %s is %s; recovery replays from record %d, after all of its "
                        "records, so it is not needed: set aside as %s",
                        seg.path, seg.damage, needed_from, target.name)
        if aside:
            fsync_dir(self.dir)
        live = [seg for seg in scan if seg not in aside]
        if live:
            tail = live[-1]
            if tail.good_end < tail.size:
                with open(tail.path, "r+b") as f:
                    f.truncate(tail.good_end)
                    os.fsync(f.fileno())
            self.next_lsn = tail.next_lsn
        # Never number a record below the checkpoint's replay position: replay starts there,
        # so such a record would be acknowledged and then skipped (an empty wal directory
        # used to restart at lsn 0 — the cause of an offset that went backwards).
        if self.next_lsn < needed_from:
            self.next_lsn = needed_from
        if live and live[-1].next_lsn == self.next_lsn:
            self._fd = os.open(live[-1].path, os.O_WRONLY | os.O_APPEND)
            self._seg_bytes = live[-1].good_end
        else:
            self._new_segment(self.next_lsn)
        self._synced = self.next_lsn - 1
        self._settled = True
        return self.set_aside

    def _new_segment(self, first_lsn: int) -> None:
        path = self.dir / f"{first_lsn:020d}{_SUFFIX}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise write_error("WAL segment", path, exc) from exc
        fsync_dir(self.dir)
        self._fd = fd
        self._seg_bytes = 0

    # ------------------------------------------------------------------ append
    def append(self, kind: str, header: dict[str, Any] | None = None,
               body: bytes | pa.Buffer = b"") -> int:
        """Write one record (to the OS; see ``sync``); returns its lsn. Callers serialize."""
        hdr = dict(header or {})
        hdr["k"] = kind
        hbytes = msgpack.packb(hdr, use_bin_type=True)
        if not self._settled:
            self.settle(0)
        lsn = self.next_lsn
        body_view = memoryview(body)
        crc = crc32c(body_view, crc32c(hbytes, crc32c(_LSN.pack(lsn))))
        head = _HEAD.pack(_MAGIC, len(hbytes), len(body_view), lsn, crc)
        if self._seg_bytes >= self.segment_bytes:
            self.rotate()
        try:
            _write_all(self._fd, [head, hbytes, body_view])
        except OSError as exc:
            # the record may be half-written: cut it off so the log stays well-formed
            os.ftruncate(self._fd, self._seg_bytes)
            raise write_error("WAL record", self.dir, exc) from exc
        n = len(head) + len(hbytes) + len(body_view)
        self._seg_bytes += n
        self.bytes_written += n
        self.next_lsn = lsn + 1
        return lsn

    def append_insert(self, source: str, batch: pa.RecordBatch, client: tuple[str, int] | None = None) -> int:
        """``client``: the (client id, sequence number) of a cluster client's insert (``c``/``q``
        in the header), so a retried insert is recognised after a restart."""
        header: dict[str, Any] = {"s": source}
        if client is not None:
            header["c"], header["q"] = client
        return self.append("insert", header, encode_batch(batch))

    def sync(self, lsn: int) -> None:
        """Return once record ``lsn`` is on stable storage (group commit across threads)."""
        with self._cv:
            while self._synced < lsn:
                if self._syncing:
                    self._cv.wait(1.0)
                    continue
                self._syncing = True
                target, fd = self.next_lsn - 1, self._fd
                self._cv.release()
                try:
                    os.fsync(fd)
                finally:
                    self._cv.acquire()
                    self._syncing = False
                    self._cv.notify_all()
                self.syncs += 1
                self._synced = max(self._synced, target)

    def rotate(self) -> int:
        """Start a new segment (at a checkpoint); returns the lsn the new segment starts at."""
        if not self._settled:
            self.settle(0)
        if self._seg_bytes == 0:
            return self.next_lsn
        with self._cv:
            while self._syncing:
                self._cv.wait(1.0)
            if self.sync_mode == "always":  # every record is acknowledged only once on disk
                os.fsync(self._fd)
                self._synced = self.next_lsn - 1
            # (default mode: a checkpoint covers the records before its lsn with fsynced
            # snapshots, so the old segment needs no fsync of its own)
            old = self._fd
            self._new_segment(self.next_lsn)
            # then seal the old segment with its successor's name: a segment that says it has
            # a successor which is gone was damaged (the newest segment deleted would
            # otherwise look like a log that ended there). Written after the successor
            # exists, so a crash in between leaves no seal rather than a false one.
            lsn = _LSN.pack(self.next_lsn)
            try:
                _write_all(old, [_SEAL.pack(_SEAL_MAGIC, self.next_lsn, crc32c(lsn))])
            except OSError:
                pass  # a segment without its seal is only checked less
            os.close(old)
        return self.next_lsn

    def truncate_before(self, lsn: int) -> int:
        """Delete segments holding only records < ``lsn``; returns how many were deleted."""
        return Wal.truncate_dir(self.dir, lsn)

    @staticmethod
    def truncate_dir(directory: str | os.PathLike[str], lsn: int) -> int:
        """``truncate_before`` on a WAL another process appends to (a reactor actor's,
        ``direct_insert.ActorWals``): only whole segments with a successor go, never the one
        being written."""
        segs = _segments(Path(directory))
        gone = 0
        for (_first, path), (nxt, _) in zip(segs, segs[1:], strict=False):
            if nxt <= lsn:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for _, p in self.segments())

    # ------------------------------------------------------------------ read
    def replay(self, from_lsn: int = 0) -> Iterator[WalRecord]:
        """Records with lsn >= ``from_lsn``, in order."""
        segs = self.segments()
        for i, (_first, path) in enumerate(segs):
            if i + 1 < len(segs) and segs[i + 1][0] <= from_lsn:
                continue  # every record of this segment is before from_lsn
            with open(path, "rb") as f:
                data = f.read()
            view = memoryview(data)
            pos = 0
            while pos + _HEAD.size <= len(view):
                magic, hl, bl, lsn, _crc = _HEAD.unpack_from(view, pos)
                start = pos + _HEAD.size
                end = start + hl + bl
                if magic != _MAGIC or end > len(view):
                    break
                if lsn >= from_lsn:
                    header = msgpack.unpackb(view[start : start + hl], raw=False)
                    kind = header.pop("k")
                    yield WalRecord(lsn, kind, header, view[start + hl : end])
                pos = end

    def close(self) -> None:
        if self._fd >= 0:
            with self._cv:
                os.close(self._fd)
                self._fd = -1


def _segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of a WAL directory, as (first lsn, path), oldest first."""
    return sorted((int(p.stem), p) for p in directory.iterdir() if p.suffix == _SUFFIX and p.stem.isdigit())


def _write_all(fd: int, parts: list) -> None:
    for part in parts:
        mv = memoryview(part)
        while len(mv):
            k = os.write(fd, mv)
            mv = mv[k:]


def _record_ok(view: memoryview, pos: int) -> int:
    """The end of a valid record at ``pos``, or -1."""
    if pos + _HEAD.size > len(view):
        return -1
    magic, hl, bl, rec_lsn, crc = _HEAD.unpack_from(view, pos)
    start = pos + _HEAD.size
    end = start + hl + bl
    if magic != _MAGIC or end > len(view):
        return -1
    if crc32c(view[start + hl : end], crc32c(view[start : start + hl], crc32c(_LSN.pack(rec_lsn)))) != crc:
        return -1
    return end


def _seal_at(view: memoryview, pos: int) -> int | None:
    """The successor's lsn named by a valid seal at ``pos`` that ends the file, or None."""
    if len(view) - pos != _SEAL.size:
        return None
    magic, nxt, crc = _SEAL.unpack_from(view, pos)
    return nxt if magic == _SEAL_MAGIC and crc == crc32c(_LSN.pack(nxt)) else None


def _scan_segment(path: Path, first_lsn: int) -> tuple[int, int, bool, bool, int | None]:
    """(end of the last good record, the lsn after it, whether bad bytes follow, whether a
    valid record follows the bad bytes — then they are damage, not a torn tail — and the
    successor's lsn if the segment ends with a seal)."""
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    pos, lsn = 0, first_lsn
    while pos < len(view):
        sealed = _seal_at(view, pos)
        if sealed is not None:
            return pos, lsn, False, False, sealed
        end = _record_ok(view, pos)
        if end < 0 or _HEAD.unpack_from(view, pos)[3] != lsn:
            magic = _HEAD.pack(_MAGIC, 0, 0, 0, 0)[:4]
            at = data.find(magic, pos + 1)
            while at >= 0:
                if _record_ok(view, at) >= 0:
                    return pos, lsn, True, True, None
                at = data.find(magic, at + 1)
            return pos, lsn, True, False, None
        pos, lsn = end, lsn + 1
    return pos, lsn, False, False, None
