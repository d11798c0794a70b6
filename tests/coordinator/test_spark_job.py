"""The coordinator's Spark job on a real local Spark: staged Arrow IPC parts in, one
deterministic Arrow table out, types as staged."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from laminardb.checkpoint.spark_job import iter_epoch, read_epoch

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64()),
                    ("n", pa.int32()), ("ok", pa.bool_()), ("ts", pa.timestamp("ms")),
                    ("ts6", pa.timestamp("us")), ("__weight", pa.int64())])


def _part(ids: list[int]) -> pa.Table:
    return pa.table({
        "id": ids,
        "name": [None if i % 5 == 0 else f"n{i}" for i in ids],
        "x": [i / 3 for i in ids],
        "n": pa.array([i % 100 for i in ids], pa.int32()),
        "ok": [i % 2 == 0 for i in ids],
        "ts": pa.array([1_700_000_000_123 + i for i in ids], pa.timestamp("ms")),
        "ts6": pa.array([1_700_000_000_123_456 + i for i in ids], pa.timestamp("us")),
        "__weight": [1 if i % 3 else -1 for i in ids],  # a changelog: passed through as is
    }, schema=SCHEMA)


def _write(path, table: pa.Table, *, stream: bool = True) -> str:
    with pa.OSFile(str(path), "wb") as f:
        w = ipc.new_stream(f, table.schema) if stream else ipc.new_file(f, table.schema)
        with w:
            for b in table.to_batches(max_chunksize=7):  # several batches per part
                w.write_batch(b)
    return str(path)


def test_parts_are_unioned_in_file_then_row_order(spark, tmp_path) -> None:
    # descending ids inside each part: any sort by value would reorder them
    parts = [_part(list(range(40, 0, -1))), _part([]), _part(list(range(1000, 950, -1)))]
    files = [_write(tmp_path / f"p{i}.arrows", p, stream=i != 2) for i, p in enumerate(parts)]
    out = read_epoch(spark, files)
    assert out.schema.equals(SCHEMA)
    assert out.equals(pa.concat_tables(parts))
    assert read_epoch(spark, files).equals(out)  # the same epoch read twice: same rows, same order


def test_jobs_are_bounded_in_rows_and_keep_the_order(spark, tmp_path) -> None:
    parts = [_part(list(range(30, 0, -1))), _part(list(range(500, 480, -1)))]
    files = [_write(tmp_path / f"p{i}.arrows", p) for i, p in enumerate(parts)]
    jobs = list(iter_epoch(spark, files, rows_per_job=12))  # slices across both parts
    assert [t.num_rows for t in jobs] == [12, 12, 12, 12, 2]
    assert pa.concat_tables(jobs).equals(pa.concat_tables(parts))


def test_empty_epoch_gives_an_empty_table_of_the_schema(spark, tmp_path) -> None:
    f = _write(tmp_path / "empty.arrows", _part([]))
    assert read_epoch(spark, [f]).num_rows == 0
    assert read_epoch(spark, [], schema=SCHEMA).schema.equals(SCHEMA)


def test_a_dead_jvm_fails_the_job_and_the_next_session_is_fresh(spark, tmp_path) -> None:
    """An OutOfMemoryError makes the JVM exit (-XX:+ExitOnOutOfMemoryError): the job in
    flight raises, and spark_session() starts a new JVM for the next epoch. (Runs last in
    the session: it costs the one extra JVM start of the tests.)"""
    from laminardb.checkpoint.spark_job import kill_jvm, spark_session

    f = _write(tmp_path / "p.arrows", _part(list(range(20))))
    kill_jvm()
    with pytest.raises(Exception):  # noqa: B017 - py4j's error for a vanished JVM
        read_epoch(spark, [f])
    fresh = spark_session()
    assert fresh is not spark
    assert read_epoch(fresh, [f]).equals(_part(list(range(20))))
