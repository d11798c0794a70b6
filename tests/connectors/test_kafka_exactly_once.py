"""Exactly-once Kafka against a real Tansu broker: the transactional sink through crashes and
recoveries (Flink's KafkaSinkITCase / FlinkKafkaProducerITCase scenarios), the read_committed
source with real aborted transactions, and the source's checkpoint state.

The oracle for what a read_committed reader sees is :func:`committed`: it fetches the topic's
raw log and parses it with kafka-python's own record reader (not laminardb's), keeping a
transactional record only when its producer's next marker is COMMIT. A read_committed
kafka-python consumer cannot be the oracle here: Tansu 0.6 sends no aborted-transaction list
in Fetch responses, so that consumer delivers aborted records as if committed. Every sink
record carries a ``laminardb.epoch`` header, so the tests also assert that exactly the
committed epochs are present, each with exactly its rows — and that the aborted attempts
really are in the log (:func:`everything`), so the scenarios are not vacuous.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest

from laminardb.checkpoint.exceptions import SinkCommitError
from laminardb.connectors.exceptions import KafkaConfigError
from laminardb.connectors.kafka import ExactlyOnceKafkaSink, KafkaSink
from tests._services.kafka import drain

pytestmark = pytest.mark.integration

OUT = pa.schema([("k", pa.string()), ("v", pa.int64())])
ROWS_PER_EPOCH = 4
EXACTLY_ONCE = {"format": "json", "key": "k", "delivery.guarantee": "exactly-once"}


def rows(epoch: int, variant: int = 0) -> pa.RecordBatch:
    """The rows a pipeline emits in ``epoch`` (``variant``: a replay that differs)."""
    base = epoch * 100 + variant * 10
    return pa.RecordBatch.from_pylist(
        [{"k": f"k{i}", "v": base + i} for i in range(ROWS_PER_EPOCH)], schema=OUT)


def values(epochs: list[int]) -> list[int]:
    return sorted(v for e in epochs for v in rows(e).column("v").to_pylist())


# -- the oracle: the raw log, parsed by kafka-python ---------------------------------------

def _log(bootstrap: str, topic: str, timeout: float = 15.0) -> list[dict[str, Any]]:
    """Every batch of every partition, read_uncommitted, up to the high watermark."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.protocol.consumer import FetchRequest
    from kafka.record import MemoryRecords

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, client_id="test-oracle")
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        parts = sorted(c.partitions_for_topic(topic) or [])
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        ends = c.end_offsets(tps)
        ft = FetchRequest.FetchTopic
        for tp in tps:
            offset = 0
            while offset < ends[tp]:
                assert time.monotonic() < deadline, f"reading {tp} timed out at {offset}"
                request = FetchRequest(
                    max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                    session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                    topics=[ft(topic=topic, partitions=[ft.FetchPartition(
                        partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])], max_version=12)
                node = c._manager.cluster.leader_for_partition(tp)
                future = c._net.call_soon_with_future(c._manager.send, request, node)
                while not future.is_done:
                    assert time.monotonic() < deadline, "no fetch response"
                    time.sleep(0.01)
                data = future.value.responses[0].partitions[0].records
                batches = MemoryRecords(bytes(data or b""))
                while (batch := batches.next_batch()) is not None:
                    recs = [r for r in batch if r.offset >= offset]
                    out.append({"partition": tp.partition, "pid": batch.producer_id,
                                "txn": batch.is_transactional,
                                "control": batch.is_control_batch, "records": recs})
                    offset = max(offset, batch.next_offset)
    finally:
        c.close()
    return out


def everything(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """What a read_uncommitted reader sees: every data record (aborted ones too)."""
    return [_rec(b, r) for b in _log(bootstrap, topic) if not b["control"] for r in b["records"]]


def committed(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """What a read_committed reader must see: non-transactional records, and transactional
    ones whose producer's next marker is COMMIT; in offset order per partition."""
    held: dict[tuple[int, int], list[dict[str, Any]]] = {}
    kept: list[dict[str, Any]] = []
    for b in _log(bootstrap, topic):
        key = (b["partition"], b["pid"])
        if b["control"]:
            if b["records"] and b["records"][0].commit:
                for entry in held.pop(key, []):
                    entry["keep"] = True
            else:
                held.pop(key, None)
            continue
        for r in b["records"]:
            entry = {**_rec(b, r), "keep": not b["txn"]}
            kept.append(entry)
            if b["txn"]:
                held.setdefault(key, []).append(entry)
    return [e for e in kept if e.pop("keep")]


def _rec(batch: dict[str, Any], r: Any) -> dict[str, Any]:
    return {"partition": batch["partition"], "offset": r.offset, "value": r.value,
            "headers": {k: v.decode() for k, v in r.headers}}


def epochs(recs: list[dict[str, Any]]) -> Counter[int]:
    return Counter(int(r["headers"]["laminardb.epoch"]) for r in recs)


def vs(recs: list[dict[str, Any]]) -> list[int]:
    return sorted(json.loads(r["value"])["v"] for r in recs)


# -- fixtures -------------------------------------------------------------------------------

@pytest.fixture
def sink_factory(bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., ExactlyOnceKafkaSink]]:
    """``make(topic)``: an exactly-once sink over one stage directory per test (the database
    directory that outlives a crash); every sink is closed at teardown."""
    made: list[ExactlyOnceKafkaSink] = []

    def make(topic: str, **extra: str) -> ExactlyOnceKafkaSink:
        s = ExactlyOnceKafkaSink(name="out", schema=OUT, stage_dir=tmp_path / "stage",
                                 options={"brokers": bootstrap, "topic": topic,
                                          **EXACTLY_ONCE, **extra})
        made.append(s)
        return s

    yield make
    for s in made:
        if getattr(s, "dead", False):  # a dead process runs no cleanup: just free the sockets
            s._stage.close()
            if s._producer is not None:
                s._producer.close(timeout=0.5)
        else:
            s.close()


class _Crash(BaseException):
    """The process dies here: nothing after it runs (not even except-Exception handlers)."""


def die_before(sink: ExactlyOnceKafkaSink, step: str) -> None:
    """Make ``sink`` die right before the transactional request ``step`` (its transaction
    stays open on the broker, as after a SIGKILL)."""
    real = sink._step
    sink.dead = True  # type: ignore[attr-defined]

    def step_or_die(start: Any, public: Any, what: str, *args: Any, **kwargs: Any) -> None:
        if what == step:
            raise _Crash(step)
        real(start, public, what, *args, **kwargs)

    sink._step = step_or_die  # type: ignore[method-assign]


def checkpoint(sink: ExactlyOnceKafkaSink, epoch: int, *batches: pa.RecordBatch) -> dict:
    for b in batches:
        sink.write(b)
    return sink.pre_commit(epoch)


# -- the sink -------------------------------------------------------------------------------

def test_crash_before_and_during_commit_recovers_exactly_once(
        new_topic: Callable[..., str], sink_factory: Callable[..., ExactlyOnceKafkaSink],
        bootstrap: str, sources: Callable[..., Any]) -> None:
    """Flink rows 1, 2, 9: epoch 2 is pre-committed and its manifest written, then the process
    dies before commit(2); the restarted one dies again in the middle of producing it (the
    transaction open, its rows in the log); the third recovers: every epoch exactly once, and
    newer epochs become visible (the lingering transaction does not hold the LSO back)."""
    topic = new_topic(2)
    a = sink_factory(topic)
    checkpoint(a, 1, rows(1))
    a.commit(1)
    assert checkpoint(a, 2, rows(2)) == {"rows": ROWS_PER_EPOCH}
    # -- crash before commit(2) --
    b = sink_factory(topic)
    die_before(b, "EndTxn")
    with pytest.raises(_Crash):
        b.recover(2, {"rows": ROWS_PER_EPOCH})
    c = sink_factory(topic)
    c.recover(2, {"rows": ROWS_PER_EPOCH})
    assert c._stage.epochs() == []
    checkpoint(c, 3, rows(3))
    c.commit(3)

    got = committed(bootstrap, topic)
    assert epochs(got) == {1: ROWS_PER_EPOCH, 2: ROWS_PER_EPOCH, 3: ROWS_PER_EPOCH}
    assert vs(got) == values([1, 2, 3])
    assert epochs(everything(bootstrap, topic))[2] == 2 * ROWS_PER_EPOCH  # the aborted attempt
    src = sources(schema=OUT, options={"brokers": bootstrap, "topic": topic, "format": "json",
                                       "offset_reset": "earliest",
                                       "isolation.level": "read_committed"})
    table, _ = drain(src, rows=3 * ROWS_PER_EPOCH)
    assert sorted(table.column("v").to_pylist()) == values([1, 2, 3])


def test_recover_the_same_checkpoint_twice(new_topic: Callable[..., str], bootstrap: str,
                                           sink_factory: Callable[..., ExactlyOnceKafkaSink],
                                           ) -> None:
    """Flink row 3: twice, epoch 2 is half-produced and the restart falls back to checkpoint 1
    (manifest 2 unusable); both times epoch 2 is aborted and only epoch 1 stays."""
    topic = new_topic(1)
    a = sink_factory(topic)
    checkpoint(a, 1, rows(1))
    a.commit(1)
    previous = a
    for variant in (1, 2):
        checkpoint(previous, 2, rows(2, variant))
        die_before(previous, "EndTxn")
        with pytest.raises(_Crash):
            previous.commit(2)
        nxt = sink_factory(topic)
        nxt.recover(1, None)
        assert nxt._stage.epochs() == []
        previous = nxt
    previous.recover(1, None)  # and once more: nothing changes

    got = committed(bootstrap, topic)
    assert epochs(got) == {1: ROWS_PER_EPOCH}
    assert vs(got) == values([1])
    assert epochs(everything(bootstrap, topic))[2] == 2 * ROWS_PER_EPOCH


def test_recover_an_epoch_already_committed(new_topic: Callable[..., str], bootstrap: str,
                                            sink_factory: Callable[..., ExactlyOnceKafkaSink],
                                            ) -> None:
    """Flink row 4: the process dies after Kafka committed epoch 1 but before its staged file
    was dropped; recovering (twice) must not produce it again."""
    topic = new_topic(1)
    a = sink_factory(topic)
    checkpoint(a, 1, rows(1))
    staged = a._stage.path(1)
    kept = staged.read_bytes()
    a.commit(1)
    assert not staged.exists()
    staged.write_bytes(kept)  # the crash came before the drop
    for _ in range(2):
        b = sink_factory(topic)
        b.recover(1, {"rows": ROWS_PER_EPOCH})
        assert b._stage.epochs() == []
        staged.write_bytes(kept)
    got = committed(bootstrap, topic)
    assert epochs(got) == {1: ROWS_PER_EPOCH}
    assert epochs(everything(bootstrap, topic)) == {1: ROWS_PER_EPOCH}


def test_empty_epochs_and_epochs_beyond_the_manifest(
        new_topic: Callable[..., str], bootstrap: str,
        sink_factory: Callable[..., ExactlyOnceKafkaSink]) -> None:
    """Flink row 12: an epoch without rows stages nothing and runs no transaction; a staged
    epoch newer than the manifest recovery restores is discarded, older ones are produced."""
    topic = new_topic(1)
    a = sink_factory(topic)
    assert a.pre_commit(1) == {"rows": 0}
    a.commit(1)
    assert a._producer is None and a._stage.epochs() == []
    checkpoint(a, 2, rows(2))
    checkpoint(a, 3, rows(3))  # pre-committed, but its manifest was never written
    b = sink_factory(topic)
    b.recover(2, {"rows": ROWS_PER_EPOCH})
    assert b._stage.epochs() == [] and b._marker == 2
    assert b.pre_commit(3) == {"rows": 0}
    b.commit(3)
    assert b._read_marker() == 2
    got = committed(bootstrap, topic)
    assert epochs(got) == {2: ROWS_PER_EPOCH}
    assert epochs(everything(bootstrap, topic)) == {2: ROWS_PER_EPOCH}


def test_a_skipped_checkpoint_never_has_its_epoch_reused(
        new_topic: Callable[..., str], bootstrap: str,
        sink_factory: Callable[..., ExactlyOnceKafkaSink]) -> None:
    """Epoch 2 committed to Kafka, then its checkpoint was damaged: recovery restores 1 and
    replays. The sink reports epoch 2 as used (highest_epoch), so the replayed rows go out as
    epoch 3; a reused epoch 2 would be taken for the one in Kafka and dropped (rows lost)."""
    topic = new_topic(1)
    a = sink_factory(topic)
    checkpoint(a, 1, rows(1))
    a.commit(1)
    checkpoint(a, 2, rows(2))
    a.commit(2)
    b = sink_factory(topic)
    b.recover(1, None)
    nxt = max(1, b.highest_epoch()) + 1  # what recovery opens (laminardb/checkpoint/recovery.py)
    assert nxt == 3
    checkpoint(b, nxt, rows(2, variant=1))  # the replay: epoch 2's rows and what came after
    b.commit(nxt)
    got = committed(bootstrap, topic)
    assert epochs(got) == {1: ROWS_PER_EPOCH, 2: ROWS_PER_EPOCH, 3: ROWS_PER_EPOCH}
    assert sorted(vs(got)) == sorted(values([1, 2]) + rows(2, variant=1).column("v").to_pylist())


def test_a_fenced_writer_keeps_its_epoch_staged(new_topic: Callable[..., str], bootstrap: str,
                                                sink_factory: Callable[..., ExactlyOnceKafkaSink],
                                                ) -> None:
    """Flink rows 5, 13: a second writer with the same transactional.id fences the first; the
    first's commit fails with SinkCommitError (no retry that would fence the new one back),
    its epoch stays staged, and the new writer produces it once."""
    topic = new_topic(1)
    a = sink_factory(topic)
    checkpoint(a, 1, rows(1))
    a.commit(1)
    b = sink_factory(topic)
    b.recover(1, None)
    assert b.transactional_id == a.transactional_id
    checkpoint(a, 2, rows(2))
    with pytest.raises(SinkCommitError, match="fenced.*stays staged") as err:
        a.commit(2)
    assert err.value.code == "LDB-5005"
    assert a._stage.epochs() == [2]
    b.commit(2)
    got = committed(bootstrap, topic)
    assert epochs(got) == {1: ROWS_PER_EPOCH, 2: ROWS_PER_EPOCH}
    assert [r["headers"]["laminardb.engine.writer"] for r in got] == ["0"] * len(got)


def test_exactly_once_needs_a_durable_database() -> None:
    with pytest.raises(KafkaConfigError, match="durable database"):
        KafkaSink(schema=OUT, options={"brokers": "127.0.0.1:1", "topic": "t",
                                       "delivery.guarantee": "exactly-once"})
    with pytest.raises(KafkaConfigError, match="delivery.guarantee"):
        KafkaSink(schema=OUT, options={"brokers": "127.0.0.1:1", "topic": "t",
                                       "delivery.guarantee": "twice"})


# -- the read_committed source ---------------------------------------------------------------

TEXT = pa.schema([("v", pa.string())])


def _transactional(bootstrap: str, tid: str) -> Any:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=0,
                      client_id=f"test-{tid}")
    p.init_transactions()
    return p


def test_read_committed_source_drops_aborted_transactions(
        new_topic: Callable[..., str], bootstrap: str, producer: Any,
        sources: Callable[..., Any]) -> None:
    """Real transactions, two transactional producers interleaved with plain records:
    read_committed delivers committed and plain records in offset order, holds everything
    behind a transaction that is still open (and its checkpoint position stays before it),
    and resumes from that position without loss or duplicates; read_uncommitted gets all.
    A read_committed source starting at 'latest' while a transaction is open starts at the
    LSO, so it reads that transaction whole."""
    topic = new_topic(1)
    t1 = _transactional(bootstrap, f"{topic}-1")
    t2 = _transactional(bootstrap, f"{topic}-2")
    sent: list[tuple[str, str]] = []  # (value, fate) in offset order

    def send(p: Any, value: str, fate: str) -> None:
        p.send(topic, value=value.encode(), partition=0)
        p.flush()
        sent.append((value, fate))

    send(producer, "p0", "plain")
    t1.begin_transaction()
    send(t1, "a0", "a")
    send(producer, "p1", "plain")
    t2.begin_transaction()
    send(t2, "b0", "b")
    send(t1, "a1", "a")
    send(t2, "b1", "b")
    t1.abort_transaction()  # a: aborted after its records reached the log
    send(producer, "p2", "plain")
    send(t2, "b2", "b")
    t2.commit_transaction()  # b: committed, interleaved with a and p
    t1.begin_transaction()
    send(t1, "c0", "c")  # c: still open while the sources first read
    send(producer, "p3", "plain")

    def visible(fates: set[str]) -> list[str]:
        return [v for v, f in sent if f in fates]

    opts = {"brokers": bootstrap, "topic": topic, "format": "raw", "offset_reset": "earliest",
            "max_poll_records": "3"}
    rc = sources(schema=TEXT, options={**opts, "isolation.level": "read_committed"})
    before = visible({"plain", "b"})[:-1]  # not p3: it is behind the open c
    got, _ = drain(rc, rows=len(before), timeout=10)
    assert got.column("v").to_pylist() == before
    state = msgpack.unpackb(msgpack.packb(rc.checkpoint_state()), strict_map_key=False)
    c0_offset = [v for v, _ in sent].index("c0") + 2  # two markers before it: a's, b's
    assert state["offsets"] == {"0": c0_offset} and rc.lag() > 0
    # 'latest' under read_committed is the LSO (as in Kafka), not past the open transaction
    late = sources(schema=TEXT, options={**opts, "offset_reset": "latest",
                                         "isolation.level": "read_committed"})
    assert late.poll(timeout_ms=300)[0] is None
    assert late.positions() == {0: c0_offset}

    t1.commit_transaction()
    resumed = sources(schema=TEXT, options={**opts, "isolation.level": "read_committed"},
                      restore_state=state)
    got, _ = drain(resumed, rows=2, timeout=10)
    assert got.column("v").to_pylist() == ["c0", "p3"]
    for src in (rc, late):
        got, _ = drain(src, rows=2, timeout=10)
        assert got.column("v").to_pylist() == ["c0", "p3"]

    ru = sources(schema=TEXT, options=opts)
    got, _ = drain(ru, rows=len(sent), timeout=10)
    assert got.column("v").to_pylist() == [v for v, _ in sent]
    t1.close()
    t2.close()


def test_checkpoint_state_round_trip(new_topic: Callable[..., str], bootstrap: str,
                                     producer: Any, sources: Callable[..., Any]) -> None:
    """checkpoint_state() after a poll, through msgpack, resumes a new source at the same
    offsets with the same per-partition watermarks: the two runs together read each message
    once, and the watermark candidate does not go back."""
    topic = new_topic(2)
    schema = pa.schema([pa.field("ts", pa.int64(), nullable=False), ("v", pa.int64())])
    for i in range(40):
        producer.send(topic, value=json.dumps({"ts": 1000 + i, "v": i}).encode(),
                      partition=i % 2)
    producer.flush()
    opts = {"brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest",
            "max_poll_records": "7"}
    first = sources(schema=schema, time_col="ts", delay_ticks=5, options=opts)
    seen: list[int] = []
    wm = None
    deadline = time.monotonic() + 15
    while len(seen) < 20 and time.monotonic() < deadline:
        batch, wm = first.poll(timeout_ms=500)
        if batch is not None:
            seen += batch.column("v").to_pylist()
    state = msgpack.unpackb(msgpack.packb(first.checkpoint_state()), strict_map_key=False)
    marks = first.partition_watermarks()
    first.close()
    assert sum(state["offsets"].values()) == len(seen)

    second = sources(schema=schema, time_col="ts", delay_ticks=5, options=opts,
                     restore_state=state)
    assert second.positions() == {int(p): o for p, o in state["offsets"].items()}
    assert {p: wm_p for p, (wm_p, _) in second.partition_watermarks().items()} == {
        p: wm_p for p, (wm_p, _) in marks.items()}
    rest, wm2 = drain(second, rows=40 - len(seen))
    assert sorted(seen + rest.column("v").to_pylist()) == list(range(40))
    assert wm2 is not None and wm is not None and wm2 >= wm


@pytest.mark.parametrize("seed", range(20))
def test_committed_filter_matches_the_transaction_semantics(seed: int) -> None:
    """The read_committed filter over random logs — plain records, interleaved transactions of
    three producers, commits, aborts, one left open — fetched in random chunks and resumed
    from a checkpoint position at a random point: it delivers exactly the committed and plain
    records, in offset order, up to the first record of a still-open transaction."""
    import random

    import numpy as np

    from laminardb.connectors._kafka_fetch import _CommittedFilter
    from laminardb.connectors._kafka_records import ABORT, COMMIT, CONTROL, DATA, TRANSACTIONAL
    from laminardb.connectors._kafka_records import Records as Recs

    rng = random.Random(seed)
    log: list[tuple[int, int, int, int]] = []  # (offset, attributes, producer id, kind)
    open_txn: dict[int, list[int]] = {}
    fate: dict[int, bool] = {}  # data offset → visible
    for offset in range(rng.randrange(20, 80)):
        pid = rng.choice([1, 2, 3])
        roll = rng.random()
        if roll < 0.3:
            log.append((offset, 0, -1, DATA))
            fate[offset] = True
        elif roll < 0.75 or pid not in open_txn:
            log.append((offset, TRANSACTIONAL, pid, DATA))
            open_txn.setdefault(pid, []).append(offset)
        else:
            commit = rng.random() < 0.5
            log.append((offset, TRANSACTIONAL | CONTROL, pid, COMMIT if commit else ABORT))
            for o in open_txn.pop(pid):
                fate[o] = commit
    first_open = min((os[0] for os in open_txn.values()), default=len(log))
    want = [o for o in sorted(fate) if fate[o] and o < first_open]

    def fetch(start: int, stop: int) -> Recs:
        batches = log[start:stop]
        data = [o for o, attrs, _, _ in batches if not attrs & CONTROL]
        info = np.array([[o, o, a, p, k] for o, a, p, k in batches], np.int64).reshape(-1, 5)
        offs = np.array(data, np.int64)
        vals = pa.array([str(o).encode() for o in data], pa.large_binary())
        return Recs(offs, offs, vals, vals, stop, False, info)

    def run(position: int, cut: int | None) -> tuple[list[int], int]:
        """Read from ``position``; stop delivering at the first stable position ≥ ``cut``
        (a checkpoint there); returns the delivered offsets and the position reached."""
        filt, got, at = _CommittedFilter(), [], position
        while at < len(log):
            stop = min(len(log), at + rng.randrange(1, 8))
            ready, stable = filt.add(fetch(at, stop))
            for r in ready:
                got += r.offsets.tolist()
                assert r.next_offset <= stable
            position, at = stable, stop
            if cut is not None and position >= cut:
                break
        return got, position

    cut = rng.randrange(len(log))
    first, position = run(0, cut)
    assert first == [o for o in want if o < position]
    assert all(o < first_open for o in first)
    rest, _ = run(position, None)
    assert first + rest == want
