"""A connector's watermark is authoritative: ``None`` ("not placed yet", e.g. a Kafka
partition that has not delivered) holds the watermark instead of falling back to the
batch's own max event time — which made the other partitions' rows late."""

from __future__ import annotations

import pyarrow as pa

import laminardb

DDL = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts - INTERVAL '100' MILLISECOND);"
       "CREATE STREAM w AS SELECT k, window_start, count(*) AS n FROM t "
       "GROUP BY k, tumble(ts, INTERVAL '1' SECOND)")


def _rows(k: str, start: int, end: int, step: int = 10) -> pa.RecordBatch:
    ts = list(range(start, end, step))
    return pa.record_batch({"ts": pa.array(ts, pa.int64()), "k": pa.array([k] * len(ts))})


def test_unplaced_connector_watermark_holds():
    db = laminardb.open()
    db.execute(DDL)
    sub = db.subscribe_stream("w")
    node = db.engine.reactor.nodes["t"]
    with db.engine.reactor.lock:
        # partition 0 runs ahead; partition 1 has not delivered yet: the connector says None
        db.engine.reactor.ingest(node, _rows("p0", 0, 3000), watermark=None)
        assert node.wm == db.engine.reactor.nodes["w"].wm  # nothing advanced
        # partition 1 arrives with older rows: none of them is late
        db.engine.reactor.ingest(node, _rows("p1", 0, 3000), watermark=2890)
    db.finish()
    assert db.metrics()["late_events_dropped"] == 0
    got = sorted((r["k"], r["window_start"], r["n"]) for r in sub.to_arrow().to_pylist())
    assert got == [(k, ws, 100) for k in ("p0", "p1") for ws in (0, 1000, 2000)]


def test_insert_still_follows_the_data():
    db = laminardb.open()
    db.execute(DDL)
    db.insert("t", _rows("a", 0, 3000))
    assert db.metrics()["watermarks"]["t"] == 2990 - 100
    db.insert("t", _rows("a", 0, 500))  # every window of these rows has closed
    assert db.metrics()["late_events_dropped"] == 50
