"""One row far in the future must not silently poison a stream: by default an event time more
than a day ahead of the connection's clock is refused (LDB-2005, routed per ``on_error``), and
``insert()`` reports rows that queries dropped as late (``late``, ``late_by_query``) instead of
only saying they were accepted. "Now" is pinned (``_event_time.wall_ms``, our own read of the
wall clock): nothing here depends on the time the test runs."""

from __future__ import annotations

from datetime import datetime

import pytest

import laminardb
from laminardb.engine import event_time as _event_time
from laminardb.engine.insert_batch import InsertResult

NOW = 1_704_067_200_000  # 2024-01-01T00:00:00Z, the pinned "now"
DAY = 86_400_000
DDL = """CREATE SOURCE t (ts BIGINT NOT NULL, v BIGINT, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) {with_};
         CREATE STREAM w AS SELECT window_start, count(*) AS n FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE);
         CREATE STREAM everything AS SELECT * FROM t"""
ROWS = [{"ts": NOW - 3_600_000 + i * 1000, "v": i} for i in range(100)]


@pytest.fixture
def now(monkeypatch):
    clock = [NOW]
    monkeypatch.setattr(_event_time, "wall_ms", lambda: clock[0])
    return clock


@pytest.fixture
def db(now):
    conn = laminardb.open()
    yield conn
    conn.close()


def _counts(sub) -> int:
    return sum(r["n"] for batch in sub for r in batch.to_pylist())


def test_a_row_in_2900_is_refused_and_the_stream_goes_on(db):
    db.execute(DDL.format(with_=""))
    w = db.subscribe_stream("w")
    dead = db.subscribe_stream("t__rejected")
    r = db.insert("t", [{"ts": 29_000_000_000_000, "v": -1}], on_error="dead_letter")  # 2889-01-… ms
    assert (r.accepted, r.rejected) == (0, 1)
    assert "more than 1 day ahead of the clock (now 2024-01-01T00:00:00Z)" in r.rejected_rows.column("error")[0].as_py()
    with pytest.raises(laminardb.DataError) as e:
        db.insert("t", {"ts": NOW + 2 * DAY, "v": -2})
    assert e.value.code == "LDB-2005" and "max_ahead_of_clock" in str(e.value)
    r = db.insert("t", ROWS)
    assert isinstance(r, InsertResult) and (r.accepted, r.rejected, r.late) == (100, 0, 0)
    db.finish()
    assert _counts(w) == 100
    assert [row["index"] for b in dead for row in b.to_pylist()] == [0]


def test_the_bound_follows_the_clock_and_can_be_set_or_turned_off(now):
    with laminardb.open(config={"clock": lambda: 5_000}) as db:  # PROCTIME's clock is not "now" here
        db.execute("CREATE SOURCE a (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (max_ahead_of_clock = '1 hour');"
                   "CREATE SOURCE b (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (max_ahead_of_clock = 'off');"
                   "CREATE SOURCE c (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (event_time_range = 'off')")
        ahead = NOW + 2 * 3_600_000
        assert db.insert("a", {"ts": ahead}, on_error="skip").rejected == 1
        now[0] = NOW + 3_600_000  # an hour later, the same row is plausible
        assert db.insert("a", {"ts": ahead}, on_error="skip").rejected == 0
        assert db.insert("b", {"ts": 29_000_000_000_000}) == 1
        assert db.insert("c", {"ts": 29_000_000_000_000}) == 1  # no upper bound at all: nothing judged ahead
        with pytest.raises(laminardb.SqlError, match="max_ahead_of_clock 'soon' is not an interval"):
            db.execute("CREATE SOURCE d (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (max_ahead_of_clock = 'soon')")


def test_insert_reports_rows_dropped_as_late(db):
    db.execute(DDL.format(with_="WITH (max_ahead_of_clock = 'off')"))  # simulated future data: the user's call
    w = db.subscribe_stream("w")
    assert db.insert("t", {"ts": 29_000_000_000_000, "v": -1}).late == 0
    r = db.insert("t", ROWS, on_error="skip")
    assert (r.accepted, r.rejected, r.late) == (100, 0, 100)
    assert r.late_by_query == {"w": 100}  # the plain stream took them: only the window dropped them
    assert repr(r) == "InsertResult(accepted=100, rejected=0, late=100)"
    assert db.metrics()["late_events_dropped"] == 100
    db.finish()
    assert _counts(w) == 1  # only the row of 2889


def test_late_rows_sent_to_late_data_to_are_reported_too(db):
    db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts);"
               "CREATE STREAM w AS SELECT count(*) AS n FROM t GROUP BY tumble(ts, INTERVAL '1' SECOND) "
               "LATE DATA TO w_late")
    db.insert("t", {"ts": NOW})
    r = db.insert("t", [{"ts": NOW - 5000}, {"ts": NOW + 10}, {"ts": NOW - 4000}])
    assert r.late == 2 and r.late_by_query == {"w": 2}


def test_writer_watermark_far_ahead_of_the_clock_is_refused(db):
    db.execute(DDL.format(with_=""))
    with db.writer("t") as wr:
        with pytest.raises(laminardb.DataError) as e:
            wr.watermark(NOW + 30 * DAY)
        assert e.value.code == "LDB-2005"
        wr.watermark(NOW)


def test_timestamp_columns_are_judged_against_the_clock_too(db):
    db.execute("CREATE SOURCE s (ts TIMESTAMP(3) NOT NULL, WATERMARK FOR ts AS ts)")
    r = db.insert("s", [{"ts": datetime(2900, 1, 1)}, {"ts": datetime(2023, 12, 31)}], on_error="skip")
    assert (r.accepted, r.rejected) == (1, 1)
    assert "2900-01-01" in r.rejected_rows.column("error")[0].as_py()


def test_the_cluster_wire_keeps_the_counts():
    """The head answers an insert with the same counts (``_insert_answer`` → ``_insert_result``)."""
    from laminardb.cluster.client import _insert_result
    from laminardb.cluster.head import _insert_answer
    from laminardb.cluster.wire import to_ipc_table

    back = _insert_result(_insert_answer(InsertResult(3, late_by_query={"w": 2}), to_ipc_table))
    assert (back.accepted, back.rejected, back.late, back.late_by_query) == (3, 0, 2, {"w": 2})
