"""``kafka`` discovery: members heartbeat onto a membership topic and read it from the end.

Entry point: :class:`KafkaDiscovery`.

* Topic: one partition, ``cleanup.policy=compact``, keyed by member id, so the topic holds the
  last heartbeat per member once compacted (created on first use if missing).
* Every ``heartbeat_interval`` a member produces ``{id, addr, meta, ts, state: "alive"}``.
  ``stop()`` produces ``state: "left"`` and then a tombstone (``None`` value) so compaction
  forgets the member.
* Readers ``assign()`` the partition manually (no consumer group: nothing to rebalance, no
  group-join hang) and start at the end; a member is live while its heartbeats keep arriving
  and gone ``member_timeout`` seconds after the last one (measured on the reader's monotonic
  clock, so producer clock skew does not matter). ``start()`` waits one heartbeat interval
  so that ``members()`` is complete when it returns.
* With ``key`` set, every record carries an HMAC-SHA256 and records that fail it are ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from typing import Any

import msgpack

from laminardb.discovery.base import Discovery, EventKind, Member, MemberEvent
from laminardb.discovery.exceptions import (
    DiscoveryConfigError,
    DiscoveryNotStartedError,
    DiscoveryUnavailableError,
)

__all__ = ["KafkaDiscovery"]

_log = logging.getLogger(__name__)

# Heartbeat twice a second and declare a member gone after 6 missed beats: tolerates a GC or
# scheduling hiccup, detects a dead process in ~3 s.
_HEARTBEAT_S = 0.5
_MEMBER_TIMEOUT_S = 3.0
# Missing this many beats makes a member SUSPECT (still a member) before it times out.
_SUSPECT_AFTER_BEATS = 3
# Reader poll granularity; bounds how late an expiry is noticed.
_POLL_MS = 100
_MAC_LEN = 32


class KafkaDiscovery(Discovery):
    """Membership through a Kafka topic.

    Args:
        bootstrap: Kafka bootstrap servers (``host:port[,host:port]``).
        node_id: this member's id.
        address: this member's address as published (e.g. its RPC address).
        metadata: published with every heartbeat.
        topic: membership topic name.
        heartbeat_interval: seconds between heartbeats.
        member_timeout: seconds without heartbeat after which a member is gone.
        key: optional shared key; when set, unauthenticated records are ignored.
    """

    def __init__(self, *, bootstrap: str, node_id: str, address: str = "",
                 metadata: dict[str, Any] | None = None, topic: str = "laminardb.members",
                 heartbeat_interval: float = _HEARTBEAT_S,
                 member_timeout: float = _MEMBER_TIMEOUT_S, key: str | bytes | None = None) -> None:
        super().__init__()
        if member_timeout <= 2 * heartbeat_interval:
            msg = "kafka discovery member_timeout must exceed two heartbeat intervals"
            raise DiscoveryConfigError(msg)
        self.bootstrap, self.node_id, self.address = bootstrap, node_id, address
        self.metadata = dict(metadata or {})
        self.topic, self.heartbeat_interval, self.member_timeout = (
            topic, heartbeat_interval, member_timeout)
        raw = key.encode() if isinstance(key, str) else key
        self._key = hmac.new(raw, b"laminardb-kafka-members-v1", hashlib.sha256).digest() \
            if raw else None
        self._seen: dict[str, tuple[Member, float]] = {}
        self._suspected: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producer: Any = None
        self._consumer: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Create the topic if needed, start heartbeating and reading from the end.

        Raises:
            DiscoveryUnavailableError: the broker cannot be reached.
        """
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.errors import KafkaError

        try:
            self._ensure_topic()
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0,
                                           acks=1, client_id=f"laminardb-members-{self.node_id}")
            consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                     enable_auto_commit=False, auto_offset_reset="latest",
                                     client_id=f"laminardb-members-r-{self.node_id}")
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            consumer.seek_to_end(tp)
            consumer.position(tp)  # resolve "end" now, before our own first heartbeat
        except KafkaError as exc:
            msg = f"kafka discovery cannot reach {self.bootstrap}: {exc}; check the bootstrap list"
            raise DiscoveryUnavailableError(msg) from exc
        self._consumer = consumer
        for name, fn in (("hb", self._heartbeat_loop), ("read", self._read_loop)):
            t = threading.Thread(target=fn, name=f"kafka-members-{name}-{self.node_id}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        # One interval (plus slack) lets every live member's next heartbeat arrive.
        time.sleep(self.heartbeat_interval + 0.3)

    def stop(self) -> None:
        """Publish ``left`` and a tombstone, then close the clients."""
        if self._producer is None:
            raise DiscoveryNotStartedError("kafka discovery is not running; call start() first")
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        try:
            self._produce("left")
            self._producer.send(self.topic, key=self.node_id.encode(), value=None, partition=0)
            self._producer.flush(timeout=5)
        finally:
            self._producer.close(timeout=5)
            self._consumer.close()
            self._producer = None

    def _ensure_topic(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                 client_id=f"laminardb-members-admin-{self.node_id}")
        try:
            if self.topic in admin.list_topics():
                return
            topic = NewTopic(self.topic, num_partitions=1, replication_factor=1,
                             topic_configs={"cleanup.policy": "compact"})
            try:
                admin.create_topics([topic])
            except TopicAlreadyExistsError:
                pass  # another member created it first
        finally:
            admin.close()

    # -- heartbeats --------------------------------------------------------------------------

    def _produce(self, state: str) -> None:
        body = msgpack.packb({"id": self.node_id, "addr": self.address, "meta": self.metadata,
                              "ts": time.time(), "state": state}, use_bin_type=True)
        if self._key is not None:
            body = hmac.new(self._key, body, hashlib.sha256).digest() + body
        self._producer.send(self.topic, key=self.node_id.encode(), value=body, partition=0)

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._produce("alive")
                self._producer.flush(timeout=self.heartbeat_interval * 4)
            except Exception:  # broker hiccup: keep beating, readers time us out if it lasts
                _log.warning("membership heartbeat of %s failed", self.node_id, exc_info=True)
            self._stop.wait(self.heartbeat_interval)

    # -- reading -----------------------------------------------------------------------------

    def _decode(self, value: bytes | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if self._key is not None:
            mac, value = value[:_MAC_LEN], value[_MAC_LEN:]
            if not hmac.compare_digest(mac, hmac.new(self._key, value, hashlib.sha256).digest()):
                return None
        try:
            rec = msgpack.unpackb(value, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return None
        return rec if isinstance(rec, dict) and isinstance(rec.get("id"), str) else None

    def _read_loop(self) -> None:
        while not self._stop.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=_POLL_MS)
            except Exception:
                _log.warning("membership topic read failed", exc_info=True)
                self._stop.wait(0.5)
                continue
            now = time.monotonic()
            events: list[MemberEvent] = []
            for records in batches.values():
                for r in records:
                    rec = self._decode(r.value)
                    if rec is None:
                        continue
                    m = Member(rec["id"], str(rec.get("addr", "")), dict(rec.get("meta") or {}))
                    if rec.get("state") == "left":
                        if self._seen.pop(m.id, None) is not None:
                            events.append(MemberEvent(EventKind.LEAVE, m))
                        continue
                    if m.id not in self._seen:
                        events.append(MemberEvent(EventKind.JOIN, m))
                    elif m.id in self._suspected:
                        events.append(MemberEvent(EventKind.ALIVE, m))
                    self._suspected.discard(m.id)
                    self._seen[m.id] = (m, now)
            for mid, (m, last) in list(self._seen.items()):
                if now - last > self.member_timeout:
                    del self._seen[mid]
                    self._suspected.discard(mid)
                    events.append(MemberEvent(EventKind.LEAVE, m))
                elif now - last > _SUSPECT_AFTER_BEATS * self.heartbeat_interval \
                        and mid not in self._suspected:
                    self._suspected.add(mid)
                    events.append(MemberEvent(EventKind.SUSPECT, m))
            if events:
                with self._mu:
                    self._members = {mid: m for mid, (m, _) in self._seen.items()}
                for ev in events:
                    self._emit(ev)
