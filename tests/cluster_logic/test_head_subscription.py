"""``HeadSubscription`` when a recovery attaches a new engine while a read is taking a batch
from the old one (the database head's threads: a client's read, and a recovery started by
another call or the watchdog). Unit tests of the head's own bookkeeping: the engines are
in-memory queues standing in for ``Subscription``s."""

from __future__ import annotations

from collections import deque

import pyarrow as pa

from laminardb.cluster.head import HeadSubscription
from laminardb.cluster.remote_rows import RemoteBatch
from laminardb.cluster.wire import from_ipc


class _Queue:
    """A subscription's queue: ``next_timeout`` may run ``during_read`` first, as a
    recovery on another thread would while the read waits."""

    def __init__(self, *batches: pa.RecordBatch) -> None:
        self.queue = deque(batches)
        self.during_read = None
        self.ended = False
        self._queue = self.queue

    def try_next(self):
        return self.queue.popleft() if self.queue else None

    def next_timeout(self, _ms):
        batch = self.try_next()
        if self.during_read is not None:
            hook, self.during_read = self.during_read, None
            hook()
        return batch

    def cancel(self) -> None:
        pass


def _rows(lo: int, hi: int) -> pa.RecordBatch:
    return pa.record_batch({"i": list(range(lo, hi))})


def _read_all(sub: HeadSubscription, position: int) -> tuple[list[int], int]:
    got: list[int] = []
    for _ in range(5):
        answer = sub.read(10, position)
        assert not answer.get("lost")
        for data in answer["batches"]:
            got += from_ipc(data).column("i").to_pylist()
        position += sum(from_ipc(d).num_rows for d in answer["batches"])
    return got, position


def test_rows_before_the_checkpoint_taken_by_a_racing_read_are_kept():
    """Rows 0–1 were queued before the checkpoint (the new engine starts at row 2): a read
    that took them from the old engine while the recovery ran must not drop them."""
    old = _Queue(_rows(0, 2))
    new = _Queue(_rows(2, 3))
    sub = HeadSubscription("s", old, 0)
    old.during_read = lambda: sub.reattach(new, emitted=2)
    first = sub.read(10, 0)
    assert first["batches"] == []
    got, position = _read_all(sub, 0)
    assert got == [0, 1, 2] and position == 3


def test_rows_after_the_checkpoint_taken_by_a_racing_read_come_once():
    """Rows 2–3 came after the checkpoint at row 2: the new engine replays them, and the
    read that took them from the old engine keeps them, so the replayed copies are skipped."""
    old = _Queue(_rows(0, 2), _rows(2, 4))
    new = _Queue(_rows(2, 4), _rows(4, 5))
    sub = HeadSubscription("s", old, 0)
    got, position = [], 0
    answer = sub.read(10, 0)  # rows 0–1
    got += [r for d in answer["batches"] for r in from_ipc(d).column("i").to_pylist()]
    position = len(got)
    old.during_read = lambda: sub.reattach(new, emitted=2)
    rest, position = _read_all(sub, position)
    assert got + rest == [0, 1, 2, 3, 4] and position == 5


def test_remote_batches_slice_as_record_batches_do():
    """A plan tree's root rows reach the head as ``RemoteBatch``es (a reference and a row
    count): every (offset, length) the subscription's skip and catch-up may cut gives the
    rows ``RecordBatch.slice`` gives, also sliced twice."""
    rows = _rows(0, 7)
    whole = RemoteBatch("ref", rows.num_rows)
    for offset in range(9):
        for length in (None, *range(9)):
            cut = whole.slice(offset, length)
            want = rows.slice(offset, length)
            assert (cut.offset, cut.num_rows) == (min(offset, 7), want.num_rows)
            for again in range(4):
                twice = cut.slice(again)
                assert rows.slice(twice.offset, twice.num_rows).to_pylist() == want.slice(again).to_pylist()


def test_replayed_remote_rows_are_skipped_and_the_rest_handed_on_by_reference():
    """After a recovery the new engine replays rows the client has: the head cuts them off
    the references it hands on (offset, count) without fetching any row."""
    old = _Queue(RemoteBatch("a", 4))
    sub = HeadSubscription("s", old, 0)
    first = sub.read(10, 0)
    assert first["batches"] == [RemoteBatch("a", 4)]
    sub.reattach(_Queue(RemoteBatch("b", 6)), emitted=1)  # the checkpoint was at row 1
    second = sub.read(10, 4)
    assert second["batches"] == [RemoteBatch("b", 3, offset=3)] and not second.get("lost")
    assert second["position"] == 4 and sub.position == 7


def test_rows_the_client_did_not_get_are_handed_out_again():
    """A client that could not fetch the rows of an answer (the node holding them died) reads
    again from the same position: the head hands out the same rows again, and forgets them
    once a read's position shows the client has them."""
    engine = _Queue(RemoteBatch("a", 4), RemoteBatch("b", 2))
    sub = HeadSubscription("s", engine, 10)
    first = sub.read(10, 10)
    assert first["batches"] == [RemoteBatch("a", 4), RemoteBatch("b", 2)] and first["position"] == 10
    again = sub.read(10, 10)  # nothing applied: the same rows, from the same position
    assert again["batches"] == first["batches"] and again["position"] == 10 and not again["lost"]
    part = sub.read(10, 13)  # three rows applied, then the read failed
    assert part["batches"] == [RemoteBatch("a", 1, offset=3), RemoteBatch("b", 2)] and part["position"] == 13
    done = sub.read(10, 16)
    assert done["batches"] == [] and not done["lost"] and sub.handed == [] and sub.carry == []
