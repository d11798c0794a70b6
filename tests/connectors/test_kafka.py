"""KafkaSource / KafkaSink against a real Tansu broker: decoding per format, dead letters,
per-partition watermarks with idleness, positions and lag, sink round trips, and SQL end to end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import msgpack
import pyarrow as pa
import pytest

from laminardb.connectors.exceptions import KafkaConfigError
from laminardb.connectors.kafka import KafkaSink
from tests._services.kafka import drain

pytestmark = pytest.mark.integration

TRADES = pa.schema([pa.field("ts", pa.int64(), nullable=False), ("sym", pa.string()),
                    ("price", pa.float64())])
ROWS = [
    {"ts": 1_000, "sym": "AAPL", "price": 190.5},
    {"ts": 1_500, "sym": "MSFT", "price": 410.0},
    {"ts": 2_100, "sym": None, "price": 1.25},
    {"ts": 2_900, "sym": "AAPL", "price": None},
    {"ts": 3_000, "sym": "a \"quoted\", comma", "price": -3.5},
]


def encode(fmt: str, row: dict[str, Any]) -> bytes:
    if fmt == "json":
        return json.dumps(row).encode()
    if fmt == "msgpack":
        return msgpack.packb(row, use_bin_type=True)
    cells = ["" if v is None else (f'"{v.replace(chr(34), 2 * chr(34))}"' if isinstance(v, str)
                                   else str(v)) for v in row.values()]
    return ",".join(cells).encode()


def by_ts(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["ts"])


@pytest.mark.parametrize("fmt", ["json", "msgpack", "csv"])
def test_source_decodes_every_format(fmt: str, new_topic: Callable[..., str], producer: Any,
                                     sources: Callable[..., Any], bootstrap: str) -> None:
    topic = new_topic(2)
    for i, row in enumerate(ROWS):
        producer.send(topic, value=encode(fmt, row), partition=i % 2)
    producer.flush()
    src = sources(schema=TRADES, time_col="ts", delay_ticks=100,
                  options={"brokers": bootstrap, "topic": topic, "format": fmt,
                           "offset_reset": "earliest"})
    table, wm = drain(src, rows=len(ROWS))
    assert table.schema == TRADES
    assert by_ts(table) == ROWS
    # partition 0 saw ts 1000, 2100, 3000; partition 1 saw 1500, 2900 → min(3000, 2900) − 100
    assert wm == 2_800
    assert src.metrics()["dead_lettered"] == 0
    assert src.positions() == {0: 3, 1: 2}


def test_bad_messages_go_to_dead_letter_topic(new_topic: Callable[..., str], producer: Any,
                                              sources: Callable[..., Any], bootstrap: str,
                                              read_topic: Callable[..., list[Any]]) -> None:
    topic = new_topic(1)
    messages = [
        (b'{"ts": 1, "sym": "A", "price": 1.0}', None),
        (b'{"ts": 2, "sym": "B", "price": ', "bad JSON"),  # truncated
        (b'{"ts": 3, "sym": "C", "price": "cheap"}', "price"),  # wrong type
        (b'{"ts": null, "sym": "D", "price": 4.0}', "'ts'"),  # NULL event time
        (b'{"sym": "E", "price": 5.0}', "'ts'"),  # missing event time
        (b'{"ts": 6, "sym": "F", "price": 6.0}', None),
        (b'[1, 2, 3]', "bad JSON"),  # not an object
        (b'{"ts": 8, "sym": "H", "price": 8.0}', None),
    ]
    for i, (value, _) in enumerate(messages):
        producer.send(topic, value=value, key=f"k{i}".encode(), partition=0)
    producer.flush()
    src = sources(schema=TRADES, time_col="ts", options={
        "brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest"})
    table, _ = drain(src, rows=3)
    assert table.column("sym").to_pylist() == ["A", "F", "H"]
    bad = [(i, why) for i, (_, why) in enumerate(messages) if why]
    assert src.metrics()["dead_lettered"] == len(bad)

    dlq = sorted(read_topic(f"{topic}.dlq", expect=len(bad)),
                 key=lambda r: int(dict(r.headers)["laminardb.offset"]))
    assert len(dlq) == len(bad)
    for rec, (i, why) in zip(dlq, bad, strict=True):
        headers = {k: v.decode() for k, v in rec.headers}
        assert rec.value == messages[i][0] and rec.key == f"k{i}".encode()
        assert headers["laminardb.topic"] == topic
        assert headers["laminardb.partition"] == "0"
        assert headers["laminardb.offset"] == str(i)
        assert headers["laminardb.source"] == "src"
        assert why in headers["laminardb.error"], headers["laminardb.error"]


def test_watermark_is_min_over_partitions_and_skips_idle_ones(
        new_topic: Callable[..., str], producer: Any, sources: Callable[..., Any],
        bootstrap: str) -> None:
    topic = new_topic(2)
    src = sources(schema=TRADES, time_col="ts", delay_ticks=1_000, options={
        "brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest",
        "idle_timeout_ms": "1500"})
    assert src.poll(timeout_ms=50) == (None, None)  # no data yet

    def send(partition: int, ts: int) -> None:
        producer.send(topic, value=encode("json", {"ts": ts, "sym": "X", "price": 1.0}),
                      partition=partition)
        producer.flush()

    send(0, 10_000)
    _, wm = drain(src, rows=1)
    assert wm is None  # partition 1 has no data and is not idle yet: it holds the watermark
    send(1, 5_000)
    _, wm = drain(src, rows=1)
    assert wm == 4_000  # min(10 000, 5 000) − 1 000
    assert src.metrics()["watermarks"] == {0: 9_000, 1: 4_000}
    assert src.partition_watermarks() == {0: (9_000, False), 1: (4_000, False)}

    # partition 1 falls silent: partition 0 alone drives the watermark once 1 is idle
    send(0, 20_000)
    _, wm = drain(src, rows=1)
    assert wm == 4_000
    deadline = time.monotonic() + 10
    while wm != 19_000 and time.monotonic() < deadline:
        send(0, 20_000)  # partition 0 stays active
        _, wm = src.poll(timeout_ms=200)
        time.sleep(0.2)
    assert wm == 19_000
    # all idle → max of them; never backwards when partition 1 wakes up behind
    time.sleep(1.6)
    assert src.poll(timeout_ms=50)[1] == 19_000
    send(1, 6_000)
    _, wm = drain(src, rows=1)
    assert wm == 19_000


def test_key_column_positions_lag_and_resume(new_topic: Callable[..., str], producer: Any,
                                             sources: Callable[..., Any],
                                             bootstrap: str) -> None:
    topic = new_topic(1)
    schema = pa.schema([("sym", pa.string()), pa.field("ts", pa.int64(), False),
                        ("price", pa.float64())])
    for i in range(10):
        producer.send(topic, key=f"S{i}".encode(),
                      value=encode("json", {"ts": i, "price": float(i)}), partition=0)
        producer.flush()  # one batch per message: Tansu's end offset is the last batch's base + 1
    opts = {"brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest",
            "key": "sym", "max_poll_records": "4"}
    src = sources(schema=schema, time_col="ts", options=opts)
    assert src.lag() == 10
    first, _ = src.poll(timeout_ms=5_000)
    assert first is not None and first.num_rows == 4
    assert first.column("sym").to_pylist() == ["S0", "S1", "S2", "S3"]
    assert src.positions() == {0: 4}
    assert src.lag() >= 1

    resumed = sources(schema=schema, time_col="ts", options=opts, partitions=[0],
                      start_offsets=src.positions())
    rest, _ = drain(resumed, rows=6)
    assert rest.column("ts").to_pylist() == list(range(4, 10))
    while resumed.lag():  # a drain loop ends: lag reaches 0 after an empty poll
        resumed.poll(timeout_ms=100)
    assert resumed.positions() == {0: 10}


def test_raw_format_and_bad_options(new_topic: Callable[..., str], producer: Any,
                                    sources: Callable[..., Any], bootstrap: str) -> None:
    topic = new_topic(1)
    for v in (b"hello", b"\xff\xfe", b"world"):
        producer.send(topic, value=v, partition=0)
    producer.flush()
    schema = pa.schema([("line", pa.string())])
    src = sources(schema=schema, options={"brokers": bootstrap, "topic": topic,
                                          "format": "raw", "offset_reset": "earliest"})
    table, wm = drain(src, rows=2)
    assert table.column("line").to_pylist() == ["hello", "world"] and wm is None
    assert src.metrics()["dead_lettered"] == 1
    with pytest.raises(KafkaConfigError, match="format"):
        sources(schema=schema, options={"brokers": bootstrap, "topic": topic, "format": "xml"})
    with pytest.raises(KafkaConfigError, match="brokers"):
        sources(schema=schema, options={"topic": topic})
    with pytest.raises(KafkaConfigError, match="raw"):
        sources(schema=TRADES, options={"brokers": bootstrap, "topic": topic, "format": "raw"})


@pytest.mark.parametrize("fmt", ["json", "csv", "msgpack"])
def test_sink_round_trip(fmt: str, new_topic: Callable[..., str], sources: Callable[..., Any],
                         bootstrap: str, read_topic: Callable[..., list[Any]]) -> None:
    topic = new_topic(1)
    schema = pa.schema([("sym", pa.string()), ("window_start", pa.timestamp("ms")),
                        ("n", pa.int64()), ("avg", pa.float64()), ("__weight", pa.int64())])
    rows = [
        {"sym": "AAPL", "window_start": 1_700_000_000_000, "n": 3, "avg": 1.5, "__weight": 1},
        {"sym": "MS,FT", "window_start": 1_700_000_001_123, "n": 1, "avg": None,
         "__weight": -1},
        {"sym": None, "window_start": 1_700_000_002_000, "n": 7, "avg": -2.25, "__weight": 1},
    ]
    batch = pa.RecordBatch.from_pylist(
        rows, schema=pa.schema([("sym", pa.string()), ("window_start", pa.int64()),
                                ("n", pa.int64()), ("avg", pa.float64()),
                                ("__weight", pa.int64())])).cast(schema)
    sink = KafkaSink(schema=schema, options={"brokers": bootstrap, "topic": topic,
                                             "format": fmt, "key": "n"})
    try:
        sink.write(batch)
        sink.flush()
    finally:
        sink.close()
    records = read_topic(topic, expect=3)
    assert [r.key for r in records] == [b"3", b"1", b"7"]
    src = sources(schema=schema, options={"brokers": bootstrap, "topic": topic, "format": fmt,
                                          "offset_reset": "earliest"})
    table, _ = drain(src, rows=3)
    assert table.to_pylist() == batch.to_pylist()


def test_sql_end_to_end_matches_duckdb(new_topic: Callable[..., str], producer: Any,
                                       bootstrap: str,
                                       read_topic: Callable[..., list[Any]]) -> None:
    import duckdb
    import numpy as np

    import laminardb

    trades, bars = new_topic(1), f"bars-{new_topic(1)}"
    rng = np.random.default_rng(3)
    n = 3_000
    ts = 1_700_000_000_000 + np.arange(n) * 4 - rng.integers(0, 500, n)  # jitter < the 1 s delay
    rows = [{"ts": int(t), "sym": f"S{rng.integers(0, 5)}", "price": float(i % 97)}
            for i, t in enumerate(ts)]
    bad = [b'{"ts": "soon", "sym": "S0", "price": 1}', b"not json"]

    db = laminardb.open()
    try:
        db.execute(f"""CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
            FROM KAFKA (brokers = '{bootstrap}', topic = '{trades}', format = 'json',
                        offset_reset = 'earliest')""")
        db.execute("CREATE STREAM bars AS SELECT sym, window_start, count(*) AS n FROM trades "
                   "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
        db.execute(f"CREATE SINK out FROM bars INTO KAFKA (brokers = '{bootstrap}', "
                   f"topic = '{bars}', format = 'json')")
        db.start()
        for i, row in enumerate(rows):
            producer.send(trades, value=json.dumps(row).encode(), partition=0)
            if i == n // 2:
                for b in bad:
                    producer.send(trades, value=b, partition=0)
        producer.flush()
        db.flush()
        db.finish()
    finally:
        db.close()

    got = sorted((json.loads(r.value)["sym"], json.loads(r.value)["window_start"],
                  json.loads(r.value)["n"]) for r in read_topic(bars, expect=1))
    con = duckdb.connect()
    con.execute("CREATE TABLE t (ts BIGINT, sym VARCHAR, price DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(r["ts"], r["sym"], r["price"])
                                                       for r in rows])
    # window_start of a BIGINT time column is BIGINT epoch ms
    want = con.execute("SELECT sym, ts // 1000 * 1000 AS ws, count(*) FROM t GROUP BY ALL "
                       "ORDER BY ALL").fetchall()
    assert got == [tuple(r) for r in want]
    dlq = read_topic(f"{trades}.dlq", expect=len(bad))
    assert sorted(r.value for r in dlq) == sorted(bad)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_column_declared_camel_case_reads_the_camel_case_key(fmt: str, new_topic: Callable[..., str],
                                                               producer: Any, bootstrap: str) -> None:
    """``userId`` unquoted in the DDL becomes the column ``userid`` (SQL folds it); messages
    that spell the key ``userId`` fill it, as ``insert()`` matches names — it never reads as
    a silent NULL. The answer equals the same rows given to ``insert_json``."""
    import laminardb

    topic = new_topic(1)
    rows = [{"userId": i % 3, "eventTs": 1_000 + i, "amountCents": i} for i in range(30)]
    for row in rows:
        producer.send(topic, value=encode(fmt, row), partition=0)
    producer.flush()
    ddl = ("CREATE SOURCE pay (userId BIGINT, eventTs BIGINT NOT NULL, amountCents BIGINT, "
           "WATERMARK FOR eventTs AS eventTs){}; "
           "CREATE STREAM per_user AS SELECT userId, count(*) AS n, sum(amountCents) AS total "
           "FROM pay GROUP BY userId")
    answers = []
    for kafka in (True, False):
        db = laminardb.open()
        try:
            db.execute(ddl.format(f" FROM KAFKA (brokers = '{bootstrap}', topic = '{topic}', "
                                  f"format = '{fmt}', offset_reset = 'earliest')" if kafka else ""))
            view = db.subscribe_stream("per_user")
            if kafka:
                db.start()
                db.flush()  # every message produced so far is read
            else:
                db.insert_json("pay", "\n".join(json.dumps(r) for r in rows))
            db.finish()
            got = view.to_arrow().to_pylist()
        finally:
            db.close()
        answers.append(sorted((r["userId"], r["n"], r["total"]) for r in got))
    assert answers[0] == answers[1]
    assert {u for u, _, _ in answers[0]} == {0, 1, 2}  # no NULL group: every key was read
