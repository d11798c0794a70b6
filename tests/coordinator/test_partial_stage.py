"""The head's stage of a local-global aggregate's partials (``partial_stage.PartialStagedSink``):
an epoch holds partials or final rows, never both; a consumer that appears mid-epoch, or an
aborted epoch rolled back into one holding final rows, gets the partials merged at the head.
Oracle: the head's own merge (``KeyedPartialMerger.merge``) of the same partials."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminardb.checkpoint.partial_stage import PartialStagedSink, executors_write
from laminardb.cluster.partial import KeyedPartialMerger
from laminardb.operators.query_operator import QueryOperator
from tests.coordinator.test_spark_merge import _partials, _raw


@pytest.fixture
def staged(tmp_path):
    raw = _raw(1200)
    merge, schema = _partials(raw, tmp_path)
    partials = pq.read_table(merge["stage"])
    from laminardb.checkpoint.spark_merge import plan_of

    plan = plan_of(merge)
    merger = KeyedPartialMerger(plan, QueryOperator(plan))
    merger.query_sql, merger.input_relation = merge["sql"], merge["input"]
    sink = PartialStagedSink("out", "CREATE SINK out FROM q INTO FILE (path = 'x')", schema,
                             tmp_path / "stage", executors_write=True)
    yield sink, merger, partials, schema
    sink.close()


def _final(merger: KeyedPartialMerger, partials: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(KeyedPartialMerger(merger.plan, QueryOperator(merger.plan)).merge(partials),
                                 schema=schema)


def test_an_epoch_of_partials_is_described_for_the_epoch_job(staged) -> None:
    sink, merger, partials, _ = staged
    assert sink.take_partials(partials, merger)
    sink.pre_commit(1)
    desc = sink.describe(1)
    assert desc["stage"] is None and desc["rows"] == 0
    assert desc["merge"]["rows"] == partials.num_rows and desc["merge"]["sql"] == merger.query_sql
    assert pq.read_table(desc["merge"]["stage"]).equals(partials)
    assert merger.rows_merged == 0
    sink.release(1)
    assert sink.partials.epochs() == []


def test_a_consumer_mid_epoch_merges_the_open_partials_at_the_head(staged) -> None:
    sink, merger, partials, schema = staged
    half = partials.num_rows // 2
    assert sink.take_partials(partials.slice(0, half), merger)
    later = _final(merger, partials.slice(half), schema)
    sink.write(later.to_batches()[0])  # a subscriber came: the head merged this close
    assert not sink.take_partials(partials.slice(half), merger)  # final rows open: the caller merges
    sink.pre_commit(2)
    desc = sink.describe(2)
    assert "merge" not in desc
    got = pq.read_table(desc["stage"])
    assert got.equals(pa.concat_tables([_final(merger, partials.slice(0, half), schema), later]))
    assert merger.rows_merged == half


def test_an_aborted_epoch_of_partials_goes_back_in_front(staged) -> None:
    sink, merger, partials, schema = staged
    half = partials.num_rows // 2
    sink.take_partials(partials.slice(0, half), merger)
    sink.pre_commit(3)
    sink.take_partials(partials.slice(half), merger)
    sink.abort(3)  # partials open: the aborted ones go in front of them, still unmerged
    sink.pre_commit(4)
    assert pq.read_table(sink.describe(4)["merge"]["stage"]).equals(partials)
    assert merger.rows_merged == 0

    sink.take_partials(partials.slice(0, half), merger)
    sink.pre_commit(5)
    sink.write(_final(merger, partials.slice(half), schema).to_batches()[0])
    sink.abort(5)  # final rows open: the aborted partials are merged here, in front
    sink.pre_commit(6)
    got = pq.read_table(sink.describe(6)["stage"])
    want = pa.concat_tables([_final(merger, partials.slice(0, half), schema),
                             _final(merger, partials.slice(half), schema)])
    assert got.equals(want)


def test_which_sinks_the_executors_write() -> None:
    assert executors_write("FILE", {"path": "/x"})
    assert not executors_write("file", {"path": "/x", "partitioned_by": "k"})
    assert executors_write("delta_lake", {"path": "/lake"})
    assert not executors_write("delta_lake", {"path": "s3://bucket/lake"})
    assert not executors_write("kafka", {"topic": "t"})
