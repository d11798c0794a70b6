"""The coordinator's epoch log: per-database epochs, intents and manifests, in a JSON file
and in the Raft state (real voter processes), with the old global call forms unchanged."""

from __future__ import annotations

import json
import pickle

import pytest

from laminardb.checkpoint.epoch_log import FileEpochLog, RaftEpochLog, fence
from laminardb.checkpoint.exceptions import EpochLogError
from laminardb.raft.state import OwnershipState

EMPTY = {"allocated": 0, "intent": None, "manifest": None}


def _exercise(log, refused: type[Exception]) -> None:
    """The order rules every backend enforces, and the state they leave."""
    assert log.state() == EMPTY
    assert [log.allocate(), log.allocate()] == [1, 2]
    log.intent(1)
    assert log.state()["intent"] == 1
    with pytest.raises(refused):
        log.intent(3)  # not allocated yet
    log.record_manifest(1, "ckpt/1", {"sinks": {"out": {"info": {"files": ["a"]}, "rows": 3}}})
    with pytest.raises(refused):
        log.intent(1)  # at the manifest: that checkpoint is done
    with pytest.raises(refused):
        log.record_manifest(1, "ckpt/1b")  # not above the last manifest
    with pytest.raises(refused):
        log.record_manifest(3, "ckpt/3")  # not allocated
    log.intent(2)
    st = log.state()
    assert st == {"allocated": 2, "intent": 2,
                  "manifest": {"epoch": 1, "ref": "ckpt/1",
                               "sinks": {"out": {"info": {"files": ["a"]}, "rows": 3}}}}


def _fenced(log) -> None:
    """After ``_exercise`` (epoch 2 intended, 1 recorded): a recovering head fences epoch 2;
    its manifest is refused; the coordinator's next epoch commits."""
    e = log.allocate()
    fenced = fence(log)
    assert fenced["intent"] == e + 1 and fenced["manifest"]["epoch"] == 1
    with pytest.raises(EpochLogError, match="a recovering head fenced it"):
        log.record_manifest(2, "ckpt/2")
    with pytest.raises(EpochLogError, match="a recovering head fenced it"):
        log.record_manifest(e, f"ckpt/{e}")
    nxt = log.allocate()
    log.intent(nxt)
    log.record_manifest(nxt, f"ckpt/{nxt}")
    assert log.state()["manifest"]["epoch"] == nxt


def test_file_epoch_log_rules_and_persistence(tmp_path) -> None:
    log = FileEpochLog(tmp_path / "log")
    _exercise(log, EpochLogError)
    # a new instance (a restarted coordinator) reads the same log
    again = FileEpochLog(tmp_path / "log")
    assert again.state()["intent"] == 2 and again.state()["manifest"]["epoch"] == 1
    assert again.allocate() == 3
    assert json.loads((tmp_path / "log" / "epochs.json").read_text())["allocated"] == 3
    _fenced(again)


def test_file_epoch_log_refuses_a_damaged_file(tmp_path) -> None:
    log = FileEpochLog(tmp_path)
    log.allocate()
    (tmp_path / "epochs.json").write_text('{"allocated": 1')
    with pytest.raises(EpochLogError, match="damaged"):
        log.state()


def test_state_scopes_are_independent_and_global_form_unchanged() -> None:
    st = OwnershipState()
    assert st.apply_allocate_checkpoint_epoch("a1")["result"] == 1  # global, old form
    assert st.apply_allocate_checkpoint_epoch("b1", "db1")["result"] == 1
    assert st.apply_allocate_checkpoint_epoch("b2", "db1")["result"] == 2
    assert st.apply_allocate_checkpoint_epoch("c1", "db2")["result"] == 1
    assert st.apply_record_intent("i1", "db1", 2)["ok"]
    res = st.apply_record_manifest("m1", 2, "r2", "db1", {"sinks": {"s": {"rows": 1}}})
    assert res["result"] == {"epoch": 2, "ref": "r2", "sinks": {"s": {"rows": 1}}}
    # the global log keeps its exact old result shape
    assert st.apply_record_manifest("m2", 1, "g1")["result"] == {"epoch": 1, "ref": "g1"}
    snap = st.snapshot()
    assert snap["checkpoint_epoch"] == 1 and snap["manifest"] == {"epoch": 1, "ref": "g1"}
    assert snap["checkpoints"]["db1"] == {"allocated": 2, "intent": 2, "manifest": 2}
    assert st.checkpoint_log("db2")["result"] == {"allocated": 1, "intent": None, "manifest": None}
    assert st.apply_record_intent("i2", "db2", 5)["code"] == "LDB-6007"
    assert st.apply_allocate_checkpoint_epoch("x", "d" * 300)["code"] == "LDB-6007"


def test_a_dump_written_before_the_checkpoint_logs_still_loads() -> None:
    old = OwnershipState()
    old.apply_allocate_checkpoint_epoch("a")
    for field in ("checkpoint_logs", "checkpoint_intent"):  # as pickled by an older version
        del old.__dict__[field]
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.checkpoint_epoch == 1 and loaded.checkpoint_logs == {}
    assert loaded.apply_allocate_checkpoint_epoch("b", "db")["result"] == 1
    assert loaded.apply_record_intent("c", "", 1)["ok"]


def test_replicated_command_numbering_is_append_only() -> None:
    """pysyncobj numbers commands by sorted name: new ones must sort after the old ones,
    or journals written by an older version replay as the wrong commands."""
    from laminardb.raft.machine import _COMMAND_ORDER, OwnershipStateMachine

    names = sorted(m.removesuffix("_v0") for m in dir(OwnershipStateMachine)
                   if m.endswith("_v0") and getattr(getattr(OwnershipStateMachine, m), "replicated", False))
    assert names == list(_COMMAND_ORDER)
    released = ("acquire", "allocate_checkpoint_epoch", "announce_voter", "assign", "barrier",
                "check_fence_barrier", "commit_plan", "deregister_node", "record_manifest",
                "register_node", "release")
    assert tuple(names[: len(released)]) == released


def test_raft_epoch_log_with_real_voters(raft_cluster) -> None:
    cluster = raft_cluster(3)
    client = cluster.client()
    _exercise(RaftEpochLog(client, "db1"), EpochLogError)  # the voters' LDB-6007, as the file's
    other = RaftEpochLog(cluster.client(), "db2")
    assert other.state() == EMPTY and other.allocate() == 1
    # the old global forms still work beside the scoped logs
    assert client.allocate_checkpoint_epoch() == 1
    assert client.record_manifest(1, "g/1") == {"epoch": 1, "ref": "g/1"}
    # the log survives the loss of the leader (committed on a majority)
    leader = cluster.leader_index(client)
    cluster.signal(leader, 9)
    st = RaftEpochLog(cluster.client(deadline=15.0), "db1").state()
    assert st["intent"] == 2 and st["manifest"]["sinks"]["out"]["rows"] == 3
    _fenced(RaftEpochLog(cluster.client(deadline=15.0), "db1"))
