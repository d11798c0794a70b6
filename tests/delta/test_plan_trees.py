"""Plan trees in the Delta mode (issue 10, "Distribution"): every stateful node of a join,
OVER, Top-N or subquery tree runs on the actors, partitioned by its own key; rows move
actor → actor where consecutive keys differ (the head only schedules them). Checked the Flink way: the
Nexmark tree queries over the same generated rows, with an actor SIGKILLed and the database
rescaled 2 → 1 → 2 mid-stream, equal an unbroken embedded run (changelogs folded)."""

from __future__ import annotations

import os
import signal

import pytest

from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate
from tests._services.fixtures import kafka_broker  # noqa: F401
from tests.nexmark.test_nexmark import _fold, _normalize

pytestmark = pytest.mark.integration

#: the tree queries that read no PROCTIME() (those run at the head, stamped by its clock)
TREES = ("q3", "q4", "q5", "q7", "q8", "q9", "q18", "q19", "q20", "q23")
EVENTS = 24_000
BATCH_EVENTS = 2_000
SLOW = NexmarkConfig(rate=1000.0)  # windows open and close as the rows arrive


def _batches() -> list:
    return list(generate(EVENTS, seed=11, batch_events=BATCH_EVENTS, config=SLOW))


def _pids(db) -> list[int]:
    return [m["pid"] for m in db.metrics()["cluster"]["members"]]


def _run(db, batches, faults: dict) -> dict:
    db.execute(SOURCES_DDL)
    for name in TREES:
        db.execute(QUERIES[name].statement())
    subs = {n: db.subscribe_stream(n) for n in TREES}
    for i, (stream, batch) in enumerate(batches):
        db.insert(stream, batch)
        if i in faults:
            faults[i](db)
    db.finish()
    return {n: _fold(subs[n].to_arrow()) for n in TREES}


def test_tree_state_lives_on_the_actors_through_kills_and_rescales(database):
    import laminardb

    batches = _batches()
    with laminardb.open() as ref:
        want = _run(ref, batches, {})
    n = len(batches)
    seen: dict = {}

    def look(db) -> None:  # both actors took rows of the trees' stateful nodes
        seen["rows_per_actor"] = db.metrics()["cluster"]["rows_per_actor"]

    faults = {
        n // 6: lambda db: db.checkpoint(),
        n // 5: lambda db: db.checkpoint(),  # a delta of the joins' state: the kill restores a chain
        n // 4: look,
        n // 3: lambda db: os.kill(_pids(db)[1], signal.SIGKILL),  # recovered at the next call
        n // 2: lambda db: db.scale(1),
        2 * n // 3: lambda db: db.scale(2),
        3 * n // 4: lambda db: db.checkpoint(),
        5 * n // 6: lambda db: os.kill(_pids(db)[0], signal.SIGKILL),
    }
    db = database("trees-faults", coordinator="local", checkpoint_interval="off")
    got = _run(db, batches, faults)
    assert all(r > 0 for r in seen["rows_per_actor"]), seen
    m = db.metrics()
    assert len(m["database"]["recoveries"]) >= 2
    assert [(r["previous"], r["actors"]) for r in m["autoscale"]["rescales_done"]] == [(2, 1), (1, 2)]
    for name in TREES:
        assert want[name].num_rows > 0, name
        assert _normalize(got[name]) == _normalize(want[name]), name


def test_a_kafka_join_pipeline_commits_exactly_once_through_an_actor_kill(database, kafka_broker):  # noqa: F811
    """Kafka → a tree (an interval self-join, then a windowed aggregate keyed differently:
    rows move actor → actor between them) → an exactly-once Kafka sink; an actor is
    SIGKILLed mid-stream; the sink topic, read committed, equals the embedded engine's result."""
    import time

    from kafka.admin import KafkaAdminClient, NewTopic

    import laminardb
    from tests.delta.workload import (
        KAFKA_ROWS,
        kafka_rows,
        produce_through_an_actor_kill,
        settled_windows,
    )

    bootstrap = kafka_broker.bootstrap
    src, dst = f"tin-{time.monotonic_ns()}", f"tout-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 1, 1)])
    admin.close()
    source = ("CREATE SOURCE trades (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL, "
              "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)")
    query = ("CREATE STREAM per_key AS SELECT k, window_start, count(*) AS c, sum(v2) AS s FROM ("
             "SELECT a.k, a.ts, a.v + b.v AS v2 FROM trades a JOIN trades b ON a.k = b.k AND a.seq = b.seq + 1 "
             "AND a.ts BETWEEN b.ts AND b.ts + INTERVAL '5' SECOND) AS j "
             "GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE")
    with laminardb.open() as ref:
        ref.execute(f"{source}; {query}")
        sub = ref.subscribe_stream("per_key")
        ref.insert("trades", kafka_rows(0, KAFKA_ROWS))
        ref.finish()
        expected = sorted((r["k"], r["window_start"], r["c"], r["s"]) for r in sub.to_arrow().to_pylist())
    assert expected

    db = database("kafka-tree", checkpoint_interval="1s")
    db.execute(f"{source} FROM KAFKA (brokers = '{bootstrap}', topic = '{src}', format = 'json', "
               f"idle_timeout_ms = '60000'); {query}; CREATE SINK out FROM per_key INTO KAFKA (brokers = "
               f"'{bootstrap}', topic = '{dst}', format = 'json', delivery.guarantee = 'exactly-once')")
    db.start()
    produce_through_an_actor_kill(bootstrap, src, db)
    assert settled_windows(bootstrap, dst, expected, timeout=180) == expected
    assert len(db.metrics()["database"]["recoveries"]) >= 1


def test_a_trees_metrics_sum_its_nodes_on_the_actors(database):
    """``metrics()`` of a tree on the cluster: the rows its nodes hold and the late rows they
    dropped, summed over the actors, equal the embedded engine's over the same rows."""
    import laminardb
    from tests.delta.workload import DDL, batch

    tree = ("CREATE STREAM pairs AS SELECT a.k, a.seq, b.v FROM t a JOIN t b ON a.k = b.k AND a.seq = b.seq "
            "AND a.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts")

    def run(db) -> dict:
        db.execute(DDL + ";" + tree)
        for i in range(4):
            db.insert("t", batch(i))
        late = batch(0).slice(0, 100)  # event times far behind the watermark
        db.insert("t", late)
        return db.metrics()["queries"]["pairs"]

    with laminardb.open() as ref:
        want = run(ref)
    got = run(database("tree-metrics", coordinator="local", checkpoint_interval="off"))
    assert want["late_dropped"] > 0 and want["state_rows"] > 0
    assert (got["late_dropped"], got["state_rows"]) == (want["late_dropped"], want["state_rows"])
    assert got["state_bytes"] > 0


def test_nodes_without_a_key_run_on_one_actor_and_keep_their_state_through_a_kill(database):
    """A global aggregate over a join, a LAG and a Top-N without PARTITION BY: each such node
    runs on the owner of vnode 0, and its state survives an actor kill and a rescale."""
    import laminardb
    from tests.delta.workload import DDL, batch, rows

    trees = {
        "total": "SELECT count(*) AS n, sum(v2) AS s FROM (SELECT a.k, a.v + b.v AS v2 FROM t a JOIN t b "
                 "ON a.k = b.k AND a.seq = b.seq AND a.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts) AS j",
        "prev": "SELECT k, seq, v, LAG(v) OVER (ORDER BY ts) AS before FROM t",
        "top3": "SELECT * FROM (SELECT k, v, ts, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) WHERE rn <= 3",
    }

    def run(db, faults: dict) -> dict:
        db.execute(DDL + ";" + ";".join(f"CREATE STREAM {n} AS {q}" for n, q in trees.items()))
        subs = {n: db.subscribe_stream(n) for n in trees}
        for i in range(12):
            db.insert("t", batch(i))
            if i in faults:
                faults[i](db)
        db.finish()
        return {n: _fold(subs[n].to_arrow()) for n in trees}

    with laminardb.open() as ref:
        want = run(ref, {})
    got = run(database("keyless", coordinator="local", checkpoint_interval="off"), {
        2: lambda db: db.checkpoint(),
        4: lambda db: os.kill(_pids(db)[0], signal.SIGKILL),
        6: lambda db: db.scale(1),
        8: lambda db: db.scale(2),
        9: lambda db: os.kill(_pids(db)[1], signal.SIGKILL),
    })
    for n in trees:
        assert want[n].num_rows > 0, n
        assert rows(got[n]) == rows(want[n]), n
