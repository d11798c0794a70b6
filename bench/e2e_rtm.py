"""Spark 4.3 Real-Time Mode (``trigger(realTime=…)``) on ``bench_e2e_latency.py``'s rows,
with what runs offline. Entry point: ``run``.

What pyspark 4.3 allows (``RealTimeModeAllowlist`` in spark-sql_2.13-4.3.0.jar): sources that
implement ``SupportsRealTimeMode`` — Kafka (its jar is not installed: no Maven here) and
``LowLatencyMemoryStream``, Spark's own in-memory test source, built here through py4j; sinks:
Kafka, foreach, console. Output mode update (append is refused). The batch duration must be
≥ ``spark.sql.streaming.realTimeMode.minBatchDuration`` (5 s by default; lowered to 1 s here,
the checkpoint interval of the other systems). The pipelined shuffle runs the source task and
every reducer at once: the two queries need 3 task slots (1 shuffle partition), so RTM gets
its own ``local[3]`` session.

There is no committed sink row in RTM (Kafka and foreach sinks are at-least-once), so a row's
time is taken as it reaches the sink, in the JVM: ``reflect('java.lang.System',
'currentTimeMillis')`` in the last projection (ms resolution). The Python foreach writer only
records it: Python's foreach runner hands rows to its worker in batches, hundreds of ms later.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import e2e_common as ec
import e2e_spark
import pyarrow as pa

_SEEN = "cast(reflect('java.lang.System', 'currentTimeMillis') as long) * 1000000"


class LineWriter:
    """Foreach writer: one JSON line per row, flushed, one file per (partition, epoch)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.f = open(os.path.join(self.directory, f"p{partition_id}-e{epoch_id}.jsonl"), "a")  # noqa: SIM115
        return True

    def process(self, row) -> None:
        self.f.write(json.dumps(row.asDict()) + "\n")
        self.f.flush()

    def close(self, error) -> None:
        self.f.close()


class Tail(ec.Watcher):
    """Reads the complete lines the foreach writers appended since the last poll."""

    def __init__(self, directory: Path, on_rows: Callable[[pa.Table], None]) -> None:
        super().__init__(lambda: [], lambda p, t: None)
        self.directory, self.on_rows = directory, on_rows
        self.offsets: dict[str, int] = {}

    def poll(self) -> None:
        for name in sorted(os.listdir(self.directory)):
            with open(self.directory / name, "rb") as f:
                f.seek(self.offsets.get(name, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end:
                self.offsets[name] = self.offsets.get(name, 0) + end
                self.on_rows(pa.Table.from_pylist([json.loads(ln) for ln in data[:end].splitlines()]))


def session():
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[3]").appName("laminardb-e2e-rtm")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "1").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.realTimeMode.minBatchDuration", "1000").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def run(spark: e2e_spark.Spark, work: Path, args, measure: Callable,
        only: tuple[str, ...] = ("stateless", "windowed")) -> dict:
    """RTM on a fresh ``local[3]`` session, the queries in ``only``; rows fed through py4j."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F  # noqa: N812

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark.session.stop()  # local[2] has too few task slots for RTM's pipelined stages
    s = spark.session = session()
    jvm = s._jvm
    stream = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(
        s._jsparkSession, 1, jvm.org.apache.spark.sql.Encoders.STRING())
    parts = F.split("value", ",")
    src = DataFrame(stream.toDF(), s).select(
        parts[0].cast("long").alias("id"), parts[1].alias("key"), parts[2].cast("long").alias("ts"),
        parts[3].cast("long").alias("created_ns"), parts[4].cast("long").alias("v"))
    col = ec.Collector(only)
    started, watchers = [], []
    try:
        for q, df in e2e_spark.queries(src).items():
            if q not in only:
                continue
            out = work / q
            out.mkdir(parents=True)
            started.append(df.withColumn("seen_ns", F.expr(_SEEN)).writeStream.outputMode("update")
                           .option("checkpointLocation", str(work / f"ckpt-{q}")).queryName(f"rtm_{q}")
                           .trigger(realTime="1 second").foreach(LineWriter(str(out))).start())
            watchers.append(Tail(out, col.stateless if q == "stateless" else col.windowed))
        to_scala = jvm.scala.jdk.javaapi.CollectionConverters.asScala

        def emit(batch: pa.RecordBatch) -> None:
            lines = jvm.java.util.ArrayList()
            for r in zip(*(batch.column(c).to_pylist() for c in ("id", "key", "ts", "created_ns", "v")), strict=True):
                lines.add(",".join(map(str, r)))
            stream.addData(to_scala(lines))

        res = measure(col, watchers, emit, args, updates=True)
        res["note"] = "seen = row reaches the sink (JVM clock, ms), not committed: RTM sinks are at-least-once"
        return res
    finally:
        for q in started:
            q.stop()
