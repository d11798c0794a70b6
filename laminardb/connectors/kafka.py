"""Kafka connectors: :class:`KafkaSource` (consume a topic into Arrow batches with per-partition
watermarks) and :class:`KafkaSink` (produce a stream's rows as messages).

The source never joins a consumer group: it ``assign()`` s the partitions it is given (in Delta
mode, those of the vnodes its actor owns) and positions itself from ``start_offsets`` (a
checkpoint) or ``offset_reset``; offsets are never committed to Kafka, checkpoints hold them.
Each :meth:`KafkaSource.poll` drains what has been fetched (up to ``max_poll_records``),
decodes it in one vectorized pass (:mod:`laminardb.connectors._decode`) and returns one
``RecordBatch`` plus the watermark candidate (:mod:`laminardb.connectors._watermarks`).

Fetching (option ``fetcher``): ``raw`` (default) sends Fetch requests over kafka-python's
connections and parses the record batches in numba into Arrow arrays
(:mod:`laminardb.connectors._kafka_fetch`, :mod:`laminardb.connectors._kafka_records`):
~10× kafka-python's consumer, which builds one Python object per message. ``consumer`` uses
``KafkaConsumer.poll``; it is also what ``raw`` falls back to with kafka-python < 3 or
``kafka.isolation_level = 'read_committed'``.
Messages that do not decode go to the dead-letter topic (default ``<topic>.dlq``) with their
original key and value and headers ``laminardb.error``, ``laminardb.source``,
``laminardb.topic``, ``laminardb.partition``, ``laminardb.offset``; they never raise.

The sink is at-least-once: :meth:`KafkaSink.flush` waits for every acknowledgement and raises
:class:`SinkWriteError` if any message was not written.

Tansu (the test broker) reports a partition's end offset as the base offset of its last
record batch + 1, so ``end − position`` can read 0 while the tail of the last batch is unread:
:meth:`KafkaSource.lag` therefore counts at least 1 for a partition whose last poll returned
messages, so a drain loop (``while lag(): poll()``) stops only after an empty poll. The same
quirk makes ``offset_reset='latest'`` on Tansu re-deliver the tail of the last batch.
"""

from __future__ import annotations

import gc
import io
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from laminardb.connectors._decode import FORMATS, Decoder
from laminardb.connectors._kafka_fetch import RawFetcher, raw_fetch_supported
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors._watermarks import PartitionWatermarks
from laminardb.connectors.exceptions import (
    KafkaConfigError,
    KafkaUnavailableError,
    SinkClosedError,
    SinkWriteError,
)
from laminardb.connectors.files import json_lines

__all__ = ["KafkaSink", "KafkaSource"]

_log = logging.getLogger(__name__)

_DEFAULT_IDLE_TIMEOUT_MS = 5000
_DEFAULT_MAX_POLL_RECORDS = 65536
# How long metadata/topic creation may take before the broker counts as unreachable.
_METADATA_TIMEOUT_S = 10.0
# Dead letters are rare: wait this long for their acknowledgement before logging a failure.
_DLQ_FLUSH_TIMEOUT_S = 10.0
# Producer batching: a few ms of linger fills batches of ~10k small messages at full speed
# and adds at most that much latency when the stream is slow.
_LINGER_MS = 5
_BATCH_BYTES = 1 << 20
_SINK_FLUSH_TIMEOUT_S = 60.0


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while kafka-python builds one Python object per
    record: those objects hold no cycles (refcounting frees them), yet allocating ~10^5 of them
    triggers full collections that cost about half the consume time (bench_kafka: 79k → 142k
    events/s). Re-enabled only if it was enabled on entry, so nested or concurrent use never
    leaves it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _option_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _passthrough(options: dict[str, str]) -> dict[str, Any]:
    """``kafka.fetch.max.wait.ms = '50'`` → ``{"fetch_max_wait_ms": 50}`` for kafka-python."""
    return {k[len("kafka."):].replace(".", "_"): _option_value(str(v))
            for k, v in options.items() if k.startswith("kafka.")}


def _require(options: dict[str, str], name: str, what: str) -> str:
    value = options.get(name)
    if not value:
        msg = f"Kafka {what} needs option {name!r}: add {name} = '…' to its FROM/INTO KAFKA (…)"
        raise KafkaConfigError(msg)
    return str(value)


def _int_option(options: dict[str, str], name: str, default: int) -> int:
    try:
        return int(options.get(name, default))
    except (TypeError, ValueError):
        msg = f"Kafka option {name} = {options[name]!r} is not an integer: write e.g. {name} = '{default}'"
        raise KafkaConfigError(msg) from None


def _unavailable(brokers: str, exc: BaseException) -> KafkaUnavailableError:
    return KafkaUnavailableError(
        f"cannot reach Kafka at {brokers!r}: {exc}; check the brokers option and that the "
        "broker is running")


def _ensure_topic(brokers: list[str], topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=brokers, client_id="laminardb-admin")
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                              replication_factor=1)])
            except TopicAlreadyExistsError:
                pass  # created concurrently
    finally:
        admin.close()


class KafkaSource:
    """One source's Kafka consumer over manually assigned partitions (never a consumer group).

    Args:
        name: the source name (client id, dead-letter header).
        schema: the source schema; batches from :meth:`poll` have exactly it.
        options: from SQL: ``brokers``, ``topic``, ``format`` (json | csv | msgpack | raw),
            ``offset_reset`` (earliest | latest, default latest), ``key`` (column filled from
            the message key), ``dead_letter_topic`` (default ``<topic>.dlq``),
            ``idle_timeout_ms`` (5000), ``max_poll_records`` (65536), ``partitions`` (count
            used when the topic does not exist and is created), ``fetcher`` (raw |
            consumer, default raw: see the module docs), ``kafka.*`` (passed to
            kafka-python's ``KafkaConsumer``, dots as underscores).
        time_col: the event-time column (BIGINT ms, TIMESTAMP(3), TIMESTAMP(6)) or None.
        delay_ticks: the WATERMARK delay in ticks of ``time_col``.
        partitions: the Kafka partitions to read (default all of the topic).
        start_offsets: next offset per partition (from a checkpoint); others use offset_reset.

    Raises:
        KafkaConfigError: a missing or invalid option.
        KafkaUnavailableError: the brokers cannot be reached.
    """

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 time_col: str | None, delay_ticks: int, partitions: list[int] | None = None,
                 start_offsets: dict[int, int] | None = None) -> None:
        self.name, self.schema, self.time_col = name, schema, time_col
        self.brokers = _require(options, "brokers", f"source {name!r}")
        self.topic = _require(options, "topic", f"source {name!r}")
        fmt = str(options.get("format", "json")).lower()
        reset = str(options.get("offset_reset", "latest")).lower()
        key = options.get("key") or None
        self.dead_letter_topic = str(options.get("dead_letter_topic") or f"{self.topic}.dlq")
        self.max_poll_records = max(1, _int_option(options, "max_poll_records",
                                                   _DEFAULT_MAX_POLL_RECORDS))
        idle = _int_option(options, "idle_timeout_ms", _DEFAULT_IDLE_TIMEOUT_MS)
        if fmt not in FORMATS:
            msg = f"source {name!r}: format {fmt!r} is not supported; use one of {', '.join(FORMATS)}"
            raise KafkaConfigError(msg)
        fetcher = str(options.get("fetcher", "raw")).lower()
        if fetcher not in ("raw", "consumer"):
            msg = f"source {name!r}: fetcher must be 'raw' or 'consumer', not {fetcher!r}"
            raise KafkaConfigError(msg)
        if reset not in ("earliest", "latest"):
            msg = f"source {name!r}: offset_reset must be 'earliest' or 'latest', not {reset!r}"
            raise KafkaConfigError(msg)
        for col, what in ((key, "key"), (time_col, "event-time")):
            if col is not None and col not in schema.names:
                msg = (f"source {name!r}: the {what} column {col!r} is not one of its columns "
                       f"({', '.join(schema.names)})")
                raise KafkaConfigError(msg)
        if fmt == "raw":
            value_fields = [f for f in schema if f.name != key]
            if len(value_fields) != 1 or not (pa.types.is_string(value_fields[0].type)
                                              or pa.types.is_binary(value_fields[0].type)):
                msg = (f"source {name!r}: format 'raw' needs exactly one VARCHAR or BINARY "
                       "column (besides the key column) to receive the message value")
                raise KafkaConfigError(msg)
        self._decoder = Decoder(fmt, schema, key_column=key, time_column=time_col)  # type: ignore[arg-type]
        self._brokers = [b.strip() for b in self.brokers.split(",") if b.strip()]
        self._passthrough = _passthrough(options)
        self.decoded = self.dead_lettered = self.dead_letter_failures = 0
        self._dlq: Any = None
        self._just_polled: set[int] = set()
        # kafka-python consumers are not thread-safe, and the engine polls on a runner thread
        # while flush()/metrics() ask lag() and positions() from the caller's thread.
        self._lock = threading.RLock()
        self._closed = False

        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        conf: dict[str, Any] = dict(
            bootstrap_servers=self._brokers, group_id=None, enable_auto_commit=False,
            auto_offset_reset=reset, client_id=f"laminardb-{name}",
            max_poll_records=self.max_poll_records)
        conf.update(self._passthrough)
        try:
            self._consumer = KafkaConsumer(**conf)
        except AssertionError as exc:  # kafka-python's check of unknown configs
            raise KafkaConfigError(f"source {name!r}: bad kafka.* option: {exc}") from exc
        except KafkaError as exc:
            raise _unavailable(self.brokers, exc) from exc
        try:
            if partitions is None:
                partitions = self._topic_partitions(_int_option(options, "partitions", 1))
            self._tps = {p: TopicPartition(self.topic, p) for p in sorted(partitions)}
            self._consumer.assign(list(self._tps.values()))
            start_offsets = start_offsets or {}
            for p, tp in self._tps.items():
                if p in start_offsets:
                    self._consumer.seek(tp, int(start_offsets[p]))
                elif reset == "earliest":
                    self._consumer.seek_to_beginning(tp)
                else:
                    self._consumer.seek_to_end(tp)
            # resolve now: "latest" means when the source opened
            start = {p: int(self._consumer.position(tp)) for p, tp in self._tps.items()}
        except KafkaError as exc:
            self._consumer.close()
            raise _unavailable(self.brokers, exc) from exc
        self._raw: RawFetcher | None = None
        committed = str(self._passthrough.get("isolation_level", "")) == "read_committed"
        if fetcher == "raw" and not committed and raw_fetch_supported(self._consumer):
            self._raw = RawFetcher(self._consumer, self.topic, start, reset=reset,
                                   config=self._consumer.config, explicit=set(self._passthrough))
        self.fetcher = "raw" if self._raw is not None else "consumer"
        self._watermarks = PartitionWatermarks(self._tps, delay_ticks=delay_ticks,
                                               idle_timeout_ms=idle)

    def _topic_partitions(self, create_with: int) -> list[int]:
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        created = False
        while True:
            found = self._consumer.partitions_for_topic(self.topic)
            if found:
                return sorted(found)
            if not created:
                _ensure_topic(self._brokers, self.topic, max(1, create_with))
                created = True
            elif time.monotonic() > deadline:
                msg = (f"source {self.name!r}: topic {self.topic!r} has no partitions after "
                       f"{_METADATA_TIMEOUT_S:.0f} s: create it or check the brokers option")
                raise KafkaUnavailableError(msg)
            time.sleep(0.1)

    # -- reading -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 100) -> tuple[pa.RecordBatch | None, int | None]:
        """Rows decoded since the last poll as one batch (None if none) and the watermark
        candidate (None while it cannot be placed)."""
        with self._lock:
            if self._closed:
                return None, self._watermarks.current()
            return self._poll(timeout_ms)

    def _poll(self, timeout_ms: int) -> tuple[pa.RecordBatch | None, int | None]:
        if self._raw is None:
            return self._deliver(*self._poll_consumer(timeout_ms))
        chunks = self._raw.poll(timeout_ms, self.max_poll_records)
        if len(chunks) == 1:
            (p, r), = chunks
            return self._deliver([p], [len(r)], r.offsets, r.values, r.keys)
        return self._deliver(
            [p for p, _ in chunks], [len(r) for _, r in chunks],
            np.concatenate([r.offsets for _, r in chunks]) if chunks else np.empty(0, np.int64),
            pa.concat_arrays([r.values for _, r in chunks]) if chunks else [],
            pa.concat_arrays([r.keys for _, r in chunks]) if chunks else [])

    def _poll_consumer(self, timeout_ms: int) -> tuple[list[int], list[int], np.ndarray,
                                                       list[Any], list[Any]]:
        """kafka-python's ``KafkaConsumer.poll`` (option ``fetcher = 'consumer'``)."""
        left = self.max_poll_records
        chunks: list[tuple[int, list[Any]]] = []
        values: list[Any] = []
        keys: list[Any] = []
        offsets: list[int] = []
        counts = []
        with _no_cyclic_gc():
            fetched = self._consumer.poll(timeout_ms=timeout_ms, max_records=left)
            while fetched:
                for tp, recs in fetched.items():
                    chunks.append((tp.partition, recs))
                    left -= len(recs)
                if left <= 0:
                    break
                fetched = self._consumer.poll(timeout_ms=0, max_records=left)
            for _, recs in chunks:
                values += [r.value for r in recs]
                keys += [r.key for r in recs]
                offsets += [r.offset for r in recs]
                counts.append(len(recs))
        return ([p for p, _ in chunks], counts, np.array(offsets, np.int64), values, keys)

    def _deliver(self, partitions: list[int], counts: list[int], offsets: np.ndarray,
                 values: pa.Array | list[Any], keys: pa.Array | list[Any],
                 ) -> tuple[pa.RecordBatch | None, int | None]:
        """Decode one poll's messages (``counts[i]`` from ``partitions[i]``), dead-letter the
        bad ones, advance the watermarks."""
        self._just_polled = {p for p, c in zip(partitions, counts, strict=True) if c}
        if not partitions:
            return None, self._watermarks.current()
        parts = np.repeat(np.array(partitions, np.int64), counts)
        out = self._decoder.decode(values, keys if self._decoder.key_column else None)
        if out.rejected:
            self._dead_letter(out.rejected, parts, offsets, values, keys)
        self.decoded += out.table.num_rows
        self._advance(out.table, parts[out.positions], parts)
        wm = self._watermarks.current()
        if out.table.num_rows == 0:
            return None, wm
        batches = out.table.combine_chunks().to_batches()
        return batches[0], wm

    def _advance(self, table: pa.Table, row_parts: np.ndarray, all_parts: np.ndarray) -> None:
        delivered = np.unique(all_parts)
        ticks = None
        if self.time_col is not None and table.num_rows:
            col = table.column(self.time_col).combine_chunks()
            ticks = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
        for p in delivered.tolist():
            top = None
            if ticks is not None:
                mine = ticks[row_parts == p]
                if len(mine):
                    top = int(mine.max())
            self._watermarks.seen(p, max_event_time=top)

    def _dead_letter(self, rejected: list[tuple[int, str]], parts: np.ndarray,
                     offsets: np.ndarray, values: pa.Array | list[Any],
                     keys: pa.Array | list[Any]) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        def item(xs: pa.Array | list[Any], i: int) -> Any:
            return xs[i].as_py() if isinstance(xs, pa.Array) else xs[i]

        self.dead_lettered += len(rejected)
        try:
            if self._dlq is None:
                self._dlq = KafkaProducer(bootstrap_servers=self._brokers, acks="all",
                                          linger_ms=_LINGER_MS,
                                          client_id=f"laminardb-{self.name}-dlq")
            for i, error in rejected:
                headers = [("laminardb.error", error.encode()),
                           ("laminardb.source", self.name.encode()),
                           ("laminardb.topic", self.topic.encode()),
                           ("laminardb.partition", str(int(parts[i])).encode()),
                           ("laminardb.offset", str(int(offsets[i])).encode())]
                self._dlq.send(self.dead_letter_topic, value=item(values, i),
                               key=item(keys, i), headers=headers)
            self._dlq.flush(timeout=_DLQ_FLUSH_TIMEOUT_S)
        except KafkaError:  # the data is bad, not the pipeline: count and go on
            self.dead_letter_failures += len(rejected)
            _log.warning("source %s: %d messages could not be written to dead-letter topic %s",
                         self.name, len(rejected), self.dead_letter_topic, exc_info=True)

    # -- state -------------------------------------------------------------------------------

    def positions(self) -> dict[int, int]:
        """Next offset per assigned partition (what a checkpoint stores)."""
        with self._lock:
            if self._raw is not None:
                return self._raw.positions()
            return {p: int(self._consumer.position(tp)) for p, tp in self._tps.items()}

    def partition_watermarks(self) -> dict[int, tuple[int | None, bool]]:
        """``{partition: (wm_p, idle)}``: what a caller combining partitions read by several
        sources (Delta mode: one source per actor) needs to apply the same MIN/idle rule."""
        with self._lock:
            marks = self._watermarks
            return {p: (wm, marks.idle(p)) for p, wm in marks.per_partition().items()}

    def lag(self) -> int:
        """Messages not yet returned by :meth:`poll`: end offsets − positions, summed over the
        assigned partitions (at least 1 for a partition whose last poll returned messages;
        see the module docs on Tansu)."""
        with self._lock:
            if self._closed:
                return 0
            ends = self._consumer.end_offsets(list(self._tps.values()))
            positions = self.positions()
            total = 0
            for p, tp in self._tps.items():
                behind = max(0, int(ends.get(tp, 0) or 0) - positions[p])
                total += max(behind, 1 if p in self._just_polled else 0)
            return total

    def metrics(self) -> dict[str, Any]:
        """Counters and per-partition state for monitoring and autoscaling."""
        with self._lock:
            return self._metrics()

    def _metrics(self) -> dict[str, Any]:
        return {"decoded": self.decoded, "dead_lettered": self.dead_lettered,
                "dead_letter_failures": self.dead_letter_failures,
                "watermarks": self._watermarks.per_partition(),
                "idle": {p: self._watermarks.idle(p) for p in self._tps},
                "watermark": self._watermarks.current(),
                "positions": self.positions(), "lag": self.lag()}

    def close(self) -> None:
        """Close the consumer and the dead-letter producer; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._dlq is not None:
                self._dlq.close(timeout=_DLQ_FLUSH_TIMEOUT_S)
                self._dlq = None
            self._consumer.close()


class KafkaSink:
    """Writes a stream's rows to a topic, one message per row (at-least-once).

    Args:
        schema: the stream's schema (a changelog's ``__weight`` is an ordinary field).
        options: ``brokers``, ``topic``, ``format`` (json | csv | msgpack), ``key`` (a column
            whose text is the message key), ``kafka.*`` (passed to ``KafkaProducer``).

    JSON messages are objects with ISO-8601 timestamps; CSV lines have no header and the
    schema's column order; msgpack maps hold timestamps as ISO-8601 text.
    """

    def __init__(self, *, schema: pa.Schema, options: dict[str, str]) -> None:
        self.schema = schema
        self.brokers = _require(options, "brokers", "sink")
        self.topic = _require(options, "topic", "sink")
        self.format = str(options.get("format", "json")).lower()
        self.key = options.get("key") or None
        if self.format not in ("json", "csv", "msgpack"):
            msg = f"Kafka sink: format {self.format!r} is not supported; use json, csv or msgpack"
            raise KafkaConfigError(msg)
        if self.key is not None and self.key not in schema.names:
            msg = (f"Kafka sink: key column {self.key!r} is not one of the stream's columns "
                   f"({', '.join(schema.names)})")
            raise KafkaConfigError(msg)
        self.rows_written = 0
        self._closed = False
        self._futures: list[Any] = []
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        conf: dict[str, Any] = dict(
            bootstrap_servers=[b.strip() for b in self.brokers.split(",") if b.strip()],
            acks="all", linger_ms=_LINGER_MS, batch_size=_BATCH_BYTES,
            client_id="laminardb-sink", retries=5,
            # retries must not reorder messages of one partition
            max_in_flight_requests_per_connection=1)
        conf.update(_passthrough(options))
        try:
            self._producer = KafkaProducer(**conf)
        except AssertionError as exc:
            raise KafkaConfigError(f"Kafka sink: bad kafka.* option: {exc}") from exc
        except KafkaError as exc:
            raise _unavailable(self.brokers, exc) from exc

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue one message per row; :meth:`flush` waits until all are acknowledged."""
        if self._closed:
            raise SinkClosedError(f"Kafka sink for {self.topic!r} is closed: create a new one")
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if batch.num_rows == 0:
            return
        batch = self._conform(batch)
        values = self._encode(batch)
        keys: list[Any] = [None] * batch.num_rows
        if self.key is not None:
            keys = pc.cast(pc.cast(batch.column(self.key), pa.string()),
                           pa.binary()).to_pylist()
        send, topic, futures = self._producer.send, self.topic, self._futures
        try:
            with _no_cyclic_gc():  # one future per message: as in poll()
                for v, k in zip(values, keys, strict=True):
                    futures.append(send(topic, value=v, key=k))
        except Exception as exc:  # noqa: BLE001 - any producer failure is a write failure
            raise SinkWriteError(f"Kafka sink cannot write to {self.topic!r}: {exc}") from exc
        self.rows_written += batch.num_rows

    def _encode(self, table: pa.Table) -> list[bytes]:
        if self.format == "json":
            return pc.cast(json_lines(table), pa.binary()).to_pylist()
        if self.format == "csv":
            buf = io.BytesIO()
            pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False))
            lines = buf.getvalue().split(b"\n")[:-1]
            if len(lines) == table.num_rows:
                return lines
            out = []  # a quoted value holds a newline: one row at a time
            for i in range(table.num_rows):
                one = io.BytesIO()
                pacsv.write_csv(table.slice(i, 1), one, pacsv.WriteOptions(include_header=False))
                out.append(one.getvalue().rstrip(b"\n"))
            return out
        cols = [pc.cast(c, pa.string()) if pa.types.is_timestamp(c.type) else c
                for c in table.columns]
        rows = pa.Table.from_arrays(cols, names=table.column_names).to_pylist()
        return [msgpack.packb(r, use_bin_type=True) for r in rows]

    def _conform(self, table: pa.Table) -> pa.Table:
        return conform_to_sink(table, self.schema, f"Kafka sink for {self.topic!r}")

    def flush(self) -> None:
        """Wait until every written message is acknowledged.

        Raises:
            SinkWriteError: some messages were not written (they may be retried by replaying
                from the last checkpoint).
        """
        if self._closed:
            return
        from kafka.errors import KafkaError

        try:
            self._producer.flush(timeout=_SINK_FLUSH_TIMEOUT_S)
        except KafkaError as exc:
            raise SinkWriteError(f"Kafka sink: flush to {self.topic!r} failed: {exc}") from exc
        futures, self._futures = self._futures, []
        failed = [f for f in futures if not f.succeeded()]
        if failed:
            why = failed[0].exception if failed[0].is_done else "not acknowledged in time"
            msg = (f"Kafka sink: {len(failed)} of {len(futures)} messages to {self.topic!r} "
                   f"were not written ({why}); check the broker")
            raise SinkWriteError(msg)

    def close(self) -> None:
        """Flush and close; idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._producer.close(timeout=_SINK_FLUSH_TIMEOUT_S)
