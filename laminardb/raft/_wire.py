"""Framing and authentication of the control RPC: msgpack over TCP, HMAC-SHA256 per frame.

Frame layout::

    | 4-byte big-endian length L | 32-byte HMAC-SHA256(key, body) | body (L - 32 bytes) |

``body`` is msgpack. A frame is only unpacked after its MAC verified (``hmac.compare_digest``),
so bytes from a peer without the secret are never parsed. Nothing here ever unpickles.
Requests carry a timestamp; frames outside ``_MAX_CLOCK_SKEW_S`` are refused, which bounds
replays (there is no nonce cache: every command is idempotent by request id anyway).

The length is checked before anything is buffered: a voter reads requests with
``MAX_REQUEST_FRAME`` (1 MiB; a frame declaring more closes the connection after the 4-byte
header — ``FrameTooLargeError``), a client reads answers with ``MAX_RESPONSE_FRAME``.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
from typing import Any

import msgpack

from laminardb.raft._policy import check_secret
from laminardb.raft.exceptions import RpcAuthError, RpcProtocolError

__all__ = ["derive_key", "pack_frame", "read_frame", "send_frame", "MAX_CLOCK_SKEW_S",
           "MAX_REQUEST_FRAME", "MAX_RESPONSE_FRAME", "FrameTooLargeError"]

_MAC_LEN = 32
# Answers carry ownership maps (~10 KiB per source at 256 vnodes): 16 MiB leaves room for
# thousands of sources while refusing absurd lengths before allocating them.
MAX_RESPONSE_FRAME = 16 * 1024 * 1024
# Requests are a method name and a few arguments (a plan's member list, some vnode ids): the
# largest real one is a few KiB. A voter reads at most this much from a peer it has not yet
# authenticated (the MAC covers the whole body), so keep it small.
MAX_REQUEST_FRAME = 1024 * 1024
# Loose enough for unsynchronised clocks on one cluster, tight enough to make a captured frame
# useless soon after.
MAX_CLOCK_SKEW_S = 60.0
_HEADER = struct.Struct(">I")


class FrameTooLargeError(RpcProtocolError):
    """A frame declared a length over the reader's cap (LDB-6008); nothing was buffered."""


def derive_key(secret: str | bytes) -> bytes:
    """The HMAC key for the RPC, derived from the cluster secret (domain-separated from Raft's).

    Raises:
        RpcAuthError: the secret is empty.
        WeakSecretError: the secret is shorter than ``_policy.MIN_SECRET_BYTES``.
    """
    raw = secret.encode() if isinstance(secret, str) else secret
    if not raw:
        msg = "the control-plane secret is empty; set LAMINARDB_RAFT_SECRET or pass --secret-file"
        raise RpcAuthError(msg)
    check_secret(raw)
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


def read_frame(sock: socket.socket, key: bytes, *, max_frame: int = MAX_RESPONSE_FRAME) -> Any:
    """Read one message, verify its MAC, then unpack it.

    Args:
        max_frame: largest length accepted; checked on the 4-byte header, before the body.

    Raises:
        RpcAuthError: the MAC does not match (wrong or missing secret).
        FrameTooLargeError: the declared length is over ``max_frame`` (nothing was read).
        RpcProtocolError: bad length or undecodable body.
        ConnectionError: the peer closed the connection.
    """
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if length > max_frame:
        msg = (f"control RPC frame declares {length} bytes, over the {max_frame}-byte cap; "
               "is this a laminardb RPC peer?")
        raise FrameTooLargeError(msg)
    if length <= _MAC_LEN:
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
