"""A deterministic workload with per-key sequence numbers, and the checks Flink's
exactly-once tests make: per key, the sequence numbers that come out are gap-free and
duplicate-free, and every aggregate equals the embedded engine's over the same rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

KEYS = 40
ROWS = 2_000  # per batch

DDL = """
CREATE SOURCE t (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL,
                 WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE STREAM passthru AS SELECT k, seq, v FROM t WHERE v >= 0;
CREATE STREAM per_key AS SELECT k, window_start, count(*) AS c, sum(v) AS s, max(seq) AS top
    FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE;
CREATE STREAM per_window AS SELECT window_start, count(*) AS c, sum(v) AS s
    FROM t GROUP BY tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW per_key_total AS SELECT k, count(*) AS c, sum(v) AS s FROM t GROUP BY k;
"""
STREAMS = ("passthru", "per_key", "per_window")


def batch(i: int, rows: int = ROWS) -> pa.Table:
    """Batch ``i``: keys round-robin (so key k's j-th row has seq j), event time rising."""
    n0 = i * rows
    idx = np.arange(n0, n0 + rows)
    rng = np.random.default_rng(i)
    return pa.table({"k": idx % KEYS, "seq": idx // KEYS, "v": rng.integers(0, 100, rows),
                     "ts": idx // 2})


def reference(batches: int) -> tuple[dict[str, pa.Table], pa.Table]:
    """The embedded engine over the same batches: every stream's rows and the view."""
    import laminardb

    with laminardb.open() as db:
        db.execute(DDL)
        subs = {s: db.subscribe_stream(s) for s in STREAMS}
        for i in range(batches):
            db.insert("t", batch(i))
        db.finish()
        return {s: subs[s].to_arrow() for s in STREAMS}, db.query("SELECT * FROM per_key_total").to_arrow()


def rows(table: pa.Table) -> list[tuple]:
    cols = sorted(c for c in table.column_names if c != "__weight")
    return sorted((tuple(r[c] for c in cols) for r in table.to_pylist()),
                  key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))


def assert_exactly_once(got: dict[str, pa.Table], view: pa.Table, batches: int) -> None:
    """Per key, seq is exactly 0..n-1 once each; aggregates equal the embedded engine's."""
    seqs: dict[int, list[int]] = {}
    for r in got["passthru"].select(["k", "seq"]).to_pylist():
        seqs.setdefault(r["k"], []).append(r["seq"])
    per_key_rows = batches * ROWS // KEYS
    for k in range(KEYS):
        s = sorted(seqs.get(k, []))
        dups = len(s) - len(set(s))
        missing = per_key_rows - len(set(s))
        assert dups == 0 and missing == 0, f"key {k}: {dups} duplicates, {missing} missing"
        assert s == list(range(per_key_rows))
    expected, expected_view = reference(batches)
    for name in ("per_key", "per_window"):
        assert rows(got[name]) == rows(expected[name]), name
    assert rows(view) == rows(expected_view)


# -- the same rows through Kafka (a Kafka→Kafka pipeline in the cluster) -------------------

_KAFKA_TUMBLE = """
CREATE SOURCE trades (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL,
                      WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)
    FROM KAFKA (brokers = '{brokers}', topic = '{src}', format = 'json', idle_timeout_ms = '60000');
CREATE STREAM per_key AS SELECT k, window_start, count(*) AS c, sum(v) AS s
    FROM trades GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE;
"""
KAFKA_DDL = _KAFKA_TUMBLE + """CREATE SINK out FROM per_key INTO KAFKA (brokers = '{brokers}', topic = '{dst}', format = 'json',
                                         delivery.guarantee = 'exactly-once');
"""
# The same keyed tumble into an exactly-once FILE sink ({brokers}, {src}, {out})
KAFKA_FILE_DDL = _KAFKA_TUMBLE + """CREATE SINK out FROM per_key INTO FILE (path = '{out}', format = 'parquet');
"""


def new_topic(bootstrap: str, tag: str, partitions: int = 2) -> str:
    """A fresh topic of ``partitions`` partitions, named after ``tag``, this process and now."""
    import os
    import time

    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"{tag}-{os.getpid()}-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    return topic
KAFKA_ROWS = 6_000
SENTINEL_TS = 10**9  # closes every window before it


def produce(bootstrap: str, topic: str, rows: list[dict], partitions: int = 2) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, value_serializer=lambda r: json.dumps(r).encode())
    try:
        for r in rows:
            p.send(topic, r, partition=r["k"] % partitions)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)


def produce_through_an_actor_kill(bootstrap: str, topic: str, db) -> None:
    """The Kafka fault workload: half the rows, read by ``db`` and covered by a checkpoint;
    its actor 1 SIGKILLed; the other half, then a sentinel per partition closing every window."""
    import os
    import signal
    import time

    from tests._services.procs import wait_until

    produce(bootstrap, topic, kafka_rows(0, KAFKA_ROWS // 2))
    wait_until(lambda: db.metrics()["events_ingested"] >= KAFKA_ROWS // 2, timeout=60)
    time.sleep(1.5)  # a checkpoint covers part of the input
    os.kill(db.metrics()["cluster"]["members"][1]["pid"], signal.SIGKILL)
    produce(bootstrap, topic, kafka_rows(KAFKA_ROWS // 2, KAFKA_ROWS))
    produce(bootstrap, topic, [{"k": p, "seq": -1, "v": 0, "ts": SENTINEL_TS} for p in range(2)])


def kafka_rows(lo: int, hi: int) -> list[dict]:
    b = batch(0, rows=KAFKA_ROWS)  # the same deterministic rows as the insert tests
    return b.slice(lo, hi - lo).to_pylist()


def expected_windows(rows: int = KAFKA_ROWS) -> list[tuple]:
    """The windows the first ``rows`` Kafka rows make, as sorted (k, window_start, c, s)."""
    import laminardb

    with laminardb.open() as ref:
        ref.execute("CREATE SOURCE trades (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL, "
                    "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND); CREATE STREAM per_key AS SELECT k, "
                    "window_start, count(*) AS c, sum(v) AS s FROM trades GROUP BY k, tumble(ts, "
                    "INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE")
        sub = ref.subscribe_stream("per_key")
        ref.insert("trades", kafka_rows(0, rows))
        ref.finish()
        return sorted((r["k"], r["window_start"], r["c"], r["s"]) for r in sub.to_arrow().to_pylist())


def committed_windows(bootstrap: str, topic: str) -> list[tuple]:
    """The sink topic's windows as a read_committed consumer sees them: (k, window_start, c, s)."""
    from tests.connectors.test_kafka_exactly_once import committed

    return sorted((r["k"], r["window_start"], r["c"], r["s"])
                  for r in (json.loads(rec["value"]) for rec in committed(bootstrap, topic)))


def settled_windows(bootstrap: str, topic: str, expected: list[tuple], *, timeout: float,
                    settle_s: float = 2.0) -> list[tuple]:
    """The sink topic's committed windows once it holds at least as many as ``expected`` and
    ``settle_s`` more seconds of checkpoints have run (they must add no duplicates)."""
    import time

    from tests._services.procs import wait_until

    wait_until(lambda: len(committed_windows(bootstrap, topic)) >= len(expected), timeout=timeout, interval=0.5)
    time.sleep(settle_s)
    return committed_windows(bootstrap, topic)
