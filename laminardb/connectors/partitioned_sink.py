"""FILE sinks partitioned by columns: Hive-style ``col=value/…`` directories of part files, as
Flink's filesystem connector writes a table declared ``PARTITIONED BY (dt, hm)``.

Entry points: :class:`PartitionedTransactionalFileSink` (exactly-once: a durable database) and
:class:`PartitionedFileSink` (at-least-once: an in-memory one), both built by
:func:`~laminardb.connectors.sinks.make_sink` for ``CREATE SINK … INTO FILE (path = '…',
format = 'csv', partitioned_by = 'dt, hm')`` and for Flink's ``INSERT INTO`` a partitioned
filesystem table. Layout of ``path`` (exactly-once)::

    dt=2024-01-02/hm=10%3A05/part-000000000007-0-0000.csv   committed output of epoch 7
    _staging/dt=2024-01-02/hm=10%3A05/part-000000000008-0-0000.csv   sealed, awaiting commit(8)
    _staging/dt=2024-01-02/hm=10%3A05/.inprogress-0-0000.csv         rows of the open epoch

Each partition is one :class:`~laminardb.connectors.file_sink.TransactionalFileSink` whose
staging directory sits under the shared ``_staging/`` (so readers that skip ``_``/``.`` names,
or glob ``path/*/*/*.csv``, see committed rows only): every partition's files of an epoch
become visible when that epoch's checkpoint commits, by atomic renames, idempotently — the
protocol of the unpartitioned sink, per directory.

As in Flink and Hive, the partition columns are not written into the files (readers take them
from the path: DuckDB ``hive_partitioning``, ``pyarrow.dataset(partitioning="hive")``); a value
is written as its text with Hive's escapes (``:`` → ``%3A``, ``/`` → ``%2F``, …) and NULL as
the default partition name (``__DEFAULT_PARTITION__``, Flink's ``partition.default-name``).
Rows are split by partition with one Arrow group-by per batch: no per-row Python.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.checkpoint._files import fsync_dir
from laminardb.checkpoint.sink import TwoPhaseSink
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import SinkSchemaError, SinkWriteError
from laminardb.connectors.file_sink import _STAGING, TransactionalFileSink
from laminardb.connectors.files import FileSink, infer_format

__all__ = ["DEFAULT_PARTITION", "PartitionedFileSink", "PartitionedTransactionalFileSink", "partition_columns",
           "partition_dir"]

#: the directory name of a NULL partition value (Flink's 'partition.default-name')
DEFAULT_PARTITION = "__DEFAULT_PARTITION__"
# Hive's FileUtils.escapePathName (and Flink's PartitionPathUtils): these characters, and the
# control characters, are written as %XX in a partition directory's name
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 32))
# Files an in-memory partitioned sink keeps open at once: a stream partitioned by time writes
# to a few recent partitions; the least recently written is closed beyond this (and a later
# row of it opens its next part file), so open descriptors stay bounded.
_MAX_OPEN = 64


def _escape(text: str) -> str:
    if not any(ch in _ESCAPED for ch in text):
        return text
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


def partition_dir(names: list[str], values: list[str | None], default: str = DEFAULT_PARTITION) -> str:
    """``a=1/b=x`` for partition columns ``names`` holding ``values`` (text; None: NULL)."""
    parts = []
    for name, value in zip(names, values, strict=True):
        text = default if value is None or value == "" else _escape(value)
        parts.append(f"{_escape(name)}={text}")
    return "/".join(parts)


def partition_columns(schema: pa.Schema, spec: str | list[str] | tuple[str, ...], what: str) -> list[str]:
    """The partition columns named by ``spec`` (``'dt, hm'`` or a list), checked against ``schema``.

    Raises:
        SinkSchemaError: a name is no column, is given twice, or every column is a partition one.
    """
    names = [c.strip().strip('`"') for c in spec.split(",")] if isinstance(spec, str) else list(spec)
    names = [n for n in names if n]
    if not names:
        raise SinkSchemaError(f"{what}: partitioned_by names no column; write partitioned_by = 'col1, col2'")
    folded = {n.lower(): n for n in schema.names}
    out = []
    for n in names:
        col = n if n in schema.names else folded.get(n.lower())
        if col is None:
            raise SinkSchemaError(f"{what}: partition column {n!r} is not a column of the stream; its columns are "
                                  f"{', '.join(schema.names)}")
        if col in out:
            raise SinkSchemaError(f"{what}: partition column {col!r} is named twice")
        out.append(col)
    if len(out) == len(schema.names):
        raise SinkSchemaError(f"{what}: every column is a partition column, so the files would hold no column; "
                              "leave at least one column out of partitioned_by")
    return out


class _Splitter:
    """Splits batches of ``schema`` by the values of the partition columns ``cols``."""

    def __init__(self, schema: pa.Schema, cols: list[str], default: str) -> None:
        self.schema = schema
        self.cols = cols
        self.default = default
        self.data_schema = pa.schema([f for f in schema if f.name not in cols])
        self._data_idx = [schema.get_field_index(f.name) for f in self.data_schema]

    def split(self, batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
        """(partition directory, the batch's rows of it without the partition columns), per partition."""
        keys = [batch.column(c) for c in self.cols]
        data = pa.RecordBatch.from_arrays([batch.column(i) for i in self._data_idx], schema=self.data_schema)
        texts = [k if pa.types.is_string(k.type) or pa.types.is_large_string(k.type) else pc.cast(k, pa.string())
                 for k in keys]
        if all(pc.count_distinct(t, mode="all").as_py() == 1 for t in texts):  # one partition: no take
            return [(partition_dir(self.cols, [t[0].as_py() for t in texts], self.default), data)]
        names = [f"k{i}" for i in range(len(texts))]
        table = pa.table(texts + [pa.array(np.arange(batch.num_rows, dtype=np.int64))], names=[*names, "row"])
        groups = table.group_by(names, use_threads=False).aggregate([("row", "list")])
        values = [groups.column(n).to_pylist() for n in names]
        rows = groups.column("row_list")
        out = []
        for g in range(groups.num_rows):  # one iteration per partition, not per row
            idx = rows[g].values
            out.append((partition_dir(self.cols, [v[g] for v in values], self.default), data.take(idx)))
        return out


def _init_partitioned(sink, path, format, schema: pa.Schema, partition_by, writer: str, default_name: str) -> None:
    """What both partitioned sinks set up: the path, format, schema and the row splitter."""
    sink.path = Path(path).absolute()
    sink.format = infer_format(sink.path, format)
    sink.schema = schema
    sink.writer = writer
    sink.partition_by = partition_columns(schema, partition_by, f"sink {os.fspath(sink.path)!r}")
    sink.default_name = default_name
    sink._split = _Splitter(schema, sink.partition_by, default_name)


def _split_rows(sink, batch: pa.RecordBatch | pa.Table) -> tuple[list[tuple[str, pa.RecordBatch]], int]:
    """``batch`` (a Table: each of its batches) checked against the sink's schema and split by
    partition: the (partition directory, rows) parts and the row count."""
    parts: list[tuple[str, pa.RecordBatch]] = []
    n = 0
    for b in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
        b = conform_to_sink(b, sink.schema, f"sink {os.fspath(sink.path)!r}")
        if b.num_rows:
            parts += sink._split.split(b)
            n += b.num_rows
    return parts, n


class PartitionedTransactionalFileSink(TwoPhaseSink):
    """Exactly-once Hive-partitioned part files under ``path``; see the module docstring.

    Args:
        path: the output directory (created if missing).
        format: ``"jsonl"``, ``"csv"`` or ``"parquet"``.
        schema: the schema of the stream the sink reads (partition columns included).
        partition_by: the partition columns, outermost first (``'dt, hm'`` or a list).
        writer: this writer's id in the file names.
        default_name: the directory value of a NULL (or empty) partition value.

    Raises:
        FileFormatError: the format is unknown.
        SinkSchemaError: ``partition_by`` does not fit ``schema``.
        SinkWriteError: ``path`` cannot be created or is a file.
    """

    def __init__(self, path: str | os.PathLike[str], *, format: str | None, schema: pa.Schema,
                 partition_by: str | list[str], writer: str = "0", default_name: str = DEFAULT_PARTITION) -> None:
        _init_partitioned(self, path, format, schema, partition_by, writer, default_name)
        self.staging = self.path / _STAGING
        self.rows_written = 0
        self.rows_committed = 0
        self.epochs_committed = 0
        self._parts: dict[str, TransactionalFileSink] = {}  # partition directory → its sink
        self._staged: set[str] = set()  # partition directories holding sealed files
        self._sealed_rows: dict[int, int] = {}
        self._open_rows = 0
        try:
            self.staging.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = (f"cannot create the sink directory {os.fspath(self.path)!r}: {exc.strerror or exc}; a "
                   "partitioned FILE sink writes partition directories into it: choose a writable directory")
            raise SinkWriteError(msg) from exc
        self._staged.update(self._walk_staging())  # epochs staged before a restart (see recover())

    @property
    def data_schema(self) -> pa.Schema:
        """The schema of the files: the stream's without the partition columns."""
        return self._split.data_schema

    def _part(self, rel: str) -> TransactionalFileSink:
        sink = self._parts.get(rel)
        if sink is None:
            sink = TransactionalFileSink(self.path / rel, format=self.format, schema=self.data_schema,
                                         writer=self.writer, staging=self.staging / rel)
            self._parts[rel] = sink
        return sink

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add rows to the open epoch, each in its partition's in-progress file.

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: a file cannot be written (as the unpartitioned sink).
        """
        parts, n = _split_rows(self, batch)
        for rel, rows in parts:
            self._part(rel).write(rows)
        self.rows_written += n
        self._open_rows += n

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal every partition's open files as ``epoch``; ``{"files": ["dt=…/hm=…/part-…", …]}``."""
        files: list[str] = []
        for rel, sink in self._parts.items():
            names = sink.pre_commit(epoch)["files"]
            if names:
                self._staged.add(rel)
                files += [f"{rel}/{n}" for n in names]
        if files:
            self._sealed_rows[epoch] = self._open_rows
        self._open_rows = 0
        return {"files": files}

    def adopt(self, epoch: int, parts: dict[str, list[str]], rows: int) -> dict[str, Any]:
        """Stage ``epoch`` from part files written elsewhere (the Delta coordinator's Spark
        tasks): ``parts`` maps a partition directory to its files, in row order. Each is
        renamed to ``_staging/<partition>/part-<epoch>-<writer>-<n>.<fmt>``, as ``pre_commit``
        names them, so ``commit`` is the usual rename; returns what ``pre_commit`` returns.

        Raises:
            SinkWriteError: a file of that name is already committed (another run's), or a
                rename fails.
        """
        staged: list[tuple[str, str, str]] = []
        for rel in sorted(parts):
            part = self._part(rel)
            for n, src in enumerate(parts[rel]):
                name = part._name(epoch, n)
                if (part.path / name).exists():
                    msg = (f"sink {os.fspath(self.path)!r} already holds {rel}/{name}, written by another "
                           "run: point the sink at a new directory or move the old part files away")
                    raise SinkWriteError(msg)
                staged.append((rel, src, name))
        try:
            for rel, src, name in staged:
                (self.staging / rel).mkdir(parents=True, exist_ok=True)
                os.replace(src, self.staging / rel / name)
            for rel in parts:
                fsync_dir(self.staging / rel)
        except OSError as exc:
            raise SinkWriteError(f"cannot stage part files in {os.fspath(self.staging)!r}: {exc}; free space or "
                                 "fix the directory's permissions: the epoch is written again") from exc
        self._staged.update(parts)
        if staged:
            self._sealed_rows[epoch] = rows
        return {"files": [f"{rel}/{name}" for rel, _, name in staged]}

    def commit(self, epoch: int) -> None:
        """Rename the staged files of epochs <= ``epoch`` into their partition directories
        (each partition's files oldest first). Idempotent."""
        for rel in sorted(self._staged):
            self._part(rel).commit(epoch)
        for e in sorted(e for e in self._sealed_rows if e <= epoch):
            self.rows_committed += self._sealed_rows.pop(e)
            self.epochs_committed += 1
        self._staged = {r for r in self._staged if self._parts[r].staged_files()}
        self._forget_idle()

    def abort(self, epoch: int) -> None:
        """Delete the staged files of ``epoch`` in every partition."""
        for rel in sorted(self._staged):
            self._part(rel).abort(epoch)
        self._sealed_rows.pop(epoch, None)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """After a restart from checkpoint ``epoch``: drop unsealed files, commit staged epochs
        <= ``epoch`` and abort later ones, in every partition found under ``_staging/``."""
        by_part: dict[str, list[str]] = {}
        for f in (info or {}).get("files", []):
            rel, _, name = f.rpartition("/")
            by_part.setdefault(rel, []).append(name)
        # every partition directory: committed files of a skipped checkpoint's epochs can sit
        # in one with nothing staged (they are moved aside, see TransactionalFileSink)
        for rel in sorted(set(self._walk_partitions()) | set(self._parts)):
            self._part(rel).recover(epoch, {"files": by_part.get(rel, [])})
        self._staged = {r for r, s in self._parts.items() if s.staged_files()}
        self._sealed_rows.clear()
        self._open_rows = 0
        self._forget_idle()

    def highest_epoch(self) -> int:
        """The highest epoch of this writer's files in any partition directory."""
        best = 0
        for rel in self._walk_partitions():
            best = max(best, self._part(rel).highest_epoch())
        self._forget_idle()
        return best

    def flush(self) -> None:
        """Nothing to do: rows become visible when their checkpoint commits."""

    def close(self) -> None:
        """Drop the open epoch's in-progress files; staged epochs stay for recovery."""
        for sink in self._parts.values():
            sink.close()

    # ------------------------------------------------------------------ internals
    def _forget_idle(self) -> None:
        """Release the partitions with nothing open or staged, and their empty staging
        directories: a time-partitioned stream leaves its past partitions behind for good."""
        for rel in [r for r, s in self._parts.items() if r not in self._staged and s.idle]:
            del self._parts[rel]
            d = self.staging / rel
            while d != self.staging:
                try:
                    d.rmdir()
                except OSError:
                    break  # not empty (another writer's files) or gone
                d = d.parent

    def _walk_partitions(self) -> list[str]:
        """The partition directories under ``_staging/`` and under ``path`` (committed)."""
        return sorted(set(self._walk_staging()) | set(self._walk_staging(self.path)))

    def _walk_staging(self, top: Path | None = None) -> list[str]:
        """The partition directories under ``_staging/`` (or ``top``; relative, ``/``-separated;
        names starting with ``_`` or ``.`` are not partitions)."""
        top = self.staging if top is None else top
        depth = len(self.partition_by)
        out = []
        for root, dirs, _ in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            rel = os.path.relpath(root, top)
            level = 0 if rel == "." else rel.count(os.sep) + 1
            if level == depth:
                out.append(rel.replace(os.sep, "/"))
                dirs.clear()
        return out


class PartitionedFileSink:
    """At-least-once Hive-partitioned files under ``path`` (an in-memory database): rows are
    written as they arrive, to ``<partition>/part-<writer>-<n>.<format>``; a Parquet file is
    complete once closed (``close()``, or when more than ``_MAX_OPEN`` partitions are open)."""

    def __init__(self, path: str | os.PathLike[str], *, format: str | None, schema: pa.Schema,
                 partition_by: str | list[str], writer: str = "0", default_name: str = DEFAULT_PARTITION) -> None:
        _init_partitioned(self, path, format, schema, partition_by, writer, default_name)
        self.rows_written = 0
        self._open: OrderedDict[str, FileSink] = OrderedDict()
        self._next: dict[str, int] = {}  # partition → number of its next part file

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        parts, n = _split_rows(self, batch)
        for rel, rows in parts:
            self._file(rel).write(rows)
        self.rows_written += n

    def _file(self, rel: str) -> FileSink:
        """The open file of partition ``rel`` (a new part file if it has none; the least
        recently written one is closed beyond ``_MAX_OPEN``)."""
        sink = self._open.get(rel)
        if sink is not None:
            self._open.move_to_end(rel)
            return sink
        n = self._next.get(rel, 0)
        self._next[rel] = n + 1
        sink = FileSink(self.path / rel / f"part-{self.writer}-{n:04d}.{self.format}", format=self.format,
                        schema=self._split.data_schema)
        self._open[rel] = sink
        if len(self._open) > _MAX_OPEN:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return sink

    def flush(self) -> None:
        for sink in self._open.values():
            sink.flush()

    def close(self) -> None:
        for sink in self._open.values():
            sink.close()
        self._open.clear()
