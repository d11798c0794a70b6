"""The head's side of the cross-node merge in Spark: a staged sink that may stage a local-global
aggregate's *partials* instead of its final rows, and the rule for when it does.

Why: a keyed window aggregate whose rows are not partitioned by its key (Kafka partitions, or
any batch split by row range) aggregates on every actor; the closed windows' partials — one
row per (actor, window, key) — must be merged. When the aggregate's only consumer is an
exactly-once FILE or local Delta Lake sink of a coordinated database, the coordinator's epoch
job merges them in Spark (``spark_merge.py``) and the head does no merge at all.

An epoch's stage holds either partials or final rows, never both: partials arrive only while
the sink is the query's only consumer; when another consumer appears mid-epoch (a subscriber,
a view, a query), the open partials are merged here first and the epoch goes on with final
rows (``write``), and partials that would follow final rows in an epoch are merged here too.
Every actor closes a window in the same round (the head sends the watermark to all of them
with the batch), so all partials of a (window, key) are in one epoch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.sink import EpochStage
from laminardb.checkpoint.staged_sink import StagedSink

#: never a real epoch (they start at 1): the open partials sealed here to be read back
_SCRATCH_EPOCH = 0


def executors_write(connector: str, options: dict[str, str]) -> bool:
    """Whether the coordinator's executors write this sink's epochs (``native_epoch.native_kind``),
    told from its CREATE SINK: FILE not partitioned, or Delta Lake on a local path."""
    connector = connector.lower()
    if connector == "file":
        return not options.get("partitioned_by")
    if connector in ("delta_lake", "deltalake", "delta"):
        return "://" not in str(options.get("path", ""))
    return False


class PartialStage(EpochStage):
    """The partials' stage: Parquet without dictionary pages. Partials hold one row per (actor,
    window, key), keys mostly distinct, where dictionary encoding costs the head ~3x the CPU
    of the write for no saving (bench/bench_spark_merge.py: 0.38 vs 0.11 µs a partial row)."""

    def _new_writer(self, f: Any) -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetWriter(f, self.schema, use_dictionary=False)


class PartialStagedSink(StagedSink):
    """A ``StagedSink`` that also takes a local-global aggregate's partials (module docstring)."""

    def __init__(self, name: str, sql: str, schema: pa.Schema, directory: str | os.PathLike[str], *,
                 connector_name: str | None = None, executors_write: bool = False) -> None:
        super().__init__(name, sql, schema, directory, connector_name=connector_name)
        self.executors_write = executors_write
        # the partial schema is the first close's (it follows the query's plan); files only until then
        self.partials = PartialStage(Path(directory) / "partials", pa.schema([]), fmt="parquet")
        self._partial_rows: dict[int, int] = {}
        self._merger: Any = None  # the KeyedPartialMerger whose partials are open here
        self._spec: dict[str, Any] | None = None  # how the epoch job re-plans the query
        self.partial_rows_staged = 0

    # ------------------------------------------------------------------ rows
    def take_partials(self, table: pa.Table, merger: Any) -> bool:
        """Stage closed windows' partials for the epoch job; False (the caller merges) when
        this epoch already holds final rows."""
        if self.stage.open_rows:
            return False
        if not self.partials.open_rows:
            self.partials.schema = table.schema
        elif not table.schema.equals(self.partials.schema):
            return False
        self._merger = merger
        self._spec = self._spec or merge_spec(merger)
        for batch in table.to_batches():
            self.partials.append(batch)
        self.partial_rows_staged += table.num_rows
        return True

    def write(self, batch: pa.RecordBatch) -> None:
        self._flush_open_partials()  # a consumer appeared mid-epoch: the open partials merge here
        super().write(batch)

    def _flush_open_partials(self) -> None:
        if self.partials.open_rows:
            for b in self._merge_here(self._take_open_partials()):
                StagedSink.write(self, b)

    def _take_open_partials(self) -> pa.Table:
        self.partials.seal(_SCRATCH_EPOCH)
        table = self.partials.read(_SCRATCH_EPOCH)
        self.partials.drop(_SCRATCH_EPOCH)
        return table

    def _merge_here(self, table: pa.Table) -> list[pa.RecordBatch]:
        if table.num_rows == 0:
            return []
        if self._merger is None:
            msg = (f"sink {self.name!r}: staged partial rows but no aggregate to merge them "
                   "(restart the database: its replay stages them again)")
            raise RuntimeError(msg)
        return [b.cast(self.schema) if not b.schema.equals(self.schema) else b
                for b in self._merger.merge(table)]

    # ------------------------------------------------------------------ two phases
    def pre_commit(self, epoch: int) -> dict[str, Any]:
        out = super().pre_commit(epoch)
        if self.partials.open_rows:
            self._partial_rows[epoch] = self.partials.seal(epoch)
        return out

    def abort(self, epoch: int) -> None:
        """As ``StagedSink.abort``; an aborted epoch's partials go back in front of the open
        partials — merged here first when the open epoch holds final rows (and open partials
        are merged here when the aborted epoch's final rows come back in front of them)."""
        self._partial_rows.pop(epoch, None)
        path = self.partials.path(epoch)
        if path.exists():
            earlier = pq_read(path)
            self.partials.drop(epoch)
            if self.stage.open_rows:
                self.stage.prepend(pa.Table.from_batches(self._merge_here(earlier), schema=self.schema))
            elif earlier.num_rows:
                if not self.partials.open_rows:
                    self.partials.schema = earlier.schema
                self.partials.prepend(earlier)
        elif self.partials.open_rows and _rows_in(self.stage.path(epoch)):
            self._flush_open_partials()
        super().abort(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        super().recover(epoch, info)
        self.partials.settle(epoch)

    def release(self, epoch: int) -> None:
        super().release(epoch)
        for e in self.partials.epochs():
            if e <= epoch:
                self.partials.drop(e)
                self._partial_rows.pop(e, None)

    def describe(self, epoch: int) -> dict[str, Any]:
        """As ``StagedSink.describe``; an epoch of partials adds ``merge``: the staged partials
        and how to re-plan the query whose finisher (HAVING, projection) the executors run."""
        out = super().describe(epoch)
        rows = self._partial_rows.get(epoch, 0)
        path = self.partials.path(epoch)
        if rows and path.exists() and self._spec is not None:
            out["merge"] = {**self._spec, "stage": str(path), "rows": rows}
        return out

    def close(self) -> None:
        super().close()
        self.partials.close()


def pq_read(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _rows_in(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows if path.exists() else 0


def merge_spec(merger: Any) -> dict[str, Any]:
    """What the epoch job needs to rebuild the query's finisher with laminardb's own planner:
    the query text and its input relation (schema, event time), as the head planned it."""
    return {"sql": merger.query_sql, "input": merger.input_relation}


def spark_route(reactor: Any, name: str, merger: Any):
    """``KeyedPartialMerger.route`` for query ``name``: its only consumer, when that is a sink
    whose epochs the executors write (no subscriber, view, query or second sink reads it)."""

    def route() -> PartialStagedSink | None:
        node = reactor.nodes.get(name)
        if node is None or node.downstream or node.subscribers or node.view is not None or len(node.sinks) != 1:
            return None
        sink = node.sinks[0]
        if not isinstance(sink, PartialStagedSink) or not sink.executors_write:
            return None
        if getattr(merger, "query_sql", None) is None:
            merger.query_sql = node.sql
            merger.input_relation = reactor.relation(node.input)
        return sink

    return route
