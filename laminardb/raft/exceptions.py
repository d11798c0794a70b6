"""Errors of the control plane (Raft ownership, fencing, control RPC): codes LDB-6001…LDB-6099,
plus the configuration leaf ``WeakSecretError`` (LDB-9030).

Each leaf subclasses :class:`~laminardb.errors.ControlPlaneError` and the builtin whose meaning
matches, so callers can catch either. ``ERRORS_BY_CODE`` maps a code carried over the RPC wire
back to its class (the voters report failures as ``{"code", "message"}``).
"""

from __future__ import annotations

from laminardb.errors import ConfigError, ControlPlaneError

__all__ = [
    "StaleEpochError",
    "VnodeNotOwnedError",
    "NoLeaderError",
    "RpcAuthError",
    "InsecureConfigError",
    "UnknownNodeError",
    "CommandRejectedError",
    "RpcProtocolError",
    "WeakSecretError",
    "ERRORS_BY_CODE",
    "error_from_wire",
]


class StaleEpochError(ControlPlaneError, PermissionError):
    """A fencing token is older than the committed epoch of its vnode (LDB-6001).

    The holder lost the vnode (it was paused, partitioned or presumed dead) and must stop
    writing for it; re-acquire ownership through Raft to get a fresh token.
    """

    code = "LDB-6001"


class VnodeNotOwnedError(ControlPlaneError, LookupError):
    """The vnode is owned by another node, so it cannot be acquired or released (LDB-6002)."""

    code = "LDB-6002"


class NoLeaderError(ControlPlaneError, TimeoutError):
    """No voter committed the command in time: no quorum, or every voter unreachable (LDB-6003)."""

    code = "LDB-6003"


class RpcAuthError(ControlPlaneError, PermissionError):
    """A control RPC frame failed HMAC authentication or is outside the clock window (LDB-6004)."""

    code = "LDB-6004"


class InsecureConfigError(ControlPlaneError, ValueError):
    """A voter would listen without authentication where that is not allowed (LDB-6005)."""

    code = "LDB-6005"


class UnknownNodeError(ControlPlaneError, LookupError):
    """The command names a node that is not registered in Raft (LDB-6006)."""

    code = "LDB-6006"


class CommandRejectedError(ControlPlaneError, ValueError):
    """The state machine refused a command whose arguments do not fit the state (LDB-6007)."""

    code = "LDB-6007"


class RpcProtocolError(ControlPlaneError, ConnectionError):
    """A control RPC frame is malformed, too large, or names an unknown method (LDB-6008)."""

    code = "LDB-6008"


class WeakSecretError(ConfigError):
    """The cluster secret is too short to resist guessing (LDB-9030); the message says how to
    generate a good one."""

    code = "LDB-9030"


ERRORS_BY_CODE: dict[str, type[ControlPlaneError]] = {
    cls.code: cls
    for cls in (
        StaleEpochError,
        VnodeNotOwnedError,
        NoLeaderError,
        RpcAuthError,
        InsecureConfigError,
        UnknownNodeError,
        CommandRejectedError,
        RpcProtocolError,
    )
}


def error_from_wire(code: str, message: str) -> ControlPlaneError:
    """Rebuild the typed error a voter reported as ``(code, message)``.

    Args:
        code: the ``LDB-6xxx`` code sent by the voter.
        message: its human-readable message (already says what to do).

    Returns:
        An instance of the matching leaf class, or a plain ``ControlPlaneError``.
    """
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        return ControlPlaneError(message, code=code)
    return cls(message)
