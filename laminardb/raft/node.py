"""One Raft voter process: pysyncobj ``SyncObj`` + ownership state machine + control RPC.

Entry point: :func:`run_node` (used by ``laminardb raft-node``), or :class:`VoterNode` to
embed a voter in a process you control. A voter:

1. validates its config (no unauthenticated pickle port outside loopback dev mode);
2. locks its data dir, so two voters never share a journal;
3. starts ``SyncObj`` with journal + full dump on disk (a journal alone loses state after log
   compaction), ``useFork=False`` and fast timings (see ``config.py``);
4. serves the control RPC (``server.py``);
5. announces ``raft address → rpc address`` through the log, so every voter can tell clients
   where the leader's RPC port is;
6. logs what an operator needs to follow the cluster (``docs/operations.md``, "Log events"):
   ``voter.up``/``voter.down``, ``raft.state`` (election started, won, stepped down),
   ``raft.term``, ``raft.leader``, ``raft.peer`` (a partner's connection up/down), and the
   refused frames of ``_transport.py`` and ``server.py``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import time
import uuid
from typing import IO, Any

from pysyncobj import SyncObj, SyncObjException

from laminardb.raft import _wire
from laminardb.raft._log import event
from laminardb.raft._transport import FrameGuard, guarded_transport
from laminardb.raft.config import RaftNodeConfig
from laminardb.raft.exceptions import InsecureConfigError
from laminardb.raft.machine import OwnershipStateMachine
from laminardb.raft.server import RpcServer

__all__ = ["VoterNode", "run_node"]

# Retry period of the voter's own announcement while no leader exists yet.
_ANNOUNCE_RETRY_S = 0.2
_STATES = {0: "follower", 1: "candidate", 2: "leader"}


class VoterNode:
    """A running voter. ``start()`` / ``stop()``; not restartable (build a new one)."""

    def __init__(self, config: RaftNodeConfig) -> None:
        config.validate()
        self.config = config
        self._stop = threading.Event()
        self._lock_file: IO[str] | None = None
        self.machine = OwnershipStateMachine()
        self.syncobj: SyncObj | None = None
        self.rpc: RpcServer | None = None
        self.guard = FrameGuard(max_frame_bytes=config.max_frame_bytes,
                                encrypted=not config.insecure_dev)
        self._started = time.monotonic()
        self._seen: tuple[int, str | None] = (0, None)  # (term, leader) last logged
        self._announcer = threading.Thread(target=self._announce, name="raft-announce",
                                           daemon=True)

    def start(self) -> None:
        """Lock the data dir, start Raft and the RPC server.

        Raises:
            InsecureConfigError: the data dir is locked by another voter.
        """
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self._lock_file = open(os.path.join(cfg.data_dir, "voter.lock"), "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            msg = f"data dir {cfg.data_dir} is used by another running voter; give each its own"
            raise InsecureConfigError(msg) from exc
        self.syncobj = SyncObj(
            cfg.raft_address, list(cfg.other_peers),
            conf=cfg.sync_obj_conf(onStateChanged=self._on_state_changed),
            consumers=[self.machine], transportClass=guarded_transport(self.guard,
                                                                       on_peer=self._on_peer))
        self.syncobj.addOnTickCallback(self._on_tick)
        self.rpc = RpcServer(cfg.rpc_bind, key=_wire.derive_key(cfg.secret), machine=self.machine,
                             syncobj=self.syncobj, voter_id=cfg.node_id,
                             commit_timeout=cfg.commit_timeout, voter_info=self._voter_info)
        self.rpc.start()
        self._announcer.start()

    # -- what the voter reports -------------------------------------------------------------

    def _voter_info(self) -> dict[str, Any]:
        return {"uptime_s": round(time.monotonic() - self._started, 1),
                "max_frame_bytes": self.config.max_frame_bytes,
                "security": {"raft": self.guard.counters()}}

    def _term(self) -> int:
        so = self.syncobj
        return int(so.raftCurrentTerm) if so is not None else 0

    def _on_state_changed(self, old: int, new: int) -> None:
        # Runs in pysyncobj's thread, on every change of this voter's Raft role.
        term = self._term()
        old_s, new_s = _STATES.get(old, str(old)), _STATES.get(new, str(new))
        if new_s == "candidate":
            term += 1  # pysyncobj switches to candidate just before raising the term
            text = f"election started: {self.config.node_id} is a candidate for term {term}"
        elif new_s == "leader":
            text = f"election won: {self.config.node_id} leads term {term}"
        else:
            text = f"{self.config.node_id} is {new_s} again (was {old_s}) in term {term}"
        event(logging.INFO, "raft.state", text, voter=self.config.node_id, previous=old_s,
              state=new_s, term=term)

    def _on_tick(self) -> None:
        # Runs in pysyncobj's thread after every tick: report term and leader changes once.
        so = self.syncobj
        if so is None:
            return
        leader_node = so._getLeader()
        leader = str(getattr(leader_node, "address", leader_node)) if leader_node else None
        term = self._term()
        last_term, last_leader = self._seen
        if term != last_term:
            event(logging.INFO, "raft.term", f"term {last_term} -> {term}",
                  voter=self.config.node_id, term=term, previous=last_term)
        if leader != last_leader:
            if leader is None:
                text = f"leader {last_leader} lost (term {term}): waiting for an election"
            else:
                text = f"leader is {leader} (term {term})"
            event(logging.INFO, "raft.leader", text, voter=self.config.node_id, leader=leader,
                  previous=last_leader, term=term)
        self._seen = (term, leader)

    def _on_peer(self, address: str, connected: bool) -> None:
        what = "connected" if connected else "disconnected (down, paused or unreachable)"
        event(logging.INFO if connected else logging.WARNING, "raft.peer",
              f"voter {address} {what}", voter=self.config.node_id, peer=address,
              connected=connected)

    def _announce(self) -> None:
        cfg = self.config
        rid = f"announce-{cfg.node_id}-{uuid.uuid4().hex}"
        me = {"id": cfg.node_id, "raft": cfg.raft_address, "rpc": cfg.rpc_address}
        while not self._stop.is_set():
            known = self.machine.read(lambda st: st.voters.get(cfg.raft_address))
            if known == me:
                return
            try:
                res = self.machine.announce_voter(rid, cfg.node_id, cfg.raft_address,
                                                  cfg.rpc_address, sync=True,
                                                  timeout=cfg.commit_timeout)
                if isinstance(res, dict) and res.get("ok"):
                    return
            except SyncObjException:
                pass
            self._stop.wait(_ANNOUNCE_RETRY_S)

    def wait(self) -> None:
        """Block until :meth:`stop` is called (e.g. from a signal handler)."""
        while not self._stop.wait(0.5):
            pass

    def stop(self) -> None:
        """Stop serving and shut Raft down cleanly (flushes the journal)."""
        self._stop.set()
        if self.rpc is not None:
            self.rpc.stop()
        if self.syncobj is not None:
            self.syncobj.destroy()
        if self._lock_file is not None:
            self._lock_file.close()


def run_node(config: RaftNodeConfig) -> int:
    """Run a voter until SIGTERM/SIGINT. Returns the process exit code."""
    node = VoterNode(config)
    node.start()
    reason: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        reason.append(signal.Signals(signum).name)
        node._stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    c = config
    event(logging.INFO, "voter.up",
          f"raft voter {c.node_id} up: raft {c.raft_address} (bound {c.bind}), rpc "
          f"{c.rpc_address} (bound {c.rpc_bind}), {len(c.other_peers)} peers, frame cap "
          f"{c.max_frame_bytes} bytes"
          + (", NO Raft encryption (--insecure-dev)" if c.insecure_dev else ""),
          voter=c.node_id, raft=c.raft_address, rpc=c.rpc_address, bind=c.bind,
          rpc_bind=c.rpc_bind, peers=list(c.other_peers), pid=os.getpid(),
          max_frame_bytes=c.max_frame_bytes, encrypted=not c.insecure_dev)
    node.wait()
    node.stop()
    why = reason[0] if reason else "stop"
    event(logging.INFO, "voter.down", f"raft voter {c.node_id} stopped ({why})",
          voter=c.node_id, reason=why)
    return 0
