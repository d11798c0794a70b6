"""A client's callback subscriptions are read by one thread with one head call per read
(``SubscriptionPump`` → ``DatabaseHead.sub_read_many``), against real Ray: every callback
ends with exactly the embedded engine's rows, a cancelled one stops alone, the pump goes on
through a SIGKILLed head and a SIGKILLed actor, and ``close()`` ends its thread."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests._services.procs import process_alive, wait_until
from tests.delta.workload import DDL, ROWS, STREAMS, assert_exactly_once, batch, reference, rows

pytestmark = pytest.mark.integration

BATCHES = 8
_PUMP = "laminardb-subscriptions"


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def _table(batches: list):
    import pyarrow as pa

    return pa.Table.from_batches(batches) if batches else None


def test_callbacks_share_one_reader_and_get_the_embedded_rows(database):
    before = len(_threads(_PUMP))
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    got: dict[str, list] = {f"{s}-{i}": [] for s in ("passthru", "per_key", "per_window") for i in (0, 1)}
    callbacks = {key: db.subscribe_callback(key.rsplit("-", 1)[0], got[key].append) for key in got}
    cancelled: list = []
    dropped = db.subscribe_callback("passthru", cancelled.append)
    # seven callback subscriptions, one reader thread (before: a thread and a head call each)
    assert len(_threads(_PUMP)) == before + 1, [t.name for t in threading.enumerate()]
    for i in range(BATCHES):
        db.insert("t", batch(i))
        if i == 2:
            wait_until(lambda: sum(b.num_rows for b in cancelled) == 3 * ROWS, timeout=60,
                       what="the soon-cancelled callback's first rows")
            dropped.cancel()
            assert dropped.wait(30)
    db.finish()
    expected, _ = reference(BATCHES)
    for key, batches in got.items():
        name = key.rsplit("-", 1)[0]
        wait_until(lambda b=batches, n=name: sum(x.num_rows for x in b) >= expected[n].num_rows, timeout=60,
                   what=f"{key}'s rows")
        assert rows(_table(batches)) == rows(expected[name]), key
        assert callbacks[key].error is None
    assert sum(b.num_rows for b in cancelled) == 3 * ROWS  # nothing after its cancel
    wait_until(lambda: len(_threads(_PUMP)) == before, timeout=10, what="the pump to end with the streams")


def test_close_ends_the_callbacks_and_the_pump(database):
    """``close()`` (no ``finish()``: the streams go on in the cluster) ends this client's
    callback subscriptions after what they hold, and its reader thread."""
    before = len(_threads(_PUMP))
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    got: list = []
    callbacks = [db.subscribe_callback("passthru", got.append), db.subscribe_callback("per_key", lambda b: None)]
    db.insert("t", batch(0))
    wait_until(lambda: sum(b.num_rows for b in got) == ROWS, timeout=60, what="the first batch's rows")
    db.close()
    assert all(cb.wait(30) for cb in callbacks)
    assert all(cb.error is None for cb in callbacks)
    wait_until(lambda: len(_threads(_PUMP)) == before, timeout=10, what="the pump thread to end after close()")


def test_an_actor_lost_by_a_database_in_memory_ends_its_callbacks(database):
    """Not durable, so nothing to recover: once the head knows an actor died (the next insert
    fails on it), the pumped reads, which drain nothing themselves, end every callback
    subscription instead of polling a dead pipeline for ever."""
    from laminardb.errors import LaminarError

    db = database(checkpoint_interval="off", checkpoint_dir=":memory:")
    db.execute(DDL)
    callbacks = [db.subscribe_callback(s, lambda b: None) for s in ("passthru", "per_key")]
    db.insert("t", batch(0))
    victim = db.metrics()["cluster"]["members"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not process_alive(victim), timeout=10, interval=0.02)
    with pytest.raises(LaminarError):
        for i in range(1, BATCHES):
            db.insert("t", batch(i))
    assert all(cb.wait(60) for cb in callbacks), "the callbacks still run on a lost pipeline"


def test_the_pump_reads_on_through_a_sigkilled_head(database):
    """All rows read before the kill (a flush, then the callbacks caught up with an iterated
    subscription of the same streams): after Ray restarts the head and it replays its WAL, the
    pump's repeated read skips what its subscriptions have, and the rows end exact, none lost."""
    before = len(_threads(_PUMP))
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    names = ("passthru", "per_key")
    got: dict[str, list] = {n: [] for n in names}
    callbacks = [db.subscribe_callback(n, got[n].append) for n in names]
    control = {n: db.subscribe_stream(n) for n in names}
    half = BATCHES // 2
    for i in range(half):
        db.insert("t", batch(i))
    db.flush()
    for n in names:
        while control[n].try_next() is not None:
            pass
        want = control[n].to_arrow().num_rows
        wait_until(lambda n=n, w=want: sum(b.num_rows for b in got[n]) == w, timeout=60,
                   what=f"{n}'s callback to catch up before the kill")
    pid = db.metrics()["database"]["head_pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)
    for i in range(half, BATCHES):
        db.insert("t", batch(i))
    assert len(_threads(_PUMP)) == before + 1  # its read failed with the head, waited for it, went on
    db.finish()
    expected, _ = reference(BATCHES)
    for n in names:
        wait_until(lambda n=n: sum(b.num_rows for b in got[n]) >= expected[n].num_rows, timeout=90,
                   what=f"{n}'s rows after the head restarted")
        assert rows(_table(got[n])) == rows(expected[n]), n
    assert db.metrics()["database"]["head_pid"] != pid
    assert all(cb._sub.rows_lost == 0 and cb.error is None for cb in callbacks)
    wait_until(lambda: len(_threads(_PUMP)) == before, timeout=10, what="the pump to end with the streams")


def test_callbacks_hold_every_row_once_through_an_actor_kill(database):
    """An actor SIGKILLed mid-stream: the head recovers in its process and attaches the
    subscriptions to the recovered engine while the pump's long-poll may be reading the old
    one (which the recovery cancels): no callback ends or errs, and every stream holds every
    row once, as the embedded engine's."""
    db = database(checkpoint_interval="off")
    db.execute(DDL)
    got: dict[str, list] = {s: [] for s in STREAMS}
    callbacks = [db.subscribe_callback(s, got[s].append) for s in STREAMS]
    for i in range(BATCHES):
        if i == BATCHES // 2:
            victim = db.metrics()["cluster"]["members"][0]["pid"]
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda v=victim: not process_alive(v), timeout=10, interval=0.02)
        db.insert("t", batch(i))
    db.finish()
    expected, _ = reference(BATCHES)
    for s in STREAMS:
        wait_until(lambda s=s: sum(b.num_rows for b in got[s]) >= expected[s].num_rows, timeout=90,
                   what=f"{s}'s rows after the recovery")
    assert_exactly_once({s: _table(got[s]) for s in STREAMS}, db.query("SELECT * FROM per_key_total").to_arrow(),
                        BATCHES)
    assert all(cb._sub.rows_lost == 0 and cb.error is None for cb in callbacks)
    assert len(db.metrics()["database"]["recoveries"]) == 1


def test_subscription_reads_have_threads_of_their_own():
    """Long-polls never take the threads inserts, DDL and metrics() run on: Ray must see the
    ``reads`` group on both read methods (it looks through ``_answer``'s wrapper, so an
    attribute set on the wrapper alone was silently ignored). bench/bench_subscribers.py
    measures what it changes: 40 long-polls from 40 connections held every default thread."""
    from laminardb.cluster.head import head_class

    meta = head_class().__ray_metadata__
    assert meta.method_meta.concurrency_group_for_methods == {"sub_read": "reads", "sub_read_many": "reads"}
    assert meta.concurrency_groups["reads"] >= 64
