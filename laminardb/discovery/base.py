"""The discovery contract every membership backend implements.

Entry points: :class:`Discovery` (abstract: ``start``, ``stop``, ``members``, ``subscribe``),
:class:`Member`, :class:`MemberEvent` and :class:`EventKind`.

Discovery only reports who is alive; it never decides ownership. A subscriber (e.g.
``laminardb.raft.rebalance``) reacts to JOIN / LEAVE by committing a new plan through Raft.

Backends keep a dict ``id -> Member`` and call :meth:`Discovery._update` with each new view (or
``_emit`` for single events); the base class turns view changes into events and fans them out
to subscribers, outside its lock.
"""

from __future__ import annotations

import enum
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["Discovery", "EventKind", "Member", "MemberEvent", "Subscriber"]

_log = logging.getLogger(__name__)


class EventKind(enum.StrEnum):
    """What happened to a member."""

    JOIN = "join"        # became a member (first seen alive, or back after LEAVE)
    LEAVE = "leave"      # left gracefully or was declared dead
    SUSPECT = "suspect"  # failed probes; still a member until declared dead
    ALIVE = "alive"      # a suspect refuted the suspicion (gossip only)


@dataclass(frozen=True)
class Member:
    """One member of the cluster.

    Attributes:
        id: stable member id (the node id registered in Raft).
        address: where the backend reaches it (gossip address, Ray node IP, ...).
        metadata: free-form, e.g. ``{"rpc": "host:port", "cores": 2}``.
    """

    id: str
    address: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class MemberEvent:
    """A change in membership, delivered to subscribers."""

    kind: EventKind
    member: Member


Subscriber = Callable[[MemberEvent], None]


class Discovery(ABC):
    """A membership backend. Use as a context manager, or call ``start()`` / ``stop()``."""

    def __init__(self) -> None:
        self._members: dict[str, Member] = {}
        self._subscribers: list[Subscriber] = []
        self._mu = threading.Lock()

    @abstractmethod
    def start(self) -> None:
        """Join the cluster and begin reporting members."""

    @abstractmethod
    def stop(self) -> None:
        """Leave the cluster (gracefully where the backend can) and release resources."""

    def members(self) -> list[Member]:
        """Current live members, sorted by id."""
        with self._mu:
            return sorted(self._members.values(), key=lambda m: m.id)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` on every JOIN / LEAVE / SUSPECT / ALIVE from now on.

        Callbacks run on the backend's thread: keep them short, and never call ``stop()`` from
        one. Returns a function that unsubscribes.
        """
        with self._mu:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._mu:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def __enter__(self) -> Discovery:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- for backends --------------------------------------------------------------------

    def _update(self, view: Iterable[Member]) -> list[MemberEvent]:
        """Replace the member view; emit JOIN for new ids and LEAVE for vanished ones."""
        new = {m.id: m for m in view}
        with self._mu:
            old = self._members
            self._members = new
        events = [MemberEvent(EventKind.JOIN, m) for i, m in sorted(new.items()) if i not in old]
        events += [MemberEvent(EventKind.LEAVE, m) for i, m in sorted(old.items()) if i not in new]
        for ev in events:
            self._emit(ev)
        return events

    def _emit(self, event: MemberEvent) -> None:
        with self._mu:
            subs = list(self._subscribers)
        for cb in subs:
            try:
                cb(event)
            except Exception:  # a bad subscriber must not stop discovery
                _log.exception("discovery subscriber %r failed on %s", cb, event)
