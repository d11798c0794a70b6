"""Durability: write-ahead log, operator snapshots, manifests, recovery and the two-phase sink
protocol. The local coordinator drives them in an embedded ``open(directory)``; the Delta
coordinator drives the same snapshots, manifests and sink contract across actors.
"""

from __future__ import annotations

from laminardb.checkpoint.exceptions import (
    CheckpointUnsupportedError,
    CheckpointWriteError,
    ManifestError,
    RecoveryError,
    SinkCommitError,
    SnapshotFormatError,
    WalCorruptError,
)

__all__ = [
    "CheckpointUnsupportedError",
    "CheckpointWriteError",
    "ManifestError",
    "RecoveryError",
    "SinkCommitError",
    "SnapshotFormatError",
    "WalCorruptError",
]
