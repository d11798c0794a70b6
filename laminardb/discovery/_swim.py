"""SWIM membership rules: member records, incarnation precedence, dissemination queue.

Pure logic (no sockets, no threads, no clock reads) used by ``gossip.py``; unit-testable.

Precedence (SWIM paper §4.2, as in memberlist/Lifeguard), for a record with incarnation *i*:

* ``alive i``   overrides any state with incarnation < *i*;
* ``suspect i`` overrides ``alive j`` for *i* ≥ *j*, and ``suspect j`` for *i* > *j*;
* ``dead i`` / ``left i`` override ``alive``/``suspect`` with incarnation ≤ *i*.

Only the member itself raises its incarnation (to refute a suspicion, or to rejoin after being
declared dead). A fresh process starts at its start time in ms, so it outranks the tombstone
of its previous life.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALIVE", "SUSPECT", "DEAD", "LEFT", "Record", "merge", "Disseminator"]

ALIVE, SUSPECT, DEAD, LEFT = "alive", "suspect", "dead", "left"
_STATES = frozenset({ALIVE, SUSPECT, DEAD, LEFT})


@dataclass
class Record:
    """What one member knows about another (or itself)."""

    id: str
    addr: str
    inc: int
    state: str = ALIVE
    meta: dict[str, Any] = field(default_factory=dict)
    since: float = 0.0  # local monotonic time of the last state change

    @property
    def live(self) -> bool:
        """Alive or suspect: still a member."""
        return self.state in (ALIVE, SUSPECT)

    def to_wire(self) -> dict[str, Any]:
        """msgpack form."""
        return {"id": self.id, "addr": self.addr, "inc": self.inc, "st": self.state,
                "meta": self.meta}

    @classmethod
    def from_wire(cls, data: dict[str, Any], now: float) -> Record:
        """Parse and validate a wire record; raises ``ValueError`` if malformed."""
        rec = cls(id=str(data["id"]), addr=str(data["addr"]), inc=int(data["inc"]),
                  state=str(data["st"]), meta=dict(data.get("meta") or {}), since=now)
        if rec.state not in _STATES or not rec.id:
            msg = f"bad gossip record {data!r}"
            raise ValueError(msg)
        return rec


def merge(cur: Record | None, new: Record) -> bool:
    """Whether ``new`` should replace ``cur`` under SWIM precedence."""
    if cur is None:
        return True
    if new.state == ALIVE:
        return new.inc > cur.inc
    if new.state == SUSPECT:
        if cur.state == ALIVE:
            return new.inc >= cur.inc
        return new.inc > cur.inc
    # DEAD / LEFT
    if cur.state in (DEAD, LEFT):
        return new.inc > cur.inc
    return new.inc >= cur.inc


class Disseminator:
    """Updates to piggyback, each sent ``mult * ceil(log2(n + 1))`` times (SWIM's λ log n)."""

    def __init__(self, mult: int) -> None:
        self._mult = mult
        self._queue: dict[str, tuple[dict[str, Any], int]] = {}

    def push(self, rec: Record, cluster_size: int) -> None:
        """Queue ``rec`` (replacing any older update about the same member)."""
        times = self._mult * max(1, math.ceil(math.log2(cluster_size + 1)))
        self._queue[rec.id] = (rec.to_wire(), times)

    def take(self, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` updates, least-sent first; each take counts as one transmission."""
        picked = sorted(self._queue.items(), key=lambda kv: -kv[1][1])[:limit]
        out = []
        for mid, (wire, left) in picked:
            out.append(wire)
            if left <= 1:
                del self._queue[mid]
            else:
                self._queue[mid] = (wire, left - 1)
        return out

    def __len__(self) -> int:
        return len(self._queue)
