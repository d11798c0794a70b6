"""Rows left on the actors that read them (``RemoteRows``) give the embedded answer for
every kind of query — keyed (routed actor → actor), local-global, stateless, the source's
own subscribers — and a query that was not planned when the rows were read still gets
them (fetched through the client)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import laminardb

ray = pytest.importorskip("ray")

DDL = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v BIGINT, WATERMARK FOR ts AS ts);"
       "CREATE STREAM per_key AS SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k;"
       "CREATE STREAM windows AS SELECT k, window_start, count(*) AS n, max(v) AS mx FROM t "
       "GROUP BY k, tumble(ts, INTERVAL '100' MILLISECOND);"
       "CREATE STREAM big AS SELECT ts, k, v FROM t WHERE v > 7")
LATE_DDL = "CREATE STREAM late_q AS SELECT k, min(v) AS lo FROM t GROUP BY k"
STREAMS = ["per_key", "windows", "big", "t", "late_q"]


def _batches() -> list[pa.RecordBatch]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(6):
        n = 300
        out.append(pa.record_batch({"ts": pa.array(np.sort(rng.integers(i * 100, i * 100 + 100, n)), pa.int64()),
                                    "k": pa.array(rng.choice(["a", "b", "c", "d", "e", "f"], n)),
                                    "v": pa.array(rng.integers(0, 10, n), pa.int64())}))
    return out


def _remote(db, batches: list[pa.RecordBatch], plan_queries: list[str]):
    """What ClusterKafkaSource.poll builds: each batch 'read' by one actor, split there."""
    from laminardb.cluster.remote_rows import RemoteRows
    from laminardb.cluster.routing import route_rows
    from laminardb.cluster.wire import to_ipc_array

    schema = db.engine.reactor.nodes["t"].schema  # what a reading actor's connector produces
    batches = [pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches]
    polls = []
    for a, b in enumerate(batches):
        routed = {}
        for q in plan_queries:
            parts = route_rows(db.engine.reactor.nodes[q].op.plan, b, db.engine.backend.cluster.routing.owner, db.engine.backend.cluster.n_actors)
            routed[q] = [ray.put(to_ipc_array(p)) if p.num_rows else None for p in parts]
        polls.append((a % db.engine.backend.cluster.n_actors, {"rows": b.num_rows, "max_event_time": int(b["ts"].to_numpy().max()),
                                                "whole": ray.put(to_ipc_array(b)), "routed": routed}))
    return RemoteRows.merge(schema, polls, db.engine.backend.cluster.n_actors)


def _run(db, remote: bool) -> dict[str, list]:
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS if s != "late_q"}
    batches = _batches()
    for i in range(0, len(batches), 2):
        pair = batches[i:i + 2]
        if i == 2:
            db.execute(LATE_DDL)
            subs["late_q"] = db.subscribe_stream("late_q")
        if remote:
            keyed = [n for n in ("per_key",) if db.engine.reactor.nodes[n].op.mode == "keyed"]
            rows = _remote(db, pair, keyed)  # late_q: not planned when these rows were read
            node = db.engine.reactor.nodes["t"]
            with db.engine.reactor.lock:
                db.engine.reactor.ingest(node, rows, watermark=int(max(b["ts"].to_numpy().max() for b in pair)))
        else:  # the same rows as one batch: EMIT CHANGES emits once per batch
            db.insert("t", pa.Table.from_batches(pair))
    db.finish()
    return {s: sorted(tuple(r.values()) for r in subs[s].to_arrow().to_pylist()) for s in STREAMS}


@pytest.mark.integration
def test_remote_rows_give_the_embedded_answer(clusters):
    from laminardb.cluster.backend import cluster_connection

    expected = _run(laminardb.open(), remote=False)
    db = cluster_connection(clusters[2], shutdown_on_close=False)
    try:
        got = _run(db, remote=True)
        ops = {n: db.engine.reactor.nodes[n].op for n in ("per_key", "windows", "big", "late_q")}
        assert ops["per_key"].mode == "keyed" and ops["windows"].mode == "local_global"
        assert ops["per_key"].fetched_to_client == 0  # routed actor → actor
        assert ops["late_q"].fetched_to_client > 0  # created after its rows were read
    finally:
        db.close()
    for s in STREAMS:
        assert got[s] == expected[s], s
        assert expected[s], f"{s}: the scenario must produce rows"
