"""plan_assignment: balance, minimal movement on join/leave, determinism (pure, no processes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from laminardb.raft.plan import DEFAULT_VNODES, plan_assignment

members_st = st.lists(st.sampled_from([f"n{i}" for i in range(12)]), min_size=1, max_size=8,
                      unique=True)


def _loads(assignment: dict[int, str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in assignment.values():
        if o is not None:
            out[o] = out.get(o, 0) + 1
    return out


def test_fresh_plan_assigns_every_vnode_balanced() -> None:
    plan = plan_assignment(DEFAULT_VNODES, members=["a", "b", "c"])
    assert sorted(plan.assignment) == list(range(256))
    assert plan.load() == {"a": 86, "b": 85, "c": 85} or sorted(plan.load().values()) == [85, 85, 86]
    assert len(plan.moves) == 256  # all from unowned


def test_no_members_unowns_everything() -> None:
    plan = plan_assignment(8, members=[], current={0: "a", 1: "b"})
    assert set(plan.assignment.values()) == {None}
    assert [(m.vnode, m.src, m.dst) for m in plan.moves] == [(0, "a", None), (1, "b", None)]


def test_stable_plan_moves_nothing() -> None:
    first = plan_assignment(64, members=["a", "b", "c"])
    again = plan_assignment(64, members=["c", "b", "a"], current=first.assignment)
    assert again.moves == ()
    assert again.assignment == first.assignment


@settings(max_examples=60, deadline=None)
@given(members=members_st, vnodes=st.integers(1, 300))
def test_balanced_within_one(members: list[str], vnodes: int) -> None:
    plan = plan_assignment(vnodes, members=members)
    loads = [plan.load().get(m, 0) for m in members]
    assert sum(loads) == vnodes
    assert max(loads) - min(loads) <= 1


@settings(max_examples=60, deadline=None)
@given(members=members_st.filter(lambda m: len(m) >= 2), vnodes=st.integers(1, 300),
       data=st.data())
def test_leave_moves_only_the_leavers_vnodes(members: list[str], vnodes: int,
                                             data: st.DataObject) -> None:
    before = plan_assignment(vnodes, members=members).assignment
    leaver = data.draw(st.sampled_from(members))
    after = plan_assignment(vnodes, members=[m for m in members if m != leaver], current=before)
    moved = {m.vnode for m in after.moves}
    assert moved == {v for v, o in before.items() if o == leaver}
    assert all(m.dst != leaver for m in after.moves)


@settings(max_examples=60, deadline=None)
@given(members=members_st, vnodes=st.integers(1, 300))
def test_join_moves_only_what_the_newcomer_takes(members: list[str], vnodes: int) -> None:
    before = plan_assignment(vnodes, members=members).assignment
    after = plan_assignment(vnodes, members=[*members, "new"], current=before)
    # Every move goes to the newcomer, and it takes exactly its balanced share.
    assert all(m.dst == "new" for m in after.moves)
    share = vnodes // (len(members) + 1)
    assert share <= len(after.moves) <= share + 1


def test_plan_is_deterministic_across_calls() -> None:
    a = plan_assignment(256, members=["x", "y", "z", "w"])
    b = plan_assignment(256, members=["w", "z", "y", "x"])
    assert a.assignment == b.assignment
