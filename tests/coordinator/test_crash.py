"""Crashes of the coordinator's process (``os._exit`` at a step of a checkpoint) and the
restart that settles them: an intent without a manifest is aborted; a manifest whose
commits did not happen is re-driven, and every row reaches every sink exactly once.

The first run is a child process (it really dies, Spark's JVM with it); the restart runs
in the test process on the session's Spark and continues with two more checkpoints.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from laminardb.checkpoint.epoch_log import FileEpochLog
from tests._services.fixtures import postgres_server  # noqa: F401
from tests._services.procs import repo_env
from tests.coordinator._crash_run import build
from tests.coordinator._oracle import (
    assert_exactly_once,
    delta_rows,
    file_rows,
    partitioned_rows,
    postgres_rows,
)

pytest.importorskip("deltalake")

_ROWS = 400
_CRASH_EPOCH = 3
# A child's cold start: Python + Spark's JVM + two checkpoints; generous for a loaded 2-core box.
_CHILD_TIMEOUT_S = 240


def crash_run(work, step: str, pg_url: str) -> None:
    """Run the child until it exits at ``step`` of epoch 3 (exit 1 without a traceback)."""
    env = repo_env(LAMINARDB_TEST_COORD_CRASH_AT=step, LAMINARDB_TEST_PG_URL=pg_url,
                   LAMINARDB_TEST_COORD_CRASH_EPOCH=str(_CRASH_EPOCH))
    proc = subprocess.run([sys.executable, "-m", "tests.coordinator._crash_run", str(work), "5",
                           str(_ROWS)], env=env, capture_output=True, timeout=_CHILD_TIMEOUT_S)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]


def outputs(work, upto: int, pg_url: str) -> None:
    assert_exactly_once(file_rows(work / "out_file"), "out_file", upto)
    assert_exactly_once(delta_rows(work / "lake"), "out_even", upto)
    assert_exactly_once(partitioned_rows(work / "out_parts"), "out_parts", upto)
    assert_exactly_once(postgres_rows(pg_url), "out_pg", upto)


@pytest.fixture
def pg_url(postgres_server, monkeypatch) -> str:  # noqa: F811
    """A fresh database for the PostgreSQL sink, named to the coordinator by the environment.
    The restart's driver may not read a sealed epoch (its commit runs on an executor)."""
    from laminardb.checkpoint.sink import EpochStage

    def through_the_driver(*_a, **_k):
        raise AssertionError("an epoch's rows were read in the driver")

    monkeypatch.setattr(EpochStage, "read", through_the_driver)
    name = postgres_server.create_database("crash")
    url = f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{name}"
    monkeypatch.setenv("LAMINARDB_TEST_PG_URL", url)
    return url


@pytest.mark.parametrize("step", ["after_intent", "after_prepare", "after_manifest"])
def test_restart_settles_a_crashed_checkpoint(step, tmp_path, spark, pg_url) -> None:
    crash_run(tmp_path, step, pg_url)
    log = FileEpochLog(tmp_path / "ckpt" / "db1" / "coordinator").state()
    head, coord = build(tmp_path, _ROWS)  # Spark: the session's one (the fixture started it)
    before = head.state()
    assert log["intent"] == _CRASH_EPOCH
    if step == "after_manifest":
        # the commit point was passed: nothing visible of epoch 3 yet, the head still pending
        assert log["manifest"]["epoch"] == _CRASH_EPOCH
        assert before["last_committed"] == 2 and list(before["pending"]) == ["3"]
        outputs(tmp_path, 2 * _ROWS, pg_url)
        staged = list((tmp_path / "out_file" / "_staging").glob("part-000000000003-*"))
        assert staged, "epoch 3 should be staged in the FILE sink, waiting for its commit"
        assert list((tmp_path / "out_parts" / "_staging").glob("k=*/part-000000000003-*"))
        sealed = tmp_path / "ckpt" / "db1" / "coordinator-sinks" / "out_pg" / "epoch-000000000003.arrow"
        assert sealed.exists(), "epoch 3 should be sealed in the PostgreSQL sink's stage"
    else:
        assert log["manifest"]["epoch"] == 2
        assert list(before["pending"]) == (["3"] if step == "after_prepare" else [])

    coord.start()  # what Ray does after restarting the actor: re-read the registry
    try:
        assert coord.databases() == ["db1"]
        assert coord.checkpoint_now("db1") == _CRASH_EPOCH + 1
        assert coord.checkpoint_now("db1") == _CRASH_EPOCH + 2
    finally:
        coord.stop()
    after = head.state()
    calls = [tuple(c) for c in after["calls"][len(before["calls"]):]]
    if step == "after_manifest":
        assert ("commit", 3) in calls and ("abort", 3) not in calls  # re-driven, not undone
    else:
        assert ("abort", 3) in calls and ("commit", 3) not in calls
    assert after["pending"] == {} and after["last_committed"] == _CRASH_EPOCH + 2
    # the head staged 4 prepares' worth of input by then, whatever was aborted on the way
    committed = after["committed_upto"]
    assert committed == after["ingested"]
    outputs(tmp_path, committed, pg_url)
