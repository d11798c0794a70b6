"""``EpochStage`` in Parquet holds small appends until they make a row group (``ROW_GROUP_ROWS``)
or the epoch is sealed: a plan tree's actors and a window close append a few rows per step,
and a row group per append made the writer and Spark's reader pay per group."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from laminardb.checkpoint import sink
from laminardb.checkpoint.sink import EpochStage

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string())])


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + n), pa.int64()),
                            pa.array([f"r{i}" for i in range(start, start + n)])], schema=SCHEMA)


def test_small_appends_are_one_row_group_per_limit_in_append_order(tmp_path, monkeypatch):
    monkeypatch.setattr(sink, "ROW_GROUP_ROWS", 100)
    stage = EpochStage(tmp_path, SCHEMA, fmt="parquet")
    for i in range(25):  # 250 rows, 10 at a time
        stage.append(_batch(i * 10, 10))
    assert stage.open_rows == 250
    assert (tmp_path / "open.parquet").exists()  # the open file is there from the first row
    assert stage.seal(7) == 250
    meta = pq.ParquetFile(stage.path(7)).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [100, 100, 50]
    assert stage.read(7)["k"].to_pylist() == list(range(250))


def test_held_rows_go_with_a_prepend_and_not_past_a_discard(tmp_path, monkeypatch):
    monkeypatch.setattr(sink, "ROW_GROUP_ROWS", 1000)
    stage = EpochStage(tmp_path, SCHEMA, fmt="parquet")
    stage.append(_batch(10, 5))  # held, not yet written
    stage.prepend(pa.Table.from_batches([_batch(0, 10)]))
    stage.seal(1)
    assert stage.read(1)["k"].to_pylist() == list(range(15))
    stage.append(_batch(100, 3))
    stage.discard_open()
    stage.append(_batch(200, 2))
    stage.seal(2)
    assert stage.read(2)["k"].to_pylist() == [200, 201]
