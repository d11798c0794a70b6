"""The coordinator's Spark job on a real local Spark over an older head's Arrow IPC stage
files: read on the executors (no driver path), the rows written in staged order, types as
staged; a dead JVM is replaced."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from laminardb.checkpoint.epoch_tasks import plan_chunks
from laminardb.checkpoint.native_epoch import native_kind, write_epoch
from laminardb.checkpoint.stage_files import stage_groups
from laminardb.connectors.file_sink import TransactionalFileSink

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


def _sink(path) -> TransactionalFileSink:
    return TransactionalFileSink(path, format="parquet", schema=SCHEMA)


def _committed(sink: TransactionalFileSink) -> pa.Table:
    files = sorted(sink.path.glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in files]) if files else SCHEMA.empty_table()


def _epoch(spark, sink: TransactionalFileSink, files: list[str], epoch: int = 1) -> int:
    kind = native_kind(sink)
    assert kind == "file"
    _, rows = write_epoch(spark, kind, sink, files, epoch, SCHEMA)
    sink.commit(epoch)
    return rows


def test_arrow_ipc_parts_are_written_on_the_executors_in_file_then_row_order(spark, tmp_path) -> None:
    """An older head's Arrow IPC stage files (stream and file) take the executors' path too."""
    # descending ids inside each part: any sort by value would reorder them
    parts = [_part(list(range(40, 0, -1))), _part([]), _part(list(range(1000, 950, -1)))]
    files = [_write(tmp_path / f"p{i}.arrows", p, stream=i != 2) for i, p in enumerate(parts)]
    assert [sum(stage_groups(f)) for f in files] == [40, 0, 50]
    # batches of 7 rows (6 and 8 of them), the empty part has none: all one chunk
    assert plan_chunks(files, 1) == [(0, 0, ((files[0], 0, 6), (files[2], 0, 8)))]
    sink = _sink(tmp_path / "out")
    assert _epoch(spark, sink, files) == 90
    out = _committed(sink)
    assert out.schema.equals(SCHEMA)  # the staged types (timestamps, changelog weight) as staged
    assert out.equals(pa.concat_tables(parts))
    again = _sink(tmp_path / "again")
    _epoch(spark, again, files)
    assert _committed(again).equals(out)  # the same epoch written twice: same rows, same order


def test_empty_arrow_parts_stage_no_file(spark, tmp_path) -> None:
    f = _write(tmp_path / "empty.arrows", _part([]))
    sink = _sink(tmp_path / "out")
    assert _epoch(spark, sink, [f]) == 0 and _committed(sink).num_rows == 0


def test_a_dead_jvm_fails_the_job_and_the_next_session_is_fresh(spark, tmp_path) -> None:
    """An OutOfMemoryError makes the JVM exit (-XX:+ExitOnOutOfMemoryError): the job in
    flight raises, and spark_session() starts a new JVM for the next epoch. (Runs last in
    the session: it costs the one extra JVM start of the tests.)"""
    from laminardb.checkpoint.spark_job import kill_jvm, spark_session

    f = _write(tmp_path / "p.arrows", _part(list(range(20))))
    kill_jvm()
    with pytest.raises(Exception):  # noqa: B017 - py4j's error for a vanished JVM
        _epoch(spark, _sink(tmp_path / "dead"), [f])
    fresh = spark_session()
    assert fresh is not spark
    sink = _sink(tmp_path / "fresh")
    _epoch(fresh, sink, [f])
    assert _committed(sink).equals(_part(list(range(20))))


def _task_pid(spark) -> int:
    """The pid of the Python worker that runs one epoch-like task."""
    from laminardb.checkpoint import spark_job
    from laminardb.checkpoint.epoch_tasks import ReadToEnd, worker_pid

    with spark_job._Watchdog():  # counted as an epoch's job
        return spark.sparkContext.parallelize([0], 1).mapPartitions(ReadToEnd(worker_pid)).collect()[0]


def test_a_no_op_task_runs_while_epochs_come_and_stops_after(spark, monkeypatch) -> None:
    """The keep-warm rule on the real session: a no-op task once no job ran for
    WORKER_IDLE_S, and none once the last epoch's job is older than KEEP_WARM_FOR_S."""
    import time

    from laminardb.checkpoint import spark_job
    from tests._services.procs import wait_until

    monkeypatch.setattr(spark_job, "WORKER_IDLE_S", 0.4)
    _task_pid(spark)
    runs = spark_job._KeepWarm.runs
    wait_until(lambda: spark_job._KeepWarm.runs >= runs + 2, timeout=30, interval=0.1,
               what="two no-op tasks after an epoch's job")
    monkeypatch.setattr(spark_job, "KEEP_WARM_FOR_S", 0.0)  # the last epoch is now long ago
    time.sleep(1.0)  # a no-op task already started ends
    runs = spark_job._KeepWarm.runs
    time.sleep(2.0)
    assert spark_job._KeepWarm.runs == runs, "no-op tasks went on without epochs"


def test_a_minute_without_epochs_keeps_the_python_worker(spark, monkeypatch) -> None:
    """Spark kills a Python worker idle for a minute (its monitor looks every 10 s): without
    the keep-warm task the next epoch's task runs in a fresh worker, which imports pyspark,
    pyarrow, pandas and laminardb again (1.5-2 CPU s); with it, the same worker runs it."""
    import time

    from laminardb.checkpoint import spark_job

    monkeypatch.setattr(spark_job, "KEEP_WARM_FOR_S", 0.0)  # the premise: no keep-warm task
    before = _task_pid(spark)
    time.sleep(75)
    fresh = _task_pid(spark)
    assert fresh != before, "Spark kept an idle worker past a minute: the keep-warm task is not needed"
    monkeypatch.setattr(spark_job, "KEEP_WARM_FOR_S", 600.0)
    time.sleep(75)
    assert _task_pid(spark) == fresh, "the worker was killed although a no-op task kept it busy"
