"""Framing and authentication of the control RPC: msgpack over TCP, HMAC-SHA256 per frame.

Frame layout::

    | 4-byte big-endian length L | 32-byte HMAC-SHA256(key, body) | body (L - 32 bytes) |

``body`` is msgpack. A frame is only unpacked after its MAC verified (``hmac.compare_digest``),
so bytes from a peer without the secret are never parsed. Nothing here ever unpickles.
Requests carry a timestamp; frames outside ``_MAX_CLOCK_SKEW_S`` are refused, which bounds
replays (there is no nonce cache: every command is idempotent by request id anyway).
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
from typing import Any

import msgpack

from laminardb.raft.exceptions import RpcAuthError, RpcProtocolError

__all__ = ["derive_key", "pack_frame", "read_frame", "send_frame", "MAX_CLOCK_SKEW_S"]

_MAC_LEN = 32
# Ownership maps are ~10 KiB per source at 256 vnodes; 16 MiB leaves room for thousands of
# sources while refusing absurd lengths before allocating them.
_MAX_FRAME = 16 * 1024 * 1024
# Loose enough for unsynchronised clocks on one cluster, tight enough to make a captured frame
# useless soon after.
MAX_CLOCK_SKEW_S = 60.0
_HEADER = struct.Struct(">I")


def derive_key(secret: str | bytes) -> bytes:
    """The HMAC key for the RPC, derived from the cluster secret (domain-separated from Raft's)."""
    raw = secret.encode() if isinstance(secret, str) else secret
    if not raw:
        msg = "the control-plane secret is empty; set LAMINARDB_RAFT_SECRET or pass --secret-file"
        raise RpcAuthError(msg)
    return hmac.new(raw, b"laminardb-control-rpc-v1", hashlib.sha256).digest()


def pack_frame(key: bytes, obj: Any) -> bytes:
    """Serialize and authenticate one message."""
    body = msgpack.packb(obj, use_bin_type=True)
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return _HEADER.pack(len(body) + _MAC_LEN) + mac + body


def send_frame(sock: socket.socket, key: bytes, obj: Any) -> None:
    """Send one authenticated message."""
    sock.sendall(pack_frame(key, obj))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("control RPC peer closed the connection")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, key: bytes) -> Any:
    """Read one message, verify its MAC, then unpack it.

    Raises:
        RpcAuthError: the MAC does not match (wrong or missing secret).
        RpcProtocolError: bad length or undecodable body.
        ConnectionError: the peer closed the connection.
    """
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if not (_MAC_LEN < length <= _MAX_FRAME):
        msg = f"control RPC frame length {length} out of range; is this a laminardb RPC peer?"
        raise RpcProtocolError(msg)
    data = _recv_exact(sock, length)
    mac, body = data[:_MAC_LEN], data[_MAC_LEN:]
    expected = hmac.new(key, body, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        msg = (
            "control RPC frame failed authentication; client and voters must share the same "
            "secret (LAMINARDB_RAFT_SECRET / --secret-file)"
        )
        raise RpcAuthError(msg)
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        msg = f"undecodable control RPC body: {exc}"
        raise RpcProtocolError(msg) from exc
