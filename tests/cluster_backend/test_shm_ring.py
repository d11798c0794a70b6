"""The shared-memory ring that ships batches to actors on the client's machine."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from laminardb.cluster.shm_ring import ShmReader, ShmRing


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({"ts": pa.array(np.arange(n), pa.int64()),
                            "sym": pa.array([f"S{i % 13}" for i in range(n)]),
                            "price": pa.array(np.arange(n) / 4, mask=np.arange(n) % 7 == 0)})


@pytest.fixture
def ring():
    r = ShmRing.open(slots=3)
    if r is None:
        pytest.skip("no /dev/shm here")
    yield r
    r.close()
    assert not os.path.exists(r.path), "close() removes the file"


def test_batches_round_trip_through_slots(ring):
    reader = ShmReader()
    sent = [_batch(n) for n in (1, 1000, 70_000)]
    slices = []
    for b in sent:
        written = ring.write(b)
        assert written is not None
        slices.append(written)
    assert ring.free_slots == 0 and ring.write(_batch(5)) is None, "no free slot: the caller uses ray.put"
    for b, (where, _slot) in zip(sent, slices, strict=True):
        assert reader.read(where).equals(b)
    ring.release(slices[0][1])
    again = ring.write(_batch(7))
    assert again is not None and again[1] == slices[0][1]
    assert reader.read(again[0]).equals(_batch(7)), "a released slot is rewritten and read anew"
    reader.close()


def test_readers_probe_the_file_and_a_lost_ring_is_removed():
    ring = ShmRing.open(slots=1)
    if ring is None:
        pytest.skip("no /dev/shm here")
    path = ring.path
    assert ShmReader().can_read(path)
    del ring  # never closed: the finalizer removes the file
    import gc

    gc.collect()
    assert not os.path.exists(path) and not ShmReader().can_read(path)


def test_a_batch_larger_than_a_slot_is_refused(ring):
    big = pa.record_batch({"x": pa.array(np.zeros(ring.slot_bytes // 8 + 1, np.int64))})
    assert ring.write(big) is None
    assert ring.free_slots == 3, "the slot tried is free again"


def test_the_ring_of_a_killed_client_is_reclaimed_by_the_next_open():
    """A client killed with SIGKILL cannot unlink its ring; the next open on the machine
    removes it (its owner pid is gone), and leaves the rings of live owners alone."""
    import signal
    import subprocess
    import sys

    mine = ShmRing.open(slots=1)
    if mine is None:
        pytest.skip("no /dev/shm here")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from laminardb.cluster.shm_ring import ShmRing\n"
         "r = ShmRing.open(slots=1)\nprint(r.path, flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        path = child.stdout.readline().strip()
        assert path.startswith("/dev/shm/laminardb-") and os.path.exists(path)
        assert f"-{child.pid}-" in path, "the ring is named after its owner"
        other = ShmRing.open(slots=1)
        assert other is not None and os.path.exists(path), "a live owner's ring is kept"
        other.close()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert os.path.exists(path), "SIGKILL left the file behind"
        again = ShmRing.open(slots=1)
        assert again is not None
        assert not os.path.exists(path), "the next open removed the dead owner's ring"
        assert os.path.exists(mine.path) and os.path.exists(again.path)
        again.close()
    finally:
        child.kill()
        child.wait(timeout=10)
        mine.close()
