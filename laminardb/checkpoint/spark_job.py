"""The Spark session of the Delta checkpoint coordinator, and the bounded driver-side reader
kept for the sinks whose epochs are not written on the executors yet.

Entry points: :func:`spark_session` (one local Spark application per process, started on
first use and reused), :func:`iter_epoch` (an epoch's staged files → Arrow tables, one
Spark job per bounded number of rows; Kafka, PostgreSQL, Iceberg and partitioned FILE
sinks) and :func:`read_epoch` (the same as one table). FILE and Delta Lake sinks do not
come here: ``native_epoch.py`` writes them on the executors.

Why Spark, and why this shape: the coordinator is a PySpark application (issue 9). RayDP
would run Spark executors as Ray actors but pins pyspark <= 3.5, so Spark runs
``local[*]`` inside the coordinator's Ray actor on the head node. Each part file (or slice
of one: a job reads at most ``_ROWS_PER_JOB`` rows) becomes a DataFrame with
``createDataFrame`` from Arrow (no per-row Python), tagged with its part number and row
number; Spark unions the parts and orders them by (part, row), so the output is
deterministic — the same epoch read twice gives the same rows in the same order,
which a re-driven commit relies on. Changelog streams (a ``__weight`` column) pass through
unchanged: consolidating +1/-1 pairs would change what a downstream reader of the
changelog sees.

Spark's own types differ from the engine's in two places, undone by a cast back to the
staged schema: timestamps come back as ``timestamp[us, tz=UTC]`` (the session time zone
is pinned to UTC, so naive engine timestamps keep their value) and strings may come back
as ``large_string``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

__all__ = ["iter_epoch", "kill_jvm", "read_epoch", "read_stage_file", "spark_session", "stop_spark"]

log = logging.getLogger(__name__)

# Every core of the node (local[*]: executors are threads of the one JVM) and a heap sized
# from the node's memory, an eighth of it within [512 MB, 8 GB]: the coordinator shares the
# head node with the database heads. Set LAMINARDB_COORDINATOR_SPARK_MEMORY (e.g. "2g") or
# LAMINARDB_COORDINATOR_SPARK_MASTER (e.g. "local[2]") to override.
_MASTER = "local[*]"
# Rows per Spark job: with the default 512m heap a job of 1M rows runs out of memory (the
# driver holds them as Arrow, as batches in the JVM, sorted, and collected; measured peaks of
# ~480 MB with 250k-row jobs); 100k keeps the peak well inside the heap.
_ROWS_PER_JOB = 100_000
# Bound on one Spark call (a createDataFrame or a job): past it the JVM is presumed hung and
# killed, the call raises, the coordinator aborts the epoch and the next one starts a new
# JVM. Generous: a 100k-row job takes ~0.3-1 s on one core.
_JOB_TIMEOUT_S = float(os.environ.get("LAMINARDB_COORDINATOR_SPARK_JOB_TIMEOUT", "300"))
_PART = "__ldb_part"
_ROW = "__ldb_row"
_ARROW_FILE_MAGIC = b"ARROW1"
_PARQUET_MAGIC = b"PAR1"

_APP_NAME = "laminardb-coordinator"
_lock = threading.Lock()
_spark: Any = None


def driver_memory() -> str:
    """The JVM heap: ``LAMINARDB_COORDINATOR_SPARK_MEMORY``, else an eighth of the node's RAM
    within [512 MB, 8 GB]."""
    from laminardb.spark.resources import driver_memory_mb

    return os.environ.get("LAMINARDB_COORDINATOR_SPARK_MEMORY") or f"{driver_memory_mb()}m"


def _worker_pythonpath() -> str:
    """PYTHONPATH of Spark's Python workers: this laminardb first (the mapInArrow tasks of
    ``native_epoch`` import it), then what the process had."""
    import laminardb

    root = str(Path(laminardb.__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def spark_session() -> Any:
    """The process's coordinator SparkSession (``local[*]``, no UI, Arrow on, quiet logs).

    Started once (a JVM: ~3-5 s), then reused by every database's checkpoints; started
    again when its JVM died (it exits on OutOfMemoryError rather than hang half-alive).
    """
    global _spark
    with _lock:
        if _spark is not None and _jvm_alive():
            return _spark
        if _spark is not None:
            log.warning("the coordinator's Spark JVM died; starting a new one")
            _forget_jvm()
        # Spark warns about guessing the local IP on every start: it only serves loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # the executors' Python workers run this interpreter (pyspark reads only the
        # environment for it; "python3" on the PATH may lack pyarrow)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings = {
            "spark.master": os.environ.get("LAMINARDB_COORDINATOR_SPARK_MASTER", _MASTER),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",  # no progress bars in the actor's log
            "spark.driver.memory": driver_memory(),
            # the executors' Python workers import this laminardb
            "spark.executorEnv.PYTHONPATH": _worker_pythonpath(),
            # Arrow batches of up to 100k rows into mapInArrow (10k by default: per-batch cost)
            "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            # never fall back to a per-row conversion: fail loudly instead
            "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
            # an OutOfMemoryError leaves Spark's scheduler threads dead and the job waiting
            # forever: exit instead, so the call fails and the next epoch gets a fresh JVM
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+ExitOnOutOfMemoryError",
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyspark's pandas-version FutureWarning
            spark = _start_session(settings)
        spark.sparkContext.setLogLevel("ERROR")
        _spark = spark
        return spark


def _start_session(settings: dict[str, str]) -> Any:
    """On the standalone cluster ``laminardb spark up`` started on this node (executors on
    every node, ``laminardb.spark``), unless a master is forced by the environment; else in
    this process (``local[*]``)."""
    from laminardb.spark.session import standalone_session
    from laminardb.spark.standalone import coordinator_conf

    cluster = None if "LAMINARDB_COORDINATOR_SPARK_MASTER" in os.environ else coordinator_conf()
    if cluster is not None:
        log.info("the coordinator's Spark runs on the standalone cluster at %s", cluster["spark.master"])
        host = cluster["spark.driver.host"]  # where the other nodes' executors reach the driver
        return standalone_session({**settings, **cluster, "spark.driver.bindAddress": host},
                                  app_name=_APP_NAME)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(_APP_NAME)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def stop_spark() -> None:
    """Stop the process's SparkSession (the next :func:`spark_session` starts a new one)."""
    global _spark
    with _lock:
        spark, _spark = _spark, None
    if spark is not None and _jvm_alive():
        spark.stop()
    elif spark is not None:
        _forget_jvm()


def _jvm_process() -> Any:
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def _jvm_alive() -> bool:
    proc = _jvm_process()
    return proc is None or proc.poll() is None


def _forget_jvm() -> None:
    """Drop pyspark's process-wide handles on a dead JVM, so the next session launches one."""
    global _spark
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    _spark = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001 - its JVM is gone already
            log.debug("closing the dead gateway failed", exc_info=True)


def kill_jvm() -> None:
    """Kill the Spark JVM (a hung job's last resort; also what the tests use)."""
    proc = _jvm_process()
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


class _Watchdog:
    """Kills the JVM if the calls inside take longer than ``_JOB_TIMEOUT_S``."""

    def __enter__(self) -> _Watchdog:
        self._timer = threading.Timer(_JOB_TIMEOUT_S, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _fire(self) -> None:
        log.error("a Spark job of the coordinator ran past %.0f s: killing its JVM", _JOB_TIMEOUT_S)
        kill_jvm()

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def read_stage_file(path: str | os.PathLike[str]) -> pa.Table:
    """One staged part: Parquet (what heads write), an Arrow IPC stream or an Arrow IPC file."""
    with open(path, "rb") as f:
        head = f.read(len(_ARROW_FILE_MAGIC))
    if head.startswith(_PARQUET_MAGIC):
        return pq.read_table(path)
    source = pa.memory_map(os.fspath(path))
    if head == _ARROW_FILE_MAGIC:
        with ipc.open_file(source) as r:
            return r.read_all()
    with ipc.open_stream(source) as r:
        return r.read_all()


def iter_epoch(spark: Any, stage_files: Sequence[str | os.PathLike[str]], *,
               schema: pa.Schema | None = None,
               rows_per_job: int = _ROWS_PER_JOB) -> Iterator[pa.Table]:
    """The rows of one sink's epoch as a sequence of tables, one Spark job per
    ``rows_per_job`` rows: every staged part, in file order then row order.

    The driver holds a job's rows several times over (the Arrow input, Spark's local
    relation, the sort, the collected result), so jobs are bounded in rows and the caller
    writes each table out before the next job runs: memory stays flat for any epoch size.

    Args:
        spark: the session of :func:`spark_session`.
        stage_files: the epoch's part files (Arrow IPC), in the order their rows go out.
        schema: the sink's stream schema (default: the first part's).
        rows_per_job: the most rows one Spark job reads.
    """
    parts = [read_stage_file(p) for p in stage_files]
    if schema is None:
        if not parts:
            raise ValueError("read_epoch needs a schema when there are no stage files")
        schema = parts[0].schema
    job: list[Any] = []
    rows = 0
    for i, part in enumerate(parts):
        part = part.cast(schema)
        start = 0
        while start < part.num_rows:
            n = min(part.num_rows - start, rows_per_job - rows)
            with _Watchdog():
                job.append(_tagged(spark, part.slice(start, n), i, start))
            start += n
            rows += n
            if rows >= rows_per_job:
                with _Watchdog():
                    out = _run(job, schema)
                job, rows = [], 0
                yield out
    if job:
        with _Watchdog():
            out = _run(job, schema)
        yield out


def read_epoch(spark: Any, stage_files: Sequence[str | os.PathLike[str]], *,
               schema: pa.Schema | None = None, rows_per_job: int = _ROWS_PER_JOB) -> pa.Table:
    """All rows of one sink's epoch as one table (see :func:`iter_epoch`); empty when
    there are no parts or no rows."""
    if schema is None and stage_files:
        schema = read_stage_file(stage_files[0]).schema
    if schema is None:
        raise ValueError("read_epoch needs a schema when there are no stage files")
    tables = list(iter_epoch(spark, stage_files, schema=schema, rows_per_job=rows_per_job))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _tagged(spark: Any, rows: pa.Table, part: int, first_row: int) -> Any:
    """A DataFrame of ``rows`` with their part number and row number within the part."""
    n = rows.num_rows
    tagged = rows.append_column(_PART, pa.array(np.full(n, part, np.int32)))
    tagged = tagged.append_column(_ROW, pa.array(np.arange(first_row, first_row + n, dtype=np.int64)))
    return spark.createDataFrame(tagged)


def _run(frames: list[Any], schema: pa.Schema) -> pa.Table:
    """One Spark job: union the frames, order by (part, row), collect as Arrow."""
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    out = df.coalesce(1).sortWithinPartitions(_PART, _ROW).drop(_PART, _ROW).toArrow()
    return out.select(schema.names).cast(schema)
