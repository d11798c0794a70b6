"""The exactly-once sinks whose target records which epochs it holds: Delta Lake (an app
transaction per commit), Iceberg (the epoch in each snapshot's summary) and PostgreSQL (a row in
``laminardb_epochs``). Entry point: :class:`EpochRecordingSink`, their base.

Why one base: the three share every phase but the target's two verbs. Rows of the open epoch
wait in an :class:`EpochStage` (Arrow IPC under the database directory); ``commit(e)`` applies
each staged epoch ``<= e`` the target does not hold yet, oldest first, as one target commit
that also records the epoch, then drops it from the stage. Because the coordinator's epochs
only increase, the newest epoch the target records tells which staged ones are already in it,
so an epoch committed just before a crash (and still staged) is never applied twice.

A subclass sets ``label`` ("Delta Lake sink") and ``target`` (what messages name), calls
:meth:`_open_stage` in its constructor and implements :meth:`_last_committed` and
:meth:`_apply`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import SinkWriteError

__all__ = ["EpochRecordingSink"]

log = logging.getLogger(__name__)


class EpochRecordingSink(TwoPhaseSink):
    commit_outside_lock = True  # commit() reads sealed epochs only
    #: how messages name the kind of sink ("Delta Lake sink"); ``target``: the table they name
    label = "sink"
    target = ""

    def _open_stage(self, name: str, schema: pa.Schema, stage_dir: str | os.PathLike[str]) -> None:
        self.name = name
        self.schema = schema
        self.rows_written = 0
        self.rows_committed = 0  # rows this object's commits put into the target
        self.epochs_committed = 0
        self._recovered = 0  # the newest epoch the target recorded when recover() ran
        self._failed: str | None = None
        try:
            self._stage = EpochStage(stage_dir, schema)
        except OSError as exc:
            raise SinkWriteError(f"{self.label} {name!r} could not create its staging directory "
                                 f"{os.fspath(stage_dir)!r}: {exc}; check the disk and its permissions") from exc

    @property
    def epoch_stage(self) -> EpochStage:
        """Where sealed epochs wait (the Delta coordinator's Spark tasks install them here)."""
        return self._stage

    # ------------------------------------------------------------------ what a target does
    def _last_committed(self) -> int:
        """The newest epoch the target records for this sink (0: none)."""
        raise NotImplementedError

    def _apply(self, epoch: int, table: pa.Table) -> bool:
        """Put ``table``, the rows of ``epoch``, into the target as one commit that records the
        epoch; False if the target already held it. Raises a SinkWriteError (or another
        ConnectorError) if it could not: the epoch stays staged."""
        raise NotImplementedError

    # ------------------------------------------------------------------ phases
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows of the open epoch (nothing reaches the target before commit).

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: the stage cannot be written (the open epoch is then lost until
                the database is reopened; later rows are dropped, and rebuilt on reopen).
        """
        data = conform_to_sink(batch, self.schema, f"{self.label} {self.name!r}")
        if self._failed is not None:
            return  # nothing can be committed before recover() rebuilds the epoch
        try:
            for b in data.to_batches() if isinstance(data, pa.Table) else [data]:
                self._stage.append(b)
        except OSError as exc:
            raise self._fail("stage rows in", self._stage.dir, exc) from exc
        self.rows_written += data.num_rows

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal the open epoch's rows as ``epoch``; returns ``{"rows": n}``."""
        if self._failed is not None:
            raise SinkWriteError(self._failed)
        if self._stage.open_rows == 0:
            return {"rows": 0}  # no rows, no target commit
        try:
            return {"rows": self._stage.seal(epoch)}
        except OSError as exc:
            raise self._fail("seal the rows of epoch", self._stage.path(epoch), exc) from exc

    def commit(self, epoch: int) -> None:
        """Apply every staged epoch ``<= epoch`` the target lacks, oldest first, one target
        commit each. Idempotent. A failure raises; that epoch and later ones stay staged and
        are retried at the next checkpoint (and by recovery)."""
        epochs = [e for e in self._stage.epochs() if e <= epoch]
        if not epochs:
            return
        done = self._last_committed()
        for e in epochs:
            if e > done:
                table = self._stage.read(e)
                if self._apply(e, table):
                    self.epochs_committed += 1
                    self.rows_committed += table.num_rows
                done = e
            self._stage.drop(e)  # a crash before this: the target records e, so it is skipped

    def abort(self, epoch: int) -> None:
        """Drop the staged rows of ``epoch``."""
        self._stage.drop(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """Settle after a restart from checkpoint ``epoch``: apply staged epochs <= ``epoch``
        the target lacks, drop later ones and any unsealed rows; the open epoch is ``epoch + 1``."""
        self._stage.settle(epoch)
        self._failed = None
        self._commit_on_recovery(epoch)
        done = self._recovered = self._last_committed()
        if done > epoch:
            # see KafkaSink.recover: the rows come again in an epoch above ``done``, never under
            # a reused number that commit() would skip as already applied
            log.warning("%s %s: %s records epochs up to %d, beyond the database's checkpoint %d (a "
                        "skipped checkpoint, or a directory restored from a backup): their rows are "
                        "written again from epoch %d on", self.label, self.name, self.target, done,
                        epoch, done + 1)

    def _commit_on_recovery(self, epoch: int) -> None:
        """Recovery's commit; raising stops the database from opening (a subclass whose target
        may be down for a while logs instead, and leaves the epochs staged)."""
        self.commit(epoch)

    def highest_epoch(self) -> int:
        """The newest epoch the target recorded (as ``recover()`` read it) or the newest staged."""
        return max([self._recovered, *self._stage.epochs()])

    def close(self) -> None:
        """Release the stage file; staged epochs stay for recovery."""
        self._stage.close()

    def _fail(self, what: str, path: str | os.PathLike[str], exc: BaseException) -> SinkWriteError:
        """Give up the open epoch (its stage file is broken): remember why, build the error."""
        self._failed = (
            f"{self.label} {self.name!r} could not {what} {os.fspath(path)!r}: {exc}; free "
            "space or fix the directory's permissions, then reopen the database: its output "
            "since the last checkpoint is rebuilt from the write-ahead log")
        self._stage.close()
        (self._stage.dir / "open.arrow").unlink(missing_ok=True)  # free the space it held
        return SinkWriteError(self._failed)
