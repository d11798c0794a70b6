"""Vnode assignment planning: sticky rendezvous hashing with balanced quotas.

Entry point: :func:`plan_assignment`, a pure function (no I/O, deterministic) used both by the
state machine when it applies a ``commit_plan`` command — every voter computes the same plan
from the same replicated state — and by ``laminardb cluster plan`` to preview a rebalance.

Algorithm:

1. Each live member gets a quota: ``V // N`` vnodes, and ``V % N`` members get one more. The
   extra slots go to the members that already hold the most vnodes (ties by member id), so
   nothing moves just to shuffle the remainder around.
2. A vnode stays with its current owner if that owner is live and under quota. An owner over
   quota keeps the vnodes it ranks highest by rendezvous score and gives up the rest.
3. Every vnode left without an owner goes to the member with the highest rendezvous score
   among those with quota left.

A leaving member therefore only moves its own vnodes, and a joining member takes about
``V / (N + 1)`` vnodes — the minimum for a balanced result — while pure rendezvous hashing
decides *which* ones, so plans stay stable across repeated runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_VNODES", "Move", "Plan", "plan_assignment", "rendezvous_score", "vnode_ranges"]

DEFAULT_VNODES = 256


def rendezvous_score(member: str, vnode: int) -> int:
    """Stable 64-bit rendezvous (highest-random-weight) score of ``member`` for ``vnode``.

    Args:
        member: member (node) id.
        vnode: vnode id.

    Returns:
        An unsigned 64-bit integer, identical in every process and Python version.
    """
    digest = hashlib.blake2b(f"{member}\x00{vnode}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Move:
    """One vnode changing owner. ``src`` is ``None`` for an unowned vnode."""

    vnode: int
    src: str | None
    dst: str | None


@dataclass(frozen=True)
class Plan:
    """A complete target assignment and the moves that reach it from the current one."""

    assignment: dict[int, str | None]
    moves: tuple[Move, ...] = field(default_factory=tuple)

    def load(self) -> dict[str, int]:
        """Number of vnodes per member in the target assignment."""
        out: dict[str, int] = {}
        for owner in self.assignment.values():
            if owner is not None:
                out[owner] = out.get(owner, 0) + 1
        return out


def _quotas(vnodes: int, members: list[str], held: Mapping[str, int]) -> dict[str, int]:
    base, extra = divmod(vnodes, len(members))
    # Extra slots go to the members holding the most already: fewer moves.
    by_holding = sorted(members, key=lambda m: (-held.get(m, 0), m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}


def plan_assignment(
    vnodes: int,
    *,
    members: Iterable[str],
    current: Mapping[int, str | None] | None = None,
) -> Plan:
    """Compute a balanced assignment of ``vnodes`` to ``members`` that moves as little as possible.

    Args:
        vnodes: number of vnodes (ids ``0 .. vnodes-1``).
        members: ids of the live members that may own vnodes.
        current: current owner per vnode (missing or ``None`` = unowned); owners that are not
            in ``members`` are treated as gone.

    Returns:
        The target :class:`Plan`. With no members every vnode becomes unowned.

    Raises:
        ValueError: if ``vnodes`` is not positive.
    """
    if vnodes <= 0:
        msg = f"vnodes must be a positive count, got {vnodes}; use DEFAULT_VNODES ({DEFAULT_VNODES})"
        raise ValueError(msg)
    live = sorted(set(members))
    cur = dict(current or {})
    if not live:
        assignment: dict[int, str | None] = dict.fromkeys(range(vnodes))
        return Plan(assignment, _diff(cur, assignment, vnodes))

    live_set = set(live)
    held: dict[str, list[int]] = {m: [] for m in live}
    for v in range(vnodes):
        owner = cur.get(v)
        if owner in live_set:
            held[owner].append(v)
    quota = _quotas(vnodes, live, {m: len(vs) for m, vs in held.items()})

    assignment = {}
    for m, vs in held.items():
        # Keep the vnodes this member ranks highest; the rest are released.
        keep = sorted(vs, key=lambda v, m=m: rendezvous_score(m, v), reverse=True)[: quota[m]]
        for v in keep:
            assignment[v] = m
    left = {m: quota[m] - sum(1 for o in assignment.values() if o == m) for m in live}
    for v in range(vnodes):
        if v in assignment:
            continue
        candidates = [m for m in live if left[m] > 0]
        best = max(candidates, key=lambda m, v=v: (rendezvous_score(m, v), m))
        assignment[v] = best
        left[best] -= 1
    return Plan(dict(sorted(assignment.items())), _diff(cur, assignment, vnodes))


def _diff(
    current: Mapping[int, str | None], target: Mapping[int, str | None], vnodes: int
) -> tuple[Move, ...]:
    return tuple(
        Move(v, current.get(v), target.get(v))
        for v in range(vnodes)
        if current.get(v) != target.get(v)
    )


def vnode_ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``, cut at 60 characters (for status and plan output)."""
    out: list[str] = []
    start = prev = None
    for v in [*ids, None]:
        if v is not None and prev is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    text = ",".join(out)
    return text if len(text) <= 60 else text[:57] + "..."
