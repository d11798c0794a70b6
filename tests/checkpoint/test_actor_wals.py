"""``ActorWals``: the head's bookkeeping of the reactor actors' WALs (direct inserts). Real
WAL files in a temporary directory; the actor's side is a ``Wal`` appended to here."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from laminardb.checkpoint.actor_wals import ActorWals, actor_wal_dir
from laminardb.checkpoint.exceptions import RecoveryError, StaleInsertRefError
from laminardb.checkpoint.wal import Wal, encode_batch


def _rows(n: int) -> pa.RecordBatch:
    return pa.record_batch({"x": list(range(n))})


def _actor(tmp_path, member: str) -> Wal:
    return Wal(actor_wal_dir(tmp_path, member), segment_bytes=1)  # a segment per record


def test_a_reference_reads_back_the_actor_record(tmp_path):
    wal = _actor(tmp_path, "a")
    lsns = [wal.append("insert", {"s": "t"}, encode_batch(_rows(n))) for n in (3, 5)]
    wals = ActorWals(tmp_path)
    assert wals.batch("a", lsns[1], 5).num_rows == 5
    with pytest.raises(RecoveryError, match="lacks record"):
        wals.batch("a", lsns[1], 4)  # the count the head logged must match
    with pytest.raises(RecoveryError, match="missing"):
        wals.batch("gone", 0, 1)


def test_truncate_frees_what_only_older_references_named_and_sets_a_floor(tmp_path):
    wal = _actor(tmp_path, "a")
    wals = ActorWals(tmp_path)
    wals.live = lambda: frozenset({"a"})
    head_lsn = iter(range(100))
    actor_lsns = [wal.append("insert", {"s": "t"}, encode_batch(_rows(2))) for _ in range(4)]
    for lsn in actor_lsns[:3]:  # the fourth is staged, not referenced yet
        wals.reference("a", lsn, lambda: next(head_lsn))
    wals.truncate(2)  # the head's WAL keeps references from head lsn 2 on: actor record 2
    left = sorted(int(p.split(".")[0]) for p in os.listdir(actor_wal_dir(tmp_path, "a")))
    assert left[0] == actor_lsns[2]
    wals.reference("a", actor_lsns[3], lambda: next(head_lsn))  # above the floor: taken
    wals.truncate(4)  # nothing referenced after: the floor rises past every record
    with pytest.raises(StaleInsertRefError):
        wals.reference("a", actor_lsns[3], lambda: next(head_lsn))


def test_the_wal_of_an_actor_no_longer_in_the_pool_goes_once_unreferenced(tmp_path):
    old, new = _actor(tmp_path, "old"), _actor(tmp_path, "new")
    wals = ActorWals(tmp_path)
    wals.live = lambda: frozenset({"new"})
    wals.reference("old", old.append("insert", {"s": "t"}, encode_batch(_rows(1))), lambda: 0)
    new.append("insert", {"s": "t"}, encode_batch(_rows(1)))
    wals.truncate(0)  # still referenced by head lsn 0
    assert os.path.isdir(actor_wal_dir(tmp_path, "old"))
    wals.truncate(1)
    assert not os.path.exists(actor_wal_dir(tmp_path, "old"))
    assert os.path.isdir(actor_wal_dir(tmp_path, "new"))  # live: kept
