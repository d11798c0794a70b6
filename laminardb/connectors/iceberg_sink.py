"""Exactly-once Apache Iceberg sink: one Iceberg snapshot per checkpoint epoch, deduplicated by
the epoch recorded in the snapshot's summary. Entry point: :class:`IcebergSink`.

``CREATE SINK s FROM stream INTO ICEBERG (warehouse = './lake', table = 'db.events')`` on a
database opened with ``laminardb.open(directory)`` builds one. It writes with pyiceberg
(``pip install 'laminardb[iceberg]'``) through a SQL catalog (SQLite beside the warehouse by
default, or any SQLAlchemy URL such as PostgreSQL) or a REST catalog.

Rows of the open epoch are staged durably as Arrow IPC (:class:`EpochStage`, under the database
directory). ``commit(e)`` appends each staged epoch ``<= e`` in order as one Iceberg snapshot
whose summary carries ``laminardb.sink`` and ``laminardb.epoch`` — the way Flink's Iceberg sink
records its checkpoint id (``flink.max-committed-checkpoint-id``). Before appending, the sink
walks the ancestry of the table's current snapshot back to its own newest snapshot and skips
epochs at or below the epoch recorded there, so an epoch committed just before a crash (and
still staged) is never appended twice.

Types: timestamps (naive UTC in the engine) are written as Iceberg ``timestamptz``
(``timestamp[us, tz=UTC]``), as the Delta Lake sink does; dictionary columns as their values.
Changelog streams are refused: pyiceberg 0.12 writes no equality deletes (and reads none).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink
from laminardb.connectors._iceberg_options import IcebergOptions, iceberg_options
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import (
    IcebergCatalogError,
    IcebergChangelogError,
    IcebergCommitError,
    SinkSchemaError,
    SinkWriteError,
)

__all__ = ["IcebergSink", "iceberg_schema", "SINK_KEY", "EPOCH_KEY"]

log = logging.getLogger(__name__)

#: snapshot summary keys: which sink (and writer) appended the snapshot, for which epoch
SINK_KEY = "laminardb.sink"
EPOCH_KEY = "laminardb.epoch"
_WEIGHT = "__weight"  # laminardb.sql.plan.WEIGHT: the column of a changelog stream's batches


def iceberg_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema written to the table: timestamps as microseconds in UTC (Iceberg's
    ``timestamptz``; nanoseconds need format v3), dictionaries as their value type."""
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type):
            f = f.with_type(pa.timestamp("us", "UTC"))
        elif pa.types.is_dictionary(f.type):
            f = f.with_type(f.type.value_type)
        fields.append(f)
    return pa.schema(fields)


def _pyiceberg() -> Any:
    from laminardb._extras import require

    return require("pyiceberg.catalog", extra="iceberg", for_what="an Iceberg sink")


class IcebergSink(TwoPhaseSink):
    """Appends a stream's rows to an Iceberg table, one snapshot per checkpoint epoch.

    Args:
        name: the sink's name, recorded in each snapshot's summary (with ``writer``).
        schema: the schema of the stream the sink reads.
        options: the ``ICEBERG (…)`` options (see ``_iceberg_options``): ``table`` and, for
            SQL catalogs, ``warehouse`` are required.
        stage_dir: a directory of the database where the epochs' rows wait for commit.
        writer: this writer's id ("0": the summary says just the sink's name).

    Raises:
        IcebergConfigError: an option is missing, unknown or invalid.
        IcebergChangelogError: the stream is a changelog (has a ``__weight`` column).
        IcebergCatalogError: the catalog cannot be loaded, or the table not created/loaded.
        SinkSchemaError: the existing table cannot take the stream's columns.
    """

    commit_outside_lock = True  # commit() reads sealed epochs only

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str], writer: str = "0") -> None:
        self.name = name
        self.options: IcebergOptions = iceberg_options(name, options)
        if _WEIGHT in schema.names:
            msg = (f"Iceberg sink {name!r}: its stream is a changelog (an aggregate, join or "
                   "TopN that updates rows it emitted), and pyiceberg cannot write the equality "
                   "deletes its retractions need: sink an append-only stream (a windowed "
                   "aggregate, a filter or projection of a source), or write the changelog to a "
                   "DELTA_LAKE sink, which keeps its __weight column for readers to net out")
            raise IcebergChangelogError(msg)
        self.schema = schema
        self.table_schema = iceberg_schema(schema)
        self.sink_id = name if writer == "0" else f"{name}/{writer}"
        self.rows_written = 0
        self.rows_committed = 0  # rows appended to the table by this object's commits
        self.epochs_committed = 0
        self._recovered_epoch = 0
        self._failed: str | None = None
        self._catalog = self._load_catalog()
        self._table = self._load_table()
        try:
            self._stage = EpochStage(stage_dir, schema)
        except OSError as exc:
            raise SinkWriteError(f"Iceberg sink {name!r} could not create its staging directory "
                                 f"{os.fspath(stage_dir)!r}: {exc}; check the disk") from exc

    # ------------------------------------------------------------------ phases
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows of the open epoch.

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: the stage cannot be written (the open epoch is then lost until
                the database is reopened; later rows are dropped, and rebuilt on reopen).
        """
        data = conform_to_sink(batch, self.schema, f"Iceberg sink {self.name!r}")
        if self._failed is not None:
            return  # nothing can be committed before recover() rebuilds the epoch
        try:
            for b in data.to_batches() if isinstance(data, pa.Table) else [data]:
                self._stage.append(b)
        except OSError as exc:
            raise self._fail(exc) from exc
        self.rows_written += data.num_rows

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal the open epoch's rows as ``epoch``; returns ``{"rows": n}``."""
        if self._failed is not None:
            raise SinkWriteError(self._failed)
        if self._stage.open_rows == 0:
            return {"rows": 0}  # no rows, no snapshot
        try:
            n = self._stage.seal(epoch)
        except OSError as exc:
            raise self._fail(exc) from exc
        return {"rows": n}

    def commit(self, epoch: int) -> None:
        """Append every staged epoch ``<= epoch`` the table lacks, oldest first, one snapshot
        each.

        Raises:
            IcebergCommitError: the catalog or the table's files could not be reached, or a
                concurrent writer won every retry: the epoch stays staged and is retried at the
                next checkpoint.
        """
        epochs = [e for e in self._stage.epochs() if e <= epoch]
        if not epochs:
            return
        done = self._last_epoch()
        for e in epochs:
            # invariant: the coordinator's epochs increase, so the epoch of this sink's newest
            # snapshot is the newest one in the table; everything up to it is skipped
            if e > done:
                table = self._stage.read(e)
                props = {SINK_KEY: self.sink_id, EPOCH_KEY: str(e)}
                try:
                    self._table.append(table.cast(self.table_schema, safe=False), snapshot_properties=props)
                except Exception as exc:  # noqa: BLE001 - catalog, FileIO and REST errors alike
                    raise self._commit_error(f"append epoch {e} to", exc) from exc
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
        done = self._recovered_epoch = self._last_epoch()
        if done > epoch:
            # see DeltaLakeSink.recover: the rows come again in an epoch above ``done``, never
            # under a reused number that commit() would skip as already appended
            log.warning("Iceberg sink %s: table %s has snapshots of epochs up to %d, beyond the "
                        "database's checkpoint %d (a skipped checkpoint, or a directory restored "
                        "from a backup): their rows are appended again from epoch %d on",
                        self.name, self.options.identifier, done, epoch, done + 1)

    def highest_epoch(self) -> int:
        """The epoch of this sink's newest snapshot (as ``recover()`` read it) or the newest
        staged epoch."""
        return max([self._recovered_epoch] + self._stage.epochs())

    def close(self) -> None:
        """Release the stage file and the catalog's connections; staged epochs stay."""
        self._stage.close()
        from pyiceberg.catalog.sql import SqlCatalog

        if isinstance(self._catalog, SqlCatalog):
            self._catalog.engine.dispose()  # its pooled database connections

    # ------------------------------------------------------------------ internals
    def _last_epoch(self) -> int:
        """The epoch of this sink's newest snapshot in the current snapshot's ancestry (0:
        none). Reloads the table's metadata from the catalog first."""
        try:
            self._table.refresh()
        except Exception as exc:  # noqa: BLE001 - catalog errors of every backend
            raise self._commit_error("read the snapshots of", exc) from exc
        meta = self._table.metadata
        by_id = {s.snapshot_id: s for s in meta.snapshots}
        snapshot = by_id.get(meta.current_snapshot_id) if meta.current_snapshot_id is not None else None
        while snapshot is not None:  # newest first: usually the current snapshot is ours
            if snapshot.summary is not None and snapshot.summary.get(SINK_KEY) == self.sink_id:
                return int(snapshot.summary.get(EPOCH_KEY) or 0)
            parent = snapshot.parent_snapshot_id
            snapshot = by_id.get(parent) if parent is not None else None  # None: expired
        return 0

    def _load_catalog(self) -> Any:
        catalog = _pyiceberg()
        o = self.options
        try:
            return catalog.load_catalog(o.catalog_name, **o.properties)
        except Exception as exc:  # noqa: BLE001 - drivers, SQLAlchemy, HTTP: all mean the same
            msg = (f"Iceberg sink {self.name!r} could not load the {o.describe()}: "
                   f"{o.redact(_first_line(exc))}; check catalog.uri (is the database or REST "
                   "server up? is its driver installed?) and the catalog.* options")
            raise IcebergCatalogError(msg) from exc

    def _load_table(self) -> Any:
        o = self.options
        try:
            self._catalog.create_namespace_if_not_exists(o.namespace)
            table = self._catalog.create_table_if_not_exists(o.identifier, schema=self.table_schema)
        except Exception as exc:  # noqa: BLE001 - catalog errors of every backend
            msg = (f"Iceberg sink {self.name!r} could not create or load the table "
                   f"{o.identifier!r} in the {o.describe()}: {o.redact(_first_line(exc))}; check "
                   "the warehouse (writable?) and that the table name is valid")
            raise IcebergCatalogError(msg) from exc
        problems = _mismatches(table, self.table_schema)
        if problems:
            msg = (f"Iceberg sink {self.name!r}: the table {o.identifier!r} cannot take the "
                   f"stream's rows: {'; '.join(problems)}. Write to a new table, select and cast "
                   "the table's columns in the stream, or evolve the table's schema")
            raise SinkSchemaError(msg)
        return table

    def _commit_error(self, what: str, exc: BaseException) -> IcebergCommitError:
        from pyiceberg.exceptions import CommitFailedException

        why = ("another writer kept changing the table (pyiceberg's retries ran out)"
               if isinstance(exc, CommitFailedException) else self.options.redact(_first_line(exc)))
        msg = (f"Iceberg sink {self.name!r} could not {what} the table {self.options.identifier!r} "
               f"({self.options.describe()}): {why}; the staged rows are kept and committed at "
               "the next checkpoint or when the database is reopened")
        return IcebergCommitError(msg)

    def _fail(self, exc: BaseException) -> SinkWriteError:
        """Give up the open epoch (its stage file is broken): remember why, build the error."""
        self._failed = (
            f"Iceberg sink {self.name!r} could not stage rows in {str(self._stage.dir)!r}: {exc}; "
            "free space or fix the directory's permissions, then reopen the database: its output "
            "since the last checkpoint is rebuilt from the write-ahead log")
        self._stage.close()
        (self._stage.dir / "open.arrow").unlink(missing_ok=True)  # free the space it held
        return SinkWriteError(self._failed)


def _mismatches(table: Any, ours: pa.Schema) -> list[str]:
    """Why ``table`` cannot take rows of ``ours`` (empty: it can): the checks pyiceberg's
    append makes (names, required columns, type promotions), said per column."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import promote

    existing = table.schema()
    names = {f.name for f in existing.fields}
    problems = [f"column {n!r} is not in the table" for n in ours.names if n not in names]
    if problems:
        return problems
    provided = pyarrow_to_schema(ours, name_mapping=existing.name_mapping,
                                 format_version=table.format_version)
    for field in existing.fields:
        try:
            theirs = provided.find_field(field.field_id)
        except ValueError:
            if field.required:
                problems.append(f"the table's required column {field.name!r} is not in the stream")
            continue
        if field.required and not theirs.required:
            problems.append(f"column {field.name!r} is required in the table and may be NULL in the stream")
        elif theirs.field_type != field.field_type:
            try:
                promote(theirs.field_type, field.field_type)
            except ResolveError:
                problems.append(f"column {field.name!r} is {field.field_type} in the table, "
                                f"{theirs.field_type} in the stream")
    return problems


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
