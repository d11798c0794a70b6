"""The replicated ownership state, as a plain deterministic object.

Entry point: :class:`OwnershipState`. Every ``apply_*`` method is called with the arguments of
one committed Raft entry, on every voter, in log order; it must be deterministic (no clock, no
randomness, no I/O) and must never raise — a raise inside pysyncobj's apply loop would stall
the voter — so failures are returned as ``{"ok": False, "code", "message"}``.

Kept apart from pysyncobj (see ``machine.py``) so it is unit-testable without processes.

Invariants relied on by fencing (see ``fencing.py``):

* a vnode's epoch only grows, by exactly one per change of owner (including to/from unowned);
* therefore each ``(source, vnode, epoch)`` names at most one owner, ever.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from laminardb.raft.plan import DEFAULT_VNODES, plan_assignment

__all__ = ["OwnershipState", "ok", "fail"]

# Commands carry a client-chosen request id so a retried command (the client timed out, the
# leader changed) is applied once. 4096 covers minutes of retries at bench rates while keeping
# snapshots small.
_DEDUP_CAPACITY = 4096
# Checkpoint scopes are database names; bounded so one command cannot bloat every snapshot.
_MAX_SCOPE_LEN = 256

Result = dict[str, Any]


def ok(result: Any = None) -> Result:
    """Successful command result."""
    return {"ok": True, "result": result}


def fail(code: str, message: str) -> Result:
    """Refused command result; ``code`` is an ``LDB-6xxx`` code of ``raft/exceptions.py``."""
    return {"ok": False, "code": code, "message": message}


class OwnershipState:
    """Node registrations, vnode → (owner, epoch) per source, epochs and the manifest ref."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        # source -> {"vnodes": V, "owner": [node id | None] * V, "epoch": [int] * V}
        self.sources: dict[str, dict[str, Any]] = {}
        # Bumped on every committed change of membership or ownership; plans computed
        # against an older value are refused (optimistic concurrency).
        self.cluster_epoch = 0
        # The unscoped checkpoint log (scope ""): the global epoch counter and manifest.
        self.checkpoint_epoch = 0
        self.checkpoint_intent: int | None = None
        self.manifest: dict[str, Any] | None = None
        # One checkpoint log per database (scope): {"allocated", "intent", "manifest"}.
        self.checkpoint_logs: dict[str, dict[str, Any]] = {}
        self.voters: dict[str, dict[str, str]] = {}
        self.changes = 0
        self._dedup: OrderedDict[str, Result] = OrderedDict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        # pysyncobj's dump pickles this object: a dump written before a field existed loads
        # with that field's default instead of an AttributeError at the first command.
        self.__init__()  # type: ignore[misc]
        self.__dict__.update(state)

    # -- helpers -------------------------------------------------------------------------

    def _once(self, rid: str | None, fn: Any, *args: Any) -> Result:
        if rid and rid in self._dedup:
            return self._dedup[rid]
        try:
            res = fn(*args)
        except (TypeError, ValueError, KeyError) as exc:  # malformed arguments: refuse, never raise
            res = fail("LDB-6007", f"command rejected: {exc}; check the arguments and retry")
        if rid:
            self._dedup[rid] = res
            while len(self._dedup) > _DEDUP_CAPACITY:
                self._dedup.popitem(last=False)
        return res

    def _source(self, name: str, vnodes: int | None, *, create: bool) -> dict[str, Any] | Result:
        src = self.sources.get(name)
        if src is None:
            if not create:
                return fail("LDB-6007", f"unknown source {name!r}; commit a plan for it first")
            count = int(vnodes or DEFAULT_VNODES)
            if count <= 0:
                return fail("LDB-6007", f"vnode count must be positive, got {count}")
            src = {"vnodes": count, "owner": [None] * count, "epoch": [0] * count}
            self.sources[name] = src
        elif vnodes is not None and int(vnodes) != src["vnodes"]:
            return fail(
                "LDB-6007",
                f"source {name!r} has {src['vnodes']} vnodes, not {vnodes}; vnode counts are "
                "fixed once created",
            )
        return src

    def _set_owner(self, src: dict[str, Any], vnode: int, owner: str | None) -> bool:
        if src["owner"][vnode] == owner:
            return False
        src["owner"][vnode] = owner
        # Epoch monotonicity: +1 on every change of owner, never reset.
        src["epoch"][vnode] += 1
        self.changes += 1
        return True

    @staticmethod
    def _token(name: str, src: dict[str, Any], v: int) -> dict[str, Any]:
        return {"source": name, "vnode": v, "epoch": src["epoch"][v], "owner": src["owner"][v] or ""}

    @staticmethod
    def _check_vnodes(src: dict[str, Any], vnodes: list[int]) -> Result | None:
        bad = [v for v in vnodes if not (0 <= int(v) < src["vnodes"])]
        if bad:
            return fail("LDB-6007", f"vnode ids {bad[:5]} outside 0..{src['vnodes'] - 1}")
        return None

    # -- commands ------------------------------------------------------------------------

    def apply_register_node(
        self, rid: str, node_id: str, address: str, cores: int, metadata: dict[str, Any]
    ) -> Result:
        def run() -> Result:
            self.nodes[node_id] = {
                "id": node_id,
                "address": address,
                "cores": int(cores),
                "metadata": dict(metadata or {}),
            }
            self.cluster_epoch += 1
            return ok({"cluster_epoch": self.cluster_epoch})

        return self._once(rid, run)

    def apply_deregister_node(self, rid: str, node_id: str) -> Result:
        def run() -> Result:
            if node_id not in self.nodes:
                return fail("LDB-6006", f"node {node_id!r} is not registered; nothing to remove")
            del self.nodes[node_id]
            released = 0
            for src in self.sources.values():
                for v, owner in enumerate(src["owner"]):
                    if owner == node_id:
                        released += self._set_owner(src, v, None)
            self.cluster_epoch += 1
            return ok({"released": released, "cluster_epoch": self.cluster_epoch})

        return self._once(rid, run)

    def _owned_source(self, owner: str, source: str, vnode_count: int | None, vnodes: list[int]):
        """The source table for a change of owner, or the refusal (unknown node, bad vnodes)."""
        if owner not in self.nodes:
            return fail("LDB-6006", f"node {owner!r} is not registered; register it first")
        src = self._source(source, vnode_count, create=True)
        if "ok" in src:
            return src
        return self._check_vnodes(src, vnodes) or src

    def apply_assign(
        self, rid: str, source: str, vnodes: list[int], owner: str, vnode_count: int | None
    ) -> Result:
        def run() -> Result:
            src = self._owned_source(owner, source, vnode_count, vnodes)
            if "ok" in src:  # a refusal, not the source table
                return src
            changed = sum(self._set_owner(src, int(v), owner) for v in vnodes)
            if changed:
                self.cluster_epoch += 1
            return ok([self._token(source, src, int(v)) for v in vnodes])

        return self._once(rid, run)

    def apply_acquire(
        self, rid: str, source: str, vnodes: list[int], owner: str, vnode_count: int | None
    ) -> Result:
        def run() -> Result:
            src = self._owned_source(owner, source, vnode_count, vnodes)
            if "ok" in src:  # a refusal, not the source table
                return src
            taken = [int(v) for v in vnodes if src["owner"][int(v)] not in (None, owner)]
            if taken:
                return fail(
                    "LDB-6002",
                    f"vnodes {taken[:5]} of {source!r} are owned by other nodes; wait for them "
                    "to be released or commit a plan",
                )
            changed = sum(self._set_owner(src, int(v), owner) for v in vnodes)
            if changed:
                self.cluster_epoch += 1
            return ok([self._token(source, src, int(v)) for v in vnodes])

        return self._once(rid, run)

    def apply_release(self, rid: str, source: str, tokens: list[list[int]], owner: str) -> Result:
        def run() -> Result:
            src = self._source(source, None, create=False)
            if "ok" in src:
                return src
            pairs = [(int(v), int(e)) for v, e in tokens]
            bad = self._check_vnodes(src, [v for v, _ in pairs])
            if bad:
                return bad
            stale = [
                (v, e) for v, e in pairs if src["epoch"][v] != e or src["owner"][v] != owner
            ]
            if stale:
                v, e = stale[0]
                return fail(
                    "LDB-6001",
                    f"cannot release {source}/{v} at epoch {e}: committed epoch is "
                    f"{src['epoch'][v]} (owner {src['owner'][v]!r}); the vnode already moved",
                )
            for v, _ in pairs:
                self._set_owner(src, v, None)
            self.cluster_epoch += 1
            return ok([self._token(source, src, v) for v, _ in pairs])

        return self._once(rid, run)

    def apply_commit_plan(
        self,
        rid: str,
        source: str,
        members: list[str] | None,
        vnode_count: int | None,
        expected_cluster_epoch: int | None,
    ) -> Result:
        def run() -> Result:
            if expected_cluster_epoch is not None and expected_cluster_epoch != self.cluster_epoch:
                return fail(
                    "LDB-6007",
                    f"plan was computed at cluster epoch {expected_cluster_epoch} but the state "
                    f"is at {self.cluster_epoch}; recompute the plan and commit again",
                )
            src = self._source(source, vnode_count, create=True)
            if "ok" in src:
                return src
            live = sorted(self.nodes) if members is None else sorted(set(members) & set(self.nodes))
            current = dict(enumerate(src["owner"]))
            plan = plan_assignment(src["vnodes"], members=live, current=current)
            for mv in plan.moves:
                self._set_owner(src, mv.vnode, mv.dst)
            if plan.moves:
                self.cluster_epoch += 1
            return ok(
                {
                    "moves": [[m.vnode, m.src, m.dst, src["epoch"][m.vnode]] for m in plan.moves],
                    "cluster_epoch": self.cluster_epoch,
                }
            )

        return self._once(rid, run)

    # -- checkpoint logs: scope "" is the original global log, kept in its original fields
    #    (old dumps, ``cluster status``); any other scope is one database's log.

    def _ckpt_log(self, scope: str) -> dict[str, Any]:
        if not isinstance(scope, str) or len(scope) > _MAX_SCOPE_LEN:
            raise ValueError(f"checkpoint scope must be a string of at most {_MAX_SCOPE_LEN} chars")
        if not scope:
            return {"allocated": self.checkpoint_epoch, "intent": self.checkpoint_intent,
                    "manifest": self.manifest}
        return dict(self.checkpoint_logs.get(scope)
                    or {"allocated": 0, "intent": None, "manifest": None})

    def _put_ckpt_log(self, scope: str, log: dict[str, Any]) -> None:
        if not scope:
            self.checkpoint_epoch = log["allocated"]
            self.checkpoint_intent = log["intent"]
            self.manifest = log["manifest"]
        else:
            self.checkpoint_logs[scope] = log

    def apply_allocate_checkpoint_epoch(self, rid: str, scope: str = "") -> Result:
        def run() -> Result:
            log = self._ckpt_log(scope)
            # Epoch monotonicity per scope: never handed out twice, never reset.
            log["allocated"] += 1
            self._put_ckpt_log(scope, log)
            return ok(log["allocated"])

        return self._once(rid, run)

    def apply_record_intent(self, rid: str, scope: str, epoch: int) -> Result:
        def run() -> Result:
            log = self._ckpt_log(scope)
            last = log["manifest"]["epoch"] if log["manifest"] else 0
            intent = log["intent"] or 0
            if not (last < int(epoch) <= log["allocated"] and int(epoch) >= intent):
                return fail(
                    "LDB-6007",
                    f"intent epoch {epoch} of {scope!r} must be above the last committed ({last}), "
                    f"not below the last intent ({intent}) and at most the last allocated "
                    f"({log['allocated']}); allocate an epoch first",
                )
            log["intent"] = int(epoch)
            self._put_ckpt_log(scope, log)
            return ok(int(epoch))

        return self._once(rid, run)

    def apply_record_manifest(self, rid: str, epoch: int, ref: str, scope: str = "",
                              info: dict[str, Any] | None = None) -> Result:
        def run() -> Result:
            log = self._ckpt_log(scope)
            last = log["manifest"]["epoch"] if log["manifest"] else 0
            intent = log["intent"] or 0
            if not (last < int(epoch) <= log["allocated"] and int(epoch) >= intent):
                return fail(
                    "LDB-6007",
                    f"manifest epoch {epoch} must be above the last committed ({last}), not below "
                    f"the last intent ({intent}: a recovering head fenced it) and at most the "
                    f"last allocated ({log['allocated']}); allocate an epoch first",
                )
            if info is not None and not isinstance(info, dict):
                return fail("LDB-6007", "manifest info must be a map (sink pre-commit infos)")
            manifest: dict[str, Any] = {"epoch": int(epoch), "ref": str(ref)}
            if scope:
                manifest["sinks"] = {}
            for key, value in (info or {}).items():
                if key not in ("epoch", "ref"):
                    manifest[str(key)] = value
            log["manifest"] = manifest
            self._put_ckpt_log(scope, log)
            return ok(dict(manifest))

        return self._once(rid, run)

    def checkpoint_log(self, scope: str = "") -> Result:
        """The checkpoint log of ``scope``: ``{"allocated", "intent", "manifest"}``."""
        try:
            log = self._ckpt_log(scope)
        except ValueError as exc:
            return fail("LDB-6007", str(exc))
        manifest = log["manifest"]
        return ok({"allocated": log["allocated"], "intent": log["intent"],
                   "manifest": dict(manifest) if manifest else None})

    def apply_announce_voter(self, rid: str, voter_id: str, raft_addr: str, rpc_addr: str) -> Result:
        def run() -> Result:
            self.voters[raft_addr] = {"id": voter_id, "raft": raft_addr, "rpc": rpc_addr}
            return ok(None)

        return self._once(rid, run)

    # -- reads (also run as committed no-op commands for read barriers) -------------------

    def check_fence(self, source: str, vnode: int, epoch: int, owner: str = "") -> Result:
        """Accept a token iff it carries the committed epoch (and owner, when given)."""
        src = self.sources.get(source)
        if src is None or not (0 <= vnode < src["vnodes"]):
            return fail("LDB-6001", f"no ownership committed for {source}/{vnode}; acquire it first")
        cur_epoch, cur_owner = src["epoch"][vnode], src["owner"][vnode]
        if epoch != cur_epoch or cur_owner is None or (owner and owner != cur_owner):
            return fail(
                "LDB-6001",
                f"token {source}/{vnode}@{epoch} (owner {owner or '?'}) is stale: committed "
                f"epoch {cur_epoch} owner {cur_owner!r}; stop writing for this vnode and "
                "re-acquire it",
            )
        return ok(cur_epoch)

    def snapshot(self, source: str | None = None) -> dict[str, Any]:
        """Plain-data copy of the state (or of one source's ownership)."""
        sources = {
            name: {"vnodes": s["vnodes"], "owner": list(s["owner"]), "epoch": list(s["epoch"])}
            for name, s in self.sources.items()
            if source is None or name == source
        }
        return {
            "nodes": {k: dict(v) for k, v in self.nodes.items()},
            "sources": sources,
            "cluster_epoch": self.cluster_epoch,
            "checkpoint_epoch": self.checkpoint_epoch,
            "manifest": dict(self.manifest) if self.manifest else None,
            "checkpoints": {
                scope: {"allocated": log["allocated"], "intent": log["intent"],
                        "manifest": log["manifest"]["epoch"] if log["manifest"] else None}
                for scope, log in self.checkpoint_logs.items()
            },
            "voters": {k: dict(v) for k, v in self.voters.items()},
            "changes": self.changes,
        }
