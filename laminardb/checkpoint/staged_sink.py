"""An exactly-once sink whose epochs the Delta checkpoint coordinator writes.

Why: in the Delta mode the coordinator (a Spark job, ``spark_coordinator.py``) writes every
exactly-once sink's epoch, after the barrier and before the manifest is recorded in Raft.
The database head therefore only stages each sink's rows: as a ``TwoPhaseSink`` it seals
the open rows into ``epoch-<e>.parquet`` at pre-commit (the barrier), hands the coordinator
that file with the sink's DDL and schema (``describe``), and forgets epochs the coordinator
confirmed (``release``). Parquet, not Arrow IPC: the coordinator's Spark job reads it with
Spark's own reader on its executors (``spark.read.parquet``), so no row passes through the
Spark driver. Abort and recovery drop staged epochs no manifest covers.
Its counters are those of the sink the coordinator writes (``metrics()`` shows them under that
sink's ``connector_name``): rows handed to it, and rows and epochs the coordinator committed.
Rows the actors staged themselves (``actor_stages.py``) join each epoch as their own files:
``seal_actors``, set by the cluster backend, seals them at the barrier.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.actor_stages import release_actor_files, settle_actor_files
from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink

#: (file, rows) an actor sealed for an epoch
ActorFile = tuple[str, int]


class StagedSink(TwoPhaseSink):
    """Stages a stream's rows per epoch for the coordinator (see the module docstring)."""

    commit_outside_lock = False

    def __init__(self, name: str, sql: str, schema: pa.Schema, directory: str | os.PathLike[str], *,
                 connector_name: str | None = None) -> None:
        self.name = name
        self.sql = sql
        self.schema = schema
        self.schema_ipc = schema.serialize().to_pybytes()  # for the coordinator and the staging actors
        self.stage = EpochStage(directory, schema, fmt="parquet")
        self._rows: dict[int, int] = {}
        #: the class the embedded engine would write with (``connectors.sinks.sink_class_name``)
        self.connector_name = connector_name or type(self).__name__
        self.rows_written = 0  # rows handed to the sink, as the embedded sinks count them
        self.rows_committed = 0  # rows of epochs the coordinator committed (``release``)
        self.epochs_committed = 0  # of those epochs, the ones that held rows (as the embedded sinks)
        #: the actors' part of each epoch; ``seal_actors(epoch)`` seals their open files
        self.seal_actors: Callable[[int], list[ActorFile]] | None = None
        self._actor_files: dict[int, list[ActorFile]] = {}
        self._carried: list[ActorFile] = []  # files of aborted epochs: they ride with the next one
        self._own: dict[int, int] = {}  # rows of each epoch in the head's own file
        self._actors_open = 0  # rows the actors staged since the last barrier

    def write(self, batch: pa.RecordBatch) -> None:
        self.stage.append(batch)
        self.rows_written += batch.num_rows

    def written_by_actors(self, rows: int) -> None:
        """Rows the actors appended to their own stage files (counted as handed to the sink)."""
        self.rows_written += rows
        self._actors_open += rows

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        rows = self._own[epoch] = self.stage.seal(epoch)
        files, self._carried = self._carried, []
        if self.seal_actors is not None and self._actors_open:  # no call to the actors when none staged
            files += self.seal_actors(epoch)
            self._actors_open = 0
        if files:
            self._actor_files[epoch] = files
        rows += sum(n for _, n in files)
        self._rows[epoch] = rows
        return {"rows": rows}

    def commit(self, epoch: int) -> None:
        """Nothing here: the coordinator wrote the epoch; ``release`` drops the stage."""

    def abort(self, epoch: int) -> None:
        """The coordinator gave up on ``epoch`` (it crashed before recording the manifest, or
        a step failed) while this engine keeps running: its rows are not regenerated, so they
        go back in front of the open rows and ride with the next epoch (as Flink's sinks keep
        the data of a declined checkpoint for the next one)."""
        path = self.stage.path(epoch)
        self._rows.pop(epoch, None)
        self._own.pop(epoch, None)
        self._carried = self._actor_files.pop(epoch, []) + self._carried
        if not path.exists():
            return
        earlier = self.stage.read(epoch)
        self.stage.prepend(earlier)
        self.stage.drop(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """Restarted from checkpoint ``epoch``: epochs after it were never recorded, and the
        replay of the log after it makes their rows again."""
        self.stage.settle(epoch)
        settle_actor_files(self.stage.dir, self.schema, epoch)
        self._actor_files, self._carried, self._own = {}, [], {}
        self._actors_open = 0

    def release(self, epoch: int) -> None:
        """The coordinator committed every epoch up to ``epoch``: their stages go."""
        for e in self.stage.epochs():
            if e <= epoch:
                self.stage.drop(e)
                rows = self._rows.pop(e, 0)  # 0: staged before a restart (not counted, as embedded)
                self.rows_committed += rows
                self.epochs_committed += rows > 0
        release_actor_files(self.stage.dir, epoch)
        for e in [e for e in self._own if e <= epoch]:
            self._actor_files.pop(e, None)
            del self._own[e]

    def describe(self, epoch: int) -> dict[str, Any]:
        """What the coordinator needs to write this sink's ``epoch``: ``stages``, the files that
        hold its rows (the head's, then each actor's), and ``stage``, the head's alone."""
        path = self.stage.path(epoch)
        rows = self._rows.get(epoch, 0)
        mine = str(path) if self._own.get(epoch) and path.exists() else None
        stages = ([mine] if mine else []) + [f for f, _ in self._actor_files.get(epoch, [])]
        return {"sql": self.sql, "schema": self.schema_ipc,
                "stage": mine, "stages": stages, "rows": rows}

    def close(self) -> None:
        self.stage.close()


def stage_route(reactor: Any, name: str, *, beside_subscribers: bool = False):
    """For query ``name``: its only consumer when that is a sink whose rows the coordinator
    writes from stage files (no subscriber, view, query or second sink reads it), else None
    (``ReactorActorImpl.merge_closed`` then stages the rows on the key owners).
    ``beside_subscribers``: subscribers may read it too — the actors stage the sink's rows and
    send them to the head for the subscribers alone (a plan tree's root: ``DistributedPlanOperator``)."""

    def route() -> StagedSink | None:
        node = reactor.nodes.get(name)
        if node is None or node.downstream or node.view is not None or len(node.sinks) != 1 or (
                node.subscribers and not beside_subscribers):
            return None
        sink = node.sinks[0]
        return sink if type(sink) is StagedSink and sink.seal_actors is not None else None

    return route
