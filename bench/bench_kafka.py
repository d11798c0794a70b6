"""Kafka connector benchmark: KafkaSource consume+decode throughput against a real Tansu broker.

Run from the repository root:

    .venv/bin/python bench/bench_kafka.py                  # 1M JSON trade messages
    .venv/bin/python bench/bench_kafka.py --rows 200000 --format msgpack
    .venv/bin/python bench/bench_kafka.py --fetchers raw   # skip the slow kafka-python consumer

Steps: start Tansu on a free loopback port; produce N trade messages (``{"ts", "sym",
"price"}``, 1,000 symbols) to a topic with ``--partitions`` partitions (not timed); then, for
each fetcher (``raw``: laminardb's Fetch requests + numba record parser, the default;
``consumer``: kafka-python's ``KafkaConsumer.poll``, the path before it), time a fresh
:class:`KafkaSource` (offset_reset earliest) calling ``poll()`` until all N rows are back as
Arrow batches (best of ``--repeat``), and check the row count and the sum of ``ts``. Also
times the decoder alone over the same message values (no broker), to split the cost between
fetching/record parsing and decoding; and KafkaSink write+flush of the same rows. The last
stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.connectors._decode import Decoder  # noqa: E402
from laminardb.connectors.files import json_lines  # noqa: E402
from laminardb.connectors.kafka import KafkaSink, KafkaSource  # noqa: E402
from tests._services.kafka import start_kafka_broker  # noqa: E402

SCHEMA = pa.schema([pa.field("ts", pa.int64(), False), ("sym", pa.string()),
                    ("price", pa.float64())])


def make_rows(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64) // 100
    syms = np.array([f"SYM{i:04d}" for i in range(1000)], dtype=object)[rng.integers(0, 1000, n)]
    price = np.round(rng.uniform(10, 500, n) * 4) / 4
    return pa.table({"ts": ts, "sym": pa.array(syms, pa.string()), "price": price}, schema=SCHEMA)


def encode(table: pa.Table, fmt: str) -> list[bytes]:
    if fmt == "json":
        return pa.compute.cast(json_lines(table), pa.binary()).to_pylist()
    import msgpack

    return [msgpack.packb(r) for r in table.to_pylist()]


def consume_once(bootstrap: str, args: argparse.Namespace, fetcher: str, n: int,
                 want_ts: int) -> tuple[float, int, int | None]:
    """A fresh source reads all n rows: (seconds, polls, final watermark); checks the rows."""
    src = KafkaSource(name="trades", schema=SCHEMA, time_col="ts", delay_ticks=100,
                      options={"brokers": bootstrap, "topic": "trades", "format": args.format,
                               "offset_reset": "earliest", "fetcher": fetcher,
                               "max_poll_records": str(args.max_poll_records)})
    assert src.fetcher == fetcher, f"asked for fetcher {fetcher!r}, got {src.fetcher!r}"
    got, ts_sum, polls, wm = 0, 0, 0, None
    deadline = time.monotonic() + 600
    t0 = time.perf_counter()
    while got < n and time.monotonic() < deadline:
        batch, wm = src.poll(timeout_ms=500)
        polls += 1
        if batch is not None:
            got += batch.num_rows
            ts_sum += int(pa.compute.sum(batch.column("ts")).as_py())
    seconds = time.perf_counter() - t0
    src.close()
    assert got == n, f"{fetcher}: got {got} of {n} rows"
    assert ts_sum == want_ts, f"{fetcher}: wrong sum of ts"
    return seconds, polls, wm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--format", choices=["json", "msgpack"], default="json")
    ap.add_argument("--max-poll-records", type=int, default=65536)
    ap.add_argument("--fetchers", default="raw,consumer",
                    help="comma-separated KafkaSource fetchers to time (raw, consumer)")
    ap.add_argument("--repeat", type=int, default=2, help="consume runs per fetcher (best)")
    ap.add_argument("--no-sink", action="store_true", help="skip the sink measurement")
    args = ap.parse_args()
    n = args.rows

    table = make_rows(n)
    values = encode(table, args.format)
    size = sum(map(len, values))
    print(f"{n:,} {args.format} messages, {size / n:.0f} B each, {args.partitions} partitions")

    # decoder alone (no broker): what laminardb's vectorized decoding costs per message
    dec = Decoder(args.format, SCHEMA, time_column="ts")  # type: ignore[arg-type]
    chunk = args.max_poll_records
    t0 = time.perf_counter()
    decoded = 0
    for i in range(0, n, chunk):
        part = values[i:i + chunk]
        decoded += dec.decode(part, [None] * len(part)).table.num_rows
    decode_s = time.perf_counter() - t0
    assert decoded == n
    print(f"decode only:       {n / decode_s:>12,.0f} events/s  ({decode_s:.2f} s)")

    broker = start_kafka_broker()
    try:
        from kafka import KafkaAdminClient, KafkaProducer
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("trades", num_partitions=args.partitions,
                                      replication_factor=1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20,
                                 batch_size=1 << 20, acks=1)
        t0 = time.perf_counter()
        parts = args.partitions
        for i, v in enumerate(values):
            producer.send("trades", value=v, partition=i % parts)
        producer.flush()
        producer.close()
        produce_s = time.perf_counter() - t0
        print(f"produce (untimed): {n / produce_s:>12,.0f} events/s  ({produce_s:.2f} s)")

        want_ts = int(pa.compute.sum(table.column("ts")).as_py())
        consume: dict[str, float] = {}
        for fetcher in [f.strip() for f in args.fetchers.split(",") if f.strip()]:
            for _ in range(max(1, args.repeat)):
                s, polls, wm = consume_once(broker.bootstrap, args, fetcher, n, want_ts)
                consume[fetcher] = min(consume.get(fetcher, s), s)
                print(f"consume+decode ({fetcher}): {n / s:>10,.0f} events/s  ({s:.2f} s, "
                      f"{polls} polls, {n / polls:,.0f} rows/poll, watermark {wm})")
        if "raw" in consume and "consumer" in consume:
            print(f"raw / consumer:    {consume['consumer'] / consume['raw']:>12.1f}x")

        sink_s = None
        if not args.no_sink:
            sink = KafkaSink(schema=SCHEMA, options={"brokers": broker.bootstrap,
                                                     "topic": "out", "format": args.format})
            t0 = time.perf_counter()
            for b in table.to_batches(max_chunksize=65536):
                sink.write(b)
            sink.flush()
            sink_s = time.perf_counter() - t0
            sink.close()
            print(f"sink write+flush:  {n / sink_s:>12,.0f} events/s  ({sink_s:.2f} s)")
    finally:
        broker.stop()
    print("BENCH_JSON " + json.dumps({
        "rows": n, "format": args.format, "partitions": args.partitions,
        "bytes_per_msg": size / n, "decode_eps": n / decode_s,
        "consume_decode_eps": {f: n / s for f, s in consume.items()},
        "produce_eps": n / produce_s,
        "sink_eps": None if sink_s is None else n / sink_s}))


if __name__ == "__main__":
    main()
