"""``ShmRing``: batches from the client to actors on the same machine through shared memory.

Why: ``ray.put`` of a 64k-row batch writes it into freshly mapped object-store memory, and
on small VMs the page faults of that fresh memory cost more than the query itself (about
2.5 ms per 1.8 MB batch on the 2-vCPU CI machine, against 0.4 ms for the same Arrow IPC
written into memory that stays mapped). The ring is one file in ``/dev/shm``, allocated
once (``posix_fallocate``, so a full tmpfs is an error here, never a SIGBUS later), cut into
fixed slots. The client writes a batch's IPC stream into a free slot and passes the actors
a ``ShmSlice`` (path, offset, length); an actor maps the file read-only and reads the batch
without copying. A slot is reused only after every actor of its round has answered, and an
actor serializes all it returns before answering, so no reader ever sees a slot rewritten.
Batches larger than a slot, actors that cannot open the file (another machine, Ray Client),
or a system without ``/dev/shm`` take ``ray.put`` instead.

Leaks: a ring's file is named ``laminardb-<pid>-<start>-<random>`` after its owner (``start``:
the process's start time in clock ticks since boot, from ``/proc/<pid>/stat``, so a reused
pid is told apart). A client killed with SIGKILL cannot remove its file; the next
``ShmRing.open`` on the machine removes every ring whose owner process is gone
(:func:`reap_orphans`).
"""

from __future__ import annotations

import mmap
import os
import uuid
import weakref
from dataclasses import dataclass

import pyarrow as pa

_SHM_DIR = "/dev/shm"
_PREFIX = "laminardb-"


@dataclass(frozen=True)
class ShmSlice:
    """Where one batch's Arrow IPC stream lies in a ring file (what travels to the actor)."""

    path: str
    offset: int
    length: int


class ShmRing:
    """Client side: a fixed set of slots in one shared-memory file."""

    def __init__(self, *, slots: int, slot_bytes: int = 4 << 20) -> None:
        self.slot_bytes = slot_bytes
        pid = os.getpid()
        self.path = os.path.join(_SHM_DIR, f"{_PREFIX}{pid}-{_start_time(pid) or 0}-{uuid.uuid4().hex[:8]}")
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.posix_fallocate(fd, 0, slots * slot_bytes)
            self._map = mmap.mmap(fd, slots * slot_bytes)
        except OSError:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        self._view = memoryview(self._map)
        self._unlink = weakref.finalize(self, _unlink, self.path)  # also if close() is never called
        self.readers: list[bool] = []  # per actor: can it map this file (same machine)?
        self.slots = slots
        self._free = list(range(slots))[::-1]
        self.writes = 0  # batches shipped through the ring (metrics, tests)

    @classmethod
    def open(cls, *, slots: int) -> ShmRing | None:
        """A ring, or None where shared memory is unavailable or full (then ``ray.put``)."""
        if not os.path.isdir(_SHM_DIR) or not hasattr(os, "posix_fallocate"):
            return None
        reap_orphans()
        try:
            return cls(slots=slots)
        except OSError:
            return None

    def write(self, batch: pa.RecordBatch) -> tuple[ShmSlice, int] | None:
        """Write ``batch`` into a free slot: (its slice, the slot to release), or None when
        no slot is free or the batch does not fit one."""
        if not self._free:
            return None
        slot = self._free.pop()
        offset = slot * self.slot_bytes
        sink = pa.FixedSizeBufferWriter(pa.py_buffer(self._view[offset:offset + self.slot_bytes]))
        try:
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError):  # larger than a slot
            self._free.append(slot)
            return None
        self.writes += 1
        return ShmSlice(self.path, offset, sink.tell()), slot

    def release(self, slot: int) -> None:
        self._free.append(slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def close(self) -> None:
        self._view.release()
        self._map.close()
        self._unlink()


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it does not exist
    (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # field 22; the command name (field 2) may hold spaces and parentheses: split after it
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def reap_orphans(directory: str = _SHM_DIR) -> list[str]:
    """Remove the ring files whose owner process is gone (killed before it could unlink
    them); returns their paths. A file whose name carries no start time (an older build)
    goes only when its pid is gone. Without ``/proc`` nothing is removed."""
    if not os.path.isdir("/proc/self"):
        return []
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        parts = name[len(_PREFIX):].split("-")
        if not parts[0].isdigit():
            continue
        pid = int(parts[0])
        start = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        alive = _start_time(pid)
        if alive is not None and (start is None or start in (0, alive)):
            continue  # the owner (or, for an old name, some process with its pid) is alive
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:  # another client reaped it first, or not ours to remove
            pass
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ShmReader:
    """Actor side: ring files mapped read-only, once each."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[mmap.mmap, memoryview]] = {}

    def can_read(self, path: str) -> bool:
        """Whether this process sees the client's ring file (same machine, same /dev/shm)."""
        return os.access(path, os.R_OK)

    def read(self, where: ShmSlice, *, copy: bool = False) -> pa.RecordBatch:
        """The batch in ``where``, zero-copy — or ``copy``-ed out of the ring, for a reader
        that keeps the rows (a join's state) past the call: the slot is reused after it."""
        from laminardb.cluster.wire import from_ipc

        mapped = self._maps.get(where.path)
        if mapped is None:
            with open(where.path, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            mapped = self._maps[where.path] = (m, memoryview(m))
        view = mapped[1][where.offset:where.offset + where.length]
        return from_ipc(pa.py_buffer(view.tobytes() if copy else view))

    def close(self) -> None:
        for m, view in self._maps.values():
            view.release()
            try:
                m.close()
            except BufferError:  # a batch still points into it; the mapping goes with the process
                pass
        self._maps.clear()
