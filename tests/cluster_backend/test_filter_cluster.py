"""Aggregate ``FILTER (WHERE …)`` on the cluster: the same rows as embedded on two actors —
keyed, local-global (partial aggregates of filtered COUNT/SUM/MIN/MAX merged when windows
close) and unkeyed partials — and Nexmark q15–q17 as published."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import laminardb
from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate
from tests.cluster_backend.test_cluster_equivalence import _sorted
from tests.engine.oracle import duck

DDL = """
CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, qty BIGINT,
                      WATERMARK FOR ts AS ts - INTERVAL '300' MILLISECOND);
CREATE STREAM keyed AS SELECT sym, count(*) FILTER (WHERE qty > 4) AS big,
    count(DISTINCT qty) FILTER (WHERE price < 50) AS dq, sum(qty) FILTER (WHERE price IS NULL) AS nq
    FROM trades GROUP BY sym;
CREATE STREAM windowed AS SELECT sym, window_start, count(*) FILTER (WHERE qty > 4) AS big,
    sum(qty) FILTER (WHERE price < 50) AS sq, min(price) FILTER (WHERE qty < 3) AS lo,
    avg(price) FILTER (WHERE qty >= 5) AS ap
    FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND);
CREATE STREAM unkeyed AS SELECT window_start, count(*) FILTER (WHERE sym = 'AAPL') AS aapl,
    max(qty) FILTER (WHERE price > 90) AS hq FROM trades GROUP BY tumble(ts, INTERVAL '1' SECOND);
"""
STREAMS = ["keyed", "windowed", "unkeyed"]


def _fold(t: pa.Table) -> pa.Table:
    """A changelog folded by ``__weight`` (actors may emit other intermediate updates)."""
    if "__weight" not in t.column_names:
        return t
    cols = ", ".join(f'"{n}"' for n in t.column_names if n != "__weight")
    return duck(f"SELECT {cols} FROM t GROUP BY ALL HAVING sum(__weight) > 0", t=t)


def _batches(seed: int = 11, n_batches: int = 20) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        n = int(rng.integers(1, 300))
        out.append(pa.record_batch({
            "ts": pa.array(rng.integers(b * 300 - 200, b * 300 + 300, n), pa.int64()),
            "sym": pa.array(rng.choice(["AAPL", "MSFT", "GOOG", None], n)),
            "price": pa.array(np.round(rng.random(n) * 100, 2), mask=rng.random(n) < 0.1),
            "qty": pa.array(rng.integers(1, 10, n), pa.int64()),
        }))
    return out


def _run(db) -> dict[str, pa.Table]:
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for b in _batches():
        db.insert("trades", b)
    db.finish()
    return {s: subs[s].to_arrow() for s in STREAMS}


def _run_nexmark(db, name: str) -> pa.Table:
    db.execute(SOURCES_DDL)
    db.execute(QUERIES[name].statement())
    sub = db.subscribe_stream(name)
    for stream, batch in generate(20_000, seed=3, batch_events=4_096, config=NexmarkConfig(rate=1000.0)):
        db.insert(stream, batch)
    db.finish()
    return sub.to_arrow()


@pytest.mark.integration
@pytest.mark.parametrize("local_global", [True, False])
def test_filtered_aggregates_match_embedded_on_two_actors(clusters, local_global):
    from laminardb.cluster.backend import cluster_connection

    expected = _run(laminardb.open())
    db = cluster_connection(clusters[2], shutdown_on_close=False, local_global=local_global)
    try:
        got = _run(db)
    finally:
        db.close()
    for s in STREAMS:
        assert expected[s].num_rows > 0, s
        assert _sorted(_fold(got[s])) == _sorted(_fold(expected[s])), s


@pytest.mark.integration
@pytest.mark.parametrize("name", ["q15", "q16", "q17"])
def test_published_nexmark_q15_to_q17_on_two_actors(clusters, name):
    from laminardb.cluster.backend import cluster_connection

    assert QUERIES[name].status == "runs"
    expected = _run_nexmark(laminardb.open(), name)
    db = cluster_connection(clusters[2], shutdown_on_close=False)
    try:
        got = _run_nexmark(db, name)
    finally:
        db.close()
    assert expected.num_rows > 0
    assert _sorted(_fold(got)) == _sorted(_fold(expected))
