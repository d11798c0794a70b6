"""Fencing tokens and the check every side effect runs before it touches the outside world.

A :class:`FencingToken` ``(vnode, epoch)`` is what an owner holds after Raft committed its
ownership. Every change of owner raises the vnode's epoch (never lowers it), so an old owner's
token is strictly older than the committed epoch and :class:`Fence` refuses it.

:class:`Fence` is the guard a resource (sink, snapshot store, Kafka producer, offset committer)
puts in front of a write. Its check has two layers:

* a local one, free: it remembers the highest epoch it has accepted per vnode and refuses
  anything older — a zombie can never write *after* its successor wrote through this fence;
* a committed one: ask the voters (``RaftClient.check_fence``). With ``barrier=True`` the
  check is itself a command in the Raft log, so its answer reflects every entry committed
  before it — a deposed leader's stale state cannot approve it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from laminardb.raft.exceptions import StaleEpochError

__all__ = ["FencingToken", "Fence", "FenceChecker"]


@dataclass(frozen=True, order=True)
class FencingToken:
    """Proof of ownership of one vnode at one epoch.

    Attributes:
        vnode: vnode id (``0 .. V-1``) within ``source``.
        epoch: the vnode's epoch when ownership was committed; larger is newer.
        source: the source the vnode belongs to.
        owner: node id of the holder (informational; the epoch alone identifies the owner,
            because one epoch has exactly one owner).
    """

    vnode: int
    epoch: int
    source: str = "default"
    owner: str = ""

    def to_wire(self) -> dict[str, Any]:
        """Plain-dict form for msgpack."""
        return {"vnode": self.vnode, "epoch": self.epoch, "source": self.source, "owner": self.owner}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FencingToken:
        """Inverse of :meth:`to_wire`."""
        return cls(
            vnode=int(data["vnode"]),
            epoch=int(data["epoch"]),
            source=str(data.get("source", "default")),
            owner=str(data.get("owner", "")),
        )


class FenceChecker(Protocol):
    """What :class:`Fence` needs from the voters: ``RaftClient`` satisfies it."""

    def check_fence(self, token: FencingToken, *, barrier: bool = True) -> int: ...


class Fence:
    """Refuses writes carrying a token older than the newest epoch known for its vnode.

    Args:
        checker: usually a ``RaftClient``; ``None`` gives a purely local fence (only the
            highest-epoch-seen rule, no round trip).

    Thread-safe; one instance per guarded resource.
    """

    def __init__(self, checker: FenceChecker | None = None) -> None:
        self._checker = checker
        self._highest: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def highest(self, source: str, vnode: int) -> int:
        """Highest epoch this fence has accepted or observed for ``(source, vnode)`` (0 if none)."""
        with self._lock:
            return self._highest.get((source, vnode), 0)

    def observe(self, token: FencingToken) -> None:
        """Record that ``token``'s epoch exists, e.g. from an ownership snapshot."""
        key = (token.source, token.vnode)
        with self._lock:
            # Epoch monotonicity: the remembered value only ever grows.
            if token.epoch > self._highest.get(key, 0):
                self._highest[key] = token.epoch

    def check(self, token: FencingToken, *, barrier: bool = False) -> None:
        """Allow a side effect for ``token`` or raise.

        Args:
            token: the writer's token.
            barrier: when a checker is set, make the committed check go through the Raft
                log (use it for commits: sink commit, offset commit, manifest write).

        Raises:
            StaleEpochError: the token is older than an epoch this fence saw, or than the
                committed epoch.
        """
        key = (token.source, token.vnode)
        with self._lock:
            seen = self._highest.get(key, 0)
        if token.epoch < seen:
            msg = (
                f"token for {token.source}/{token.vnode} at epoch {token.epoch} is older than "
                f"epoch {seen} already written here; this writer lost the vnode: stop writing "
                "and re-acquire ownership"
            )
            raise StaleEpochError(msg)
        if self._checker is not None:
            self._checker.check_fence(token, barrier=barrier)
        self.observe(token)
