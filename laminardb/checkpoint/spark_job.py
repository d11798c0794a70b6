"""The Spark session of the Delta checkpoint coordinator. Entry points:
:func:`spark_session` (one Spark application per process, started on first use and reused),
:func:`stop_spark`, :func:`kill_jvm`, ``_Watchdog`` (a bound on one Spark call) and
``_KeepWarm`` (keeps the executors' Python worker between epochs).

Why Spark, and why this shape: the coordinator is a PySpark application (issue 9). RayDP
would run Spark executors as Ray actors but pins pyspark <= 3.5, so Spark runs
``local[*]`` inside the coordinator's Ray actor on the head node, or on the standalone
cluster of ``laminardb spark up``. Its jobs (``native_epoch``) run Python tasks on the
executors that read the heads' staged files and write every sink's output; no epoch's rows
are ever collected into the driver (issue 21).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = ["kill_jvm", "spark_session", "stop_spark"]

log = logging.getLogger(__name__)

# Every core of the node (local[*]: executors are threads of the one JVM) and a heap sized
# from the node's memory, an eighth of it within [512 MB, 8 GB]: the coordinator shares the
# head node with the database heads. Set LAMINARDB_COORDINATOR_SPARK_MEMORY (e.g. "2g") or
# LAMINARDB_COORDINATOR_SPARK_MASTER (e.g. "local[2]") to override.
_MASTER = "local[*]"
# Bound on one Spark call (a job): past it the JVM is presumed hung and
# killed, the call raises, the coordinator aborts the epoch and the next one starts a new
# JVM. Generous: an epoch job of 1M rows takes a few seconds on one core.
_JOB_TIMEOUT_S = float(os.environ.get("LAMINARDB_COORDINATOR_SPARK_JOB_TIMEOUT", "300"))

_APP_NAME = "laminardb-coordinator"
_lock = threading.Lock()
_spark: Any = None

# Spark kills a Python worker that has run no task for a minute (PythonWorkerFactory's
# IDLE_WORKER_TIMEOUT_NS, not configurable). The next epoch's task then forks a fresh one,
# which imports pyspark, pyarrow, pandas and laminardb again: 1.5-2 CPU s, and about a second
# more on that epoch's barrier-to-manifest time. So while epochs keep coming (the last one
# within KEEP_WARM_FOR_S), a no-op task runs whenever no job ran for WORKER_IDLE_S.
WORKER_IDLE_S = 40.0
KEEP_WARM_FOR_S = 600.0
_last_job = 0.0  # time.monotonic() when the last job ended: any job
_last_epoch_job = 0.0  # ... an epoch's job (not a no-op)
_warm: _KeepWarm | None = None


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
    global _spark, _warm
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
        _warm = _KeepWarm(spark)
        _warm.start()
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
    global _spark, _warm
    with _lock:
        spark, _spark = _spark, None
        warm, _warm = _warm, None
    if warm is not None:
        warm.stop()
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
    """Kills the JVM if the calls inside take longer than ``_JOB_TIMEOUT_S``; notes when a
    job ended (``epoch_job=False``: a ``_KeepWarm`` no-op, which does not extend the warmth)."""

    def __init__(self, *, epoch_job: bool = True) -> None:
        self.epoch_job = epoch_job

    def __enter__(self) -> _Watchdog:
        self._timer = threading.Timer(_JOB_TIMEOUT_S, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _fire(self) -> None:
        log.error("a Spark job of the coordinator ran past %.0f s: killing its JVM", _JOB_TIMEOUT_S)
        kill_jvm()

    def __exit__(self, *exc: object) -> None:
        global _last_job, _last_epoch_job
        self._timer.cancel()
        _last_job = time.monotonic()
        if self.epoch_job:
            _last_epoch_job = _last_job


class _KeepWarm(threading.Thread):
    """Runs a no-op task on ``session`` once no job ran for ``WORKER_IDLE_S``, while the last
    epoch's job ended within ``KEEP_WARM_FOR_S`` (see ``WORKER_IDLE_S``). Ends when the
    process's session is no longer ``session`` (stopped, or its JVM died and was replaced)."""

    #: no-op tasks run in this process (tests, metrics)
    runs = 0

    def __init__(self, session: Any) -> None:
        super().__init__(name="laminardb-spark-keep-warm", daemon=True)
        self.session = session
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=_JOB_TIMEOUT_S)

    def run(self) -> None:
        while _spark is self.session and not self._stopped.wait(min(5.0, WORKER_IDLE_S / 4)):
            now = time.monotonic()
            if (_spark is not self.session or now - _last_job < WORKER_IDLE_S
                    or now - _last_epoch_job > KEEP_WARM_FOR_S or not _jvm_alive()):
                continue
            try:
                from laminardb.checkpoint.epoch_tasks import ReadToEnd, worker_pid

                with _Watchdog(epoch_job=False):
                    self.session.sparkContext.parallelize([0], 1).mapPartitions(ReadToEnd(worker_pid)).collect()
                _KeepWarm.runs += 1
            except Exception:  # noqa: BLE001 - a stopped or dying session: the loop ends or retries
                log.debug("the keep-warm task failed", exc_info=True)
