"""The pysyncobj state machine: replicated commands over :class:`OwnershipState`.

Entry point: :class:`OwnershipStateMachine`, a ``SyncObjConsumer`` handed to a ``SyncObj`` by
the voter (``node.py``). Each ``@replicated`` method becomes a Raft log entry; pysyncobj calls
its body on every voter once the entry is committed, and the caller (``sync=True``) receives
the value returned on *its* voter after that voter applied the entry — results always come
from committed state, never from "I think I am leader".

Snapshots (log compaction, ``fullDumpFile``) are pysyncobj's own: ``SyncObjConsumer``
serializes the attributes set after its ``__init__`` — here the single ``_state``.

Compatibility of journals and dumps across versions: pysyncobj numbers the ``@replicated``
methods in the sorted order of their names and writes that number into every log entry. A
new command must therefore get a name that sorts after every existing one (or existing
journals would replay as the wrong commands), and a new argument of an existing command
needs a default (old entries are replayed without it). ``_COMMAND_ORDER`` pins the order;
``tests/coordinator/test_epoch_log.py`` checks it.
"""

from __future__ import annotations

import threading
from typing import Any

from pysyncobj import SyncObjConsumer, replicated

from laminardb.raft.state import OwnershipState, Result

__all__ = ["OwnershipStateMachine"]

# Replicated commands in pysyncobj's numbering order (see the module docstring): append only.
_COMMAND_ORDER = (
    "acquire", "allocate_checkpoint_epoch", "announce_voter", "assign", "barrier",
    "check_fence_barrier", "commit_plan", "deregister_node", "record_manifest",
    "register_node", "release", "set_checkpoint_intent",
)


class OwnershipStateMachine(SyncObjConsumer):
    """Replicated ownership state: nodes, vnode → (owner, epoch), checkpoint epochs, manifest."""

    def __init__(self) -> None:
        # Set before SyncObjConsumer.__init__: excluded from snapshots on purpose.
        self._read_lock = threading.Lock()
        super().__init__()
        self._state = OwnershipState()

    # pysyncobj applies entries on its tick thread while RPC threads read; reads take the
    # lock so they never see half of a multi-vnode command.

    def read(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(state, *args)`` against the locally applied state under the apply lock."""
        with self._read_lock:
            return fn(self._state, *args)

    def _apply(self, name: str, *args: Any) -> Result:
        with self._read_lock:
            return getattr(self._state, name)(*args)

    @replicated
    def register_node(self, rid: str, node_id: str, address: str, cores: int, metadata: dict) -> Result:
        return self._apply("apply_register_node", rid, node_id, address, cores, metadata)

    @replicated
    def deregister_node(self, rid: str, node_id: str) -> Result:
        return self._apply("apply_deregister_node", rid, node_id)

    @replicated
    def assign(self, rid: str, source: str, vnodes: list, owner: str, vnode_count: Any) -> Result:
        return self._apply("apply_assign", rid, source, vnodes, owner, vnode_count)

    @replicated
    def acquire(self, rid: str, source: str, vnodes: list, owner: str, vnode_count: Any) -> Result:
        return self._apply("apply_acquire", rid, source, vnodes, owner, vnode_count)

    @replicated
    def release(self, rid: str, source: str, tokens: list, owner: str) -> Result:
        return self._apply("apply_release", rid, source, tokens, owner)

    @replicated
    def commit_plan(
        self, rid: str, source: str, members: Any, vnode_count: Any, expected_cluster_epoch: Any
    ) -> Result:
        return self._apply(
            "apply_commit_plan", rid, source, members, vnode_count, expected_cluster_epoch
        )

    @replicated
    def allocate_checkpoint_epoch(self, rid: str, scope: str = "") -> Result:
        return self._apply("apply_allocate_checkpoint_epoch", rid, scope)

    @replicated
    def record_manifest(self, rid: str, epoch: int, ref: str, scope: str = "",
                        info: Any = None) -> Result:
        return self._apply("apply_record_manifest", rid, epoch, ref, scope, info)

    @replicated
    def set_checkpoint_intent(self, rid: str, scope: str, epoch: int) -> Result:
        """The intent record of checkpoint ``epoch`` of ``scope`` (named to sort last)."""
        return self._apply("apply_record_intent", rid, scope, epoch)

    @replicated
    def announce_voter(self, rid: str, voter_id: str, raft_addr: str, rpc_addr: str) -> Result:
        return self._apply("apply_announce_voter", rid, voter_id, raft_addr, rpc_addr)

    @replicated
    def check_fence_barrier(self, source: str, vnode: int, epoch: int, owner: str) -> Result:
        """Read barrier: the fence check as a log entry, answered from committed state."""
        return self._apply("check_fence", source, vnode, epoch, owner)

    @replicated
    def barrier(self) -> Result:
        """No-op entry; once applied locally, local reads are linearizable."""
        with self._read_lock:
            return {"ok": True, "result": self._state.cluster_epoch}
