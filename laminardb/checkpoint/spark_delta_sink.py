"""The Delta Lake sink of the Delta checkpoint coordinator: the embedded
:class:`~laminardb.connectors.delta_lake.DeltaLakeSink`, whose epochs may also arrive as data
files the executors wrote (``native_epoch``). Its own module because both the driver
(``native_epoch``) and the executors' tasks (``sink_tasks``) build it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.checkpoint._files import atomic_write
from laminardb.connectors.delta_lake import DeltaLakeSink

__all__ = ["SparkDeltaLakeSink"]

_ACTIONS = re.compile(r"^actions-(\d{12})\.json$")


class SparkDeltaLakeSink(DeltaLakeSink):
    """A :class:`DeltaLakeSink` whose epochs may also arrive as data files the executors wrote:
    their add-actions wait in ``actions-<epoch>.json`` in the stage directory, and ``commit``
    puts each staged epoch in one Delta commit carrying (app id, version = epoch)."""

    def stage_actions(self, epoch: int, actions: list[dict[str, Any]]) -> None:
        data = json.dumps({"epoch": epoch, "actions": actions}).encode()
        atomic_write(self._actions_path(epoch), data, what="Delta Lake add-actions")

    def _actions_path(self, epoch: int) -> Path:
        return self._stage.dir / f"actions-{epoch:012d}.json"

    def _action_epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for n in os.listdir(self._stage.dir)
                      if (m := _ACTIONS.match(n)))

    def _read_actions(self, epoch: int) -> list[dict[str, Any]]:
        return json.loads(self._actions_path(epoch).read_bytes())["actions"]

    def commit(self, epoch: int) -> None:
        """Commit staged epochs <= ``epoch`` (rows an embedded database staged first, then the
        executors' files), each once: epochs the table records already are skipped."""
        super().commit(epoch)
        epochs = [e for e in self._action_epochs() if e <= epoch]
        if not epochs:
            return
        done = self._last_committed()
        for e in epochs:
            if e > done:
                actions = self._read_actions(e)
                self._commit_actions(e, actions)
                self.epochs_committed += 1
                self.rows_committed += sum(json.loads(a["stats"])["numRecords"] for a in actions)
                done = e
            self._actions_path(e).unlink(missing_ok=True)  # a crash before: the table records e

    def _commit_actions(self, epoch: int, actions: list[dict[str, Any]]) -> None:
        dl = self._dl
        from deltalake.transaction import AddAction, create_table_with_add_actions

        adds = [AddAction(a["path"], int(a["size"]), {}, int(a["modification_time"]), True, a["stats"])
                for a in actions]
        props = dl.CommitProperties(app_transactions=[dl.Transaction(self.app_id, epoch)])
        try:
            if dl.DeltaTable.is_deltatable(self.path):
                dl.DeltaTable(self.path).create_write_transaction(
                    adds, "append", self.table_schema, commit_properties=props)
            else:
                create_table_with_add_actions(self.path, dl.Schema.from_arrow(self.table_schema), adds,
                                              mode="append", commit_properties=props)
        except (OSError, dl.exceptions.DeltaError, pa.ArrowException) as exc:
            raise self._error(f"commit epoch {epoch} to", self.path, exc) from exc

    def abort(self, epoch: int) -> None:
        """Drop epoch's staged rows or add-actions, and the data files no log will reference."""
        super().abort(epoch)
        path = self._actions_path(epoch)
        if not path.exists():
            return
        for a in self._read_actions(epoch):
            Path(self.path, a["path"]).unlink(missing_ok=True)
        path.unlink(missing_ok=True)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        for e in self._action_epochs():
            if e > epoch:
                self.abort(e)
        super().recover(epoch, info)  # its commit(epoch) commits the staged actions too

    def highest_epoch(self) -> int:
        return max([super().highest_epoch(), *self._action_epochs()])
