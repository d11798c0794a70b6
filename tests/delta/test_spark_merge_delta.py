"""The cross-node merge of a local-global aggregate runs in the coordinator's Spark epoch job,
end to end: a durable database of two real Ray actors (``spark_merge`` on) reads rows whose
group key is not how they are split (each actor takes a row range), aggregates on both actors,
and its only consumer, an exactly-once FILE sink, gets the actors' partials; the real Spark
coordinator merges and finishes them at each checkpoint. Oracle: DuckDB over the same rows.
The head's merger must not run while the sink is the only consumer; once a subscriber reads
the stream, the head merges again (the rule in docs/coordinator.md)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401
from tests.delta.workload import KAFKA_FILE_DDL, new_topic

pytestmark = pytest.mark.integration

DDL = """
CREATE SOURCE t (k BIGINT, v DOUBLE, i BIGINT, ts TIMESTAMP(3),
                 WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE STREAM per_key AS SELECT k, window_start, count(*) AS c, sum(v) AS s, avg(i) AS a,
    min(v) AS mn, max(i) AS mx FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND)
    HAVING avg(i) > 0 EMIT ON WINDOW CLOSE;
CREATE SINK out FROM per_key INTO FILE (path = '{out}', format = 'parquet');
"""
ORACLE = """SELECT k, time_bucket(INTERVAL '1 second', ts) AS window_start, count(*) AS c, sum(v) AS s,
    avg(i) AS a, min(v) AS mn, max(i) AS mx FROM raw
    GROUP BY k, time_bucket(INTERVAL '1 second', ts) HAVING avg(i) > 0"""
ROWS = 2000
COLS = ["k", "window_start", "c", "s", "a", "mn", "mx"]


def _batch(i: int) -> pa.Table:
    """Keys 0..29 and NULL spread over every row range; event time rising across batches."""
    rng = np.random.default_rng(i)
    idx = np.arange(i * ROWS, (i + 1) * ROWS)
    k = pa.array(rng.integers(0, 31, ROWS), mask=rng.random(ROWS) < 0.05)
    return pa.table({"k": k, "v": pa.array(rng.normal(size=ROWS), mask=rng.random(ROWS) < 0.1),
                     "i": pa.array(rng.integers(-40, 50, ROWS), mask=rng.random(ROWS) < 0.1),
                     "ts": pa.array(idx // 2, pa.timestamp("ms"))})


def _sentinel() -> pa.Table:
    """A row far ahead: the watermark closes every window of the batches."""
    return pa.table({"k": pa.array([None], pa.int64()), "v": pa.array([None], pa.float64()),
                     "i": pa.array([None], pa.int64()), "ts": pa.array([10**9], pa.timestamp("ms"))})


def _rows(table: pa.Table) -> list[tuple]:
    table = table.set_column(1, "window_start", table["window_start"].cast(pa.timestamp("us")))
    out = [tuple(r[c] for c in COLS) for r in table.select(COLS).to_pylist()]
    return sorted(out, key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))


def _assert_equal(got: pa.Table, raw: pa.Table) -> None:
    import duckdb

    con = duckdb.connect()
    con.register("raw", raw)
    want = _rows(con.sql(ORACLE).to_arrow_table())
    got_rows = _rows(got)
    assert len(got_rows) == len(want) > 0
    for a, b in zip(got_rows, want, strict=True):
        assert a[:3] == b[:3] and a[5:] == b[5:], (a, b)
        assert a[3] == pytest.approx(b[3]) and a[4] == pytest.approx(b[4]), (a, b)


def _committed(path) -> pa.Table:
    files = sorted(path.glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in files])


def test_the_only_consumer_sink_is_merged_in_spark_then_the_head_when_a_subscriber_comes(database, tmp_path):
    out = tmp_path / "out"
    db = database(checkpoint_interval="off", spark_merge=True)
    db.execute(DDL.format(out=out))
    raw = []
    for i in range(6):  # two checkpoints, three batches each: windows close in both epochs
        db.insert("t", _batch(i))
        raw.append(_batch(i))
        if i % 3 == 2:
            db.checkpoint()
    m = db.metrics()
    merges = m["cluster"]["partial_merge"]["per_key"]
    assert merges["merged_at_head"] == 0 and merges["to_spark"] > 0, merges
    assert m["database"]["coordinator"]["merged_in_spark"] == merges["to_spark"]
    _assert_equal(_committed(out), pa.concat_tables(raw[:5]))  # windows closed by batch 5's watermark

    sub = db.subscribe_stream("per_key")  # a second consumer: the key owners merge from now on
    for i in range(6, 8):
        db.insert("t", _batch(i))
        raw.append(_batch(i))
    db.insert("t", _sentinel())
    db.checkpoint()
    merges_after = db.metrics()["cluster"]["partial_merge"]["per_key"]
    assert merges_after["merged_on_actors"] > 0 and merges_after["to_spark"] == merges["to_spark"]
    assert merges_after["merged_at_head"] == 0
    _assert_equal(_committed(out), pa.concat_tables(raw))
    assert sub is not None




def _produce_not_by_key(bootstrap: str, topic: str, rows: list[dict]) -> None:
    """By sequence number, not key: each key's rows alternate partitions, so both actors."""
    import json

    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, value_serializer=lambda r: json.dumps(r).encode())
    try:
        for r in rows:
            p.send(topic, r, partition=r["seq"] % 2)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)


def test_kafka_partitions_not_keyed_by_the_group_key_merge_in_spark(database, kafka_broker, tmp_path):  # noqa: F811
    """Kafka → two actors (each reads one partition, every key in both) → FILE sink: the
    committed windows equal the embedded engine's, and the head merged no partial row."""
    from tests._services.procs import wait_until
    from tests.delta.workload import KAFKA_ROWS, SENTINEL_TS, expected_windows, kafka_rows

    topic = new_topic(kafka_broker.bootstrap, "merge")
    rows = kafka_rows(0, KAFKA_ROWS)
    _produce_not_by_key(kafka_broker.bootstrap, topic, rows + [{"k": 0, "seq": s, "v": 0, "ts": SENTINEL_TS} for s in (-1, -2)])
    want = expected_windows(KAFKA_ROWS)
    out = tmp_path / "out"
    db = database(checkpoint_interval="1s", spark_merge=True)
    db.execute(KAFKA_FILE_DDL.format(brokers=kafka_broker.bootstrap, src=topic, out=out))
    db.start()

    def windows() -> list[tuple]:
        files = sorted(out.glob("part-*.parquet"))
        got = pa.concat_tables([pq.read_table(p) for p in files]).to_pylist() if files else []
        return sorted((r["k"], r["window_start"], r["c"], r["s"]) for r in got)

    wait_until(lambda: len(windows()) >= len(want), timeout=180, interval=0.5)
    assert windows() == want
    merges = db.metrics()["cluster"]["partial_merge"]["per_key"]
    assert merges["merged_at_head"] == 0 and merges["to_spark"] > len(want), merges  # keys on both actors
