"""The control RPC server inside each voter: authenticated msgpack requests → state machine.

Entry point: :class:`RpcServer` (started by ``node.py``). One thread per connection; each
request is one frame (see ``_wire.py``), answered by one frame::

    request  {"id": n, "ts": unix_time, "m": method, "a": {kwargs}}
    response {"id": n, "ok": bool, "result" | "code" + "message", "leader": rpc addr | None}

Writes become Raft commands (pysyncobj forwards a follower's command to the leader and the
answer comes from this voter's own applied state once the entry committed), so any voter can
serve any call; ``leader`` is only a hint that saves the client a hop.

Refused frames (over ``_wire.MAX_REQUEST_FRAME``, failed MAC, clock skew, undecodable) are
answered once, counted (``counters()``, shown by ``cluster status``) and logged as
``rpc.auth_failed`` / ``rpc.frame_refused``, rate-limited.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjException

from laminardb.raft import _wire
from laminardb.raft._log import RateLimiter, event
from laminardb.raft.exceptions import RpcAuthError, RpcProtocolError
from laminardb.raft.machine import OwnershipStateMachine
from laminardb.raft.state import OwnershipState, Result, fail, ok

__all__ = ["RpcServer"]

# An idle client connection is closed after this long; clients reconnect transparently.
_IDLE_TIMEOUT_S = 300.0
# pysyncobj's @replicated wrapper interprets these keyword arguments itself (``_doApply`` would
# apply a command locally without replicating it): never accept them from the wire.
_RESERVED_KWARGS = frozenset({"sync", "timeout", "callback"})


class RpcServer:
    """Serves the control RPC of one voter.

    Args:
        bind: ``host:port`` to listen on.
        key: HMAC key (``_wire.derive_key(secret)``).
        machine: the voter's state machine.
        syncobj: the voter's ``SyncObj`` (for leader / status).
        voter_id: this voter's id.
        commit_timeout: seconds to wait for one command to commit.
    """

    def __init__(self, bind: str, *, key: bytes, machine: OwnershipStateMachine,
                 syncobj: SyncObj, voter_id: str, commit_timeout: float,
                 voter_info: Callable[[], dict[str, Any]] | None = None) -> None:
        from laminardb.raft.config import split_addr

        self._voter_info = voter_info or dict
        self._counts = {"frames_refused": 0, "auth_failures": 0}
        self._counts_lock = threading.Lock()
        self._limiter = RateLimiter()
        self._key = key
        self._sm = machine
        self._so = syncobj
        self._voter_id = voter_id
        self._timeout = commit_timeout
        host, port = split_addr(bind)
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve_connection(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="raft-rpc",
                                        daemon=True)
        self._methods: dict[str, Callable[..., Result]] = {
            "ping": lambda: ok(self._voter_id),
            "status": self._status,
            "ownership": self._ownership,
            "check_fence": self._check_fence,
            "register_node": self._cmd(machine.register_node),
            "deregister_node": self._cmd(machine.deregister_node),
            "assign": self._cmd(machine.assign),
            "acquire": self._cmd(machine.acquire),
            "release": self._cmd(machine.release),
            "commit_plan": self._cmd(machine.commit_plan),
            "allocate_checkpoint_epoch": self._cmd(machine.allocate_checkpoint_epoch),
            "record_manifest": self._cmd(machine.record_manifest),
            "record_intent": self._cmd(machine.set_checkpoint_intent),
            "checkpoint_log": self._checkpoint_log,
        }

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        return self._server.server_address[:2]

    def start(self) -> None:
        """Start serving in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()

    def counters(self) -> dict[str, int]:
        """Refused RPC frames since start: ``frames_refused`` (size/format), ``auth_failures``."""
        with self._counts_lock:
            return dict(self._counts)

    def _refused(self, peer: str, exc: Exception) -> None:
        auth = isinstance(exc, RpcAuthError)
        key = "auth_failures" if auth else "frames_refused"
        with self._counts_lock:
            self._counts[key] += 1
            total = self._counts[key]
        name = "rpc.auth_failed" if auth else "rpc.frame_refused"
        suppressed = self._limiter.check(name)
        if suppressed is None:
            return
        what = ("failed authentication (wrong cluster secret, or not a laminardb client)"
                if auth else "was refused")
        event(logging.WARNING, name,
              f"control RPC request from {peer} {what}: {getattr(exc, 'message', exc)}; "
              "answered with an error and closed the connection",
              peer=peer, code=getattr(exc, "code", None), total=total, suppressed=suppressed)

    # -- connection loop -------------------------------------------------------------------

    def _serve_connection(self, sock: socket.socket) -> None:
        sock.settimeout(_IDLE_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            host, port = sock.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        while True:
            try:
                req = _wire.read_frame(sock, self._key, max_frame=_wire.MAX_REQUEST_FRAME)
            except (RpcAuthError, RpcProtocolError) as exc:
                # Answer once (the client learns why), then drop the connection.
                self._refused(peer, exc)
                self._reply(sock, {"id": None, **fail(exc.code, exc.message)})
                return
            except (ConnectionError, OSError, TimeoutError):
                return
            resp = self._handle(req)
            if resp.get("code") == "LDB-6004":  # authentic MAC, timestamp outside the window
                self._refused(peer, RpcAuthError(resp.get("message", "")))
            if not self._reply(sock, resp):
                return

    def _reply(self, sock: socket.socket, resp: dict[str, Any]) -> bool:
        resp["leader"] = self._leader_rpc()
        resp["voter"] = self._voter_id
        try:
            _wire.send_frame(sock, self._key, resp)
        except OSError:
            return False
        return True

    def _handle(self, req: Any) -> dict[str, Any]:
        if not isinstance(req, dict) or not isinstance(req.get("m"), str):
            return {"id": None, **fail("LDB-6008", "request must be a map with a method name 'm'")}
        rid = req.get("id")
        ts = req.get("ts")
        if not isinstance(ts, int | float) or abs(time.time() - ts) > _wire.MAX_CLOCK_SKEW_S:
            msg = "request timestamp outside the allowed clock skew; check the client's clock"
            return {"id": rid, **fail("LDB-6004", msg)}
        fn = self._methods.get(req["m"])
        if fn is None:
            return {"id": rid, **fail("LDB-6008", f"unknown control RPC method {req['m']!r}")}
        args = req.get("a") or {}
        if not isinstance(args, dict) or any(
            not isinstance(k, str) or k.startswith("_") or k in _RESERVED_KWARGS for k in args
        ):
            return {"id": rid, **fail("LDB-6008", "arguments must be a map of public names")}
        try:
            res = fn(**args)
        except TypeError as exc:
            res = fail("LDB-6008", f"bad arguments for {req['m']}: {exc}")
        return {"id": rid, **res}

    # -- methods -----------------------------------------------------------------------------

    def _cmd(self, command: Callable[..., Any]) -> Callable[..., Result]:
        def call(**kwargs: Any) -> Result:
            return self._commit(command, **kwargs)

        return call

    def _commit(self, command: Callable[..., Any], **kwargs: Any) -> Result:
        try:
            res = command(**kwargs, sync=True, timeout=self._timeout)
        except SyncObjException as exc:
            msg = (
                f"command not committed ({exc.errorCode}); the cluster may be electing a "
                "leader or lack a quorum: retry, and check that a majority of voters is up"
            )
            return fail("LDB-6003", msg)
        if not isinstance(res, dict):
            return fail("LDB-6003", "command result lost in a leader change; retry")
        return res

    def _leader_rpc(self) -> str | None:
        leader = self._so._getLeader()
        if leader is None:
            return None
        addr = getattr(leader, "address", None) or str(leader)
        voter = self._sm.read(lambda st: st.voters.get(addr))
        return voter["rpc"] if voter else None

    def _status(self) -> Result:
        st = self._so.getStatus()
        leader = st.get("leader")
        raft = {
            "self": str(st.get("self")),
            "state": int(st.get("state", -1)),
            "leader": str(leader) if leader is not None else None,
            "term": int(st.get("raft_term", 0)),
            "has_quorum": bool(st.get("has_quorum")),
            "commit_idx": int(st.get("commit_idx", 0)),
            "last_applied": int(st.get("last_applied", 0)),
            "log_len": int(st.get("log_len", 0)),
            "partners_connected": {
                k.removeprefix("partner_node_status_server_"): v == 2
                for k, v in st.items()
                if str(k).startswith("partner_node_status_server_")
            },
        }
        voter = {"id": self._voter_id, "pid": os.getpid(), **self._voter_info()}
        voter.setdefault("security", {})["rpc"] = self.counters()
        return ok({"raft": raft, "voter": voter, "state": self._sm.read(OwnershipState.snapshot)})

    def _ownership(self, source: str | None = None, barrier: bool = False) -> Result:
        if barrier:
            res = self._commit(self._sm.barrier)
            if not res.get("ok"):
                return res
        return ok(self._sm.read(OwnershipState.snapshot, source))

    def _checkpoint_log(self, scope: str = "", barrier: bool = True) -> Result:
        if barrier:
            res = self._commit(self._sm.barrier)
            if not res.get("ok"):
                return res
        return self._sm.read(OwnershipState.checkpoint_log, scope)

    def _check_fence(self, source: str, vnode: int, epoch: int, owner: str = "",
                     barrier: bool = True) -> Result:
        if barrier:
            return self._commit(self._sm.check_fence_barrier, source=source, vnode=vnode,
                                epoch=epoch, owner=owner)
        return self._sm.read(OwnershipState.check_fence, source, vnode, epoch, owner)
