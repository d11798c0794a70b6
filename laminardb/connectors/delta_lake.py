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

from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink
from laminardb.connectors._sinks import conform_to_sink
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


class DeltaLakeSink(TwoPhaseSink):
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

    commit_outside_lock = True  # commit() reads sealed epochs only

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str], writer: str = "0") -> None:
        self.name = name
        self.path, self.write_mode = _options(name, options)
        self._dl = _deltalake()
        self.schema = schema
        self.table_schema = delta_schema(schema)
        self.app_id = f"laminardb-{name}-{writer}"
        self.rows_written = 0
        self.rows_committed = 0  # rows appended to the table by this object's commits
        self.epochs_committed = 0
        self._failed: str | None = None
        self._check_table()
        try:
            self._stage = EpochStage(stage_dir, schema)
        except OSError as exc:
            raise self._error("create the staging directory", stage_dir, exc) from exc

    # ------------------------------------------------------------------ phases
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows of the open epoch.

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: the stage cannot be written (the open epoch is then lost until
                the database is reopened; later rows are dropped, and rebuilt on reopen).
        """
        data = conform_to_sink(batch, self.schema, f"Delta Lake sink {self.name!r}")
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
            return {"rows": 0}  # no rows, no Delta commit
        try:
            n = self._stage.seal(epoch)
        except OSError as exc:
            raise self._fail("seal the rows of epoch", self._stage.path(epoch), exc) from exc
        return {"rows": n}

    def commit(self, epoch: int) -> None:
        """Append every staged epoch ``<= epoch`` not yet in the table, oldest first.

        Raises:
            SinkWriteError: a Delta commit failed (the epoch stays staged; retried later).
        """
        epochs = [e for e in self._stage.epochs() if e <= epoch]
        if not epochs:
            return
        done = self._version()
        dl = self._dl
        for e in epochs:
            # invariant: the coordinator's epochs increase, so the table's version for our
            # app id is the newest epoch already in it; everything up to it is skipped
            if e > done:
                props = dl.CommitProperties(app_transactions=[dl.Transaction(self.app_id, e)])
                try:
                    table = self._stage.read(e)
                    dl.write_deltalake(self.path, _to_delta(table, self.table_schema),
                                       mode=self.write_mode, commit_properties=props)
                except (OSError, dl.exceptions.DeltaError, pa.ArrowException) as exc:
                    raise self._error(f"commit epoch {e} to", self.path, exc) from exc
                done = e
                self.epochs_committed += 1
                self.rows_committed += table.num_rows
            self._stage.drop(e)

    def abort(self, epoch: int) -> None:
        """Drop the staged rows of ``epoch``."""
        self._stage.drop(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """Settle after a restart from checkpoint ``epoch``: append staged epochs <= ``epoch``
        the table lacks, drop later ones and any unsealed rows; the open epoch is ``epoch + 1``."""
        self._stage.settle(epoch)
        self._failed = None
        self.commit(epoch)
        done = self._version()
        self._recovered_version = done
        if done > epoch:
            # see KafkaSink.recover: the rows come again in an epoch above ``done``, never
            # under a reused number that commit() would skip as already appended
            log.warning("Delta Lake sink %s: table %s records epochs up to %d of app %s, beyond the "
                        "database's checkpoint %d (a skipped checkpoint, or a directory restored "
                        "from a backup): their rows are appended again from epoch %d on",
                        self.name, self.path, done, self.app_id, epoch, done + 1)

    def highest_epoch(self) -> int:
        """The table's version for this sink's app id (as ``recover()`` read it) or the newest
        staged epoch."""
        return max([getattr(self, "_recovered_version", 0)] + self._stage.epochs())

    def close(self) -> None:
        """Release the stage file; staged epochs stay for recovery."""
        self._stage.close()

    # ------------------------------------------------------------------ internals
    def _version(self) -> int:
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

    def _fail(self, what: str, path: str | os.PathLike[str], exc: BaseException) -> SinkWriteError:
        """Give up the open epoch (its stage file is broken): remember why, build the error."""
        self._failed = (
            f"Delta Lake sink {self.name!r} could not {what} {os.fspath(path)!r}: {exc}; free "
            "space or fix the directory's permissions, then reopen the database: its output "
            "since the last checkpoint is rebuilt from the write-ahead log")
        self._stage.close()
        (self._stage.dir / "open.arrow").unlink(missing_ok=True)  # free the space it held
        return SinkWriteError(self._failed)


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
