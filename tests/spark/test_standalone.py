"""Spark's standalone master and worker as ``laminardb spark up`` starts them, for real: a job
runs on the worker's executor through an authenticated session, every port is on loopback,
the secret is on no command line, and ``spark down`` leaves no JVM behind."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from laminardb.spark.resources import worker_memory_mb
from laminardb.spark.session import standalone_session
from laminardb.spark.standalone import (
    coordinator_conf,
    spark_status,
    start_spark,
    stop_spark_daemons,
)
from tests._services.procs import (
    free_port,
    is_loopback_address,
    listening_sockets,
    pids_with_arg,
)

pytestmark = pytest.mark.timeout(300)


def _pids(*markers: str) -> set[int]:
    return set(pids_with_arg(*markers))


def _jvms_under(data_dir: Path) -> set[int]:
    """Spark daemons (their command lines name the data dir) and executors (they run in the
    worker's work dir) started for this data dir."""
    executors = set()
    for pid in _pids("CoarseGrainedExecutorBackend"):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(data_dir)):
                executors.add(pid)
        except OSError:
            continue
    return _pids("org.apache.spark.deploy", str(data_dir)) | executors


def _laminardb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laminardb.cli.commands", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_spark_up_runs_an_authenticated_job_on_loopback_and_down_stops_everything(tmp_path: Path) -> None:
    d = tmp_path / "spark"
    port, ui = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    spark = None
    from laminardb.checkpoint import spark_job

    spark_job.stop_spark()  # one SparkContext per process: the coordinator tests' must go first
    try:
        up = _laminardb("spark", "up", "--data-dir", str(d), "--port", str(port),
                        "--webui-port", str(ui), "--memory-mb", "1024", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        for name in ("secret", "spark.properties"):
            mode = stat.S_IMODE((d / name).stat().st_mode)
            assert mode == 0o600, f"{name} is {oct(mode)}: it holds the secret"

        conf = coordinator_conf(d)
        assert conf is not None and conf["spark.master"] == f"spark://127.0.0.1:{port}"
        spark = standalone_session({**conf, "spark.ui.enabled": "false"}, app_name="ldb-test")
        total = spark.range(0, 100_000, numPartitions=4).selectExpr("sum(id) AS s").collect()[0]["s"]
        assert total == sum(range(100_000))
        # the job ran on the worker's executor, not in the driver
        st = spark_status(d)
        assert st["status"] == "ALIVE" and [w["state"] for w in st["workers"]] == ["ALIVE"]
        assert [a["name"] for a in st["applications"]] == ["ldb-test"]
        assert st["applications"][0]["cores"] == 1 and st["workers"][0]["cores_used"] == 1
        shown = _laminardb("spark", "status", "--data-dir", str(d), "--json", env=env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["applications"][0]["name"] == "ldb-test"

        secret = (d / "secret").read_text().strip()
        jvms = _jvms_under(d)
        assert len(jvms) >= 3, "master, worker and the application's executor"
        driver = _pids("org.apache.spark.deploy.SparkSubmit", "pyspark-shell")
        assert not _pids(secret), "the secret is on a command line"
        listening = listening_sockets(jvms | driver)
        assert listening, "ss found no Spark listener: the check below would prove nothing"
        exposed = [(a, p) for a, p in listening if not is_loopback_address(a)]
        assert not exposed, f"Spark listens beyond loopback: {exposed}"
    finally:
        if spark is not None:
            spark.stop()
        done = stop_spark_daemons(d)
    assert set(done) == {"master", "worker"}
    assert not _jvms_under(d), "a Spark JVM outlived spark down"


def test_worker_memory_follows_the_node_not_a_fixed_heap() -> None:
    assert worker_memory_mb(24 * 1024) == 6 * 1024
    assert worker_memory_mb(2 * 1024) == 1024  # floor
    assert worker_memory_mb(1024 * 1024) == 64 * 1024  # cap


def test_the_coordinators_epoch_job_runs_on_the_standalone_workers(tmp_path: Path, monkeypatch) -> None:
    """``spark_job.spark_session()`` finds the cluster ``spark up`` started (LAMINARDB_SPARK_DIR)
    and a FILE epoch is written by its executors: the committed rows equal the staged ones."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from laminardb.checkpoint import spark_job
    from laminardb.checkpoint.native_epoch import native_kind, write_epoch
    from laminardb.connectors.file_sink import TransactionalFileSink

    d = tmp_path / "spark"
    start_spark(d, master_port=free_port(), webui_port=free_port(), memory_mb=1024)
    monkeypatch.setenv("LAMINARDB_SPARK_DIR", str(d))
    monkeypatch.delenv("LAMINARDB_COORDINATOR_SPARK_MASTER", raising=False)
    spark_job.stop_spark()  # another test's local session must not be reused
    try:
        spark = spark_job.spark_session()
        assert spark.sparkContext.master.startswith("spark://127.0.0.1:")
        schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
        staged = str(tmp_path / "epoch-3.parquet")
        ids = np.arange(200_000, dtype=np.int64)
        want = pa.table({"id": ids, "k": pa.array((ids % 7).astype(str))}, schema=schema)
        pq.write_table(want, staged, row_group_size=20_000)
        sink = TransactionalFileSink(tmp_path / "out", format="parquet", schema=schema)
        assert native_kind(sink) == "file"
        _, rows = write_epoch(spark, "file", sink, [staged], 3, schema)
        sink.commit(3)
        got = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("part-*"))])
        assert rows == want.num_rows and got.equals(want)
        apps = spark_status(d)["applications"]
        assert [a["name"] for a in apps] == ["laminardb-coordinator"] and apps[0]["cores"] == 1
    finally:
        spark_job.stop_spark()
        stop_spark_daemons(d)
    assert not _jvms_under(d)


def test_an_executor_killed_mid_epoch_is_replaced_and_the_epoch_commits_exactly_once(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """SIGKILL the executor while the epoch job's tasks run: the worker starts a new executor,
    Spark runs the lost tasks again, and the committed rows equal the staged ones, each once
    (a killed attempt's half-written file is never renamed into the sink)."""
    import signal
    import threading

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from laminardb.checkpoint import spark_job
    from laminardb.checkpoint.native_epoch import write_epoch
    from laminardb.connectors.file_sink import TransactionalFileSink
    from tests._services.procs import wait_until

    d = tmp_path / "spark"
    start_spark(d, master_port=free_port(), webui_port=free_port(), memory_mb=1024)
    monkeypatch.setenv("LAMINARDB_SPARK_DIR", str(d))
    monkeypatch.delenv("LAMINARDB_COORDINATOR_SPARK_MASTER", raising=False)
    spark_job.stop_spark()
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    staged = []
    for f in range(2):  # two writers' files, many row groups: several tasks of a few seconds
        ids = np.arange(f * 800_000, (f + 1) * 800_000, dtype=np.int64)
        path = str(tmp_path / f"epoch-5-{f}.parquet")
        pq.write_table(pa.table({"id": ids, "k": pa.array(np.char.add("k", (ids % 97).astype(str)))},
                                schema=schema), path, row_group_size=20_000)
        staged.append(path)
    want = pa.concat_tables([pq.read_table(p) for p in staged])
    sink = TransactionalFileSink(tmp_path / "out", format="parquet", schema=schema)
    outcome: dict = {}
    try:
        spark = spark_job.spark_session()

        def job() -> None:
            try:
                outcome["rows"] = write_epoch(spark, "file", sink, staged, 5, schema)[1]
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = exc

        def executors() -> set[int]:
            return {p for p in _pids("CoarseGrainedExecutorBackend")
                    if os.readlink(f"/proc/{p}/cwd").startswith(str(d))}

        def writing_executor() -> int | None:  # a task has begun writing its part file
            written = list((tmp_path / "out" / "_staging").glob(".spark-*/*"))
            running = executors()
            return next(iter(running)) if written and len(running) == 1 else None

        assert spark.range(10).count() == 10  # the executor is up before the epoch starts
        runner = threading.Thread(target=job, daemon=True)
        runner.start()
        victim = wait_until(writing_executor, timeout=120, interval=0.01, what="a task writing its part file")
        assert runner.is_alive() and "rows" not in outcome, "the job ended before the kill: nothing was tested"
        os.kill(victim, signal.SIGKILL)
        runner.join(timeout=240)
        assert not runner.is_alive(), "the epoch job did not finish after its executor was killed"
        assert "error" not in outcome, outcome.get("error")
        assert sink.staging.exists() and not list(sink.staging.glob(".spark-*")), "the job's temp dir is left"
        wait_until(lambda: executors() - {victim}, timeout=60, what="a new executor in place of the killed one")
        assert victim not in executors(), "the killed executor is still there"
        sink.commit(5)
        got = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("part-*"))])
        assert outcome["rows"] == want.num_rows and got.equals(want)
    finally:
        spark_job.stop_spark()
        stop_spark_daemons(d)
    assert not _jvms_under(d)
