"""Errors of checkpoints, the WAL and recovery (LDB-5xxx).

Each message says what happened and what to do: which file, which epoch, what to delete or
free. Engine faults, not user-input errors: the data a user inserted is never the cause.
"""

from __future__ import annotations

from laminardb.errors import CheckpointError

__all__ = [
    "SnapshotFormatError",
    "CheckpointWriteError",
    "WalCorruptError",
    "ManifestError",
    "SinkCommitError",
    "RecoveryError",
    "CheckpointUnsupportedError",
    "EpochLogError",
    "UnknownDatabaseError",
    "CheckpointPrepareError",
    "CoordinatorRetiredError",
]


class SnapshotFormatError(CheckpointError, ValueError):
    """A snapshot or manifest has an unknown format or version (written by a newer laminardb?)."""

    code = "LDB-5001"


class CheckpointWriteError(CheckpointError, OSError):
    """A checkpoint could not be written (disk full, permissions); the previous one is intact."""

    code = "LDB-5002"


class WalCorruptError(CheckpointError):
    """The write-ahead log is damaged before its last record (a torn tail is repaired silently)."""

    code = "LDB-5003"


class ManifestError(CheckpointError):
    """No usable manifest: every retained checkpoint is partial or corrupt."""

    code = "LDB-5004"


class SinkCommitError(CheckpointError):
    """A sink could not commit or recover an epoch; it is retried at the next checkpoint."""

    code = "LDB-5005"


class RecoveryError(CheckpointError):
    """The database directory could not be restored (catalog, snapshots or WAL replay failed)."""

    code = "LDB-5006"


class CheckpointUnsupportedError(CheckpointError):
    """checkpoint() on an in-memory database: open a directory to get durability."""

    code = "LDB-5007"


class StaleInsertRefError(CheckpointError):
    """A direct insert names a reactor actor's WAL record a checkpoint has already freed
    (``actor_wals.py``): the client sends the rows again, through its new route."""

    code = "LDB-5008"


# -- the Delta checkpoint coordinator (laminardb/checkpoint/spark_coordinator.py) -------------


class EpochLogError(CheckpointError, ValueError):
    """The coordinator's epoch log refused a record (epochs out of order) or is damaged."""

    code = "LDB-5010"


class UnknownDatabaseError(CheckpointError, LookupError):
    """The checkpoint coordinator has no database of that name registered."""

    code = "LDB-5011"


class CheckpointPrepareError(CheckpointError, RuntimeError):
    """A database head did not prepare a checkpoint epoch (timeout, died, refused); the
    epoch is aborted and the next interval tries again."""

    code = "LDB-5012"


class CoordinatorRetiredError(CheckpointError, RuntimeError):
    """The checkpoint coordinator is stopping: the last database using it was dropped. A
    database head that meets it starts a new coordinator and registers again."""

    code = "LDB-5013"
