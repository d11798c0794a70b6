"""OwnershipState: the replicated rules, applied directly (no Raft, no processes)."""

from __future__ import annotations

from laminardb.raft.state import OwnershipState


def _state_with_nodes(*nodes: str) -> OwnershipState:
    st = OwnershipState()
    for n in nodes:
        assert st.apply_register_node(f"reg-{n}", n, f"{n}:1", 2, {})["ok"]
    return st


def test_every_owner_change_raises_the_epoch_by_one() -> None:
    st = _state_with_nodes("a", "b")
    epochs = []
    for i, owner in enumerate(["a", "b", "a", "a", "b"]):
        res = st.apply_assign(f"r{i}", "s", [3], owner, 16)
        epochs.append(res["result"][0]["epoch"])
    # Same owner twice in a row ("a", "a") is not a change: epoch stays.
    assert epochs == [1, 2, 3, 3, 4]


def test_unregistered_owner_is_refused() -> None:
    st = _state_with_nodes("a")
    res = st.apply_assign("r", "s", [0], "ghost", 16)
    assert (res["ok"], res["code"]) == (False, "LDB-6006")


def test_acquire_refuses_vnodes_owned_by_others_atomically() -> None:
    st = _state_with_nodes("a", "b")
    st.apply_acquire("r1", "s", [0, 1], "a", 8)
    res = st.apply_acquire("r2", "s", [1, 2], "b", 8)
    assert (res["ok"], res["code"]) == (False, "LDB-6002")
    assert st.snapshot()["sources"]["s"]["owner"][:3] == ["a", "a", None]


def test_release_with_stale_token_is_refused() -> None:
    st = _state_with_nodes("a", "b")
    st.apply_acquire("r1", "s", [0], "a", 8)           # epoch 1, a
    st.apply_assign("r2", "s", [0], "b", 8)            # epoch 2, b
    res = st.apply_release("r3", "s", [[0, 1]], "a")   # a's old token
    assert (res["ok"], res["code"]) == (False, "LDB-6001")
    res = st.apply_release("r4", "s", [[0, 2]], "b")
    assert res["ok"] and res["result"][0]["epoch"] == 3 and res["result"][0]["owner"] == ""


def test_check_fence_accepts_only_the_committed_epoch_and_owner() -> None:
    st = _state_with_nodes("a", "b")
    st.apply_acquire("r1", "s", [5], "a", 8)
    assert st.check_fence("s", 5, 1, "a")["ok"]
    st.apply_assign("r2", "s", [5], "b", 8)
    assert st.check_fence("s", 5, 1, "a")["code"] == "LDB-6001"
    assert st.check_fence("s", 5, 2, "b")["ok"]
    assert st.check_fence("s", 5, 2, "a")["code"] == "LDB-6001"  # right epoch, wrong owner
    assert st.check_fence("nope", 0, 1, "a")["code"] == "LDB-6001"


def test_retried_command_is_applied_once() -> None:
    st = _state_with_nodes("a", "b")
    first = st.apply_assign("same-rid", "s", [0], "a", 8)
    st.apply_assign("other", "s", [0], "b", 8)
    again = st.apply_assign("same-rid", "s", [0], "a", 8)
    assert again == first
    assert st.snapshot()["sources"]["s"]["owner"][0] == "b"


def test_deregister_releases_and_fences_the_nodes_vnodes() -> None:
    st = _state_with_nodes("a", "b")
    st.apply_commit_plan("p", "s", None, 8, None)
    owned = [v for v, o in enumerate(st.snapshot()["sources"]["s"]["owner"]) if o == "a"]
    res = st.apply_deregister_node("d", "a")
    assert res["result"]["released"] == len(owned) > 0
    snap = st.snapshot()["sources"]["s"]
    assert all(snap["owner"][v] is None and snap["epoch"][v] == 2 for v in owned)


def test_commit_plan_refuses_an_outdated_plan() -> None:
    st = _state_with_nodes("a")
    epoch = st.cluster_epoch
    st.apply_register_node("r", "b", "b:1", 1, {})
    res = st.apply_commit_plan("p", "s", None, 8, epoch)
    assert (res["ok"], res["code"]) == (False, "LDB-6007")
    assert st.apply_commit_plan("p2", "s", None, 8, st.cluster_epoch)["ok"]


def test_vnode_count_is_fixed_once_created() -> None:
    st = _state_with_nodes("a")
    st.apply_acquire("r1", "s", [0], "a", 8)
    res = st.apply_acquire("r2", "s", [1], "a", 16)
    assert res["code"] == "LDB-6007"
    assert st.apply_acquire("r3", "s", [9], "a", None)["code"] == "LDB-6007"


def test_checkpoint_epochs_and_manifest_are_monotonic() -> None:
    st = OwnershipState()
    assert [st.apply_allocate_checkpoint_epoch(f"c{i}")["result"] for i in range(3)] == [1, 2, 3]
    assert st.apply_record_manifest("m1", 2, "s3://m/2")["ok"]
    assert st.apply_record_manifest("m2", 2, "s3://m/2b")["code"] == "LDB-6007"  # not above last
    assert st.apply_record_manifest("m3", 4, "s3://m/4")["code"] == "LDB-6007"   # not allocated
    assert st.apply_record_manifest("m4", 3, "s3://m/3")["result"] == {"epoch": 3, "ref": "s3://m/3"}


def test_malformed_arguments_are_refused_not_raised() -> None:
    st = _state_with_nodes("a")
    res = st.apply_assign("r", "s", ["x"], "a", 8)
    assert res["ok"] is False and res["code"] == "LDB-6007"
