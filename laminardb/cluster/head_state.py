"""What a database head must know again after Ray restarts its process, beyond the engine's
own checkpoint and WAL: whether its connector sources were running, which subscriptions its
clients hold (id → stream), the recoveries so far, and its reactor actors (they outlive it).

Why a file of its own: the engine's checkpoint restores the data, but ``start()``, a
subscription and the recovery history are the head's, not the engine's. They change rarely
(a start, a subscribe, a recovery), so one small JSON file in the database's directory,
replaced atomically, is enough; a head without a directory (``":memory:"``) keeps them in
memory only (Ray does not restart it).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from laminardb.checkpoint._files import atomic_write

_FILE = "head-state.json"
_KEEP_RECOVERIES = 32  # the history metrics() shows; older ones are dropped


class HeadState:
    """The persisted facts of one head (see the module docstring)."""

    def __init__(self, directory: str | None) -> None:
        self.path = os.path.join(directory, _FILE) if directory else None
        self._lock = threading.Lock()
        doc: dict[str, Any] = {}
        if self.path is not None and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        self.sources_running: bool = bool(doc.get("sources_running", False))
        self.subscriptions: dict[str, str] = dict(doc.get("subscriptions", {}))
        self.recoveries: list[dict] = list(doc.get("recoveries", []))
        # the members of the reactor pool in use: a restarted head takes over those still alive
        self.actors: list[str] = list(doc.get("actors", []))

    def set_running(self, running: bool) -> None:
        with self._lock:
            if self.sources_running != running:
                self.sources_running = running
                self._save()

    def add_subscription(self, sid: str, name: str) -> None:
        with self._lock:
            self.subscriptions[sid] = name
            self._save()

    def drop_subscriptions(self, sids: list[str]) -> None:
        with self._lock:
            gone = [s for s in sids if self.subscriptions.pop(s, None) is not None]
            if gone:
                self._save()

    def set_actors(self, members: list[str]) -> None:
        with self._lock:
            if self.actors != members:
                self.actors = list(members)
                self._save()

    def add_recovery(self, report: dict) -> None:
        with self._lock:
            self.recoveries = (self.recoveries + [report])[-_KEEP_RECOVERIES:]
            self._save()

    def _save(self) -> None:
        if self.path is None or not os.path.isdir(os.path.dirname(self.path)):
            return  # no directory, or the database was dropped
        doc = {"sources_running": self.sources_running, "subscriptions": self.subscriptions,
               "recoveries": self.recoveries, "actors": self.actors}
        atomic_write(self.path, json.dumps(doc, default=str).encode(), what="database head state", sync=False)
