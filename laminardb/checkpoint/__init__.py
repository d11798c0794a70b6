"""Durability: write-ahead log, operator snapshots, manifests, recovery and the two-phase sink
protocol. The local coordinator drives them in an embedded ``open(directory)``; the Delta
coordinator drives the same snapshots, manifests and sink contract across actors.
"""

from __future__ import annotations

from laminardb.checkpoint.exceptions import (
    CheckpointPrepareError,
    CheckpointUnsupportedError,
    CheckpointWriteError,
    EpochLogError,
    ManifestError,
    RecoveryError,
    SinkCommitError,
    SnapshotFormatError,
    UnknownDatabaseError,
    WalCorruptError,
)

__all__ = [
    "CheckpointPrepareError",
    "CheckpointUnsupportedError",
    "CheckpointWriteError",
    "EpochLogError",
    "ManifestError",
    "RecoveryError",
    "SinkCommitError",
    "SnapshotFormatError",
    "UnknownDatabaseError",
    "WalCorruptError",
]
