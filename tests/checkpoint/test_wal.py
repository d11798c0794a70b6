"""The WAL: records come back in order, a torn tail is cut off, damage elsewhere is refused,
group commit fsyncs once for many threads, and truncation deletes only covered segments."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from laminardb.checkpoint.exceptions import WalCorruptError
from laminardb.checkpoint.wal import Wal


def _batch(i: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"k": pa.array([f"k{i}"] * n), "v": pa.array(range(i, i + n), pa.int64())})


def test_records_round_trip_in_order(tmp_path):
    w = Wal(tmp_path)
    assert w.append_insert("s", _batch(0)) == 0
    assert w.append("ddl", {"sql": "CREATE SOURCE s (k VARCHAR, v BIGINT)"}) == 1
    assert w.append_insert("s", _batch(1)) == 2
    w.append("finish")
    w.close()
    recs = list(Wal(tmp_path).replay(0))
    assert [r.kind for r in recs] == ["insert", "ddl", "insert", "finish"]
    assert [r.lsn for r in recs] == [0, 1, 2, 3]
    assert recs[0].batch().equals(_batch(0)) and recs[2].batch().equals(_batch(1))
    assert recs[1].header == {"sql": "CREATE SOURCE s (k VARCHAR, v BIGINT)"}
    assert [r.lsn for r in Wal(tmp_path).replay(2)] == [2, 3]


@pytest.mark.parametrize("cut", [1, 7, 20])
def test_torn_tail_is_cut_off_and_appends_continue(tmp_path, cut):
    w = Wal(tmp_path)
    for i in range(3):
        w.append_insert("s", _batch(i))
    w.close()
    (_, seg), = Wal(tmp_path).segments()
    size = seg.stat().st_size
    with open(seg, "r+b") as f:  # a crash in the middle of the last record
        f.truncate(size - cut)
    w = Wal(tmp_path)
    assert w.torn_bytes > 0 and w.next_lsn == 2
    assert w.append_insert("s", _batch(9)) == 2
    w.close()
    got = [r.batch().column("v")[0].as_py() for r in Wal(tmp_path).replay(0)]
    assert got == [0, 1, 9]


def test_flipped_byte_in_last_record_is_a_torn_tail(tmp_path):
    w = Wal(tmp_path)
    for i in range(3):
        w.append_insert("s", _batch(i))
    w.close()
    (_, seg), = Wal(tmp_path).segments()
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF
    seg.write_bytes(bytes(data))
    w = Wal(tmp_path)
    assert w.next_lsn == 2
    w.close()


def test_damage_before_the_last_segment_is_refused(tmp_path):
    w = Wal(tmp_path)
    w.append_insert("s", _batch(0))
    w.append_insert("s", _batch(1))
    w.rotate()
    w.append_insert("s", _batch(2))
    w.close()
    first = Wal(tmp_path).segments()[0][1]
    data = bytearray(first.read_bytes())
    data[30] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError) as e:
        Wal(tmp_path).settle(0)  # recovery needs every record: refused, nothing changed
    assert e.value.code == "LDB-5003" and "Put an undamaged copy" in str(e.value)
    assert first.read_bytes() == bytes(data)
    w = Wal(tmp_path)  # a checkpoint at lsn 2 needs only the second segment
    assert w.settle(2) and (tmp_path / (first.name + ".damaged")).exists()
    assert [r.lsn for r in w.replay(2)] == [2]
    assert w.append_insert("s", _batch(3)) == 3
    w.close()


def test_damage_followed_by_valid_records_in_the_last_segment_is_not_a_torn_tail(tmp_path):
    w = Wal(tmp_path)
    for i in range(3):
        w.append_insert("s", _batch(i))
    w.close()
    (_, seg), = Wal(tmp_path).segments()
    data = bytearray(seg.read_bytes())
    data[30] ^= 0xFF  # inside the first record: two valid records follow
    seg.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError):
        Wal(tmp_path).settle(0)
    assert seg.read_bytes() == bytes(data)  # not cut off as a torn tail


def test_a_missing_segment_is_refused_and_lsns_never_go_below_the_checkpoint(tmp_path):
    w = Wal(tmp_path)
    w.append_insert("s", _batch(0))
    assert w.rotate() == 1
    w.append_insert("s", _batch(1))
    w.close()
    (tmp_path / f"{1:020d}.wal").rename(tmp_path / "moved")
    with pytest.raises(WalCorruptError) as e:
        Wal(tmp_path).settle(1)  # a checkpoint at lsn 1 needs segment 1
    assert "is missing" in str(e.value)
    (tmp_path / "moved").rename(tmp_path / f"{1:020d}.wal")  # what the message says: put it back
    w = Wal(tmp_path)
    w.settle(1)
    assert w.append_insert("s", _batch(2)) == 2  # numbering goes on above the checkpoint
    w.close()
    assert [r.lsn for r in Wal(tmp_path).replay(1)] == [1, 2]


def test_truncate_before_keeps_uncovered_segments(tmp_path):
    w = Wal(tmp_path)
    w.append_insert("s", _batch(0))  # lsn 0
    assert w.rotate() == 1
    w.append_insert("s", _batch(1))  # lsn 1
    w.append_insert("s", _batch(2))  # lsn 2
    assert w.rotate() == 3
    w.append_insert("s", _batch(3))  # lsn 3
    assert w.truncate_before(2) == 1  # segment [0] goes; [1, 2] holds lsn 2, stays
    assert [r.lsn for r in w.replay(0)] == [1, 2, 3]
    assert w.truncate_before(3) == 1
    assert [r.lsn for r in w.replay(0)] == [3]
    assert w.first_lsn == 3
    w.close()
    assert Wal(tmp_path).next_lsn == 4


def test_group_commit_shares_fsyncs_between_threads(tmp_path, monkeypatch):
    w = Wal(tmp_path, sync="always")
    lock = threading.Lock()
    real_fsync = os.fsync
    calls = []

    def slow_fsync(fd):
        calls.append(fd)
        threading.Event().wait(0.01)  # a slow disk: other threads queue up behind this one
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)

    def writer(i):
        for j in range(20):
            with lock:  # the engine lock serializes appends, as in Connection.insert
                lsn = w.append_insert("s", _batch(i * 100 + j))
            w.sync(lsn)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert w.next_lsn == 160
    assert w._synced == 159
    assert len(calls) < 160  # fewer fsyncs than records: commits were grouped
    w.close()


def test_bad_sync_mode_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="wal_sync"):
        Wal(tmp_path, sync="sometimes")


def test_a_missing_newest_segment_is_refused_by_its_predecessors_seal(tmp_path):
    """A segment deleted after the checkpoint's one would look like a log that ended there;
    the seal that rotate() writes at the end of the segment before says it existed."""
    w = Wal(tmp_path)
    w.append_insert("s", _batch(0))
    assert w.rotate() == 1  # the checkpoint's position
    w.append_insert("s", _batch(1))
    assert w.rotate() == 2  # a checkpoint killed before its manifest: 1 stays the position
    w.append_insert("s", _batch(2))  # acknowledged
    w.close()
    newest = tmp_path / f"{2:020d}.wal"
    kept = newest.read_bytes()
    newest.unlink()
    with pytest.raises(WalCorruptError) as e:
        Wal(tmp_path).settle(1)
    assert f"{2:020d}.wal" in str(e.value) and "missing" in str(e.value)
    newest.write_bytes(kept)  # put it back, as the message says
    w = Wal(tmp_path)
    w.settle(1)
    assert [r.lsn for r in w.replay(1)] == [1, 2] and w.append_insert("s", _batch(3)) == 3
    w.close()


def test_a_seal_torn_by_a_crash_is_not_damage(tmp_path):
    w = Wal(tmp_path)
    w.append_insert("s", _batch(0))
    w.rotate()
    w.append_insert("s", _batch(1))
    w.close()
    first = Wal(tmp_path).segments()[0][1]
    first.write_bytes(first.read_bytes()[:-7])  # the seal half-written
    w = Wal(tmp_path)
    w.settle(0)
    assert [r.lsn for r in w.replay(0)] == [0, 1]
    w.close()
