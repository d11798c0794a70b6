"""The database head's side of its reactor actors' WALs (the Delta mode's direct inserts,
``cluster/direct_insert.py``): the rows a client inserts through an actor are logged in that
actor's own WAL, ``<database dir>/actor-wal/<member>``, and the head's WAL only references
them (``insert_ref`` records). ``ActorWals`` knows which actor records the head's WAL still
references, reads one back when recovery replays its reference (the actor may be dead: its
files are not), and deletes what no retained checkpoint needs any more.
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any

ACTOR_WAL_DIR = "actor-wal"


def actor_wal_dir(database_dir: str | os.PathLike[str], member: str) -> str:
    return os.path.join(database_dir, ACTOR_WAL_DIR, member)


class ActorWals:
    """The head's side of the actors' WALs: which records its own WAL still references
    (``note``), reading a record back for recovery (``batch``), and removing what no retained
    checkpoint needs (``truncate``)."""

    def __init__(self, database_dir: str | os.PathLike[str]) -> None:
        self.root = os.path.join(database_dir, ACTOR_WAL_DIR)
        #: member → (head lsns, actor lsns) of the references, in order
        self.refs: dict[str, tuple[list[int], list[int]]] = {}
        #: member → the lowest actor lsn a reference may still name (``truncate`` freed the rest)
        self.floor: dict[str, int] = {}
        self.live: Callable[[], frozenset[str]] = frozenset  # the engine's pool's members (the head sets it)
        self._open: dict[str, dict[int, Any]] = {}  # member → its records, while recovery reads
        self._lock = threading.Lock()  # a reference is checked and logged in one step against truncate

    def reference(self, member: str, actor_lsn: int, append: Callable[[], int]) -> int:
        """Log a reference to ``member``'s record ``actor_lsn`` (``append()`` writes it to the
        head's WAL and returns its lsn), unless ``truncate`` may have freed that record: then
        ``StaleInsertRefError`` (the client sends the rows again)."""
        from laminardb.checkpoint.exceptions import StaleInsertRefError

        with self._lock:
            if actor_lsn < self.floor.get(member, 0):
                raise StaleInsertRefError(f"record {actor_lsn} of reactor actor {member}'s WAL was freed by a "
                                          "checkpoint before this insert referenced it; send it again")
            head_lsn = append()
            self.note(head_lsn, member, actor_lsn)
            return head_lsn

    def note(self, head_lsn: int, member: str, actor_lsn: int) -> None:
        heads, actors = self.refs.setdefault(member, ([], []))
        heads.append(head_lsn)
        actors.append(actor_lsn)

    def batch(self, member: str, lsn: int, rows: int):
        """The rows of the actor's record ``lsn`` (recovery replays a reference)."""
        from laminardb.checkpoint.exceptions import RecoveryError
        from laminardb.checkpoint.wal import Wal

        records = self._open.get(member)
        if records is None:
            path = os.path.join(self.root, member)
            if not os.path.isdir(path):
                raise RecoveryError(f"the WAL of reactor actor {member} ({path}) is missing; it holds inserted "
                                    "rows the database acknowledged: restore that directory")
            records = self._open[member] = {r.lsn: r for r in Wal(path).replay(0)}
        rec = records.get(lsn)
        batch = rec.batch() if rec is not None else None
        if batch is None or batch.num_rows != rows:
            raise RecoveryError(f"the WAL of reactor actor {member} lacks record {lsn} ({rows} rows) that the "
                                "database's WAL references: the directory was changed by hand or damaged")
        return batch

    def replayed(self) -> None:
        self._open.clear()

    def truncate(self, head_lsn: int) -> None:
        """The head's WAL now starts at ``head_lsn``: actor records that only older references
        named go (whole segments, never the one an actor writes), and so do the WALs of actors
        no longer in the pool that nothing references."""
        from laminardb.checkpoint.wal import Wal

        live = self.live()
        with self._lock:
            for member in list(self.refs):
                heads, actors = self.refs[member]
                cut = bisect.bisect_left(heads, head_lsn)
                needed = actors[cut] if cut < len(actors) else actors[-1] + 1
                del heads[:cut], actors[:cut]
                path = os.path.join(self.root, member)
                if not heads and member not in live:
                    shutil.rmtree(path, ignore_errors=True)
                    del self.refs[member]
                elif os.path.isdir(path):
                    # a record staged but not referenced yet may sit below ``needed`` (another
                    # client's insert referenced first): the floor turns its reference away
                    self.floor[member] = max(self.floor.get(member, 0), needed)
                    Wal.truncate_dir(path, needed)
            if os.path.isdir(self.root):  # left by actors of an earlier engine nothing references
                for member in os.listdir(self.root):
                    if member not in self.refs and member not in live:
                        shutil.rmtree(os.path.join(self.root, member), ignore_errors=True)
