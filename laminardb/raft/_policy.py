"""The pure security rules of the control plane: addresses, secrets, frame caps.

No pysyncobj here, so the CLI parser, the client and ``cluster status`` can use them without
the ``cluster`` extra. ``config.py`` applies them to a voter; ``docs/operations.md``
("Security model") explains them to operators.
"""

from __future__ import annotations

import ipaddress

from laminardb.raft.exceptions import WeakSecretError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "GENERATE_SECRET_HINT",
    "MIN_SECRET_BYTES",
    "check_secret",
    "is_loopback",
    "is_unspecified",
    "join_addr",
    "split_addr",
]

# 16 random bytes (128 bits) cannot be guessed; anything shorter is typed by hand and can be.
MIN_SECRET_BYTES = 16
GENERATE_SECRET_HINT = (
    "generate one with: python -c \"import secrets; print(secrets.token_urlsafe(32))\" > "
    "SECRET_FILE && chmod 600 SECRET_FILE (or let `laminardb cluster up` create it)"
)

# pysyncobj sends snapshots in chunks and batches log entries up to 64 KiB, so the largest
# legitimate Raft frame is one command, whose arguments came in one RPC request (<= 1 MiB,
# _wire.MAX_REQUEST_FRAME). 64 MiB is far above that and still bounds what any one
# authenticated connection can make a voter hold.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024


def split_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:port``)."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        msg = f"address {addr!r} is not host:port"
        raise ValueError(msg)
    return host.strip("[]"), int(port)


def check_secret(secret: str | bytes) -> None:
    """Refuse a secret shorter than ``MIN_SECRET_BYTES`` (``WeakSecretError``, LDB-9030).

    An empty secret is reported the same way; callers that must tell "none at all" apart
    (the voter: ``InsecureConfigError``) check that first.
    """
    raw = secret.encode() if isinstance(secret, str) else secret
    if len(raw) < MIN_SECRET_BYTES:
        msg = (
            f"the cluster secret has {len(raw)} bytes; at least {MIN_SECRET_BYTES} are required "
            "(a short secret can be guessed, and it is the only thing between a network peer "
            f"and the ownership map); {GENERATE_SECRET_HINT}"
        )
        raise WeakSecretError(msg)


def is_unspecified(host: str) -> bool:
    """True for the wildcard addresses ``0.0.0.0`` and ``::`` (listen on every interface)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def join_addr(host: str, port: int) -> str:
    """``host:port`` (IPv6 as ``[::1]:port``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
