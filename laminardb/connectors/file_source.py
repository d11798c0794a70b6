"""Flink's ``filesystem`` table as a source: a bounded, polled read of a file or a directory of
files (``sql/flink_ddl.py``).

Entry point: ``FileTableSource`` (built from a ``sql/table_specs.py`` ``FileTableSpec`` by
``flink_tables.source_connectors``, the reactor's source-connector factory; polled by
``Connection.start()``). ``path`` is a file or a directory (its files in name order, hidden
and ``_``-prefixed ones skipped, as Flink does); ``format`` is csv (with a header row, as
laminardb's FILE sink writes it), json (one object per line) or parquet. Rows are read and
converted by ``connectors/files.py`` (bad rows are counted and go to ``<file>.rejected``).
Once every file is read the source's watermark moves to the end of time, as a bounded Flink
source's does. A checkpoint keeps the number of rows read; recovery skips them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pyarrow as pa

from laminardb.connectors.exceptions import SourceFileNotFoundError
from laminardb.connectors.polled import FROM_DATA
from laminardb.sql.table_specs import FileTableSpec, file_table_spec

__all__ = ["FileTableSource"]

_BATCH_ROWS = 65_536  # rows per poll: a bounded batch however large the file
_STATE_VERSION = 1


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")) and not n.endswith(".rejected"))
        return [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
    if os.path.isfile(path):
        return [path]
    msg = f"filesystem table: {path!r} does not exist: check 'path' (a file or a directory of files)"
    raise SourceFileNotFoundError(msg)


class FileTableSource:
    """Reads the files once, a batch per poll; ``poll(timeout_ms) -> (batch | None, watermark)``."""

    @classmethod
    def from_spec(cls, spec: FileTableSpec, restore_state: dict[str, Any] | None = None) -> FileTableSource:
        """The source of a filesystem table's spec (``sql/table_specs.py``)."""
        src = cls.__new__(cls)
        src._start(spec, restore_state)
        return src

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 restore_state: dict[str, Any] | None = None) -> None:
        self._start(file_table_spec(name, schema, options), restore_state)

    def _start(self, spec: FileTableSpec, restore_state: dict[str, Any] | None) -> None:
        self.name = spec.name
        self.schema = spec.schema
        self.path = spec.path
        self.format = spec.format
        self._files = _files(self.path)
        self._next = 0
        self._reader: Any = None
        self.rows_read = 0
        self._skip = int(restore_state["rows"]) if restore_state else 0
        self._done = False
        self._ended = False
        self._from_data = FROM_DATA

    def poll(self, timeout_ms: int = 100) -> tuple[pa.RecordBatch | None, Any]:
        while not self._done:
            if self._reader is None:
                if self._next >= len(self._files):
                    self._done = True
                    break
                from laminardb.connectors.files import read_file

                self._reader = read_file(self._files[self._next], format=self.format, schema=self.schema,
                                         batch_rows=_BATCH_ROWS)
                self._next += 1
            try:
                batch = next(self._reader)
            except StopIteration:
                self._reader.close()
                self._reader = None
                continue
            if self._skip:  # recovery: these rows were read before the checkpoint
                cut = min(self._skip, batch.num_rows)
                self._skip -= cut
                self.rows_read += cut
                batch = batch.slice(cut)
                if batch.num_rows == 0:
                    continue
            self.rows_read += batch.num_rows
            return batch, self._from_data
        if not self._ended:
            from laminardb.operators.group_aggregate import END_OF_TIME

            self._ended = True
            return None, END_OF_TIME
        time.sleep(timeout_ms / 1000)
        return None, self._from_data

    def lag(self) -> int:
        """0 once every file is read, else 1 (the rows left are not known before reading)."""
        return 0 if self._done else 1

    def checkpoint_state(self) -> dict[str, Any]:
        return {"v": _STATE_VERSION, "rows": self.rows_read}

    def fetch_failure(self) -> tuple[float, str] | None:
        """Never set: a failing read raises from ``poll`` (``engine.contracts.Source``)."""
        return None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._done = True
