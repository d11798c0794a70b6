"""The Kafka source's fetch loop: raw Fetch requests over kafka-python's connections, record
batches parsed by :mod:`laminardb.connectors._kafka_records`.

Entry point: :class:`RawFetcher` (``RawFetcher(consumer, topic, positions, …).poll(timeout_ms,
max_records)`` → ``[(partition, Records), …]``).

kafka-python keeps what it does well: bootstrap, metadata and leader lookup, connections (its
IO thread sends the request and decodes the response frame), ListOffsets for
``offset_reset``. What it does not do fast — turning record batches into one Python object
per message — is skipped: this class sends ``FetchRequest`` s itself (large: several MB per
partition) and hands the ``records`` bytes of each partition to the numba parser.

Per partition it tracks the *position* (next offset :meth:`poll` returns, what a checkpoint
stores) and the *fetch offset* (next offset to ask the broker for, ≥ position); parsed records
wait in a buffer between the two. One fetch is in flight per broker, and the next one is sent
before :meth:`poll` returns, so the broker and the network work while the caller decodes.

Errors per partition: OffsetOutOfRange resets the position by ``offset_reset`` (earliest |
latest, through the consumer's ListOffsets); NotLeader, unknown topic/partition, leader-epoch
and connection errors refresh the metadata and retry after ``retry_backoff_ms``; a partition
that keeps failing for ``_GIVE_UP_S`` raises :class:`KafkaUnavailableError`, as does a
non-retriable error.

``read_committed`` (:class:`_CommittedFilter`): Fetch requests carry isolation_level = 1, so
the broker returns records below the last stable offset (LSO) only. Aborted transactions
are dropped here, in the client, from the control batches in the data — not from the
Fetch response's ``aborted_transactions`` list, which Tansu 0.6 always leaves empty (so
kafka-python's read_committed consumer delivers aborted records from Tansu). Records of a
transaction wait, with every record after them, until its COMMIT or ABORT marker arrives:
delivery stays in offset order, and the position (what a checkpoint stores) never passes a
record that was neither delivered nor dropped. A partition whose start was ``latest`` moves
back to its LSO at once (one Fetch that does not wait, in the constructor), as a
read_committed Kafka consumer starts there: a transaction open at that moment is then read
whole (Tansu's ListOffsets answers 0 for a read_committed ``latest`` while any transaction
is open, so it cannot be asked directly).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Collection
from typing import Any

import numpy as np

from laminardb.connectors._kafka_records import (
    COMMIT,
    CONTROL,
    DATA,
    TRANSACTIONAL,
    CorruptBatchError,
    Records,
    parse_records,
    warm_up,
)
from laminardb.connectors.exceptions import KafkaUnavailableError

__all__ = ["RawFetcher", "raw_fetch_supported"]

_log = logging.getLogger(__name__)

# Per-partition bytes of one fetch: a few MB amortise one round trip and one kernel call over
# ~10^5 small messages (bench_kafka: 1 MB → ~2.8M msg/s from Tansu, 8 MB → ~3.5M).
_PARTITION_BYTES = 8 << 20
# Per-request cap over all partitions of one broker.
_REQUEST_BYTES = 64 << 20
# A batch larger than the fetch size doubles the size for that partition, up to this.
_MAX_PARTITION_BYTES = 1 << 30
# Newest Fetch version without topic ids (v13 needs them); kafka-python's fetcher uses it too.
_MAX_FETCH_VERSION = 12
# Fetch ahead while a partition buffers fewer than this many polls' worth of rows, so the next
# response is on its way while the caller decodes (memory: ~2 polls + one fetch per partition).
_AHEAD = 2
# A partition that fails this long without one good fetch makes poll() raise.
_GIVE_UP_S = 120.0
# How long an offset reset (ListOffsets) may take.
_RESET_TIMEOUT_MS = 30_000
# read_committed 'latest': how long the constructor asks for the LSO before leaving it to the
# first fetch, and how long each such Fetch waits (Tansu answers a Fetch with max_wait_ms = 0
# and no data with no partitions at all, so it must wait a little).
_LSO_PROBE_S = 5.0
_LSO_PROBE_WAIT_MS = 20


def raw_fetch_supported(consumer: Any) -> bool:
    """Whether ``consumer`` (a kafka-python ``KafkaConsumer``) has the connection manager and
    IO thread this fetcher drives (kafka-python ≥ 3)."""
    try:
        from kafka.protocol.consumer import FetchRequest  # noqa: F401
    except ImportError:
        return False
    manager = getattr(consumer, "_manager", None)
    net = getattr(consumer, "_net", None)
    return (manager is not None and hasattr(manager, "send") and hasattr(manager, "cluster")
            and net is not None and hasattr(net, "call_soon_with_future"))


class RawFetcher:
    """Fetches ``topic``'s ``positions`` partitions from their leaders.

    Args:
        consumer: a kafka-python ``KafkaConsumer`` with the partitions assigned (used for its
            connections, metadata and offset resets; its own fetcher stays idle).
        topic: the topic.
        positions: the starting offset of every partition to read.
        reset: ``earliest`` | ``latest``: where OffsetOutOfRange moves a partition.
        config: the consumer's configuration (``fetch_max_wait_ms``, ``fetch_min_bytes``,
            ``max_partition_fetch_bytes``, ``fetch_max_bytes``, ``retry_backoff_ms``,
            ``request_timeout_ms``, ``check_crcs``); sizes below this module's defaults are
            raised to them unless ``explicit`` names them.
        explicit: the config keys the user set (kept as given).
        read_committed: deliver committed and non-transactional records only (module docs).
        latest: partitions whose position came from ``offset_reset = 'latest'``
            (read_committed moves them back to the LSO).
    """

    def __init__(self, consumer: Any, topic: str, positions: dict[int, int], *, reset: str,
                 config: dict[str, Any], explicit: Collection[str] = (),
                 read_committed: bool = False, latest: Collection[int] = ()) -> None:
        from kafka import TopicPartition

        self._consumer, self.topic, self._reset = consumer, topic, reset
        self._manager, self._net = consumer._manager, consumer._net
        self._tps = {p: TopicPartition(topic, p) for p in positions}
        self._pos = {p: int(o) for p, o in positions.items()}
        self._fetch_at = dict(self._pos)
        self._buffer: dict[int, deque[Records]] = {p: deque() for p in positions}
        self._buffered = dict.fromkeys(positions, 0)

        def size(key: str, default: int) -> int:
            given = int(config.get(key) or default)
            return given if key in explicit else max(given, default)

        self._part_bytes = dict.fromkeys(positions, size("max_partition_fetch_bytes",
                                                         _PARTITION_BYTES))
        self._request_bytes = size("fetch_max_bytes", _REQUEST_BYTES)
        self._max_wait_ms = int(config.get("fetch_max_wait_ms", 500))
        self._min_bytes = int(config.get("fetch_min_bytes", 1))
        self._backoff_s = int(config.get("retry_backoff_ms", 100)) / 1000.0
        self._timeout_ms = max(int(config.get("request_timeout_ms", 30_000)),
                               self._max_wait_ms + 5_000)
        self._check_crcs = bool(config.get("check_crcs", True))
        self._inflight: dict[int, tuple[Any, dict[int, int], float]] = {}
        self._retry_at = dict.fromkeys(positions, 0.0)
        self._failing_since: dict[int, float] = {}
        self.last_failure: str | None = None  # why the last fetch failed (metrics, logs)
        self.high_watermarks: dict[int, int] = {}  # end offset per partition, from Fetch responses
        self._top_hw: dict[int, int] = {}  # the highest end offset seen: a lower one means a new log
        #: offset resets not yet reported (``take_resets``): the saved position was past the end
        self.resets: list[str] = []
        self._wake = threading.Event()
        self._want = 1  # rows per poll (the caller's max_records)
        self._committed = ({p: _CommittedFilter() for p in positions} if read_committed
                           else None)
        self._to_lso = set(latest) & set(positions) if read_committed else set()
        if self._to_lso:
            self._move_to_lso()
        warm_up()  # load the compiled kernels now, not in the first poll

    # -- state -------------------------------------------------------------------------------

    def positions(self) -> dict[int, int]:
        """Next offset :meth:`poll` returns, per partition."""
        return dict(self._pos)

    def failing(self) -> tuple[float, str] | None:
        """``(monotonic time the failures began, last reason)`` while a partition's fetches
        keep failing (retried quietly until ``_GIVE_UP_S``), else None."""
        since = self._failing_since
        return (min(since.values()), self.last_failure or "fetch failed") if since else None

    # -- polling -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int, max_records: int) -> list[tuple[int, Records]]:
        """Up to ``max_records`` records, waiting at most ``timeout_ms`` when none are ready.

        Raises:
            KafkaUnavailableError: a partition kept failing for ``_GIVE_UP_S`` or failed with
                a non-retriable error.
            CorruptBatchError: a record batch fails its CRC.
        """
        self._want = max_records
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        out: list[tuple[int, Records]] = []
        left = max_records
        while True:
            left = self._drain(out, left)
            if left <= 0:
                break
            self._send()
            if self._collect():
                continue  # new records: drain them
            now = time.monotonic()
            if out or now >= deadline:
                break
            wait = deadline - now
            if not self._inflight:  # every partition backs off: look again when one may retry
                wait = min(wait, self._backoff_s)
            self._wake.wait(wait)
            self._wake.clear()
        self._send()  # the next fetch travels while the caller decodes
        return out

    def _drain(self, out: list[tuple[int, Records]], left: int) -> int:
        """Move buffered records into ``out`` (partition by partition), advancing positions."""
        for p, buf in self._buffer.items():
            while buf and left > 0:
                recs = buf[0]
                take = min(left, len(recs))
                part = recs if take == len(recs) else recs.slice(0, take)
                if take == len(recs):
                    buf.popleft()
                else:
                    buf[0] = recs.slice(take, len(recs))
                self._buffered[p] -= take
                left -= take
                self._pos[p] = part.next_offset
                if take:
                    out.append((p, part))
        return left

    def _send(self) -> None:
        """One Fetch per leader that has none in flight, for its partitions that want data."""

        now = time.monotonic()
        cluster = self._manager.cluster
        busy = {p for _, offsets, _ in self._inflight.values() for p in offsets}
        by_node: dict[int, list[int]] = {}
        for p, tp in self._tps.items():
            if p in busy or self._buffered[p] >= _AHEAD * self._want or now < self._retry_at[p]:
                continue
            node = cluster.leader_for_partition(tp)
            if node is None or node == -1:
                self._failed(p, now, "no leader known")
                continue
            if node not in self._inflight:
                by_node.setdefault(node, []).append(p)
        for node, parts in by_node.items():
            request = self._request(parts, max_wait_ms=self._max_wait_ms,
                                    min_bytes=self._min_bytes)
            future = self._net.call_soon_with_future(self._manager.send, request, node)
            self._inflight[node] = (future, {p: self._fetch_at[p] for p in parts}, now)
            future.add_both(lambda _: self._wake.set())

    def _request(self, parts: list[int], *, max_wait_ms: int, min_bytes: int,
                 part_bytes: int | None = None) -> Any:
        from kafka.protocol.consumer import FetchRequest

        fetch_topic = FetchRequest.FetchTopic
        return FetchRequest(
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=self._request_bytes,
            isolation_level=0 if self._committed is None else 1, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[fetch_topic(topic=self.topic, partitions=[
                fetch_topic.FetchPartition(
                    partition=p, current_leader_epoch=-1, fetch_offset=self._fetch_at[p],
                    last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=part_bytes or self._part_bytes[p]) for p in parts])],
            max_version=_MAX_FETCH_VERSION)

    def _move_to_lso(self) -> None:
        """Move the read_committed partitions that start at 'latest' back to their LSO now,
        with short Fetches (a checkpoint taken before the first poll must not store a
        position past an open transaction). Partitions it cannot settle within
        ``_LSO_PROBE_S`` are moved by their first regular fetch (:meth:`_partition`)."""
        cluster = self._manager.cluster
        deadline = time.monotonic() + _LSO_PROBE_S
        while self._to_lso and time.monotonic() < deadline:
            by_node: dict[int, list[int]] = {}
            for p in sorted(self._to_lso):
                node = cluster.leader_for_partition(self._tps[p])
                if node is not None and node != -1:
                    by_node.setdefault(node, []).append(p)
            done = threading.Event()
            futures = []
            for node, parts in by_node.items():
                request = self._request(parts, max_wait_ms=_LSO_PROBE_WAIT_MS, min_bytes=1,
                                        part_bytes=1)
                future = self._net.call_soon_with_future(self._manager.send, request, node)
                future.add_both(lambda _, done=done: done.set())
                futures.append(future)
            while not all(f.is_done for f in futures) and time.monotonic() < deadline:
                done.wait(0.05)
                done.clear()
            for future in futures:
                if not future.is_done or future.failed():
                    continue
                for topic in future.value.responses:
                    for pd in topic.partitions:
                        p, lso = pd.partition_index, int(pd.last_stable_offset)
                        if p in self._to_lso and pd.error_code == 0 and lso >= 0:
                            self._to_lso.discard(p)
                            self._pos[p] = self._fetch_at[p] = min(lso, self._fetch_at[p])
            if self._to_lso:
                time.sleep(self._backoff_s)

    def _collect(self) -> bool:
        """Process the responses that arrived; True if any partition got new records."""
        got = False
        now = time.monotonic()
        for node, (future, offsets, sent) in list(self._inflight.items()):
            if not future.is_done:
                if now - sent > self._timeout_ms / 1000.0:  # the IO thread lost it: resend
                    del self._inflight[node]
                    for p in offsets:
                        self._failed(p, now, f"no fetch response from node {node} in time")
                continue
            del self._inflight[node]
            if future.failed():
                for p in offsets:
                    self._failed(p, now, f"fetch from node {node} failed: {future.exception}")
                continue
            for topic in future.value.responses:
                for pd in topic.partitions:
                    p = pd.partition_index
                    if p in offsets:
                        got |= self._partition(p, offsets[p], pd, now)
        return got

    def _partition(self, p: int, fetched_at: int, pd: Any, now: float) -> bool:
        import kafka.errors as errors

        if fetched_at != self._fetch_at[p]:  # reset meanwhile: stale
            return False
        error = errors.for_code(pd.error_code)
        if error is errors.NoError and self._past_the_end(p, fetched_at, int(pd.high_watermark)):
            self._reset_offset(p, end=int(pd.high_watermark))  # as Kafka's OffsetOutOfRange
            return False
        if error is errors.NoError:
            if p in self._to_lso:  # read_committed 'latest': start at the LSO
                self._to_lso.discard(p)
                lso = int(pd.last_stable_offset)
                if 0 <= lso < fetched_at and not self._buffer[p]:
                    self._pos[p] = self._fetch_at[p] = lso
                    return False
            try:
                recs = parse_records(pd.records, fetched_at, check_crcs=self._check_crcs,
                                     transactions=self._committed is not None)
            except CorruptBatchError as exc:
                raise CorruptBatchError(f"topic {self.topic!r} partition {p}: {exc}") from exc
            self._failing_since.pop(p, None)
            self.high_watermarks[p] = int(pd.high_watermark)
            if recs.next_offset == fetched_at and recs.partial:  # a batch beyond the fetch size
                if self._part_bytes[p] >= _MAX_PARTITION_BYTES:
                    msg = (f"topic {self.topic!r} partition {p}: a record batch at offset "
                           f"{fetched_at} is larger than {_MAX_PARTITION_BYTES} bytes")
                    raise KafkaUnavailableError(msg)
                self._part_bytes[p] *= 2
                return False
            self._fetch_at[p] = recs.next_offset
            if self._committed is None:
                ready, stable = ([recs] if len(recs) else []), recs.next_offset
            else:
                ready, stable = self._committed[p].add(recs)
            for r in ready:
                self._buffer[p].append(r)
                self._buffered[p] += len(r)
            if ready:
                return True
            # only control, aborted or held records: the position moves up to the first
            # record still held (invariant: never past a record not yet delivered or dropped)
            if self._buffer[p]:
                self._buffer[p][-1].next_offset = stable
            else:
                self._pos[p] = stable
            return False
        if error is errors.OffsetOutOfRangeError:
            self._reset_offset(p)
            return False
        if issubclass(error, errors.RetriableError) or error in (
                errors.NotLeaderForPartitionError, errors.UnknownTopicOrPartitionError):
            self._manager.cluster.request_update()
            self._failed(p, now, error.__name__)
            return False
        msg = (f"fetching topic {self.topic!r} partition {p} failed: {error.__name__}; "
               "check the topic and the broker's permissions")
        raise KafkaUnavailableError(msg)

    def _past_the_end(self, p: int, fetched_at: int, end: int) -> bool:
        """Whether ``fetched_at`` lies past a partition log that is not the one read so far:
        its end went back below one seen before, or it is empty. Tansu answers such a fetch
        with no records and no error (Kafka with OffsetOutOfRange); its end offset is the
        base of the last batch + 1 (module docs of ``kafka.py``), so a position past the end
        of an unchanged log is normal and not counted."""
        if end < 0 or fetched_at <= end:
            self._top_hw[p] = max(self._top_hw.get(p, end), end)
            return False
        shrank = end < self._top_hw.get(p, -1) or end == 0
        self._top_hw[p] = max(self._top_hw.get(p, end), end)
        return shrank

    def take_resets(self) -> list[str]:
        """The offset resets since the last call, each described (then forgotten)."""
        out, self.resets = self.resets, []
        return out

    def _failed(self, p: int, now: float, why: str) -> None:
        """Back off, refresh metadata, and give up after ``_GIVE_UP_S`` of failures."""
        since = self._failing_since.setdefault(p, now)
        self.last_failure = f"partition {p}: {why}"
        self._retry_at[p] = now + self._backoff_s
        self._manager.cluster.request_update()
        _log.debug("topic %s partition %d: %s; retrying", self.topic, p, why)
        if now - since > _GIVE_UP_S:
            msg = (f"topic {self.topic!r} partition {p}: fetches kept failing for "
                   f"{_GIVE_UP_S:.0f} s ({why}); check that the broker is up")
            raise KafkaUnavailableError(msg)

    def _reset_offset(self, p: int, end: int | None = None) -> None:
        tp = self._tps[p]
        was = self._fetch_at[p]
        _log.warning("topic %s partition %d: offset %d is out of range; resetting to %s",
                     self.topic, p, was, self._reset)
        if self._reset == "earliest":
            self._consumer.seek_to_beginning(tp)
        else:
            self._consumer.seek_to_end(tp)
        offset = self._consumer.position(tp, timeout_ms=_RESET_TIMEOUT_MS)
        if offset is None:
            self._failed(p, time.monotonic(), "offset reset timed out")
            return
        self._buffer[p].clear()
        self._buffered[p] = 0
        self._pos[p] = self._fetch_at[p] = int(offset)
        self._top_hw.pop(p, None)  # a new log: its ends start afresh
        self.resets.append(
            f"topic {self.topic!r} partition {p}: the saved offset {was} is past the partition's end"
            f"{'' if end is None else f' ({end})'} — the topic was deleted and created again, or "
            f"truncated (a broker with in-memory storage restarted?). Reading went on from offset "
            f"{int(offset)} (offset_reset = {self._reset!r}): records of the old log after the last "
            "checkpoint are gone, and new ones may have been skipped. If the topic was recreated on "
            "purpose, check the output from that point; to start over, drop the database (or use a "
            "fresh checkpoint_dir)")
        if self._committed is not None:
            self._committed[p] = _CommittedFilter()
            if self._reset == "latest":
                self._to_lso.add(p)


class _CommittedFilter:
    """read_committed for one partition, from the transaction markers in the data.

    :meth:`add` takes each fetched :class:`Records` (with ``batches``) in offset order and
    returns what may be delivered now. Records of a transactional batch are held under
    their producer id until that producer's next control batch: COMMIT releases them,
    ABORT drops them (a producer has at most one open transaction, and its marker follows
    all of its records). Every record after the oldest held one waits too, so delivery
    stays in offset order.
    """

    def __init__(self) -> None:
        # [records, decided]: decided None while its transaction is open, True deliver,
        # False drop; in offset order
        self._held: deque[list[Any]] = deque()
        self._open: dict[int, list[list[Any]]] = {}  # producer id → its held pieces

    def add(self, recs: Records) -> tuple[list[Records], int]:
        """The records that can be delivered now (in offset order, each ``next_offset``
        pointing at what follows it), and the offset of the first record still held (or
        ``recs.next_offset`` when none is)."""
        info = recs.batches
        assert info is not None, "parse_records(transactions=True) gives batches"
        special = (info[:, 2] & (TRANSACTIONAL | CONTROL)) != 0
        if not self._held and not special.any():  # the common case: no transactions here
            return ([recs] if len(recs) else []), recs.next_offset
        # rows of batch b: after those of batch b - 1, up to its last offset
        hi = np.searchsorted(recs.offsets, info[:, 1], side="right")
        lo = np.concatenate([[0], hi[:-1]])
        b, n = 0, len(info)
        while b < n:
            _, _, attrs, pid, kind = (int(x) for x in info[b])
            if attrs & CONTROL:  # a transaction's marker (other control types decide nothing)
                if kind != DATA:
                    for piece in self._open.pop(pid, []):
                        piece[1] = kind == COMMIT
                b += 1
                continue
            if attrs & TRANSACTIONAL:
                if hi[b] > lo[b]:
                    piece = [recs.slice(int(lo[b]), int(hi[b])), None]
                    self._open.setdefault(pid, []).append(piece)
                    self._held.append(piece)
                b += 1
                continue
            e = b + 1  # a run of plain batches: one piece
            while e < n and not special[e]:
                e += 1
            if hi[e - 1] > lo[b]:
                self._held.append([recs.slice(int(lo[b]), int(hi[e - 1])), True])
            b = e
        ready: list[Records] = []
        while self._held and self._held[0][1] is not None:
            piece, deliver = self._held.popleft()
            if deliver:
                ready.append(piece)
        stable = int(self._held[0][0].offsets[0]) if self._held else recs.next_offset
        for i, r in enumerate(ready):  # dropped records between them are skipped
            r.next_offset = int(ready[i + 1].offsets[0]) if i + 1 < len(ready) else stable
        return ready, stable
