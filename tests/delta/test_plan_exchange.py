"""Plan trees on Kafka rows move actor → actor, never through the head (issue 20, item 1): the
actors run the whole tree over the rows they read and hand a stateful node's rows to its
owners by object reference; the head schedules those messages and decodes only the root's
output. Checked on Nexmark q20 (bid ⋈ auction, filtered) and q3 (auction ⋈ person) read from
a real Kafka broker by two actors, against the embedded engine over the same events."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate
from tests._services.fixtures import kafka_broker  # noqa: F401
from tests.nexmark.test_nexmark import _fold, _normalize

pytestmark = pytest.mark.integration

TREES = ("q20", "q3")
EVENTS = 20_000
BATCH_EVENTS = 2_000
PARTITIONS = 2


def _produce(bootstrap: str, prefix: str, batches: list) -> int:
    """Each stream's events as JSON lines in ``<prefix>-<stream>``, round robin over partitions."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    from laminardb.connectors.files import json_lines

    streams = sorted({s for s, _ in batches})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(f"{prefix}-{s}", PARTITIONS, 1) for s in streams])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    sent = 0
    try:
        for stream, batch in batches:
            for v in pc.cast(json_lines(batch), pa.binary()).to_pylist():
                producer.send(f"{prefix}-{stream}", value=v, partition=sent % PARTITIONS)
                sent += 1
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    return sent


def _kafka_ddl(bootstrap: str, prefix: str) -> str:
    out = []
    for stmt in (s.strip() for s in SOURCES_DDL.split(";") if s.strip()):
        name = stmt.split()[2]
        out.append(f"{stmt} FROM KAFKA (brokers = '{bootstrap}', topic = '{prefix}-{name}', format = 'json', "
                   "offset_reset = 'earliest')")
    return ";\n".join(out)


def _run(db, bootstrap: str, prefix: str, events: int) -> dict[str, pa.Table]:
    """Read the topics into the trees until every event is in and the input is finished."""
    from tests._services.procs import wait_until

    db.execute(_kafka_ddl(bootstrap, prefix))
    for q in TREES:
        db.execute(QUERIES[q].statement())
    subs = {q: db.subscribe_stream(q) for q in TREES}
    db.start()
    wait_until(lambda: db.metrics()["events_ingested"] >= events, timeout=120, what="every event read")
    db.flush(timeout_s=60)
    db.finish()
    return {q: subs[q].to_arrow() for q in TREES}


def test_kafka_tree_rows_move_actor_to_actor_and_the_head_decodes_only_the_root_output(
        ray_cluster, kafka_broker, monkeypatch):  # noqa: F811
    import laminardb
    from laminardb.cluster import distributed_plan
    from laminardb.cluster.actor_pool import ActorPool
    from laminardb.cluster.backend import cluster_connection
    from laminardb.cluster.remote_rows import RemoteRows

    prefix = f"xch-{time.monotonic_ns()}"
    events = _produce(kafka_broker.bootstrap, prefix, list(generate(EVENTS, seed=5, batch_events=BATCH_EVENTS)))
    with laminardb.open() as ref:  # the oracle: the embedded engine reading the same topics
        want = {q: _normalize(_fold(t)) for q, t in _run(ref, kafka_broker.bootstrap, prefix, events).items()}

    fetched: list[int] = []  # rows the head fetched off the reading actors
    materialize = RemoteRows.materialize
    monkeypatch.setattr(RemoteRows, "materialize", lambda self: fetched.append(self.num_rows) or materialize(self))
    decoded: list[int] = []  # rows the head decoded in the trees' operators
    from_ipc = distributed_plan.from_ipc
    monkeypatch.setattr(distributed_plan, "from_ipc", lambda data: (b := from_ipc(data), decoded.append(b.num_rows))[0])

    db = cluster_connection(ActorPool(2, 64), shutdown_on_close=True)
    try:
        raw = _run(db, kafka_broker.bootstrap, prefix, events)
        ops = {q: db.engine.reactor.nodes[q].op for q in TREES}
    finally:
        db.close()

    assert all(isinstance(op, distributed_plan.DistributedPlanOperator) for op in ops.values())
    assert fetched == []  # no Kafka row was fetched to the head
    # the head decoded the roots' output and nothing else: no row between two nodes
    assert sum(decoded) == sum(op.counts.root_rows for op in ops.values()) == sum(t.num_rows for t in raw.values())
    for q in TREES:
        assert ops[q].counts.messages > 0, q  # the joins' inputs did cross between the actors
        assert want[q], f"{q}: the scenario must produce rows"
        assert _normalize(_fold(raw[q])) == want[q], q


class _InProcess:
    """A ``ReactorActorImpl`` called in this process the way Ray calls an actor (``.remote``
    runs the method at once): the exchange's steps, without Ray's scheduling in the way."""

    def __init__(self, impl) -> None:
        self.impl = impl

    def __getattr__(self, method: str):
        from types import SimpleNamespace

        return SimpleNamespace(remote=getattr(self.impl, method))


class _Cluster:
    """What ``DistributedPlanOperator`` needs of an ``ActorPool``, over in-process actors."""

    def __init__(self, impls: list, owner) -> None:
        from laminardb.cluster.routing import Routing

        self.actors = [_InProcess(i) for i in impls]
        self.n_actors = len(impls)
        self.routing = Routing(owner)

    def gather(self, targets, futures, method):
        return futures

    def call_each(self, targets, method, *args):
        return [getattr(self.actors[a], method).remote(*args) for a in targets]

    def single_owner(self) -> int:
        return int(self.routing.owner[0])


@pytest.mark.parametrize("inline_bytes", [0, 1 << 40], ids=["by-reference", "inline"])
@pytest.mark.parametrize("query", ["q20", "q5", "q19"])
def test_two_actors_exchanging_rows_equal_one_tree(ray_cluster, monkeypatch, query, inline_bytes):
    """The actors' side of the exchange (``ReactorActorImpl.plan_*`` over ``ActorExchange``),
    two of them in this process, every part passed by reference or every part inline: the
    roots' output, batch by batch and watermark by watermark, folds to what one embedded tree
    emits — joins, windows closed by watermarks (q5) and Top-N (q19)."""
    import numpy as np

    import laminardb
    from laminardb.cluster import exchange
    from laminardb.cluster.distributed_plan import DistributedPlanOperator
    from laminardb.cluster.reactor_actor import ReactorActorImpl
    from laminardb.cluster.remote_rows import RemoteRows
    from laminardb.cluster.routing import Routing
    from laminardb.cluster.wire import to_ipc_array

    monkeypatch.setattr(exchange, "INLINE_BYTES", inline_bytes)
    monkeypatch.delattr("os.sched_setaffinity", raising=False)  # the actors would pin this process
    owner = Routing.from_members(2, 64).owner
    impls = [ReactorActorImpl(a, 2) for a in range(2)]
    with laminardb.open() as ref:
        try:
            for db in [ref] + [i.conn for i in impls]:
                db.execute(SOURCES_DDL)
                db.execute(QUERIES[query].statement())
            for impl in impls:
                impl.set_ownership(owner.tobytes(), np.zeros(64, np.int64).tobytes(), 2)
            one = ref.engine.reactor.nodes[query].op
            two = DistributedPlanOperator(query, one.plan, _Cluster(impls, owner))
            want, got, wm = [], [], -(2**62)
            for i, (stream, batch) in enumerate(generate(12_000, seed=7, batch_events=1_500, config=NexmarkConfig(rate=1000.0))):
                want += one.process_input(stream, batch, wm)[0]
                if i % 2:  # Kafka-style: each half read by one actor, never at the head
                    import ray

                    half = batch.num_rows // 2
                    rows = RemoteRows(batch.schema, batch.num_rows, None,
                                      [(0, ray.put(to_ipc_array(batch.slice(0, half)))),
                                       (1, ray.put(to_ipc_array(batch.slice(half))))])
                    got += two.process_input(stream, rows, wm)[0]
                else:
                    got += two.process_input(stream, batch, wm)[0]
                wm = max(wm, int(np.asarray(batch.column("dateTime").cast("int64")).max()) - 4_000)
                want += one.on_watermark(wm)
                got += two.on_watermark(wm)
        finally:
            for impl in impls:
                impl.conn.close()
    assert two.counts.messages > 0
    assert want, "the scenario must produce rows"
    assert _normalize(_fold(pa.Table.from_batches(got))) == _normalize(_fold(pa.Table.from_batches(want)))
