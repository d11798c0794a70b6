"""KafkaSource's raw fetch path (``fetcher = 'raw'``: Fetch requests + the numba record parser)
against a real Tansu broker: the same rows, positions and dead letters as kafka-python's
consumer path, compressed batches, starting inside a batch, offset resets, batches larger than
the fetch size, and a broker that goes away."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from laminardb.connectors import _kafka_fetch
from laminardb.connectors.exceptions import KafkaUnavailableError
from tests._services.kafka import drain as drain_with_watermark

pytestmark = pytest.mark.integration

TRADES = pa.schema([pa.field("ts", pa.int64(), nullable=False), ("sym", pa.string()),
                    ("price", pa.float64())])


def drain(src: Any, *, rows: int, timeout: float = 15.0) -> pa.Table:
    return drain_with_watermark(src, rows=rows, timeout=timeout)[0]


def message(i: int) -> bytes:
    return json.dumps({"ts": i, "sym": f"S{i % 7}", "price": i / 4}).encode()


def test_raw_and_consumer_fetchers_agree(new_topic: Callable[..., str], producer: Any,
                                         sources: Callable[..., Any], bootstrap: str,
                                         read_topic: Callable[..., list[Any]]) -> None:
    topic = new_topic(3)
    bad = {5: b"not json", 17: b'{"ts": "x"}', 40: b"", 41: b'{"ts": 41,\n "sym": "pretty"}',
           42: b'{"ts": 42, "sym": "nl",\n'}
    sent = []
    for i in range(300):
        value = bad.get(i, message(i))
        producer.send(topic, value=value, key=f"k{i}".encode(), partition=i % 3)
        sent.append((i % 3, value))
        if i % 50 == 0:
            producer.flush()  # several batches per partition
    producer.flush()
    tables, positions, dead = {}, {}, {}
    for fetcher in ("raw", "consumer"):
        src = sources(name=fetcher, schema=TRADES, time_col="ts", options={
            "brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest",
            "fetcher": fetcher, "max_poll_records": "37",
            "dead_letter_topic": f"{topic}.{fetcher}.dlq"})
        assert src.fetcher == fetcher
        tables[fetcher] = drain(src, rows=296)
        positions[fetcher] = src.positions()
        dead[fetcher] = src.metrics()["dead_lettered"]
    assert sorted(tables["raw"].to_pylist(), key=lambda r: r["ts"]) == sorted(
        tables["consumer"].to_pylist(), key=lambda r: r["ts"])
    assert tables["raw"].num_rows == 300 - 4  # the pretty-printed one parses
    assert positions["raw"] == positions["consumer"] == {0: 100, 1: 100, 2: 100}
    assert dead["raw"] == dead["consumer"] == 4
    # dead letters carry partition and offset: offset = index // 3 within partition index % 3
    dlq = read_topic(f"{topic}.raw.dlq", expect=4)
    got = sorted((int(dict(r.headers)["laminardb.partition"]),
                  int(dict(r.headers)["laminardb.offset"]), r.value, r.key) for r in dlq)
    want = sorted((i % 3, i // 3, v, f"k{i}".encode()) for i, v in bad.items() if i != 41)
    assert got == want


def test_compressed_batches_and_a_start_inside_a_batch(bootstrap: str, new_topic: Callable[..., str],
                                                       sources: Callable[..., Any]) -> None:
    from kafka import KafkaProducer

    topic = new_topic(1)
    gz = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=50,
                       batch_size=1 << 20, client_id="laminardb-test-gzip")
    try:
        for i in range(1_000):
            gz.send(topic, value=message(i), partition=0)
        gz.flush()
    finally:
        gz.close(timeout=10)
    opts = {"brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest"}
    src = sources(schema=TRADES, time_col="ts", options=opts)
    assert drain(src, rows=1_000).column("ts").to_pylist() == list(range(1_000))
    assert src.positions() == {0: 1_000}
    mid = sources(schema=TRADES, time_col="ts", options=opts, partitions=[0],
                  start_offsets={0: 567})
    assert drain(mid, rows=433).column("ts").to_pylist() == list(range(567, 1_000))


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_offset_out_of_range_resets(reset: str, new_topic: Callable[..., str], producer: Any,
                                    sources: Callable[..., Any], bootstrap: str) -> None:
    """Tansu answers a fetch past the end with no records and no error (kafka-python's
    consumer then waits there too), so the broker's OffsetOutOfRange answer is injected into
    the fetcher; the reset itself (ListOffsets) goes to the real broker."""
    topic = new_topic(1)
    for i in range(20):
        producer.send(topic, value=message(i), partition=0)
    producer.flush()
    src = sources(schema=TRADES, time_col="ts", partitions=[0], start_offsets={0: 10_000},
                  options={"brokers": bootstrap, "topic": topic, "format": "json",
                           "offset_reset": reset})
    assert src.poll(timeout_ms=300)[0] is None and src.positions() == {0: 10_000}
    fetcher = src._raw
    out_of_range = SimpleNamespace(error_code=1, records=None, high_watermark=-1)
    with src._lock:
        assert not fetcher._partition(0, 10_000, out_of_range, time.monotonic())
    if reset == "earliest":
        assert src.positions() == {0: 0}
        assert drain(src, rows=20).column("ts").to_pylist() == list(range(20))
    else:  # the end (Tansu: the base offset of its last batch + 1, see kafka.py)
        assert 0 < src.positions()[0] <= 20
        producer.send(topic, value=message(99), partition=0)
        producer.flush()
        assert 99 in drain(src, rows=1).column("ts").to_pylist()
    stale = SimpleNamespace(error_code=1, records=None, high_watermark=-1)
    with src._lock:  # a response for an offset the partition has left is ignored
        assert not fetcher._partition(0, 10_000, stale, time.monotonic())


def test_batch_larger_than_the_fetch_size(new_topic: Callable[..., str], producer: Any,
                                          sources: Callable[..., Any], bootstrap: str) -> None:
    topic = new_topic(1)
    pad = "x" * 20_000
    for i in range(30):
        producer.send(topic, value=json.dumps({"ts": i, "sym": pad}).encode(), partition=0)
    producer.flush()
    src = sources(schema=TRADES, time_col="ts", options={
        "brokers": bootstrap, "topic": topic, "format": "json", "offset_reset": "earliest",
        "kafka.max_partition_fetch_bytes": "1024", "kafka.fetch_max_bytes": "1024"})
    table = drain(src, rows=30)
    assert table.column("ts").to_pylist() == list(range(30))
    assert src.positions() == {0: 30}


def test_unreachable_broker_raises_after_retries(monkeypatch: pytest.MonkeyPatch,
                                                 sources: Callable[..., Any]) -> None:
    from tests._services.kafka import start_kafka_broker

    broker = start_kafka_broker()
    try:
        src = sources(schema=TRADES, time_col="ts", options={
            "brokers": broker.bootstrap, "topic": "gone", "format": "json",
            "offset_reset": "earliest", "kafka.reconnect_backoff_max_ms": "200",
            "kafka.request_timeout_ms": "2000"})
        assert src.fetcher == "raw"
        assert src.poll(timeout_ms=100)[0] is None
    finally:
        broker.stop()
    monkeypatch.setattr(_kafka_fetch, "_GIVE_UP_S", 1.0)
    deadline = time.monotonic() + 30
    with pytest.raises(KafkaUnavailableError, match="kept failing"):
        while time.monotonic() < deadline:
            assert src.poll(timeout_ms=200)[0] is None
