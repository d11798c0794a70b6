"""Kafka connectors: :class:`KafkaSource` (consume a topic into Arrow batches with per-partition
watermarks); the sinks (:class:`KafkaSink`, at-least-once, and
:class:`~laminardb.connectors.kafka_sink.ExactlyOnceKafkaSink`) live in
:mod:`laminardb.connectors.kafka_sink` and are re-exported here.

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
``KafkaConsumer.poll``; it is also what ``raw`` falls back to with kafka-python < 3.

``isolation.level = 'read_committed'`` (also ``isolation_level``, ``kafka.isolation_level``;
default ``read_uncommitted``) delivers committed and non-transactional records only, in
offset order. The raw fetcher filters aborted transactions itself from the transaction
markers in the data, because Tansu (the test broker) sends no aborted-transaction list and
kafka-python's consumer (``fetcher = 'consumer'``) then delivers aborted records as if
committed.

Checkpoints: :meth:`KafkaSource.checkpoint_state` (next offset and watermark state per
partition, msgpack-able) and the constructor's ``restore_state`` resume a source exactly
where the data a checkpoint covers ends.

Messages that do not decode go to the dead-letter topic (default ``<topic>.dlq``) with their
original key and value and headers ``laminardb.error``, ``laminardb.source``,
``laminardb.topic``, ``laminardb.partition``, ``laminardb.offset``; they never raise.

Tansu (the test broker) reports a partition's end offset as the base offset of its last
record batch + 1, so ``end − position`` can read 0 while the tail of the last batch is unread:
:meth:`KafkaSource.lag` therefore counts at least 1 for a partition whose last poll returned
messages, so a drain loop (``while lag(): poll()``) stops only after an empty poll. The same
quirk makes ``offset_reset='latest'`` on Tansu re-deliver the tail of the last batch.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.connectors._decode import FORMATS, Decoder
from laminardb.connectors._kafka_common import (
    LINGER_MS,
    brokers_list,
    choice,
    ensure_topic,
    int_option,
    no_cyclic_gc,
    passthrough,
    require,
    unavailable,
)
from laminardb.connectors._kafka_fetch import RawFetcher, raw_fetch_supported
from laminardb.connectors._watermarks import PartitionWatermarks
from laminardb.connectors.exceptions import KafkaConfigError, KafkaUnavailableError
from laminardb.connectors.kafka_sink import ExactlyOnceKafkaSink, KafkaSink

__all__ = ["ExactlyOnceKafkaSink", "KafkaSink", "KafkaSource"]

_ensure_topic = ensure_topic  # the Delta mode's Kafka ingest imports it from here

_log = logging.getLogger(__name__)

_DEFAULT_IDLE_TIMEOUT_MS = 5000
_DEFAULT_OFFSET_RESET = "earliest"  # where a partition with no checkpointed offset starts
_DEFAULT_MAX_POLL_RECORDS = 65536
# How long metadata/topic creation may take before the broker counts as unreachable.
_METADATA_TIMEOUT_S = 10.0
# Dead letters are rare: wait this long for their acknowledgement before logging a failure.
_DLQ_FLUSH_TIMEOUT_S = 10.0
# checkpoint_state() layout; restore_state refuses others
_STATE_VERSION = 1


class KafkaSource:
    """One source's Kafka consumer over manually assigned partitions (never a consumer group).

    Args:
        name: the source name (client id, dead-letter header).
        schema: the source schema; batches from :meth:`poll` have exactly it.
        options: from SQL: ``brokers``, ``topic``, ``format`` (json | csv | msgpack | raw),
            ``offset_reset`` (earliest | latest, default earliest: a database reads a topic
            from its start unless told otherwise; a checkpoint's offsets, when there are any,
            win over it), ``key`` (column filled from
            the message key), ``dead_letter_topic`` (default ``<topic>.dlq``),
            ``idle_timeout_ms`` (5000), ``max_poll_records`` (65536), ``partitions`` (count
            used when the topic does not exist and is created), ``fetcher`` (raw |
            consumer, default raw: see the module docs), ``isolation.level``
            (read_uncommitted | read_committed, default read_uncommitted), ``kafka.*``
            (passed to kafka-python's ``KafkaConsumer``, dots as underscores).
        time_col: the event-time column (BIGINT ms, TIMESTAMP(3), TIMESTAMP(6)) or None.
        delay_ticks: the WATERMARK delay in ticks of ``time_col``.
        partitions: the Kafka partitions to read (default all of the topic).
        start_offsets: next offset per partition; others use offset_reset.
        restore_state: a :meth:`checkpoint_state` to resume from (overrides
            ``start_offsets``): its offsets and watermark state; a partition it does not
            name (added to the topic since) is read from its beginning.

    Raises:
        KafkaConfigError: a missing or invalid option.
        KafkaUnavailableError: the brokers cannot be reached.
        SnapshotFormatError: ``restore_state`` has an unknown layout.
    """

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 time_col: str | None, delay_ticks: int, partitions: list[int] | None = None,
                 start_offsets: dict[int, int] | None = None,
                 restore_state: dict[str, Any] | None = None) -> None:
        self.name, self.schema, self.time_col = name, schema, time_col
        self.brokers = require(options, "brokers", f"source {name!r}")
        self.topic = require(options, "topic", f"source {name!r}")
        fmt = str(options.get("format", "json")).lower()
        # earliest by default: 'latest' silently skipped what was produced before the source
        # opened (a README run read 393 of 2,000 rows); 'latest' is for tailing, when asked
        reset = str(options.get("offset_reset", _DEFAULT_OFFSET_RESET)).lower()
        key = options.get("key") or None
        self.dead_letter_topic = str(options.get("dead_letter_topic") or f"{self.topic}.dlq")
        self.max_poll_records = max(1, int_option(options, "max_poll_records",
                                                   _DEFAULT_MAX_POLL_RECORDS))
        idle = int_option(options, "idle_timeout_ms", _DEFAULT_IDLE_TIMEOUT_MS)
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
        self.isolation = choice(
            options, ("isolation.level", "isolation_level", "kafka.isolation_level"),
            ("read-uncommitted", "read-committed"), "read-uncommitted",
            f"source {name!r}").replace("-", "_")
        restored = _restored_offsets(name, self.topic, restore_state)
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
        self._brokers = brokers_list(self.brokers)
        self._passthrough = passthrough(options)
        self._passthrough.pop("isolation_level", None)
        self.decoded = self.dead_lettered = self.dead_letter_failures = 0
        self._dlq: Any = None
        self._just_polled: set[int] = set()
        # kafka-python consumers are not thread-safe, and the engine polls on a runner thread
        # while flush()/metrics() ask lag() and positions() from the caller's thread.
        self._lock = threading.RLock()
        self._closed = False

        from kafka import TopicPartition
        from kafka.errors import KafkaError

        committed = self.isolation == "read_committed"
        conf: dict[str, Any] = dict(
            bootstrap_servers=self._brokers, group_id=None, enable_auto_commit=False,
            auto_offset_reset=reset, client_id=f"laminardb-{name}",
            max_poll_records=self.max_poll_records)
        conf.update(self._passthrough)
        self._consumer = self._new_consumer(conf)
        if fetcher == "raw" and not raw_fetch_supported(self._consumer):
            fetcher = "consumer"
        if fetcher == "consumer" and committed:  # kafka-python filters (Tansu: see module docs)
            self._consumer.close()
            self._consumer = self._new_consumer({**conf, "isolation_level": "read_committed"})
        # the raw fetcher's consumer stays read_uncommitted: its ListOffsets (lag, 'latest')
        # then see the high watermark (Tansu answers 0 to read_committed ones)
        latest: set[int] = set()
        try:
            if partitions is None:
                partitions = self._topic_partitions(int_option(options, "partitions", 1))
            self._tps = {p: TopicPartition(self.topic, p) for p in sorted(partitions)}
            self._consumer.assign(list(self._tps.values()))
            if restored is not None:
                start_offsets = restored
            start_offsets = start_offsets or {}
            for p, tp in self._tps.items():
                if p in start_offsets:
                    self._consumer.seek(tp, int(start_offsets[p]))
                elif reset == "earliest" or restored is not None:
                    # a partition the checkpoint does not know is newer than it: all its data is
                    self._consumer.seek_to_beginning(tp)
                else:
                    self._consumer.seek_to_end(tp)
                    latest.add(p)
            # resolve now: "latest" means when the source opened
            start = {p: int(self._consumer.position(tp)) for p, tp in self._tps.items()}
        except KafkaError as exc:
            self._consumer.close()
            raise unavailable(self.brokers, exc) from exc
        self._raw: RawFetcher | None = None
        if fetcher == "raw":
            self._raw = RawFetcher(self._consumer, self.topic, start, reset=reset,
                                   config=self._consumer.config, explicit=set(self._passthrough),
                                   read_committed=committed, latest=latest)
        self.fetcher = "raw" if self._raw is not None else "consumer"
        self._watermarks = PartitionWatermarks(self._tps, delay_ticks=delay_ticks,
                                               idle_timeout_ms=idle)
        if restore_state is not None:
            self._watermarks.restore(restore_state.get("watermarks") or {})

    def _new_consumer(self, conf: dict[str, Any]) -> Any:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        try:
            return KafkaConsumer(**conf)
        except AssertionError as exc:  # kafka-python's check of unknown configs
            raise KafkaConfigError(f"source {self.name!r}: bad kafka.* option: {exc}") from exc
        except KafkaError as exc:
            raise unavailable(self.brokers, exc) from exc

    def _topic_partitions(self, create_with: int) -> list[int]:
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        created = False
        while True:
            found = self._consumer.partitions_for_topic(self.topic)
            if found:
                return sorted(found)
            if not created:
                ensure_topic(self._brokers, self.topic, max(1, create_with))
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
        with no_cyclic_gc():
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
                                          linger_ms=LINGER_MS,
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

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint keeps to resume this source (msgpack-able): the next offset of
        every partition and the per-partition watermark state, as of the last :meth:`poll`
        — call it right after a poll, before that poll's batch is ingested, and pass it back
        as ``restore_state``."""
        with self._lock:
            return {"v": _STATE_VERSION, "topic": self.topic,
                    "offsets": {str(p): o for p, o in self.positions().items()},
                    "watermarks": self._watermarks.state()}

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

    def partition_lag(self) -> dict[int, int | None]:
        """Messages behind the end of each partition, from the end offsets the last fetch
        responses carried (no request to the brokers, so it answers while they are down;
        None until a partition's end is known)."""
        with self._lock:
            if self._closed:
                return {}
            pos = self.positions()
            if self._raw is not None:
                ends: dict[int, int | None] = dict(self._raw.high_watermarks)
            else:
                ends = {p: self._consumer.highwater(tp) for p, tp in self._tps.items()}
            return {p: None if ends.get(p) is None else max(0, int(ends[p]) - pos[p])  # type: ignore[arg-type]
                    for p in self._tps}

    def fetch_failure(self) -> tuple[float, str] | None:
        """``(seconds failing, last reason)`` while fetches from the brokers keep failing
        (the raw fetcher retries them quietly; see :mod:`laminardb.connectors._kafka_fetch`),
        else None. The consumer fetcher reports nothing here."""
        raw = self._raw
        failing = None if raw is None else raw.failing()
        if failing is None:
            return None
        return time.monotonic() - failing[0], failing[1]

    def take_warnings(self) -> list[Exception]:
        """What the runner must show without stopping (``contracts.Source``): a position
        found past its partition's end and reset (``KafkaOffsetResetError``), once each."""
        from laminardb.connectors.exceptions import KafkaOffsetResetError

        raw = self._raw
        if raw is None:
            return []
        with self._lock:
            return [KafkaOffsetResetError(f"source {self.name!r}: {why}") for why in raw.take_resets()]

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


def _restored_offsets(name: str, topic: str,
                      state: dict[str, Any] | None) -> dict[int, int] | None:
    """The offsets of a :meth:`KafkaSource.checkpoint_state` (None without one)."""
    if state is None:
        return None
    if state.get("v") != _STATE_VERSION or not isinstance(state.get("offsets"), dict):
        msg = (f"source {name!r}: the checkpointed Kafka position has layout "
               f"{state.get('v')!r}, this laminardb reads layout {_STATE_VERSION}: open the "
               "database with the laminardb version that wrote it")
        raise SnapshotFormatError(msg)
    if state.get("topic") not in (None, topic):
        _log.warning("source %s: the checkpoint holds offsets of topic %r, the source reads %r: "
                     "its offsets are ignored", name, state.get("topic"), topic)
        return None
    return {int(p): int(o) for p, o in state["offsets"].items()}
