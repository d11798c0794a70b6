"""pysyncobj's TCP transport, guarded: frame caps before buffering, and log events.

Entry point: :func:`guarded_transport` → the ``transportClass`` given to ``SyncObj`` (see
``node.py``); :class:`FrameGuard` holds the caps and the counters ``cluster status`` shows.

Why: pysyncobj reads a 4-byte length and then buffers the whole declared frame before it
decrypts (and so authenticates) anything. One unauthenticated connection declaring 2 GB
grew a voter by hundreds of MB, never returned, and the quadratic ``bytes +=`` of its read
buffer burned a core meanwhile. Here every connection is checked after each ``recv``:

* until one frame of the connection has decrypted under the cluster password (so the peer
  holds the secret), at most ``_PREAUTH_MAX_BYTES`` may be buffered: a voter's first frame
  is its 32-byte handshake key (~150 bytes encrypted), and it sends nothing more before we
  answer it;
* after that, a frame declaring more than ``max_frame_bytes`` (or a negative length) closes
  the connection as soon as its 4-byte header arrives.

Refusals and frames failing decryption close the connection (pysyncobj already dropped the
latter, silently) and are counted and logged, rate-limited. How: connections are pysyncobj
``TcpConnection`` objects whose class is switched to :class:`_GuardedConnection` as soon as
the transport creates them (before any byte is read); it overrides two name-mangled private
methods of pysyncobj 0.3.x (``__processRead``, ``__processParseMessage``) and reads the
private ``__readBuffer``. ``tests/raft/test_frame_cap.py`` fails if a pysyncobj upgrade
renames them.
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
from collections.abc import Callable
from typing import Any

from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from laminardb.raft._log import RateLimiter, event
from laminardb.raft._policy import DEFAULT_MAX_FRAME_BYTES

__all__ = ["FrameGuard", "guarded_transport"]

# Before a connection authenticated, a voter sends one ~150-byte handshake frame (and, with
# --insecure-dev, its address): 64 KiB is generous and is what one recv() returns anyway.
_PREAUTH_MAX_BYTES = 64 * 1024
_HEADER = struct.Struct("i")  # pysyncobj's length prefix: native signed int


class FrameGuard:
    """Caps and counters shared by every connection of one voter's Raft transport.

    Args:
        max_frame_bytes: largest frame accepted from an authenticated peer.
        encrypted: whether pysyncobj has a password (without one, "authenticated" only means
            "sent one well-formed frame", and the pre-authentication budget is the frame cap).
    """

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 encrypted: bool = True) -> None:
        self.max_frame_bytes = int(max_frame_bytes)
        self.preauth_bytes = _PREAUTH_MAX_BYTES if encrypted else self.max_frame_bytes
        self._lock = threading.Lock()
        self._counts = {"frames_refused": 0, "auth_failures": 0}
        self._limiter = RateLimiter()

    def counters(self) -> dict[str, int]:
        """Totals since start: ``frames_refused`` (over a cap), ``auth_failures``."""
        with self._lock:
            return dict(self._counts)

    def _count(self, key: str) -> int:
        with self._lock:
            self._counts[key] += 1
            return self._counts[key]

    def refused(self, peer: str, declared: int | None, buffered: int, reason: str) -> None:
        total = self._count("frames_refused")
        suppressed = self._limiter.check(f"refused:{reason}")
        if suppressed is None:
            return
        cap = self.preauth_bytes if reason == "unauthenticated" else self.max_frame_bytes
        what = (f"declares a {declared}-byte frame" if declared is not None
                else f"sent {buffered} bytes")
        event(logging.WARNING, "raft.frame_refused",
              f"closed a Raft connection from {peer} that {what} "
              f"({'before authenticating, limit' if reason == 'unauthenticated' else 'cap'} "
              f"{cap} bytes) before buffering it; if this is one of your voters, check that "
              "it runs the same laminardb and --max-frame-mb",
              peer=peer, declared_bytes=declared, buffered_bytes=buffered, cap_bytes=cap,
              reason=reason, total=total, suppressed=suppressed)

    def auth_failed(self, peer: str) -> None:
        total = self._count("auth_failures")
        suppressed = self._limiter.check("auth")
        if suppressed is None:
            return
        event(logging.WARNING, "raft.auth_failed",
              f"dropped a Raft frame from {peer} that failed decryption/authentication and "
              "closed the connection: a peer with another cluster secret, or not a voter",
              peer=peer, total=total, suppressed=suppressed)

    def install(self, conn: TcpConnection) -> TcpConnection:
        """Turn a fresh pysyncobj connection into a guarded one (before it reads anything)."""
        conn.__class__ = _GuardedConnection
        conn._ldb_guard = self  # type: ignore[attr-defined]
        conn._ldb_reset()  # type: ignore[attr-defined]
        return conn


class _GuardedConnection(TcpConnection):
    """A ``TcpConnection`` that checks declared frame lengths after every ``recv``."""

    _ldb_guard: FrameGuard

    def _ldb_reset(self) -> None:
        self._ldb_authed = False
        self._ldb_base = 0   # stream offset of the first byte still in the read buffer
        self._ldb_next = 0   # stream offset of the next frame header not yet checked
        self._ldb_peer: str | None = None

    def _ldb_peer_name(self) -> str:
        if self._ldb_peer is None:
            try:
                sock = self._TcpConnection__socket  # type: ignore[attr-defined]
                host, port = sock.getpeername()[:2]
                self._ldb_peer = f"{host}:{port}"
            except (OSError, AttributeError, TypeError):
                return "?"
        return self._ldb_peer

    def connect(self, host: str, port: int) -> bool:
        self._ldb_reset()
        return super().connect(host, port)

    def _TcpConnection__processRead(self) -> bool:  # noqa: N802 - overrides a mangled name
        more = TcpConnection._TcpConnection__processRead(self)  # type: ignore[attr-defined]
        if self.state == CONNECTION_STATE.DISCONNECTED:
            return False
        return more and self._ldb_check()

    def _ldb_check(self) -> bool:
        guard = self._ldb_guard
        buf: bytes = self._TcpConnection__readBuffer  # type: ignore[attr-defined]
        end = self._ldb_base + len(buf)
        if not self._ldb_authed:
            declared = _HEADER.unpack_from(buf)[0] if len(buf) >= _HEADER.size else None
            over = declared is not None and not 0 <= declared <= guard.preauth_bytes
            if over or len(buf) > guard.preauth_bytes:
                return self._ldb_refuse(declared, len(buf), "unauthenticated")
            return True
        # Walk the headers that arrived since the last check (several frames may be buffered).
        while self._ldb_next + _HEADER.size <= end:
            declared = _HEADER.unpack_from(buf, self._ldb_next - self._ldb_base)[0]
            if not 0 <= declared <= guard.max_frame_bytes:
                return self._ldb_refuse(declared, len(buf), "oversize")
            self._ldb_next += _HEADER.size + declared
        return True

    def _ldb_refuse(self, declared: int | None, buffered: int, reason: str) -> bool:
        peer = self._ldb_peer_name()
        self.disconnect()  # closes the socket and drops the buffer
        self._ldb_guard.refused(peer, declared, buffered, reason)
        return False

    def _TcpConnection__processParseMessage(self) -> Any:  # noqa: N802 - overrides a mangled name
        buf: bytes = self._TcpConnection__readBuffer  # type: ignore[attr-defined]
        complete = (len(buf) >= _HEADER.size
                    and len(buf) - _HEADER.size >= _HEADER.unpack_from(buf)[0] >= 0)
        peer = self._ldb_peer_name() if complete else "?"
        parse = TcpConnection._TcpConnection__processParseMessage  # type: ignore[attr-defined]
        message = parse(self)
        if message is None:
            if complete and self.state == CONNECTION_STATE.DISCONNECTED:
                # pysyncobj dropped a frame that failed decryption, its replay check or
                # unpickling, and closed the connection.
                self._ldb_guard.auth_failed(peer)
            return None
        if not self._ldb_authed:
            self._ldb_authed = True
        consumed = len(buf) - len(self._TcpConnection__readBuffer)  # type: ignore[attr-defined]
        self._ldb_base += consumed
        self._ldb_next = max(self._ldb_next, self._ldb_base)
        return message


def guarded_transport(guard: FrameGuard, *, on_peer: Callable[[str, bool], None] | None = None
                      ) -> Callable[..., TCPTransport]:
    """A ``transportClass`` for ``SyncObj`` whose connections ``guard`` checks.

    ``on_peer(address, connected)`` is called when a partner voter's connection comes up or
    goes down (not for every failed reconnect attempt).
    """
    return functools.partial(_GuardedTransport, guard=guard, on_peer=on_peer)


class _GuardedTransport(TCPTransport):
    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, *,  # noqa: N803
                 guard: FrameGuard, on_peer: Callable[[str, bool], None] | None) -> None:
        # Set before TCPTransport.__init__: it calls addNode() for every partner.
        self._ldb_guard = guard
        self._ldb_on_peer = on_peer
        self._ldb_up: set[str] = set()
        super().__init__(syncObj, selfNode, otherNodes)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:  # noqa: N802
        self._ldb_guard.install(conn)
        super()._onNewIncomingConnection(conn)

    def addNode(self, node: Any) -> None:  # noqa: N802
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and not isinstance(conn, _GuardedConnection):
            self._ldb_guard.install(conn)

    def send(self, node: Any, message: Any) -> bool:
        """Hold a message back until the connection's key exchange is done.

        pysyncobj marks an outgoing connection CONNECTED before the partner's random key has
        arrived, so under load Raft could send a frame without the key; the partner then drops
        it as a failed authentication and closes the connection (a false alarm in its log and
        counters). Returning False is what pysyncobj does for a connection not yet up: Raft
        sends again on its next tick.
        """
        conn = self._connections.get(node)
        if self._syncObj.encryptor and conn is not None and not conn.sendRandKey:
            return False
        return bool(super().send(node, message))

    def _onNodeConnected(self, node: Any) -> None:  # noqa: N802
        addr = str(getattr(node, "address", node))
        if addr not in self._ldb_up:
            self._ldb_up.add(addr)
            if self._ldb_on_peer is not None:
                self._ldb_on_peer(addr, True)
        super()._onNodeConnected(node)

    def _onNodeDisconnected(self, node: Any) -> None:  # noqa: N802
        addr = str(getattr(node, "address", node))
        if addr in self._ldb_up:
            self._ldb_up.discard(addr)
            if self._ldb_on_peer is not None:
                self._ldb_on_peer(addr, False)
        super()._onNodeDisconnected(node)
