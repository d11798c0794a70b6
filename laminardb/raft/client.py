"""Client of the control RPC: :class:`RaftClient`, used by actors, the coordinator and the CLI.

Every call goes to one voter over a persistent authenticated connection (see ``_wire.py``).
On a connection error, a "not committed" answer or a leader hint, the client moves to another
voter and retries until ``deadline`` — always with the *same* request id, so a command the
old leader did commit is not applied twice (the state machine deduplicates by id). Writes are
linearizable: the answer is computed from the committed entry.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from laminardb.raft import _wire
from laminardb.raft.config import split_addr
from laminardb.raft.exceptions import (
    NoLeaderError,
    RpcAuthError,
    RpcProtocolError,
    error_from_wire,
)
from laminardb.raft.fencing import FencingToken

__all__ = ["RaftClient"]

# Retry spacing while voters elect a leader (elections take 150-350 ms).
_RETRY_SLEEP_S = 0.05
# Default total budget for one call, retries included: covers a failover (< 2 s) with margin.
_DEFAULT_DEADLINE_S = 10.0
_CONNECT_TIMEOUT_S = 1.0
# Codes after which another voter may succeed.
_RETRYABLE = frozenset({"LDB-6003"})


class RaftClient:
    """Authenticated client for the voters' control RPC. Thread-safe (one call at a time).

    Args:
        voters: RPC addresses (``host:port``) of the voters; any subset reachable is enough.
        secret: cluster secret shared with the voters.
        deadline: seconds one call may take, retries and failovers included.
        call_timeout: socket timeout for one request on one voter.
    """

    def __init__(self, voters: Sequence[str], *, secret: str | bytes,
                 deadline: float = _DEFAULT_DEADLINE_S, call_timeout: float = 5.0) -> None:
        if not voters:
            raise ValueError("RaftClient needs at least one voter RPC address")
        self._voters = list(dict.fromkeys(voters))
        self._key = _wire.derive_key(secret)
        self._deadline = deadline
        self._call_timeout = call_timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._current = self._voters[0]
        self._ids = itertools.count(1)

    # -- transport ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (the client reconnects on the next call)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> RaftClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _connect(self, addr: str) -> socket.socket:
        host, port = split_addr(addr)
        sock = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._call_timeout)
        return sock

    def _follow_hint(self, hint: str | None) -> None:
        # Answers from a follower cost one forwarding hop: talk to the leader next time.
        if hint and hint != self._current:
            self._drop()
            self._current = hint

    def _next_voter(self, hint: str | None) -> None:
        self._drop()
        if hint and hint != self._current:
            self._current = hint
            return
        idx = self._voters.index(self._current) if self._current in self._voters else -1
        self._current = self._voters[(idx + 1) % len(self._voters)]

    def _exchange(self, method: str, args: dict[str, Any]) -> dict[str, Any] | str:
        """One request/response with the current voter; a ``str`` describes a transport error.

        Our own typed errors subclass builtins such as ``PermissionError`` (an ``OSError``),
        so transport failures are turned into values here instead of caught further up.
        """
        try:
            if self._sock is None:
                self._sock = self._connect(self._current)
            req = {"id": next(self._ids), "ts": time.time(), "m": method, "a": args}
            _wire.send_frame(self._sock, self._key, req)
            return _wire.read_frame(self._sock, self._key)
        except RpcAuthError:
            self._drop()
            raise
        except RpcProtocolError as exc:
            self._drop()
            return str(exc)
        except OSError as exc:  # refused, reset, timeout: try another voter
            self._drop()
            return str(exc) or type(exc).__name__

    def call(self, method: str, **args: Any) -> Any:
        """Send one request, retrying across voters until it gets a definite answer.

        Returns:
            The ``result`` of a successful response.

        Raises:
            ControlPlaneError: the typed refusal (stale epoch, unknown node, ...).
            NoLeaderError: no voter committed the call before the deadline.
            RpcAuthError: the voters do not accept this client's secret.
        """
        end = time.monotonic() + self._deadline
        last = "no voter reachable"
        with self._lock:
            while True:
                hint = None
                resp = self._exchange(method, args)
                if isinstance(resp, str):
                    last = f"{self._current}: {resp}"
                elif resp.get("ok"):
                    self._follow_hint(resp.get("leader"))
                    return resp.get("result")
                else:
                    code, message = resp.get("code", "LDB-6000"), resp.get("message", "")
                    if code not in _RETRYABLE:
                        # Typed refusal (stale epoch, unknown node, bad secret...): final.
                        raise error_from_wire(code, message)
                    last, hint = f"{self._current}: {message}", resp.get("leader")
                if time.monotonic() >= end:
                    self._drop()
                    msg = (
                        f"control call {method} not answered within {self._deadline:.1f} s "
                        f"(last: {last}); check that a majority of voters is running"
                    )
                    raise NoLeaderError(msg)
                self._next_voter(hint)
                time.sleep(_RETRY_SLEEP_S if hint is None else 0)

    # -- API ---------------------------------------------------------------------------------

    @staticmethod
    def _rid() -> str:
        return uuid.uuid4().hex

    @staticmethod
    def _tokens(raw: Iterable[dict[str, Any]]) -> list[FencingToken]:
        return [FencingToken.from_wire(t) for t in raw]

    def ping(self) -> str:
        """Id of the voter that answered."""
        return self.call("ping")

    def register_node(self, node_id: str, *, address: str = "", cores: int = 1,
                      metadata: dict[str, Any] | None = None) -> int:
        """Register (or update) a node; returns the new cluster epoch."""
        res = self.call("register_node", rid=self._rid(), node_id=node_id, address=address,
                        cores=cores, metadata=metadata or {})
        return int(res["cluster_epoch"])

    def deregister_node(self, node_id: str) -> int:
        """Remove a node and release its vnodes (their epochs rise); returns how many."""
        return int(self.call("deregister_node", rid=self._rid(), node_id=node_id)["released"])

    def assign(self, source: str, vnodes: Iterable[int], *, owner: str,
               vnode_count: int | None = None) -> list[FencingToken]:
        """Give ``vnodes`` to ``owner`` regardless of the current owner (a forced move)."""
        res = self.call("assign", rid=self._rid(), source=source, vnodes=list(vnodes),
                        owner=owner, vnode_count=vnode_count)
        return self._tokens(res)

    def acquire(self, source: str, vnodes: Iterable[int], *, owner: str,
                vnode_count: int | None = None) -> list[FencingToken]:
        """Take unowned ``vnodes`` (all or none); refused if another node owns one."""
        res = self.call("acquire", rid=self._rid(), source=source, vnodes=list(vnodes),
                        owner=owner, vnode_count=vnode_count)
        return self._tokens(res)

    def release(self, tokens: Sequence[FencingToken]) -> list[FencingToken]:
        """Give up vnodes held with ``tokens`` (all of one source and owner)."""
        if not tokens:
            return []
        first = tokens[0]
        res = self.call("release", rid=self._rid(), source=first.source,
                        tokens=[[t.vnode, t.epoch] for t in tokens], owner=first.owner)
        return self._tokens(res)

    def commit_plan(self, source: str, *, members: Sequence[str] | None = None,
                    vnode_count: int | None = None,
                    expected_cluster_epoch: int | None = None) -> dict[str, Any]:
        """Compute and commit a rebalance of ``source`` over ``members`` (default: all nodes).

        Returns:
            ``{"moves": [[vnode, from, to, new_epoch], ...], "cluster_epoch": n}``.
        """
        return self.call("commit_plan", rid=self._rid(), source=source,
                         members=list(members) if members is not None else None,
                         vnode_count=vnode_count, expected_cluster_epoch=expected_cluster_epoch)

    def allocate_checkpoint_epoch(self, scope: str = "") -> int:
        """Next checkpoint epoch of ``scope`` (a database name; ``""``: the global log),
        strictly increasing, never handed out twice."""
        if not scope:  # the call form voters of every version accept
            return int(self.call("allocate_checkpoint_epoch", rid=self._rid()))
        return int(self.call("allocate_checkpoint_epoch", rid=self._rid(), scope=scope))

    def record_intent(self, scope: str, epoch: int) -> int:
        """Record that checkpoint ``epoch`` of ``scope`` is about to run (Structured
        Streaming's ``offsets/N``): a restarted coordinator aborts an intent above the
        manifest. Refused (``CommandRejectedError``) at or below the recorded manifest."""
        return int(self.call("record_intent", rid=self._rid(), scope=scope, epoch=epoch))

    def record_manifest(self, epoch: int, ref: str, *, scope: str = "",
                        info: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the committed manifest of checkpoint ``epoch`` (the commit point), with
        ``info`` (msgpack-able, e.g. ``{"sinks": {...}}``) stored beside it."""
        if not scope and info is None:  # the call form voters of every version accept
            return self.call("record_manifest", rid=self._rid(), epoch=epoch, ref=ref)
        return self.call("record_manifest", rid=self._rid(), epoch=epoch, ref=ref, scope=scope,
                         info=info)

    def checkpoint_log(self, scope: str = "", *, barrier: bool = True) -> dict[str, Any]:
        """``{"allocated": e, "intent": e | None, "manifest": {"epoch", "ref", ...} | None}``
        of ``scope``; ``barrier=True`` makes the read linearizable."""
        return self.call("checkpoint_log", scope=scope, barrier=barrier)

    def ownership(self, source: str | None = None, *, barrier: bool = False) -> dict[str, Any]:
        """Snapshot of nodes, ownership and epochs; ``barrier=True`` makes it linearizable."""
        return self.call("ownership", source=source, barrier=barrier)

    def tokens(self, source: str, owner: str, *, barrier: bool = True) -> list[FencingToken]:
        """Current tokens of ``owner`` for ``source``."""
        snap = self.ownership(source, barrier=barrier)["sources"].get(source)
        if snap is None:
            return []
        return [
            FencingToken(v, snap["epoch"][v], source, owner)
            for v, o in enumerate(snap["owner"])
            if o == owner
        ]

    def check_fence(self, token: FencingToken, *, barrier: bool = True) -> int:
        """Return the committed epoch if ``token`` is current, else raise ``StaleEpochError``.

        Args:
            token: the writer's token.
            barrier: go through the Raft log (linearizable; one commit) instead of reading the
                answering voter's applied state (cheaper, may lag by a few ms).
        """
        return int(self.call("check_fence", source=token.source, vnode=token.vnode,
                             epoch=token.epoch, owner=token.owner, barrier=barrier))

    def status(self) -> dict[str, Any]:
        """Raft status of the answering voter plus the full ownership snapshot."""
        return self.call("status")
