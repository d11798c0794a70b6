"""``gossip`` discovery: SWIM-style membership over UDP, msgpack, HMAC-authenticated.

Entry points: :class:`GossipConfig` and :class:`GossipDiscovery`.

Each protocol period a member probes one other member (round-robin over a shuffled list):

1. direct ``ping``; no ``ack`` within ``ack_timeout`` →
2. ``ping_req`` to ``indirect_probes`` random members, which ping the target and relay its ack;
3. no ack by the end of the period → the target is *suspect* (still a member). A suspect that
   does not refute (by gossiping ``alive`` with a higher incarnation) within
   ``suspicion_timeout`` is declared *dead* → LEAVE.

Membership changes are piggybacked on every ping/ack (dissemination, ``_swim.Disseminator``)
and every ``sync_interval`` a member does a push-pull full-state exchange with a random member
(or its seeds while it knows nobody), which repairs anything dissemination missed.

Every datagram is ``HMAC-SHA256(key, body) || body``; datagrams that fail the MAC or carry a
timestamp outside the skew window are dropped before being unpacked.

Written here rather than taken from a library: no maintained Python SWIM implementation with
authentication exists (see docs/control_plane.md).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from laminardb.discovery._swim import ALIVE, DEAD, LEFT, SUSPECT, Disseminator, Record, merge
from laminardb.discovery.base import Discovery, EventKind, Member, MemberEvent
from laminardb.discovery.exceptions import DiscoveryConfigError, DiscoveryNotStartedError

__all__ = ["GossipConfig", "GossipDiscovery"]

_log = logging.getLogger(__name__)

_MAC_LEN = 32
# Full state of 100 members is ~10 KiB; stay well under the 64 KiB UDP limit.
_MAX_DATAGRAM = 60_000
# Updates piggybacked per message: enough to spread a burst of joins in a few periods.
_MAX_PIGGYBACK = 12
# Frames older/newer than this are dropped (bounds replay of captured datagrams).
_MAX_SKEW_S = 60.0
# Dead members are remembered this long so stale gossip cannot resurrect them.
_TOMBSTONE_TTL_S = 60.0


@dataclass(frozen=True)
class GossipConfig:
    """Settings of one gossip member.

    Attributes:
        node_id: this member's id.
        bind: ``host:port`` of its UDP socket (also its address in the membership).
        key: shared key authenticating every datagram.
        seeds: addresses to contact when joining (others are learnt by gossip).
        metadata: published with the member (e.g. ``{"rpc": ..., "cores": 2}``).
        protocol_period: seconds between probes; failure detection scales with it.
        ack_timeout: wait for a direct ack before asking others to probe.
        indirect_probes: members asked to probe on our behalf (SWIM's *k*).
        suspicion_timeout: seconds a suspect has to refute before it is declared dead; a
            member paused for less than this is never declared dead.
        sync_interval: seconds between push-pull full-state exchanges.
        retransmit_mult: each update is piggybacked ``mult * log2(n+1)`` times.
    """

    node_id: str
    bind: str
    key: str | bytes = field(repr=False)
    seeds: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    # 0.2 s periods: ~1 probe per member per period keeps CPU low for 30 members on 2 cores
    # while detecting a failure in about one second.
    protocol_period: float = 0.2
    ack_timeout: float = 0.08
    indirect_probes: int = 3
    suspicion_timeout: float = 3.0
    sync_interval: float = 2.0
    retransmit_mult: int = 3

    def validate(self) -> None:
        """Raise ``DiscoveryConfigError`` for unusable settings."""
        if not self.key:
            raise DiscoveryConfigError("gossip needs a shared key to authenticate datagrams")
        if not self.node_id:
            raise DiscoveryConfigError("gossip needs a node_id")
        if not (0 < self.ack_timeout < self.protocol_period):
            msg = "gossip ack_timeout must be positive and shorter than protocol_period"
            raise DiscoveryConfigError(msg)
        if self.suspicion_timeout <= self.protocol_period:
            raise DiscoveryConfigError("gossip suspicion_timeout must exceed protocol_period")


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class GossipDiscovery(Discovery):
    """SWIM membership over UDP. See the module docstring for the protocol."""

    def __init__(self, config: GossipConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        raw = config.key.encode() if isinstance(config.key, str) else config.key
        self._key = hmac.new(raw, b"laminardb-gossip-v1", hashlib.sha256).digest()
        self._lock = threading.RLock()
        self._self = Record(config.node_id, config.bind, inc=int(time.time() * 1000),
                            meta=dict(config.metadata), since=time.monotonic())
        self._nodes: dict[str, Record] = {}
        self._diss = Disseminator(config.retransmit_mult)
        self._seq = itertools.count(1)
        self._acks: dict[int, threading.Event] = {}
        # our seq -> (requester addr, its seq, created); pruned after a period when unanswered
        self._relays: dict[int, tuple[str, int, float]] = {}
        self._probe_order: list[str] = []
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._rng = random.Random()
        self.dropped = 0  # datagrams refused (bad MAC, skew, malformed)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind, announce ourselves to the seeds, and start probing."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(_split(self.config.bind))
        sock.settimeout(0.2)
        self._sock = sock
        self._publish([MemberEvent(EventKind.JOIN, self._member(self._self))])
        for name, target in (("gossip-recv", self._recv_loop), ("gossip-probe", self._probe_loop)):
            t = threading.Thread(target=target, name=f"{name}-{self.config.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        self._sync_with_seeds()

    def stop(self) -> None:
        """Gossip a graceful ``left`` to a few members, then close the socket."""
        if self._sock is None:
            raise DiscoveryNotStartedError("gossip discovery is not running; call start() first")
        with self._lock:
            self._self.inc += 1
            self._self.state = LEFT
            leave = self._self.to_wire()
            targets = [r.addr for r in self._nodes.values() if r.live]
        for addr in self._rng.sample(targets, min(len(targets), 2 * self.config.indirect_probes)):
            self._send(addr, {"t": "leave", "u": [leave]})
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._sock.close()
        self._sock = None

    # -- view ------------------------------------------------------------------------------

    @staticmethod
    def _member(rec: Record) -> Member:
        return Member(rec.id, rec.addr, dict(rec.meta))

    def suspects(self) -> list[str]:
        """Ids currently suspected (still counted as members)."""
        with self._lock:
            return sorted(r.id for r in self._nodes.values() if r.state == SUSPECT)

    def _publish(self, events: list[MemberEvent]) -> None:
        with self._lock:
            view = {r.id: self._member(r) for r in self._nodes.values() if r.live}
            view[self._self.id] = self._member(self._self)
        with self._mu:
            self._members = view
        for ev in events:
            self._emit(ev)

    # -- wire ------------------------------------------------------------------------------

    def _send(self, addr: str, msg: dict[str, Any], *, piggyback: bool = True) -> None:
        sock = self._sock
        if sock is None:
            return
        with self._lock:
            msg["from"] = self._self.to_wire()
            if piggyback:
                msg["u"] = msg.get("u", []) + self._diss.take(_MAX_PIGGYBACK)
        msg["ts"] = time.time()
        body = msgpack.packb(msg, use_bin_type=True)
        if len(body) > _MAX_DATAGRAM:
            _log.warning("gossip datagram of %d bytes dropped (too large)", len(body))
            return
        data = hmac.new(self._key, body, hashlib.sha256).digest() + body
        try:
            sock.sendto(data, _split(addr))
        except OSError:
            pass  # unreachable peer: the failure detector handles it

    def _decode(self, data: bytes) -> dict[str, Any] | None:
        mac, body = data[:_MAC_LEN], data[_MAC_LEN:]
        if len(data) <= _MAC_LEN or not hmac.compare_digest(
            mac, hmac.new(self._key, body, hashlib.sha256).digest()
        ):
            return None
        try:
            msg = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return None
        if not isinstance(msg, dict) or abs(time.time() - float(msg.get("ts", 0))) > _MAX_SKEW_S:
            return None
        return msg

    def _recv_loop(self) -> None:
        while not self._stop.is_set():
            sock = self._sock
            if sock is None:
                return
            try:
                data, _ = sock.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            msg = self._decode(data)
            if msg is None:
                self.dropped += 1
                continue
            try:
                self._handle(msg)
            except (KeyError, TypeError, ValueError):
                self.dropped += 1

    # -- message handling ------------------------------------------------------------------

    def _handle(self, msg: dict[str, Any]) -> None:
        now = time.monotonic()
        sender = Record.from_wire(msg["from"], now)
        updates = [sender, *(Record.from_wire(u, now) for u in msg.get("u", []))]
        updates += [Record.from_wire(u, now) for u in msg.get("full", [])]
        self._apply(updates)
        kind = msg.get("t")
        if kind == "ping":
            self._send(sender.addr, {"t": "ack", "seq": msg["seq"]})
        elif kind == "ack":
            seq = int(msg["seq"])
            with self._lock:
                ev = self._acks.get(seq)
                relay = self._relays.pop(seq, None)
            if ev is not None:
                ev.set()
            if relay is not None:
                self._send(relay[0], {"t": "ack", "seq": relay[1]})
        elif kind == "ping_req":
            seq = next(self._seq)
            with self._lock:
                self._relays[seq] = (sender.addr, int(msg["seq"]), time.monotonic())
            self._send(str(msg["target"]), {"t": "ping", "seq": seq})
        elif kind == "sync" and msg.get("reply"):
            self._send(sender.addr, {"t": "sync", "full": self._full_state()}, piggyback=False)

    def _full_state(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._self.to_wire(), *(r.to_wire() for r in self._nodes.values())]

    def _apply(self, updates: list[Record]) -> None:
        events: list[MemberEvent] = []
        with self._lock:
            for new in updates:
                if new.id == self._self.id:
                    self._refute(new)
                    continue
                cur = self._nodes.get(new.id)
                if not merge(cur, new):
                    continue
                self._nodes[new.id] = new
                self._diss.push(new, len(self._nodes) + 1)
                events += self._transition(cur, new)
        if events:
            self._publish(events)

    def _refute(self, claim: Record) -> None:
        # Someone says we are suspect/dead: outrank it with a higher incarnation.
        if claim.state != ALIVE and claim.inc >= self._self.inc and self._self.state == ALIVE:
            self._self.inc = claim.inc + 1
            self._diss.push(self._self, len(self._nodes) + 1)

    def _transition(self, cur: Record | None, new: Record) -> list[MemberEvent]:
        m = self._member(new)
        was_live = cur is not None and cur.live
        if new.live and not was_live:
            out = [MemberEvent(EventKind.JOIN, m)]
            return out + ([MemberEvent(EventKind.SUSPECT, m)] if new.state == SUSPECT else [])
        if not new.live and was_live:
            return [MemberEvent(EventKind.LEAVE, m)]
        if cur is not None and cur.state != new.state:
            kind = EventKind.SUSPECT if new.state == SUSPECT else EventKind.ALIVE
            return [MemberEvent(kind, m)]
        return []

    # -- failure detection -----------------------------------------------------------------

    def _next_target(self) -> Record | None:
        with self._lock:
            if not self._probe_order:
                self._probe_order = [i for i, r in self._nodes.items() if r.live]
                self._rng.shuffle(self._probe_order)
            while self._probe_order:
                rec = self._nodes.get(self._probe_order.pop())
                if rec is not None and rec.live:
                    return rec
        return None

    def _await_ack(self, seq: int, timeout: float) -> bool:
        with self._lock:
            ev = self._acks[seq]
        return ev.wait(timeout)

    def _probe(self, target: Record, deadline: float) -> None:
        cfg = self.config
        seq = next(self._seq)
        with self._lock:
            self._acks[seq] = threading.Event()
        try:
            self._send(target.addr, {"t": "ping", "seq": seq})
            if self._await_ack(seq, cfg.ack_timeout):
                return
            with self._lock:
                helpers = [r.addr for r in self._nodes.values()
                           if r.state == ALIVE and r.id != target.id]
            for addr in self._rng.sample(helpers, min(len(helpers), cfg.indirect_probes)):
                self._send(addr, {"t": "ping_req", "seq": seq, "target": target.addr})
            if self._await_ack(seq, max(0.0, deadline - time.monotonic())):
                return
        finally:
            with self._lock:
                self._acks.pop(seq, None)
        self._suspect(target)

    def _suspect(self, target: Record) -> None:
        with self._lock:
            cur = self._nodes.get(target.id)
            if cur is None or cur.state != ALIVE or cur.inc != target.inc:
                return
            new = Record(cur.id, cur.addr, cur.inc, SUSPECT, cur.meta, time.monotonic())
        self._apply([new])

    def _expire_suspects(self) -> None:
        now = time.monotonic()
        with self._lock:
            expired = [r for r in self._nodes.values()
                       if r.state == SUSPECT and now - r.since > self.config.suspicion_timeout]
            dead = [Record(r.id, r.addr, r.inc, DEAD, r.meta, now) for r in expired]
            for i in [i for i, r in self._nodes.items()
                      if not r.live and now - r.since > _TOMBSTONE_TTL_S]:
                del self._nodes[i]
            for seq in [s for s, r in self._relays.items()
                        if now - r[2] > self.config.protocol_period]:
                del self._relays[seq]
        if dead:
            self._apply(dead)

    def _sync_with_seeds(self) -> None:
        with self._lock:
            full = [self._self.to_wire(), *(r.to_wire() for r in self._nodes.values())]
        for seed in self.config.seeds:
            if seed != self.config.bind:
                self._send(seed, {"t": "sync", "reply": True, "full": full})

    def _probe_loop(self) -> None:
        cfg = self.config
        last_sync = time.monotonic()
        while not self._stop.is_set():
            start = time.monotonic()
            deadline = start + cfg.protocol_period
            target = self._next_target()
            if target is not None:
                self._probe(target, deadline)
            self._expire_suspects()
            if start - last_sync >= cfg.sync_interval:
                last_sync = start
                with self._lock:
                    peers = [r.addr for r in self._nodes.values() if r.live]
                if peers:
                    self._send(self._rng.choice(peers),
                               {"t": "sync", "reply": True, "full": self._full_state()},
                               piggyback=False)
                else:
                    self._sync_with_seeds()
            self._stop.wait(max(0.0, deadline - time.monotonic()))
