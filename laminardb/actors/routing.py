"""Which rows an actor owns: vnode = stable_hash(partition key) % V, vnode → actor.

Entry points: ``Routing`` (the ownership map the client computes or reads from Raft) and
``partition_mode(plan)``, which says how a query's input is split between actors:
``keyed`` by its GROUP BY key, ``range`` (contiguous row ranges, for stateless queries,
so concatenating the actors' outputs preserves row order), or ``single`` (one actor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from laminardb.operators._buffers import hash_rows
from laminardb.sql.planner import QueryPlan

DEFAULT_VNODES = 256


def partition_mode(plan: QueryPlan) -> str:
    if plan.aggregate is None:
        return "range"
    if not plan.aggregate.keys:
        from laminardb.actors.partial import partial_eligible

        # unkeyed: partial aggregates on every actor merged by the client when the
        # aggregates allow it (COUNT/SUM/AVG/MIN/MAX); else all rows to one owner
        return "partial" if partial_eligible(plan) else "single"
    return "keyed"


@dataclass
class Routing:
    """vnode → actor index for V vnodes."""

    owner: np.ndarray  # int64[V]

    @classmethod
    def from_members(cls, n_actors: int, vnodes: int = DEFAULT_VNODES) -> Routing:
        from laminardb.raft.plan import plan_assignment

        members = [f"actor-{i}" for i in range(n_actors)]
        plan = plan_assignment(vnodes, members=members)
        owner = np.array([int(plan.assignment[v].split("-")[1]) for v in range(vnodes)], dtype=np.int64)
        return cls(owner)

    @property
    def vnodes(self) -> int:
        return len(self.owner)

    def owned_mask(self, actor: int) -> np.ndarray:
        return self.owner == actor


def vnode_of(keys: list[pa.Array], vnodes: int) -> np.ndarray:
    return (hash_rows(keys) % np.uint64(vnodes)).astype(np.int64)


def range_slice(n_rows: int, actor: int, n_actors: int) -> tuple[int, int]:
    start = (n_rows * actor) // n_actors
    end = (n_rows * (actor + 1)) // n_actors
    return start, end
