"""The Delta coordinator's epoch log: epochs, intents and manifests of one database.

Entry points: :class:`RaftEpochLog` (the log lives in the Raft state, scoped by the
database's name) and :class:`FileEpochLog` (one JSON file, atomically replaced and fsynced:
for a cluster without voters). Both offer the same four calls, modelled on Structured
Streaming's ``offsets/N`` and ``commits/N`` logs:

* ``allocate() -> e``     a new epoch, never handed out twice;
* ``intent(e)``           checkpoint ``e`` is about to run (written *before* any work);
* ``record_manifest(e, ref, info)``  checkpoint ``e`` is complete: the commit point
  (refused once a later intent exists: see :func:`fence`);
* ``state()``             ``{"allocated": e, "intent": e | None, "manifest": {"epoch",
  "ref", "sinks", ...} | None}``.

On restart the coordinator re-drives the commit of the recorded manifest and aborts an
intent above it. The same order rules hold in both backends (the Raft ones are in
``laminardb/raft/state.py``): a manifest epoch is above the last one and at most the last
allocated and not below the last intent; an intent is above the manifest and not below
the last intent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol

from laminardb.checkpoint._files import atomic_write
from laminardb.checkpoint.exceptions import EpochLogError

__all__ = ["EpochLog", "FileEpochLog", "RaftEpochLog", "fence"]

_FILE = "epochs.json"
_VERSION = 1


class EpochLog(Protocol):
    """What the coordinator needs of an epoch log."""

    def allocate(self) -> int: ...

    def intent(self, epoch: int) -> None: ...

    def record_manifest(self, epoch: int, ref: str, info: dict[str, Any] | None = None) -> None: ...

    def state(self) -> dict[str, Any]: ...


def fence(log: EpochLog) -> dict[str, Any]:
    """Settle the race between a recovering head and a checkpoint in flight: an intent
    above every allocated epoch, after which no earlier epoch's manifest can be recorded.
    Returns the log's state after it: its manifest is final — the recovery point.

    Why: the coordinator records a manifest after the head prepared the epoch. A head that
    restores meanwhile (an actor lost) from the manifest it read must never see that epoch
    recorded afterwards — the sinks would commit output its restored engine produces again.
    """
    log.intent(log.allocate())
    return log.state()


class RaftEpochLog:
    """The epoch log of database ``scope`` in the Raft state (linearizable, replicated).

    Args:
        client: a :class:`~laminardb.raft.client.RaftClient`.
        scope: the database's name.
    """

    def __init__(self, client: Any, scope: str) -> None:
        if not scope:
            raise ValueError("a database's epoch log needs its name as scope")
        self.client = client
        self.scope = scope

    def allocate(self) -> int:
        return self.client.allocate_checkpoint_epoch(self.scope)

    def intent(self, epoch: int) -> None:
        with _refusal_as_epoch_log_error():
            self.client.record_intent(self.scope, epoch)

    def record_manifest(self, epoch: int, ref: str, info: dict[str, Any] | None = None) -> None:
        with _refusal_as_epoch_log_error():
            self.client.record_manifest(epoch, ref, scope=self.scope, info=info or {})

    def state(self) -> dict[str, Any]:
        return self.client.checkpoint_log(self.scope)

    def close(self) -> None:
        self.client.close()


@contextlib.contextmanager
def _refusal_as_epoch_log_error():
    """The voters' refusal of an out-of-order record is the same error as the file log's:
    certainly not recorded, so the coordinator aborts the epoch at once."""
    from laminardb.raft.exceptions import CommandRejectedError

    try:
        yield
    except CommandRejectedError as exc:
        raise EpochLogError(str(exc)) from exc


class FileEpochLog:
    """The epoch log as ``<directory>/epochs.json``, replaced atomically on every record.

    Every call reads, checks and rewrites the file under an exclusive ``flock``, so two
    coordinator processes (a restarted one racing a dying one) never interleave records.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / _FILE
        self._lock_path = self.dir / ".epochs.lock"
        self._mutex = threading.Lock()

    # ------------------------------------------------------------------ records
    def allocate(self) -> int:
        def run(doc: dict[str, Any]) -> int:
            doc["allocated"] += 1  # epoch monotonicity: never reset, never reused
            return doc["allocated"]

        return self._update(run)

    def intent(self, epoch: int) -> None:
        def run(doc: dict[str, Any]) -> None:
            last = doc["manifest"]["epoch"] if doc["manifest"] else 0
            intent = doc["intent"] or 0
            if not (last < epoch <= doc["allocated"] and epoch >= intent):
                msg = (f"intent epoch {epoch} must be above the last committed ({last}), not "
                       f"below the last intent ({intent}) and at most the last allocated "
                       f"({doc['allocated']}) in {self.path}")
                raise EpochLogError(msg)
            doc["intent"] = epoch

        self._update(run)

    def record_manifest(self, epoch: int, ref: str, info: dict[str, Any] | None = None) -> None:
        def run(doc: dict[str, Any]) -> None:
            last = doc["manifest"]["epoch"] if doc["manifest"] else 0
            intent = doc["intent"] or 0
            if not (last < epoch <= doc["allocated"] and epoch >= intent):
                msg = (f"manifest epoch {epoch} must be above the last committed ({last}), not "
                       f"below the last intent ({intent}: a recovering head fenced it) and at "
                       f"most the last allocated ({doc['allocated']}) in {self.path}")
                raise EpochLogError(msg)
            manifest: dict[str, Any] = {"epoch": epoch, "ref": str(ref), "sinks": {}}
            manifest.update({k: v for k, v in (info or {}).items() if k not in ("epoch", "ref")})
            doc["manifest"] = manifest

        self._update(run)

    def state(self) -> dict[str, Any]:
        with self._mutex:
            doc = self._read()
        return {"allocated": doc["allocated"], "intent": doc["intent"], "manifest": doc["manifest"]}

    def close(self) -> None:
        """Nothing held between calls."""

    # ------------------------------------------------------------------ internals
    def _update(self, fn: Any) -> Any:
        with self._mutex, open(self._lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                doc = self._read()
                out = fn(doc)
                data = json.dumps(doc, sort_keys=True).encode()
                atomic_write(self.path, data, what="coordinator epoch log")
                return out
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {"version": _VERSION, "allocated": 0, "intent": None, "manifest": None}
        try:
            doc = json.loads(raw)
            if doc.get("version") != _VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {_VERSION}")
            for key in ("allocated", "intent", "manifest"):
                doc[key]  # noqa: B018 - presence check
        except (ValueError, KeyError, AttributeError) as exc:
            msg = (f"the coordinator's epoch log {self.path} is damaged ({exc}); it is only "
                   "ever replaced whole, so it was changed by hand: put back an undamaged copy "
                   "(from a backup, or from where it was moved) and start the coordinator again. "
                   "Do not delete it: epochs would restart at 1, and the database's sinks would "
                   "take the new epochs for ones they already committed and drop their rows")
            raise EpochLogError(msg) from exc
        return doc
