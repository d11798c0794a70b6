"""The coordinator's executor path for the sinks beyond FILE and Delta Lake (``native_epoch``):
a partitioned FILE sink's part files, and PostgreSQL and Kafka sinks whose sealed epoch is
written by a Spark task and committed by another, on a sink rebuilt from its spec. Real Spark, a real
PostgreSQL and Kafka broker; the driver's own sink objects are booby-trapped so a row through the driver
fails the test. Oracles: the embedded partitioned sink over the same rows; the staged files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminardb.checkpoint import epoch_tasks
from laminardb.checkpoint.native_epoch import (
    commits_on_executor,
    native_kind,
    run_on_executor,
    write_epoch,
)
from laminardb.checkpoint.sink import EpochStage
from laminardb.checkpoint.sink_tasks import SinkSpec, build_sink
from laminardb.connectors._epoch_sink import EpochRecordingSink
from laminardb.connectors.partitioned_sink import PartitionedTransactionalFileSink
from tests._services.fixtures import kafka_broker, postgres_server  # noqa: F401
from tests._services.procs import descendants, wait_until
from tests.coordinator.test_native_epoch import SCHEMA, _stage


def _coordinator_sink(name: str, sql: str, tmp_path: Path):
    """The sink ``sql`` creates, built from its spec as the coordinator builds it."""
    return build_sink(SinkSpec(name, sql, SCHEMA.serialize().to_pybytes(), str(tmp_path / "stages")))


def _kafka_sink_sql(name: str, bootstrap: str, topic: str, options: str = "") -> str:
    return (f"CREATE SINK {name} FROM src INTO KAFKA (brokers = '{bootstrap}', topic = '{topic}', "
            f"format = 'json'{options})")


def _partition_files(sink: PartitionedTransactionalFileSink) -> dict[str, list[Path]]:
    """Committed part files per partition directory, in name order."""
    out: dict[str, list[Path]] = {}
    for p in sorted(sink.path.glob("k=*/part-*.parquet")):
        out.setdefault(p.parent.name, []).append(p)
    return out


def _read(files: list[Path]) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in files])


def test_partitioned_epoch_matches_the_embedded_sink_and_a_redrive_is_identical(spark, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(epoch_tasks, "MIN_CHUNK_ROWS", 0)  # several chunks: a file per (chunk, partition)
    staged = [_stage(tmp_path / "a.parquet", 0, 3000), _stage(tmp_path / "b.parquet", 3000, 4500)]
    embedded = PartitionedTransactionalFileSink(tmp_path / "embedded", format="parquet", schema=SCHEMA,
                                                partition_by="k")
    for p in staged:
        embedded.write(pq.read_table(p))
    embedded.pre_commit(4)
    embedded.commit(4)
    want = {rel: _read(files) for rel, files in _partition_files(embedded).items()}
    assert len(want) == 5
    outputs = []
    for run in ("first", "redriven"):
        sink = PartitionedTransactionalFileSink(tmp_path / run, format="parquet", schema=SCHEMA, partition_by="k")
        assert native_kind(sink) == "partitioned"
        info, rows = write_epoch(spark, "partitioned", sink, staged, 4, SCHEMA)
        assert rows == 4500 and not _partition_files(sink)  # staged, not visible before the commit
        if run == "redriven":  # a failed try first: aborted, then the epoch written again
            sink.abort(4)
            info, rows = write_epoch(spark, "partitioned", sink, staged, 4, SCHEMA)
        assert len(info["files"]) > len(want)  # a file per (chunk, partition)
        sink.commit(4)
        sink.commit(4)  # re-driven commit: nothing twice
        sink.recover(4, info)
        assert sink.rows_committed == 4500 and sink.epochs_committed == 1
        got = _partition_files(sink)
        assert sorted(got) == sorted(want)
        for rel, files in got.items():  # the rows of each partition, in the embedded sink's order
            assert _read(files).equals(want[rel]), f"partition {rel} differs from the embedded sink's"
        outputs.append({rel: [p.name for p in files] for rel, files in got.items()})
    assert outputs[0] == outputs[1]


# ---------------------------------------------------------------------------- PostgreSQL
@pytest.fixture
def pg_sink(postgres_server, tmp_path, monkeypatch):  # noqa: F811
    """(driver-side PostgreSQL sink built as the coordinator builds it, a connection to its
    database). The driver's object may stage and drop files, never read or apply rows."""
    name = postgres_server.create_database("sinks")
    url = f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{name}"
    sql = f"CREATE SINK out_pg FROM src INTO POSTGRES (url = '{url}', table = 'out_pg')"
    sink = _coordinator_sink("out_pg", sql, tmp_path)

    def through_the_driver(*_a, **_k):
        raise AssertionError("an epoch's rows were read in the driver")

    # the executors' Python workers import these afresh: only the driver is trapped
    monkeypatch.setattr(EpochRecordingSink, "commit", through_the_driver)
    monkeypatch.setattr(EpochStage, "read", through_the_driver)
    conn = postgres_server.connect(name)
    try:
        yield sink, conn
    finally:
        conn.close()
        sink.close()


def _pg_ids(conn) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM out_pg ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def _pg_epochs(conn) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT epoch FROM laminardb_epochs WHERE sink = 'out_pg' ORDER BY epoch")
        return [r[0] for r in cur.fetchall()]


def test_postgres_epochs_are_sealed_and_committed_on_the_executors_exactly_once(spark, tmp_path, pg_sink) -> None:
    sink, conn = pg_sink
    assert native_kind(sink) == "stage" and commits_on_executor(sink)
    stage = sink.epoch_stage
    epochs = {1: (0, 700), 2: (700, 1500), 3: (1500, 2100)}
    staged = {e: [_stage(tmp_path / f"e{e}.parquet", lo, hi)] for e, (lo, hi) in epochs.items()}
    info, rows = write_epoch(spark, "stage", sink, staged[1], 1, SCHEMA)
    assert info == {"rows": 700} and rows == 700 and stage.epochs() == [1]
    assert _pg_ids(conn) == []  # sealed, not in the target before the commit
    kept = tmp_path / "kept.arrow"
    shutil.copy(stage.path(1), kept)
    run_on_executor(spark, sink, "commit", 1)
    assert stage.epochs() == [] and sink.rows_committed == 700 and sink.epochs_committed == 1
    # the executor died after PostgreSQL committed epoch 1 but before it dropped the file
    shutil.copy(kept, stage.path(1))
    # epoch 2 staged twice (a first try aborted): the second seal replaces the first
    write_epoch(spark, "stage", sink, staged[2], 2, SCHEMA)
    sink.abort(2)
    write_epoch(spark, "stage", sink, staged[2], 2, SCHEMA)
    write_epoch(spark, "stage", sink, staged[3], 3, SCHEMA)  # staged past the manifest (2): dropped
    run_on_executor(spark, sink, "recover", 2, {"rows": 800})  # a restarted coordinator's settle
    assert stage.epochs() == []
    assert _pg_epochs(conn) == [1, 2]
    assert _pg_ids(conn) == list(range(1500)), "an epoch applied twice, or a row lost"
    assert sink.rows_committed == 1500 and sink.epochs_committed == 2


def _python_workers() -> list[int]:
    """The Spark JVM's Python worker processes (not the daemon that forks them)."""
    from laminardb.checkpoint.spark_job import _jvm_process

    workers = []
    for pid in descendants(_jvm_process().pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pyspark.daemon" in cmd and descendants(pid) == []:
            workers.append(pid)  # a forked worker: the daemon's command line, no children
    return workers


def test_an_executor_killed_mid_commit_leaves_the_epoch_staged_and_the_retry_commits_it_once(
        spark, tmp_path, pg_sink) -> None:
    """SIGKILL the Python worker while its commit task waits inside the PostgreSQL transaction
    (the test holds the sink's advisory lock): the job fails, the epoch stays staged, and the
    next commit applies it exactly once."""
    sink, conn = pg_sink
    write_epoch(spark, "stage", sink, [_stage(tmp_path / "e1.parquet", 0, 900)], 1, SCHEMA)
    lock = f"out_pg/{sink.writer}"
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lock,))
    outcome: dict[str, BaseException] = {}

    def commit() -> None:
        try:
            run_on_executor(spark, sink, "commit", 1)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    runner = threading.Thread(target=commit, daemon=True)
    runner.start()
    try:
        def waiting() -> bool:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                return cur.fetchone()[0] > 0
        wait_until(waiting, timeout=120, what="the commit task waiting for the advisory lock")
        victims = _python_workers()
        assert victims, "no Python worker found under the Spark JVM"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        runner.join(120)
        assert not runner.is_alive(), "the commit did not end after its worker was killed"
    finally:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (lock,))
        runner.join(120)
    assert "error" in outcome, "the commit succeeded although its worker was killed"
    assert sink.epoch_stage.epochs() == [1] and sink.rows_committed == 0
    run_on_executor(spark, sink, "commit", 1)  # the next checkpoint's commit retries it
    assert _pg_ids(conn) == list(range(900)) and _pg_epochs(conn) == [1]
    assert sink.epoch_stage.epochs() == [] and sink.rows_committed == 900


def test_an_executor_killed_mid_stage_fails_the_epoch_and_the_redriven_one_commits_once(
        spark, tmp_path, pg_sink) -> None:
    """SIGKILL the Python worker while it writes the sealed epoch file: the stage job fails,
    nothing is staged (the coordinator aborts the epoch), and the epoch staged again commits
    exactly once."""
    sink, conn = pg_sink
    stage = sink.epoch_stage
    staged = [_stage(tmp_path / "e1.parquet", 0, 600_000, width=100, group=10_000)]
    outcome: dict[str, BaseException] = {}

    def seal() -> None:
        try:
            write_epoch(spark, "stage", sink, staged, 1, SCHEMA)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    runner = threading.Thread(target=seal, daemon=True)
    runner.start()
    wait_until(lambda: stage.incoming(1).exists(), timeout=120, what="the seal task writing its file")
    victims = _python_workers()
    assert runner.is_alive() and victims, "the seal ended before the kill: nothing was tested"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    runner.join(120)
    assert not runner.is_alive() and "error" in outcome, "the stage job did not fail with its worker"
    assert stage.epochs() == []  # nothing half-written was installed
    sink.abort(1)  # what the coordinator's _abort does, then recover from the last manifest
    run_on_executor(spark, sink, "recover", 0)
    info, rows = write_epoch(spark, "stage", sink, staged, 1, SCHEMA)  # the next epoch stages it again
    assert rows == 600_000 and not stage.incoming(1).exists()
    run_on_executor(spark, sink, "commit", 1)
    with conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM out_pg")
        assert cur.fetchone() == (600_000, 600_000, 0, 599_999)
    assert _pg_epochs(conn) == [1]


# ---------------------------------------------------------------------------- Kafka
def test_kafka_epochs_are_produced_by_executor_tasks_exactly_once(spark, tmp_path, kafka_broker,  # noqa: F811
                                                                 monkeypatch) -> None:
    """The driver's Kafka sink never starts a producer: a task's producer (the sink's
    transactional.id) produces each epoch with its marker; a re-driven epoch is not produced
    twice, and a recover fences and settles from the marker."""
    from laminardb.connectors.kafka_sink import ExactlyOnceKafkaSink
    from tests.connectors.test_kafka_exactly_once import committed, epochs

    def through_the_driver(*_a, **_k):
        raise AssertionError("the driver's Kafka sink started a producer")

    monkeypatch.setattr(ExactlyOnceKafkaSink, "_settled_marker", through_the_driver)
    monkeypatch.setattr(EpochStage, "read", through_the_driver)
    topic = f"exec-{tmp_path.name[-20:]}".replace("_", "-")
    sql = _kafka_sink_sql("out_k", kafka_broker.bootstrap, topic, ", delivery.guarantee = 'exactly-once'")
    sink = _coordinator_sink("out_k", sql, tmp_path)
    try:
        assert isinstance(sink, ExactlyOnceKafkaSink) and commits_on_executor(sink)
        stage = sink.epoch_stage
        staged = {e: [_stage(tmp_path / f"e{e}.parquet", lo, hi)]
                  for e, (lo, hi) in {1: (0, 300), 2: (300, 700), 3: (700, 1000)}.items()}
        write_epoch(spark, "stage", sink, staged[1], 1, SCHEMA)
        kept = tmp_path / "kept.arrow"
        shutil.copy(stage.path(1), kept)
        run_on_executor(spark, sink, "commit", 1)
        shutil.copy(kept, stage.path(1))  # the task died after Kafka committed, before the drop
        write_epoch(spark, "stage", sink, staged[2], 2, SCHEMA)
        run_on_executor(spark, sink, "commit", 2)
        write_epoch(spark, "stage", sink, staged[3], 3, SCHEMA)
        run_on_executor(spark, sink, "recover", 3, {"rows": 300})  # a restarted coordinator's settle
        assert stage.epochs() == [] and sink._producer is None  # noqa: SLF001 - the point of the test
        recs = committed(kafka_broker.bootstrap, topic)
        ids = sorted(json.loads(r["value"])["id"] for r in recs)
        assert ids == list(range(1000)), "an epoch produced twice, or a row lost"
        assert epochs(recs) == {1: 300, 2: 400, 3: 300}
        assert sink.rows_committed == 1000 and sink.epochs_committed == 3
    finally:
        sink.close()


def test_an_at_least_once_sink_is_written_by_an_executor_task(spark, tmp_path, kafka_broker,  # noqa: F811
                                                             monkeypatch) -> None:
    from laminardb.connectors.kafka_sink import KafkaSink
    from tests.connectors.test_kafka_exactly_once import committed

    def through_the_driver(*_a, **_k):
        raise AssertionError("the driver's sink wrote rows")

    monkeypatch.setattr(KafkaSink, "write", through_the_driver)
    topic = f"alo-{tmp_path.name[-20:]}".replace("_", "-")
    sql = _kafka_sink_sql("out_a", kafka_broker.bootstrap, topic)
    sink = _coordinator_sink("out_a", sql, tmp_path)
    try:
        assert native_kind(sink) == "write" and not commits_on_executor(sink)
        staged = [_stage(tmp_path / "a.parquet", 0, 500), _stage(tmp_path / "b.parquet", 500, 800)]
        assert write_epoch(spark, "write", sink, staged, 1, SCHEMA) == ({}, 800)
        want = pa.concat_tables([pq.read_table(p) for p in staged])["id"].to_pylist()
        recs = committed(kafka_broker.bootstrap, topic)
        assert sorted(json.loads(r["value"])["id"] for r in recs) == sorted(want)  # every row once
        at = {i: n for n, i in enumerate(want)}
        for part in {r["partition"] for r in recs}:  # each partition in staged order
            pos = [at[json.loads(r["value"])["id"]] for r in recs if r["partition"] == part]
            assert pos == sorted(pos), f"partition {part} is out of the staged order"
    finally:
        sink.close()
