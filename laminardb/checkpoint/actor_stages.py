"""Sink rows staged by the actors that made them, not by the database head.

When a local-global aggregate's only consumer is an exactly-once sink the coordinator writes
(``staged_sink.py``), the owners that merge the closed windows (``cluster/owner_merge.py``)
append the final rows to their own stage file for that sink,
``<sink stage>/actors/<member>/open.parquet``, instead of sending them to the head; so does
every actor with the rows a plan tree's root emits there (``distributed_plan.py``; also when
subscribers read the tree: the actors then send the rows to the head as well, for them). At the
barrier the head's ``StagedSink.pre_commit`` asks every actor to seal its open file as the
epoch (``ActorStages.seal``): the epoch is then the head's file (rows the head still wrote)
plus one file per actor, and the coordinator's Spark job reads them all on its executors.
The head learns row counts only.

Why it stays exactly once: a file is sealed under the epoch the head's barrier names, after
every round before the barrier (Ray runs one caller's calls to an actor in order); only the
files the head collected for an epoch are described to the coordinator; an aborted epoch's
files ride with the next one; and a recovery drops every file after the checkpoint it
restores (an actor drops its open file when the new engine resets it), whose rows the replay
makes again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from laminardb.checkpoint.sink import EpochStage, sealed_epochs

ACTORS_DIR = "actors"


def _member_dirs(stage_dir: str | os.PathLike[str]) -> list[Path]:
    root = Path(stage_dir) / ACTORS_DIR
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def actor_stage_dir(stage_dir: str | os.PathLike[str], member: str) -> str:
    """Where actor ``member`` stages its rows for the sink staged in ``stage_dir``."""
    return str(Path(stage_dir) / ACTORS_DIR / member)


class ActorStages:
    """An actor's open stage files, one per sink (keyed by ``actor_stage_dir``)."""

    def __init__(self) -> None:
        self.stages: dict[str, EpochStage] = {}

    def append(self, directory: str, schema: pa.Schema | bytes, batches: list[pa.RecordBatch]) -> int:
        """Stage ``batches`` in ``directory``'s open file; ``schema`` is the sink's, or its
        IPC bytes as the head sends it with every call (read only when the file opens)."""
        stage = self.stages.get(directory)
        if stage is None:
            if isinstance(schema, bytes):
                schema = pa.ipc.read_schema(pa.py_buffer(schema))
            stage = self.stages[directory] = EpochStage(directory, schema, fmt="parquet")
        schema = stage.schema
        rows = 0
        for batch in batches:
            if batch.num_rows:
                stage.append(batch if batch.schema.equals(schema) else batch.cast(schema))
                rows += batch.num_rows
        return rows

    def seal(self, directory: str, epoch: int) -> tuple[str, int] | None:
        """The open rows in ``directory`` sealed as ``epoch``: (file, rows), or None if none."""
        stage = self.stages.get(directory)
        if stage is None or stage.open_rows == 0:
            return None
        rows = stage.seal(epoch)
        return str(stage.path(epoch)), rows

    def close(self) -> None:
        """Drop the open files (a new engine: what they held is made again by its replay)."""
        for stage in self.stages.values():
            stage.discard_open()
        self.stages = {}


def settle_actor_files(stage_dir: str | os.PathLike[str], schema: pa.Schema, epoch: int) -> None:
    """After a restart from checkpoint ``epoch``: every actor's open file (a live actor's is
    already gone, a dead one's is left) and sealed files after ``epoch`` go."""
    for member in _member_dirs(stage_dir):
        EpochStage(member, schema, fmt="parquet").settle(epoch)


def release_actor_files(stage_dir: str | os.PathLike[str], epoch: int) -> None:
    """The coordinator committed every epoch up to ``epoch``: their actor files go."""
    for member in _member_dirs(stage_dir):
        for e in sealed_epochs(member, "parquet"):
            if e <= epoch:
                (member / f"epoch-{e:012d}.parquet").unlink(missing_ok=True)


__all__ = ["ACTORS_DIR", "ActorStages", "actor_stage_dir", "release_actor_files", "settle_actor_files"]
