"""Every task the coordinator runs on Spark's executors reads its input to the end
(``epoch_tasks.ReadToEnd``, the way ``native_epoch`` and ``spark_job`` submit them). Spark
reuses a Python worker only then; after a task that stops early, the next one forks a fresh
worker, which imports pyspark, pyarrow, pandas and laminardb again (1.5-2 CPU s a task).
(``test_spark_job.py`` shows the reuse on real Spark.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from laminardb.checkpoint import native_epoch, sink_tasks
from laminardb.checkpoint.epoch_tasks import ReadToEnd, worker_pid


class _Input:
    """An iterator that notes whether it was read to the end."""

    def __init__(self, items: list[Any]) -> None:
        self._items = iter(items)
        self.exhausted = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._items)
        except StopIteration:
            self.exhausted = True
            raise


class _Partitions:
    """What ``parallelize(...).mapPartitions(f)`` does, in this process: ``f`` over one
    partition of ``items``, its input an ``_Input`` that notes whether it was read."""

    def __init__(self, items: list[Any]) -> None:
        self.input = _Input(items)
        self._f: Any = None

    def mapPartitions(self, f: Any) -> _Partitions:  # noqa: N802 - Spark's name
        self._f = f
        return self

    def collect(self) -> list[Any]:
        return list(self._f(self.input))


class _Spark:
    """A SparkSession stand-in that runs every job in this process (``_Partitions``)."""

    def __init__(self) -> None:
        self.sparkContext = self
        self.jobs: list[_Partitions] = []

    def parallelize(self, items: list[Any], n: int) -> _Partitions:
        self.jobs.append(_Partitions(items))
        return self.jobs[-1]


class _Sink:
    rows_committed = 3
    epochs_committed = 1

    def __init__(self) -> None:
        self.calls: list[str] = []

    def commit(self, epoch: int) -> None:
        self.calls.append(f"commit {epoch}")

    def recover(self, epoch: int, info: Any) -> None:
        self.calls.append(f"recover {epoch}")

    def close(self) -> None:
        self.calls.append("close")


def test_the_keep_warm_task_reads_its_input_to_the_end() -> None:
    items = _Input([0])
    assert len(list(ReadToEnd(worker_pid)(items))) == 1 and items.exhausted


def test_a_sink_commit_task_reads_its_input_to_the_end(monkeypatch) -> None:
    sink = _Sink()
    monkeypatch.setattr(sink_tasks, "build_sink", lambda spec: sink)
    spec = sink_tasks.SinkSpec("s", "CREATE SINK …", pa.schema([]).serialize().to_pybytes(), "/nowhere")
    spark = _Spark()
    for op in ("commit", "recover"):
        # submitted as native_epoch.run_on_executor does: one task, one item (no chunks)
        out = native_epoch._run_one(spark, sink_tasks.SinkCommitTask(spec, op, 7, None), [])
        items = spark.jobs[-1].input
        assert out == [(3, 1)] and items.exhausted
    assert sink.calls == ["commit 7", "close", "recover 7", "close"]
