"""The Spark checkpoint coordinator killed mid-checkpoint — before its manifest is recorded
and after — and the Raft leader killed while checkpoints run: the committed FILE sink output
equals an unbroken run's (the embedded engine over the same rows), with no epoch twice."""

from __future__ import annotations

import os
import signal

import duckdb
import pytest

from tests._services.fixtures import raft_cluster  # noqa: F401
from tests.delta.workload import DDL, assert_exactly_once, batch, reference, rows

pytestmark = pytest.mark.integration

BATCHES = 24


def _run(db, out: str, checkpoint_every: int = 4, on_batch=None) -> None:
    db.execute(DDL + f"; CREATE SINK s FROM per_window INTO FILE (path = '{out}', format = 'parquet')")
    subs = {s: db.subscribe_stream(s) for s in ("passthru", "per_key", "per_window")}
    for i in range(BATCHES):
        db.insert("t", batch(i))
        if on_batch is not None:
            on_batch(i)
        if i % checkpoint_every == checkpoint_every - 1:
            db.checkpoint()
    db.finish()
    got = {s: subs[s].to_arrow() for s in subs}
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)


def _committed(out: str):
    return duckdb.sql(f"SELECT window_start, c, s FROM '{out}/*.parquet'").fetch_arrow_table()


def _check_sink(out: str) -> None:
    expected, _ = reference(BATCHES)
    assert rows(_committed(out)) == rows(expected["per_window"])  # every window once, exact


@pytest.mark.parametrize("step", ["after_prepare", "after_manifest"])
def test_coordinator_killed_mid_checkpoint(ray_with_env, tmp_path, step):
    import laminardb

    ray_with_env(LAMINARDB_TEST_COORD_CRASH_AT=step, LAMINARDB_TEST_COORD_CRASH_EPOCH="3")
    db = laminardb.connect("ray://auto", database=f"crash-{step}", actors=2,
                           config={"checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_interval": "off"})
    try:
        _run(db, str(tmp_path / "out"))
        _check_sink(str(tmp_path / "out"))
        status = db.metrics()["database"]["coordinator"]
        assert status["manifest_epoch"] >= BATCHES // 4  # the crashed epoch did not stop the later ones
    finally:
        db.drop_database()


def test_raft_leader_killed_during_checkpoints(ray_with_env, tmp_path, raft_cluster):  # noqa: F811
    """Epochs and manifests live in Raft: killing its leader while checkpoints run every
    200 ms costs an election; no epoch is lost or committed twice."""
    import laminardb
    from laminardb.cluster.ownership import RaftConfig

    ray_with_env()
    voters = raft_cluster(3)
    db = laminardb.connect("ray://auto", database="raft-leader", actors=2,
                           raft=RaftConfig(tuple(voters.rpc_addresses), voters.secret),
                           config={"checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_interval": "200ms"})
    killed: list[int] = []

    def kill_leader(i: int) -> None:
        if i == 10:
            leader = voters.client().status()["raft"]["leader"]
            victim = next(v for v in voters.voters if v.raft == leader)
            os.kill(victim.proc.pid, signal.SIGKILL)
            killed.append(victim.proc.pid)

    try:
        _run(db, str(tmp_path / "out"), checkpoint_every=6, on_batch=kill_leader)
        _check_sink(str(tmp_path / "out"))
        assert killed
        log = voters.client().checkpoint_log("raft-leader")
        assert log["manifest"]["epoch"] >= BATCHES // 6  # recorded through Raft, past the election
    finally:
        db.drop_database()
