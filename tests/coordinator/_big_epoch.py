"""Child process of ``test_native_epoch``: one FILE sink epoch larger than the Spark JVM's heap,
written by the coordinator's executor path in a Spark session of its own: a 512 MB heap (the
least Spark starts with, and the old fixed size) and results to the driver capped at 1 MB, so
any collect of the rows fails.

Usage: ``python -m tests.coordinator._big_epoch <out dir> <staged file>...``; prints the rows
written. The parent is the oracle (it reads the staged and committed files itself).
"""

from __future__ import annotations

import os
import sys

os.environ["LAMINARDB_COORDINATOR_SPARK_MEMORY"] = "512m"
os.environ["PYSPARK_SUBMIT_ARGS"] = "--conf spark.driver.maxResultSize=1m pyspark-shell"

import pyarrow.parquet as pq  # noqa: E402

from laminardb.checkpoint.native_epoch import native_kind, write_epoch  # noqa: E402
from laminardb.checkpoint.spark_job import spark_session, stop_spark  # noqa: E402
from laminardb.connectors.file_sink import TransactionalFileSink  # noqa: E402


def main(out: str, staged: list[str]) -> None:
    schema = pq.read_schema(staged[0])
    sink = TransactionalFileSink(out, format="parquet", schema=schema)
    kind = native_kind(sink, schema, staged)
    assert kind == "file", kind
    spark = spark_session()
    try:
        heap = spark.sparkContext.getConf().get("spark.driver.memory")
        info, rows = write_epoch(spark, kind, sink, staged, 1, schema)
        sink.commit(1)
    finally:
        stop_spark()
    print(f"rows={rows} files={len(info['files'])} heap={heap}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
