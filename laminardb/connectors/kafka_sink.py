"""Kafka sinks: :class:`KafkaSink` (at-least-once: rows are produced as they arrive) and
:class:`ExactlyOnceKafkaSink` (a checkpoint's rows appear once, in one Kafka transaction).

``CREATE SINK s FROM stream INTO KAFKA (brokers = '…', topic = '…', delivery.guarantee =
'exactly-once')`` on a database opened with ``laminardb.open(directory)`` builds the second
(:func:`delivery_guarantee` reads the option; ``'at-least-once'``, the default, builds the
first). Both encode rows the same way (:class:`_Encoder`: json, csv or msgpack).

Exactly-once, and why it is built this way. kafka-python has the transactional producer but
no way for a new producer to finish a transaction that a crashed one prepared:
``init_transactions`` on the same transactional.id aborts it. So the sink never leaves
output in an open transaction across a checkpoint. Rows of the open epoch are staged durably
with the checkpoint (:class:`~laminardb.checkpoint.sink.EpochStage`, Arrow IPC under the
database directory); ``commit(e)`` then, for each staged epoch ``<= e`` in order, runs ONE
transaction that produces the epoch's rows and commits the offset ``epoch`` for partition 0
of the sink topic in a consumer group of its own (``send_offsets_to_transaction``, the
*marker*), and drops the staged file. Kafka makes the rows and the marker visible together,
so the group's committed offset says which epoch is the last one in the topic.
``recover(e, info)`` starts a producer (which fences the previous one and aborts any
transaction it left open), reads the marker (``OffsetFetch``), drops staged epochs at or
below it, produces the ones in (marker, e] and discards the ones above ``e``. Every retry
goes through the same start-fence-read-marker steps, so a transaction whose outcome was
unknown (a timeout in EndTxn) is settled before anything is produced again.

Ids: ``transactional.id = laminardb-<sink>-<writer>-<token>`` and the marker group
``laminardb-sink-<sink>-<writer>-<token>``, where the token is random and kept in the stage
directory (``kafka-sink.id``): stable across restarts of one database, and new for a
database created again at the same path (whose epochs restart at 1 and must not be taken
for epochs the old one committed). The marker group shows up in group listings with no
members; Kafka forgets an empty group's offsets after ``offsets.retention.minutes`` (7 days
by default): a database closed longer than that while an epoch sat committed-but-staged
(a crash in the instant between the two) would produce that one epoch again. Every record
carries the headers ``laminardb.epoch`` and ``laminardb.engine.writer``, so readers and tests can
tell epochs apart.

Tansu 0.6 (the test broker), checked by tests/connectors/test_kafka_exactly_once.py:
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn work;
OffsetFetch returns the offset of the last committed transaction and never one from an
aborted or fenced transaction; a new producer on the same transactional.id aborts the open
transaction of the old one and fences it (ProducerFenced on its next AddPartitionsToTxn; an
EndTxn from the fenced producer makes Tansu drop the connection instead of answering, and
kafka-python then retries it without end — one more reason every wait here is bounded, and
why a fenced producer is dropped without an abort). Its Fetch responses carry no
aborted-transaction list, so kafka-python's read_committed consumer delivers aborted records
from Tansu; laminardb's KafkaSource with ``isolation.level = 'read_committed'`` filters
them itself (:mod:`laminardb.connectors._kafka_fetch`). OffsetFetch ignores
``require_stable`` (harmless here: the marker is only read after InitProducerId settled our
last transaction).

Errors (Flink's KafkaCommitter table): retriable Kafka errors and timeouts restart the
producer and retry, ``_COMMIT_ATTEMPTS`` times within ``_COMMIT_DEADLINE_S``; ProducerFenced
(another writer with our transactional.id started, or the broker aborted a transaction that
ran past ``transaction.timeout.ms``) and authorization errors are not retried now. Either way
:class:`~laminardb.checkpoint.exceptions.SinkCommitError` says that the epoch stays staged:
the next checkpoint's commit, or the recovery on reopen, produces it (once).
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from laminardb.checkpoint._files import atomic_write
from laminardb.checkpoint.exceptions import SinkCommitError
from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink
from laminardb.connectors._kafka_common import (
    BATCH_BYTES,
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
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import KafkaConfigError, SinkClosedError, SinkWriteError
from laminardb.connectors.files import json_lines

__all__ = ["DeliveryGuarantee", "ExactlyOnceKafkaSink", "KafkaSink", "delivery_guarantee"]

log = logging.getLogger(__name__)

DeliveryGuarantee = Literal["at-least-once", "exactly-once"]

_SINK_FLUSH_TIMEOUT_S = 60.0
# A commit gives up (SinkCommitError; the epoch stays staged) after this many attempts or
# this long: it runs under the engine lock, so a broker outage must not stall it for long.
_COMMIT_ATTEMPTS = 3
_COMMIT_DEADLINE_S = 60.0
_RETRY_BACKOFF_S = 0.5
# Bound on one blocking producer step (InitProducerId, flush, TxnOffsetCommit, EndTxn).
_STEP_TIMEOUT_S = 30.0
# Bound on aborting a failed transaction before dropping its producer: best effort (the next
# InitProducerId aborts it anyway), it only spares readers a stalled LSO meanwhile.
_ABORT_TIMEOUT_S = 5.0
# Rows encoded per step while producing a staged epoch (bounds the Python objects alive).
_ENCODE_ROWS = 65536
_TOKEN_FILE = "kafka-sink.id"
_WRITER = re.compile(r"^[A-Za-z0-9_-]+$")


def delivery_guarantee(options: dict[str, str]) -> DeliveryGuarantee:
    """The ``delivery.guarantee`` (or ``delivery_guarantee``) of a Kafka sink's options;
    Flink's ``'none'`` gets at-least-once (never less than asked for)."""
    value = choice(options, ("delivery.guarantee", "delivery_guarantee"),
                   ("at-least-once", "exactly-once", "none"), "at-least-once", "Kafka sink")
    return "exactly-once" if value == "exactly-once" else "at-least-once"


class _Encoder:
    """A sink's rows → message values (json | csv | msgpack) and keys (the ``key`` column)."""

    def __init__(self, schema: pa.Schema, options: dict[str, str], what: str) -> None:
        self.format = str(options.get("format", "json")).lower()
        self.key = options.get("key") or None
        if self.format not in ("json", "csv", "msgpack"):
            msg = f"{what}: format {self.format!r} is not supported; use json, csv or msgpack"
            raise KafkaConfigError(msg)
        if self.key is not None and self.key not in schema.names:
            msg = (f"{what}: key column {self.key!r} is not one of the stream's columns "
                   f"({', '.join(schema.names)})")
            raise KafkaConfigError(msg)

    def keys(self, table: pa.Table) -> list[Any]:
        if self.key is None:
            return [None] * table.num_rows
        return pc.cast(pc.cast(table.column(self.key), pa.string()), pa.binary()).to_pylist()

    def values(self, table: pa.Table) -> list[bytes]:
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


def _producer_conf(brokers: str, options: dict[str, str], client_id: str, *,
                   transactional_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = dict(
        bootstrap_servers=brokers_list(brokers), acks="all", linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES, client_id=client_id, retries=5)
    if transactional_id is None:
        conf["max_in_flight_requests_per_connection"] = 1  # retries must not reorder
    conf.update(passthrough(options))
    if transactional_id is not None:  # idempotence keeps the order with up to 5 in flight
        conf.update(transactional_id=transactional_id, enable_idempotence=True,
                    max_block_ms=int(_STEP_TIMEOUT_S * 1000))
    return conf


def _new_producer(conf: dict[str, Any], brokers: str, what: str) -> Any:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        return KafkaProducer(**conf)
    except AssertionError as exc:  # kafka-python's check of unknown configs
        raise KafkaConfigError(f"{what}: bad kafka.* option: {exc}") from exc
    except KafkaError as exc:
        raise unavailable(brokers, exc) from exc


class KafkaSink:
    """Writes a stream's rows to a topic, one message per row (at-least-once).

    Args:
        schema: the stream's schema (a changelog's ``__weight`` is an ordinary field).
        options: ``brokers``, ``topic``, ``format`` (json | csv | msgpack), ``key`` (a column
            whose text is the message key), ``kafka.*`` (passed to ``KafkaProducer``).

    JSON messages are objects with ISO-8601 timestamps; CSV lines have no header and the
    schema's column order; msgpack maps hold timestamps as ISO-8601 text.

    Raises:
        KafkaConfigError: a missing or invalid option, or ``delivery.guarantee =
            'exactly-once'`` (that needs :class:`ExactlyOnceKafkaSink` and a durable database).
    """

    def __init__(self, *, schema: pa.Schema, options: dict[str, str]) -> None:
        self.schema = schema
        self.brokers = require(options, "brokers", "sink")
        self.topic = require(options, "topic", "sink")
        if delivery_guarantee(options) == "exactly-once":
            msg = (f"Kafka sink for {self.topic!r}: delivery.guarantee = 'exactly-once' needs "
                   "a durable database, whose checkpoints commit the sink's transactions: open "
                   "it with laminardb.open('./directory'), or use 'at-least-once'")
            raise KafkaConfigError(msg)
        self._encoder = _Encoder(schema, options, "Kafka sink")
        self.format, self.key = self._encoder.format, self._encoder.key
        self.rows_written = 0
        self._closed = False
        self._futures: list[Any] = []
        self._producer = _new_producer(_producer_conf(self.brokers, options, "laminardb-sink"),
                                       self.brokers, "Kafka sink")

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue one message per row; :meth:`flush` waits until all are acknowledged."""
        if self._closed:
            raise SinkClosedError(f"Kafka sink for {self.topic!r} is closed: create a new one")
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if batch.num_rows == 0:
            return
        batch = conform_to_sink(batch, self.schema, f"Kafka sink for {self.topic!r}")
        values, keys = self._encoder.values(batch), self._encoder.keys(batch)
        send, topic, futures = self._producer.send, self.topic, self._futures
        try:
            with no_cyclic_gc():  # one future per message: as in KafkaSource.poll()
                for v, k in zip(values, keys, strict=True):
                    futures.append(send(topic, value=v, key=k))
        except Exception as exc:  # noqa: BLE001 - any producer failure is a write failure
            raise SinkWriteError(f"Kafka sink cannot write to {self.topic!r}: {exc}") from exc
        self.rows_written += batch.num_rows

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


def _writer_token(directory: Path) -> str:
    """The random token of this sink's stage directory, created on first use."""
    path = directory / _TOKEN_FILE
    try:
        token = path.read_text().strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    token = uuid.uuid4().hex[:12]
    atomic_write(path, token.encode(), what="Kafka sink id")
    return token


# Failures of this process, not of Kafka: retrying them would fail the same way.
_LOCAL_ERRORS = (OSError, pa.ArrowException, KafkaConfigError)


def _is_fenced(exc: BaseException) -> bool:
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    # kafka-python reports a fenced producer's later calls as a plain KafkaError naming it
    return (isinstance(exc, ProducerFencedError | InvalidProducerEpochError)
            or "ProducerFenced" in str(exc) or "InvalidProducerEpoch" in str(exc))


def _is_fatal(exc: BaseException) -> bool:
    from kafka.errors import AuthorizationError, KafkaConfigurationError, UnsupportedVersionError

    return isinstance(exc, AuthorizationError | UnsupportedVersionError | KafkaConfigurationError)


class ExactlyOnceKafkaSink(TwoPhaseSink):
    """Writes a stream's rows to a topic exactly once: each checkpoint epoch in one Kafka
    transaction, made visible when the checkpoint commits (see the module docs).

    Args:
        name: the sink's name (in the transactional.id and the marker group).
        schema: the schema of the stream the sink reads.
        options: the ``KAFKA (…)`` options: ``brokers``, ``topic``, ``format`` (json | csv |
            msgpack), ``key``, ``delivery.guarantee`` (``'exactly-once'``), ``partitions``
            (count used when the topic does not exist and is created), ``kafka.*`` (passed
            to ``KafkaProducer``, e.g. ``kafka.transaction.timeout.ms``).
        stage_dir: a directory of the database where the epochs' rows wait for commit.
        writer: this writer's id (one per actor in the Delta mode): letters, digits, ``_``
            and ``-``.

    Raises:
        KafkaConfigError: a missing or invalid option.
        SinkWriteError: the stage directory cannot be created.
    """

    commit_outside_lock = True  # commit() reads sealed epochs only

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str], writer: str = "0") -> None:
        if not _WRITER.match(writer):
            raise ValueError(f"writer id {writer!r}: use letters, digits, '_' and '-'")
        self.name, self.schema, self.writer = name, schema, writer
        what = f"Kafka sink {name!r}"
        self.brokers = require(options, "brokers", f"sink {name!r}")
        self.topic = require(options, "topic", f"sink {name!r}")
        self._encoder = _Encoder(schema, options, what)
        try:
            self._stage = EpochStage(stage_dir, schema)
            token = _writer_token(self._stage.dir)
        except OSError as exc:
            msg = (f"{what} cannot use its stage directory {os.fspath(stage_dir)!r}: {exc}; "
                   "check the disk and the directory's permissions")
            raise SinkWriteError(msg) from exc
        self.transactional_id = f"laminardb-{name}-{writer}-{token}"
        self.group_id = f"laminardb-sink-{name}-{writer}-{token}"
        self._conf = _producer_conf(self.brokers, options, f"laminardb-sink-{name}-{writer}",
                                    transactional_id=self.transactional_id)
        self._partitions = max(1, int_option(options, "partitions", 1))
        self._producer: Any = None  # started (and the previous one fenced) when first needed
        self._marker: int | None = None  # newest epoch in Kafka; None: read it first
        self._failed: str | None = None
        self.rows_written = 0  # rows staged by write()
        self.rows_committed = 0  # rows produced by committed transactions of this object
        self.epochs_committed = 0
        self.commit_failures = 0

    @property
    def epoch_stage(self) -> EpochStage:
        """Where sealed epochs wait (the Delta coordinator's Spark tasks install them here)."""
        return self._stage

    # ------------------------------------------------------------------ phases
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows of the open epoch.

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: the stage cannot be written (the open epoch is then lost until
                the database is reopened, which rebuilds it from the write-ahead log).
        """
        data = conform_to_sink(batch, self.schema, f"Kafka sink {self.name!r}")
        if self._failed is not None:
            return  # nothing can be pre-committed before recover() rebuilds the epoch
        try:
            for b in data.to_batches() if isinstance(data, pa.Table) else [data]:
                self._stage.append(b)
        except OSError as exc:
            self._failed = (
                f"Kafka sink {self.name!r} could not stage rows in {os.fspath(self._stage.dir)!r}: "
                f"{exc}; free space or fix the directory's permissions, then reopen the "
                "database: its output since the last checkpoint is rebuilt from the "
                "write-ahead log")
            self._stage.close()
            (self._stage.dir / "open.arrow").unlink(missing_ok=True)
            raise SinkWriteError(self._failed) from exc
        self.rows_written += data.num_rows

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal the open epoch's rows as ``epoch``; returns ``{"rows": n}`` (an epoch without
        rows stages nothing and costs no transaction)."""
        if self._failed is not None:
            raise SinkWriteError(self._failed)
        if self._stage.open_rows == 0:
            return {"rows": 0}
        return {"rows": self._stage.seal(epoch)}

    def commit(self, epoch: int) -> None:
        """Produce every staged epoch ``<= epoch`` not yet in Kafka, oldest first, each in one
        transaction with its marker; drop them from the stage.

        Raises:
            SinkCommitError: Kafka failed past the retries, or this writer was fenced; the
                epochs not produced stay staged for the next checkpoint or recovery.
        """
        epochs = [e for e in self._stage.epochs() if e <= epoch]
        if not epochs:
            return  # an empty epoch: no transaction, the marker stays where it is
        deadline = time.monotonic() + _COMMIT_DEADLINE_S
        attempt = 0
        for e in epochs:
            while True:
                try:
                    # invariant: epochs increase, so the marker is the newest epoch in Kafka
                    # and every staged epoch at or below it is already there
                    if e > self._settled_marker():
                        self._produce(e)
                    break
                except Exception as exc:  # noqa: BLE001 - classified below; staged rows stay
                    attempt += 1
                    self._reset(abort=not _is_fenced(exc))  # the fencer aborted it already
                    if not self._retry(e, exc, attempt, deadline):
                        self.commit_failures += 1
                        raise self._commit_error(e, exc) from exc
                    time.sleep(_RETRY_BACKOFF_S)
            self._stage.drop(e)

    def abort(self, epoch: int) -> None:
        """Drop the staged rows of ``epoch`` (they were never produced)."""
        self._stage.drop(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """Settle after a restart from checkpoint ``epoch``: fence the previous producer
        (aborting the transaction it left open), produce staged epochs in (marker, epoch],
        drop the rest. If Kafka cannot be reached, the staged epochs wait for the next
        commit, which settles them the same way (the database still opens)."""
        self._stage.settle(epoch)
        self._failed = None
        self._reset()
        try:
            marker = self._settled_marker()
            if marker > epoch:
                # a checkpoint after ``epoch`` committed here, then recovery skipped it (its
                # files were damaged) or the directory was restored from a backup: Kafka
                # cannot take those records back, and replay produces their rows again in an
                # epoch above the marker (highest_epoch()), never under a reused number that
                # commit() would take for the old one and drop
                log.warning("Kafka sink %s: topic %s holds epochs up to %d of writer %s, beyond the "
                            "database's checkpoint %d (a skipped checkpoint, or a directory restored "
                            "from a backup): their rows are produced again from epoch %d on, so "
                            "readers see them twice (header laminardb.epoch tells them apart)",
                            self.name, self.topic, marker, self.transactional_id, epoch, marker + 1)
            self.commit(epoch)
        except Exception as exc:  # noqa: BLE001 - the next checkpoint's commit settles it
            self._reset()
            log.warning("Kafka sink %s: could not settle its staged epochs with Kafka on "
                        "recovery (%s); they stay staged and are produced, once, at the next "
                        "checkpoint", self.name, exc)

    def highest_epoch(self) -> int:
        """The marker (the newest epoch in Kafka, read by ``recover()``) or the newest staged
        epoch; 0 when neither is known."""
        return max([self._marker or 0] + self._stage.epochs())

    def close(self) -> None:
        """Close the producer; staged epochs stay on disk for recovery."""
        self._stage.close()
        self._reset()

    # ------------------------------------------------------------------ internals
    def _settled_marker(self) -> int:
        """Start the producer if needed (InitProducerId fences the previous one and settles
        its open transaction), then read the marker: the newest epoch in Kafka."""
        if self._producer is None:
            # the marker lives on partition 0 of the topic: it must exist
            ensure_topic(self._conf["bootstrap_servers"], self.topic, self._partitions)
            self._producer = _new_producer(self._conf, self.brokers, f"Kafka sink {self.name!r}")
            self._marker = None
            self._producer.init_transactions()
        if self._marker is None:
            self._marker = self._read_marker()
        return self._marker

    def _read_marker(self) -> int:
        from kafka import KafkaConsumer, TopicPartition

        reader = KafkaConsumer(bootstrap_servers=self._conf["bootstrap_servers"],
                               group_id=self.group_id, enable_auto_commit=False,
                               isolation_level="read_committed",
                               client_id=f"laminardb-sink-{self.name}-marker")
        try:
            offset = reader.committed(TopicPartition(self.topic, 0),
                                      timeout_ms=int(_STEP_TIMEOUT_S * 1000))
        finally:
            reader.close()
        return 0 if offset is None or offset < 0 else int(offset)

    def _produce(self, epoch: int) -> None:
        """One transaction: the rows of staged ``epoch`` and the marker ``epoch``."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        producer, topic = self._producer, self.topic
        table = self._stage.read(epoch)
        headers = [("laminardb.epoch", str(epoch).encode()),
                   ("laminardb.engine.writer", self.writer.encode())]
        failed: list[BaseException] = []
        producer.begin_transaction()
        for chunk in table.to_batches(max_chunksize=_ENCODE_ROWS):
            part = pa.Table.from_batches([chunk], schema=table.schema)
            values, keys = self._encoder.values(part), self._encoder.keys(part)
            with no_cyclic_gc():
                for v, k in zip(values, keys, strict=True):
                    # a failed batch does not always fail the transaction in kafka-python
                    # (retries exhausted): count failures, never commit past one
                    producer.send(topic, value=v, key=k, headers=headers).add_errback(
                        failed.append)
        producer.flush(timeout=_STEP_TIMEOUT_S)
        if failed:
            raise KafkaError(f"{len(failed)} records of epoch {epoch} were not written: "
                             f"{failed[0]}")
        marker = {TopicPartition(topic, 0): OffsetAndMetadata(epoch, "", -1)}
        self._step(lambda tm: tm.send_offsets_to_transaction(marker, self.group_id),
                   lambda: producer.send_offsets_to_transaction(marker, self.group_id),
                   "TxnOffsetCommit")
        self._step(lambda tm: tm.begin_commit(), producer.commit_transaction, "EndTxn")
        self._marker = epoch
        self.epochs_committed += 1
        self.rows_committed += table.num_rows

    def _step(self, start: Callable[[Any], Any], public: Callable[[], None], what: str,
              timeout_s: float = _STEP_TIMEOUT_S, producer: Any = None) -> None:
        """A transactional request with a bounded wait (kafka-python's public calls wait
        forever while the broker is away, and the commit runs under the engine lock)."""
        from kafka.errors import KafkaTimeoutError

        producer = producer or self._producer
        tm, sender = getattr(producer, "_transaction_manager", None), getattr(producer, "_sender", None)
        if tm is None or sender is None or not hasattr(tm, "begin_commit"):
            public()  # another kafka-python: its own (unbounded) wait
            return
        result = start(tm)
        sender.wakeup()
        if not result.wait(timeout_ms=int(timeout_s * 1000)):
            raise KafkaTimeoutError(f"{what} not answered in {timeout_s:.0f} s")

    def _retry(self, epoch: int, exc: BaseException, attempt: int, deadline: float) -> bool:
        if _is_fenced(exc) or _is_fatal(exc) or isinstance(exc, _LOCAL_ERRORS):
            return False
        if attempt >= _COMMIT_ATTEMPTS or time.monotonic() + _RETRY_BACKOFF_S > deadline:
            return False
        log.info("Kafka sink %s: epoch %d: %s; restarting the producer and retrying",
                 self.name, epoch, exc)
        return True

    def _commit_error(self, epoch: int, exc: BaseException) -> SinkCommitError:
        if _is_fenced(exc):
            why = (f"its producer was fenced: another writer with transactional.id "
                   f"{self.transactional_id!r} started (is the database open twice?), or a "
                   "transaction ran past kafka.transaction.timeout.ms")
        elif _is_fatal(exc):
            why = (f"Kafka refused it ({type(exc).__name__}: {exc}); check the ACLs for "
                   f"transactional.id {self.transactional_id!r}, group {self.group_id!r} "
                   f"and topic {self.topic!r}, and that the broker supports transactions")
        elif isinstance(exc, _LOCAL_ERRORS):
            why = (f"its staged rows could not be read or encoded ({type(exc).__name__}: "
                   f"{exc}); check the disk and the sink's options")
        else:
            why = f"Kafka failed ({type(exc).__name__}: {exc}); check that {self.brokers!r} is up"
        return SinkCommitError(
            f"Kafka sink {self.name!r} could not commit epoch {epoch} to {self.topic!r}: {why}. "
            "The epoch stays staged and is produced, exactly once, at the next checkpoint or "
            "when the database is reopened")

    def _reset(self, *, abort: bool = True) -> None:
        """Drop the producer (a transaction it left open is aborted by the next one's
        InitProducerId, or by the broker after transaction.timeout.ms) and forget the
        marker: the next step starts over from InitProducerId."""
        producer, self._producer, self._marker = self._producer, None, None
        if producer is None:
            return
        if abort:
            try:  # raises at once when no transaction is open
                self._step(lambda tm: tm.begin_abort(), producer.abort_transaction, "abort",
                           _ABORT_TIMEOUT_S, producer)
            except Exception:  # noqa: BLE001 - best effort, see _ABORT_TIMEOUT_S
                pass
        try:
            producer.close(timeout=_ABORT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a broken producer must not block the next one
            log.debug("Kafka sink %s: closing the producer failed", self.name, exc_info=True)
