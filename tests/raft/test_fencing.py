"""Fence: the local highest-epoch rule, and the committed check through a checker."""

from __future__ import annotations

import pytest

from laminardb.raft import Fence, FencingToken, OwnershipState, StaleEpochError
from laminardb.raft.exceptions import error_from_wire


class _StateChecker:
    """Checker answering from an OwnershipState (what the voters do, minus the network)."""

    def __init__(self, st: OwnershipState) -> None:
        self.st = st

    def check_fence(self, token: FencingToken, *, barrier: bool = True) -> int:
        res = self.st.check_fence(token.source, token.vnode, token.epoch, token.owner)
        if not res["ok"]:
            raise error_from_wire(res["code"], res["message"])
        return res["result"]


def test_local_fence_refuses_older_than_seen() -> None:
    fence = Fence()
    fence.check(FencingToken(3, 5, "s", "new"))
    with pytest.raises(StaleEpochError) as err:
        fence.check(FencingToken(3, 4, "s", "old"))
    assert err.value.code == "LDB-6001"
    assert isinstance(err.value, PermissionError)
    fence.check(FencingToken(4, 1, "s", "other-vnode"))  # other vnodes unaffected
    assert fence.highest("s", 3) == 5


def test_fence_with_checker_refuses_a_token_the_state_superseded() -> None:
    st = OwnershipState()
    st.apply_register_node("r1", "a", "", 1, {})
    st.apply_register_node("r2", "b", "", 1, {})
    tok_a = FencingToken.from_wire(st.apply_acquire("r3", "s", [0], "a", 4)["result"][0])
    fence = Fence(_StateChecker(st))
    fence.check(tok_a)
    tok_b = FencingToken.from_wire(st.apply_assign("r4", "s", [0], "b", 4)["result"][0])
    # The fence never saw b's epoch, but the committed check knows it.
    with pytest.raises(StaleEpochError):
        fence.check(tok_a)
    fence.check(tok_b)
    assert tok_b.epoch == tok_a.epoch + 1


def test_token_wire_roundtrip() -> None:
    tok = FencingToken(7, 9, "orders", "n1")
    assert FencingToken.from_wire(tok.to_wire()) == tok
