"""The coordinator driving a fake database head through real FILE (Parquet) and Delta Lake
sinks, in-process: normal epochs, a failed prepare, a failed sink, restarts from the
registry. Crashes of the coordinator's process are in test_crash.py."""

from __future__ import annotations

import pytest

from laminardb.checkpoint.exceptions import CheckpointPrepareError, UnknownDatabaseError
from laminardb.checkpoint.spark_coordinator import CheckpointCoordinator
from tests._services.procs import wait_until
from tests.coordinator._fake_head import FakeHead
from tests.coordinator._oracle import assert_exactly_once, delta_rows, file_rows

pytest.importorskip("deltalake")


def sinks_sql(tmp_path) -> dict[str, str]:
    return {
        "out_file": f"CREATE SINK out_file INTO FILE (path = '{tmp_path / 'out_file'}', "
                    "format = 'parquet') AS SELECT * FROM src",
        "out_even": f"CREATE SINK out_even INTO DELTA_LAKE (path = '{tmp_path / 'lake'}') "
                    "AS SELECT * FROM src WHERE id % 2 = 0",
    }


@pytest.fixture
def make(tmp_path, spark):
    """Factory: (head, coordinator) over the test's directories; coordinators are stopped."""
    made = []

    def build(head: FakeHead | None = None, **head_kw):
        head = head or FakeHead(tmp_path / "head", sinks_sql(tmp_path), **head_kw)
        # the default Spark: the session's (started by the fixture), or a new one after a JVM died
        coord = CheckpointCoordinator(tmp_path / "state", head_resolver=lambda name: head)
        made.append(coord)
        return head, coord

    yield build
    for c in made:
        c.stop()


def register(coord, tmp_path, interval_s=None) -> None:
    coord.register("db1", interval_s=interval_s, checkpoint_dir=str(tmp_path / "ckpt"))


def check_output(tmp_path, head: FakeHead) -> None:
    upto = head.state()["committed_upto"]
    assert_exactly_once(file_rows(tmp_path / "out_file"), "out_file", upto)
    assert_exactly_once(delta_rows(tmp_path / "lake"), "out_even", upto)


def test_epochs_commit_every_sink_once(make, tmp_path) -> None:
    head, coord = make(rows_per_epoch=500)
    register(coord, tmp_path)
    assert [coord.checkpoint_now("db1") for _ in range(3)] == [1, 2, 3]
    head.rows_per_epoch = 0  # an epoch without rows: nothing staged, nothing written
    assert coord.checkpoint_now("db1") == 4
    st = head.state()
    assert st["committed_upto"] == 1500 and st["last_committed"] == 4 and st["pending"] == {}
    check_output(tmp_path, head)
    s = coord.status("db1")
    assert s["checkpoints"] == 4 and s["last_epoch"] == 4 and s["failures"] == 0
    assert s["last_rows"] == 0 and s["sinks"] == ["out_even", "out_file"]
    assert 0.0 < s["spark_share"] < 1.0 and s["duration_p50_s"] <= s["duration_p99_s"]
    # one Delta commit per epoch with rows, each tagged with its epoch
    from deltalake import DeltaTable

    dt = DeltaTable(str(tmp_path / "lake"))
    assert dt.version() == 2 and dt.transaction_version("laminardb-out_even-0") == 3


def test_failed_prepare_aborts_the_epoch_and_the_next_one_restages(make, tmp_path) -> None:
    head, coord = make(rows_per_epoch=300)
    register(coord, tmp_path)
    coord.checkpoint_now("db1")
    head.fail_prepare = 1
    with pytest.raises(CheckpointPrepareError, match="did not prepare checkpoint 2"):
        coord.checkpoint_now("db1")
    assert ("abort", 2) in head.calls
    assert coord.checkpoint_now("db1") == 3
    check_output(tmp_path, head)
    assert coord.status("db1")["failures"] == 1


def test_a_sink_failing_after_prepare_aborts_every_sink(make, tmp_path) -> None:
    head, coord = make(rows_per_epoch=200)
    register(coord, tmp_path)
    coord.checkpoint_now("db1")
    # a sink the coordinator cannot build: out_even and out_file come first and stage epoch 2
    head.sinks["z_bad"] = "CREATE SINK z_bad INTO NOWHERE (path = 'x') AS SELECT * FROM src"
    with pytest.raises(Exception, match="NOWHERE"):
        coord.checkpoint_now("db1")
    assert head.state()["pending"] == {} and ("abort", 2) in head.calls
    assert not list((tmp_path / "out_file" / "_staging").glob("part-*"))
    del head.sinks["z_bad"]
    assert coord.checkpoint_now("db1") == 3
    check_output(tmp_path, head)


def test_a_head_recovering_mid_checkpoint_fences_the_epoch_in_flight(make, tmp_path) -> None:
    """The race the `ray up` fault test once lost: a head restores (an actor was killed)
    while the coordinator stages an epoch the old engine prepared. The head fences the epoch
    log first, so that epoch's manifest is refused and its staged output aborted in every
    sink — never committed beside the output the restored engine produces again."""
    from laminardb.checkpoint.epoch_log import FileEpochLog, fence
    from laminardb.checkpoint.exceptions import EpochLogError

    head, coord = make(rows_per_epoch=400)
    register(coord, tmp_path)
    coord.checkpoint_now("db1")
    prepare = head.prepare_checkpoint

    def prepare_then_recover(epoch):
        ack = prepare(epoch)
        state = fence(FileEpochLog(tmp_path / "ckpt" / "db1" / "coordinator"))  # what _recover does
        assert state["manifest"]["epoch"] == 1 and state["intent"] == epoch + 1
        return ack

    head.prepare_checkpoint = prepare_then_recover
    with pytest.raises(EpochLogError, match="a recovering head fenced it"):
        coord.checkpoint_now("db1")
    head.prepare_checkpoint = prepare
    assert ("abort", 2) in head.calls and head.state()["last_committed"] == 1
    assert coord.checkpoint_now("db1") == 4  # 3 was the fence
    assert head.state()["last_committed"] == 4
    check_output(tmp_path, head)  # epoch 2's rows once, restaged by epoch 4


def test_a_restarted_coordinator_resumes_from_its_registry(make, tmp_path) -> None:
    head, coord = make(rows_per_epoch=100)
    register(coord, tmp_path, interval_s=0.2)
    wait_until(lambda: coord.status("db1")["checkpoints"] >= 2, timeout=60, what="2 timed checkpoints")
    coord.stop()
    last = head.state()["last_committed"]
    _, again = make(head)
    assert again.databases() == ["db1"]
    again.start()
    wait_until(lambda: again.status("db1")["last_epoch"] > last, timeout=60,
               what="a checkpoint after the restart")
    again.stop()
    check_output(tmp_path, head)


def test_register_is_idempotent_and_unknown_databases_are_refused(make, tmp_path) -> None:
    head, coord = make()
    register(coord, tmp_path)
    register(coord, tmp_path)  # a second client connecting: same spec, nothing restarts
    assert coord.databases() == ["db1"]
    with pytest.raises(UnknownDatabaseError):
        coord.checkpoint_now("nope")
    coord.unregister("db1")
    assert coord.databases() == [] and coord.status() == {}


def test_retires_only_when_idle_and_then_refuses_registrations(make, tmp_path) -> None:
    """The head dropping the last database retires the coordinator (then kills it): refused
    while a database is registered; once retired, a database registering meanwhile is told
    (CoordinatorRetiredError) so its head starts a new coordinator."""
    from laminardb.checkpoint.exceptions import CoordinatorRetiredError

    head, coord = make()
    register(coord, tmp_path)
    assert not coord.retire_if_idle()
    coord.unregister("db1")
    assert coord.retire_if_idle()
    with pytest.raises(CoordinatorRetiredError):
        register(coord, tmp_path)
    assert coord.databases() == []


def test_a_lingering_retire_is_void_once_a_database_came_or_a_later_drop_lingers(make, tmp_path) -> None:
    """Each drop of the last database lingers in full: the timer of an earlier drop must not
    end the coordinator after a database was registered since, or a later drop started its
    own linger (seen: stopped 8 s after the last drop with a 20 s linger)."""
    head, coord = make()
    first = coord.linger_token()  # the first database dropped
    register(coord, tmp_path)  # another one comes, and goes
    coord.unregister("db1")
    assert not coord.retire_if_idle(first), "the first drop's timer ended a coordinator used since"
    second = coord.linger_token()  # its drop lingers too
    third = coord.linger_token()
    assert not coord.retire_if_idle(second), "an older linger acted after a newer one started"
    assert coord.retire_if_idle(third)


def test_a_spark_job_slower_than_the_interval_merges_epochs_and_shows_the_backlog(make, tmp_path,
                                                                                monkeypatch) -> None:
    """Each epoch's Spark job takes 3× the interval: checkpoints run back to back, each takes
    every row since the last barrier (nothing is lost or written twice), and status() counts
    the overruns and how far behind the next checkpoint is."""
    import time

    from laminardb.checkpoint import native_epoch

    real = native_epoch.write_epoch

    def slow(*args, **kwargs):
        time.sleep(0.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(native_epoch, "write_epoch", slow)
    head, coord = make(rows_per_epoch=200)
    register(coord, tmp_path, interval_s=0.2)
    behind = []

    def three_done() -> bool:
        s = coord.status("db1")
        behind.append(s["behind_s"])
        return s["checkpoints"] >= 3

    wait_until(three_done, timeout=120, interval=0.05, what="3 slow checkpoints")
    with coord._db("db1").lock:  # between checkpoints: the figures and the head agree
        s = coord.status("db1")
        st = head.state()
    coord.stop()
    assert s["failures"] == 0 and s["overruns"] >= 3 and s["last_duration_s"] > 0.2
    assert max(behind) > 0.0, "status() never showed the overdue checkpoint"
    assert st["pending"] == {} and st["last_committed"] == s["last_epoch"]
    check_output(tmp_path, head)  # every row of every epoch, once
