"""Child process of ``test_native_epoch``: one epoch larger than the Spark JVM's heap through
each kind of sink the coordinator writes on its executors — FILE, partitioned FILE and a
PostgreSQL sink (sealed by one task, committed by another) — in a Spark session of its own: a
512 MB heap (the least Spark starts with, and the old fixed size) and results to the driver
capped at 1 MB, so any collect of the rows fails.

Usage: ``python -m tests.coordinator._big_epoch <out dir> <parts dir> <postgres url> <staged file>...``;
prints a line per sink with the rows written. The parent is the oracle (it reads the staged
and committed files, and the PostgreSQL table, itself).
"""

from __future__ import annotations

import os
import sys

os.environ["LAMINARDB_COORDINATOR_SPARK_MEMORY"] = "512m"
os.environ["PYSPARK_SUBMIT_ARGS"] = "--conf spark.driver.maxResultSize=1m pyspark-shell"

import pyarrow.parquet as pq  # noqa: E402

from laminardb.checkpoint.native_epoch import native_kind, run_on_executor, write_epoch  # noqa: E402
from laminardb.checkpoint.sink import EpochStage  # noqa: E402
from laminardb.checkpoint.sink_tasks import SinkSpec, build_sink  # noqa: E402
from laminardb.checkpoint.spark_job import spark_session, stop_spark  # noqa: E402
from laminardb.connectors.file_sink import TransactionalFileSink  # noqa: E402
from laminardb.connectors.partitioned_sink import PartitionedTransactionalFileSink  # noqa: E402


def _through_the_driver(*_a, **_k):
    raise AssertionError("an epoch's rows were read in the driver")


# the driver may stage and install the sealed epoch, never read it (the executors' Python
# workers import the class afresh: only this process is trapped)
EpochStage.read = _through_the_driver


def main(out: str, parts: str, pg_url: str, staged: list[str]) -> None:
    schema = pq.read_schema(staged[0])
    spec = SinkSpec("big_pg", f"CREATE SINK big_pg FROM src INTO POSTGRES (url = '{pg_url}', table = 'big')",
                    schema.serialize().to_pybytes(), os.path.join(out, "..", "stages"))
    sinks = {"file": TransactionalFileSink(out, format="parquet", schema=schema),
             "partitioned": PartitionedTransactionalFileSink(parts, format="parquet", schema=schema,
                                                             partition_by="k"),
             "stage": build_sink(spec)}
    spark = spark_session()
    try:
        heap = spark.sparkContext.getConf().get("spark.driver.memory")
        for want, sink in sinks.items():
            kind = native_kind(sink)
            assert kind == want, kind
            info, rows = write_epoch(spark, kind, sink, staged, 1, schema)
            if kind == "stage":
                run_on_executor(spark, sink, "commit", 1)  # the rows go to PostgreSQL from a task
            else:
                sink.commit(1)
            print(f"{kind}: rows={rows} committed={sink.rows_committed} heap={heap}", flush=True)
    finally:
        for sink in sinks.values():
            sink.close()
        stop_spark()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
