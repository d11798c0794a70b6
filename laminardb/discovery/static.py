"""``static`` discovery: a fixed member list (tests, small fixed clusters, ``embedded`` Delta).

Entry point: :class:`StaticDiscovery`. ``start()`` emits one JOIN per member; ``stop()`` emits
nothing (a static list does not know who died).
"""

from __future__ import annotations

from collections.abc import Iterable

from laminardb.discovery.base import Discovery, Member
from laminardb.discovery.exceptions import DiscoveryConfigError

__all__ = ["StaticDiscovery"]


class StaticDiscovery(Discovery):
    """Members given up front.

    Args:
        members: ``Member`` objects, or ids / ``"id=address"`` strings.
    """

    def __init__(self, members: Iterable[Member | str]) -> None:
        super().__init__()
        parsed: list[Member] = []
        for m in members:
            if isinstance(m, str):
                mid, _, addr = m.partition("=")
                m = Member(mid.strip(), addr.strip())
            parsed.append(m)
        ids = [m.id for m in parsed]
        if not all(ids) or len(set(ids)) != len(ids):
            msg = f"static discovery needs unique non-empty member ids, got {ids}"
            raise DiscoveryConfigError(msg)
        self._static = parsed

    def start(self) -> None:
        """Publish the list (one JOIN per member)."""
        self._update(self._static)

    def stop(self) -> None:
        """Nothing to release."""
