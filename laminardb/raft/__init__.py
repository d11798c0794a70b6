"""Delta control plane: Raft-owned vnodes with epoch fencing (pysyncobj voters + control RPC).

Re-exports only; see ``docs/control_plane.md`` for the design. Names resolve lazily so that
``import laminardb.raft.cli`` (done by the main CLI) works without the ``cluster`` extra
(pysyncobj) installed — only using a voter or client needs it.
"""

from __future__ import annotations

from laminardb._lazy import lazy_exports

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
    "WeakSecretError",
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
    "WeakSecretError": "exceptions",
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


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
