"""Delta control plane: Raft-owned vnodes with epoch fencing (pysyncobj voters + control RPC).

Re-exports only; see ``docs/control_plane.md`` for the design. Names resolve lazily so that
``import laminardb.raft.cli`` (done by the main CLI) works without the ``cluster`` extra
(pysyncobj) installed — only using a voter or client needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEFAULT_VNODES",
    "CommandRejectedError",
    "Fence",
    "FencingToken",
    "InsecureConfigError",
    "Move",
    "NoLeaderError",
    "OwnershipState",
    "OwnershipStateMachine",
    "Plan",
    "RaftClient",
    "RaftNodeConfig",
    "Rebalancer",
    "RpcAuthError",
    "RpcProtocolError",
    "StaleEpochError",
    "UnknownNodeError",
    "VnodeNotOwnedError",
    "VoterNode",
    "plan_assignment",
    "run_node",
]

_WHERE = {
    "DEFAULT_VNODES": "plan",
    "Move": "plan",
    "Plan": "plan",
    "plan_assignment": "plan",
    "CommandRejectedError": "exceptions",
    "InsecureConfigError": "exceptions",
    "NoLeaderError": "exceptions",
    "RpcAuthError": "exceptions",
    "RpcProtocolError": "exceptions",
    "StaleEpochError": "exceptions",
    "UnknownNodeError": "exceptions",
    "VnodeNotOwnedError": "exceptions",
    "Fence": "fencing",
    "FencingToken": "fencing",
    "OwnershipState": "state",
    "OwnershipStateMachine": "machine",
    "RaftClient": "client",
    "RaftNodeConfig": "config",
    "Rebalancer": "rebalance",
    "VoterNode": "node",
    "run_node": "node",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'laminardb.raft' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"laminardb.raft.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
