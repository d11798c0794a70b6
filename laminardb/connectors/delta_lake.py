"""Exactly-once Delta Lake sink: one Delta commit per checkpoint epoch, deduplicated by the
table's own application-transaction ids. Entry point: :class:`DeltaLakeSink`.

``CREATE SINK s FROM stream INTO DELTA_LAKE (path = './lake/s', write_mode = 'append')`` on a
database opened with ``laminardb.open(directory)`` builds one. It writes with the
``deltalake`` package (delta-rs; no JVM): ``pip install 'laminardb[delta]'``.

Rows of the open epoch are staged durably as Arrow IPC (:class:`EpochStage`, under the
database directory). ``commit(e)`` appends each staged epoch ``<= e`` in order as one Delta
commit that also records the transaction ``(app_id = "laminardb-<sink>-<writer>",
version = epoch)`` — the idempotent-writer mechanism of the Delta protocol that Spark's
``txnAppId``/``txnVersion`` use. Before appending, the sink reads the table's recorded version
for its app id and skips epochs at or below it, so an epoch committed just before a crash
(and still staged) is never appended twice.

Types: TIMESTAMP(3) and TIMESTAMP(6) columns (naive UTC in the engine) are written as
``timestamp[us, tz=UTC]``, Delta's ``timestamp`` type, readable by every Delta reader (a
naive column would need the ``timestampNtz`` table feature, reader version 3). Other types
are written as they are.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa

from laminardb.connectors._epoch_sink import EpochRecordingSink
from laminardb.connectors.exceptions import DeltaConfigError, SinkSchemaError, SinkWriteError

__all__ = ["DeltaConfigError", "DeltaLakeSink", "delta_schema"]

log = logging.getLogger(__name__)

_OPTIONS = ("path", "write_mode", "delivery.guarantee", "delivery_guarantee")
_WRITE_MODES = ("append",)




def delta_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema the Delta table gets: timestamps as microseconds in UTC."""
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type):
            f = f.with_type(pa.timestamp("us", "UTC"))
        fields.append(f)
    return pa.schema(fields)


def _to_delta(table: pa.Table, schema: pa.Schema) -> pa.Table:
    # a naive timestamp is read as UTC; nanoseconds (not produced by the engine) are truncated
    return table.cast(schema, safe=False)


def _options(name: str, options: dict[str, str]) -> tuple[str, str]:
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        msg = (f"Delta Lake sink {name!r}: unknown option {', '.join(map(repr, unknown))}; "
               f"the options are {', '.join(_OPTIONS)}")
        raise DeltaConfigError(msg)
    guarantee = str(options.get("delivery.guarantee", options.get("delivery_guarantee", "exactly-once")))
    if guarantee.lower() != "exactly-once":  # LaminarDB's option; a Delta table is only ever exactly-once here
        msg = (f"Delta Lake sink {name!r}: delivery.guarantee {guarantee!r} is not supported; Delta Lake "
               "sinks commit one table version per checkpoint, so they are always 'exactly-once'")
        raise DeltaConfigError(msg)
    path = options.get("path")
    if not path:
        raise DeltaConfigError(f"Delta Lake sink {name!r} needs path = '…' (the table's directory)")
    mode = str(options.get("write_mode", "append")).lower()
    if mode not in _WRITE_MODES:
        msg = (f"Delta Lake sink {name!r}: write_mode {mode!r} is not supported; "
               f"use {' or '.join(map(repr, _WRITE_MODES))}")
        raise DeltaConfigError(msg)
    if "://" not in path:
        path = os.path.abspath(path)  # the table stays put when the process changes directory
    return path, mode


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as exc:
        msg = "Delta Lake sinks need the deltalake package: pip install 'laminardb[delta]'"
        raise DeltaConfigError(msg) from exc
    return deltalake


class DeltaLakeSink(EpochRecordingSink):
    """Appends a stream's rows to a Delta table, one commit per checkpoint epoch.

    Args:
        name: the sink's name; with ``writer`` it makes the app id the table records.
        schema: the schema of the stream the sink reads.
        options: the ``DELTA_LAKE (…)`` options: ``path`` (required), ``write_mode``
            (``'append'``, the default and only mode).
        stage_dir: a directory of the database where the epochs' rows wait for commit.
        writer: this writer's id (one per actor in the Delta mode).

    Raises:
        DeltaConfigError: an option is missing, unknown or invalid, or deltalake is missing.
        SinkSchemaError: a table already at ``path`` has other columns than the stream.
    """

    label = "Delta Lake sink"

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str], writer: str = "0") -> None:
        self.name = name
        self.path, self.write_mode = _options(name, options)
        self.target = f"table {self.path}"
        self._dl = _deltalake()
        self.table_schema = delta_schema(schema)
        self.app_id = f"laminardb-{name}-{writer}"
        self._check_table()
        self._open_stage(name, schema, stage_dir)

    # ------------------------------------------------------------------ the target
    def _apply(self, epoch: int, table: pa.Table) -> bool:
        """One Delta commit carrying the app transaction (app id, ``epoch``)."""
        dl = self._dl
        props = dl.CommitProperties(app_transactions=[dl.Transaction(self.app_id, epoch)])
        try:
            dl.write_deltalake(self.path, _to_delta(table, self.table_schema),
                               mode=self.write_mode, commit_properties=props)
        except (OSError, dl.exceptions.DeltaError, pa.ArrowException) as exc:
            raise self._error(f"commit epoch {epoch} to", self.path, exc) from exc
        return True

    def _last_committed(self) -> int:
        """The newest epoch the table records for this sink's app id (0: none)."""
        dl = self._dl
        try:
            if not dl.DeltaTable.is_deltatable(self.path):
                return 0
            version = dl.DeltaTable(self.path).transaction_version(self.app_id)
        except (OSError, dl.exceptions.DeltaError) as exc:
            raise self._error("read the transaction log of", self.path, exc) from exc
        return 0 if version is None else int(version)

    def _check_table(self) -> None:
        dl = self._dl
        try:
            if not dl.DeltaTable.is_deltatable(self.path):
                return
            existing = pa.schema(dl.DeltaTable(self.path).schema().to_arrow())
        except (OSError, dl.exceptions.DeltaError) as exc:
            raise self._error("open", self.path, exc) from exc
        ours = [(f.name, f.type) for f in self.table_schema]
        theirs = [(f.name, f.type) for f in existing]
        if ours != theirs:
            msg = (f"Delta Lake sink {self.name!r}: the table at {self.path!r} has columns "
                   f"{_describe(existing)}, the stream has {_describe(self.table_schema)}: "
                   "write to a new path, or select the table's columns in the stream")
            raise SinkSchemaError(msg)

    def _error(self, what: str, path: str | os.PathLike[str], exc: BaseException) -> SinkWriteError:
        msg = (f"Delta Lake sink {self.name!r} could not {what} {os.fspath(path)!r}: {exc}; "
               "check the disk and the path's permissions: the staged rows are kept and "
               "committed at the next checkpoint or when the database is reopened")
        return SinkWriteError(msg)


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
