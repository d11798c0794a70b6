"""One Raft voter process: pysyncobj ``SyncObj`` + ownership state machine + control RPC.

Entry point: :func:`run_node` (used by ``laminardb raft-node``), or :class:`VoterNode` to
embed a voter in a process you control. A voter:

1. validates its config (no unauthenticated pickle port outside loopback dev mode);
2. locks its data dir, so two voters never share a journal;
3. starts ``SyncObj`` with journal + full dump on disk (a journal alone loses state after log
   compaction), ``useFork=False`` and fast timings (see ``config.py``);
4. serves the control RPC (``server.py``);
5. announces ``raft address → rpc address`` through the log, so every voter can tell clients
   where the leader's RPC port is.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import uuid
from typing import IO

from pysyncobj import SyncObj, SyncObjException

from laminardb.raft import _wire
from laminardb.raft.config import RaftNodeConfig
from laminardb.raft.exceptions import InsecureConfigError
from laminardb.raft.machine import OwnershipStateMachine
from laminardb.raft.server import RpcServer

__all__ = ["VoterNode", "run_node"]

_log = logging.getLogger(__name__)

# Retry period of the voter's own announcement while no leader exists yet.
_ANNOUNCE_RETRY_S = 0.2


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
        self.syncobj = SyncObj(cfg.bind, list(cfg.other_peers), conf=cfg.sync_obj_conf(),
                               consumers=[self.machine])
        self.rpc = RpcServer(cfg.rpc_bind, key=_wire.derive_key(cfg.secret), machine=self.machine,
                             syncobj=self.syncobj, voter_id=cfg.node_id,
                             commit_timeout=cfg.commit_timeout)
        self.rpc.start()
        self._announcer.start()

    def _announce(self) -> None:
        cfg = self.config
        rid = f"announce-{cfg.node_id}-{uuid.uuid4().hex}"
        while not self._stop.is_set():
            known = self.machine.read(lambda st: st.voters.get(cfg.bind))
            if known == {"id": cfg.node_id, "raft": cfg.bind, "rpc": cfg.rpc_bind}:
                return
            try:
                res = self.machine.announce_voter(rid, cfg.node_id, cfg.bind, cfg.rpc_bind,
                                                  sync=True, timeout=cfg.commit_timeout)
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

    def on_signal(signum: int, _frame: object) -> None:
        node._stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _log.warning("raft voter %s up: raft %s rpc %s", config.node_id, config.bind, config.rpc_bind)
    node.wait()
    node.stop()
    return 0
