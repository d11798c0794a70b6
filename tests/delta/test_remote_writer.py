"""``RemoteConnection.writer`` and ``shutdown``: the embedded ``Writer`` over a database in the
cluster, with the same output, watermarks and errors as the embedded engine over the same rows."""

from __future__ import annotations

import pytest

from tests._services.procs import wait_until

pytestmark = pytest.mark.integration

SQL = """
CREATE SOURCE t (k BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE STREAM per_window AS SELECT window_start, count(*) AS c, sum(v) AS s
    FROM t GROUP BY tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE;
"""
ROWS = [{"k": i % 3, "v": i, "ts": i * 100} for i in range(25)]  # event time 0 … 2400 ms
WINDOWS = 4  # 0, 1000, 2000 (closed by the explicit watermark), 6000 (by finish)


def _code(fn) -> tuple[str, str]:
    from laminardb.errors import LaminarError

    with pytest.raises(LaminarError) as err:
        fn()
    return type(err.value).__name__, err.value.code


def run(db) -> dict:
    """The writer's whole life on one connection; what it saw, to compare across modes."""
    from laminardb.engine.writer import Writer

    db.execute(SQL)
    sub = db.subscribe_stream("per_window")
    called: list = []
    db.subscribe_callback("per_window", called.append)
    seen: dict = {}
    with db.writer("T") as w:  # names resolve as in SQL, case-insensitively
        assert isinstance(w, Writer) and w.name == "t" and w.schema.names == ["k", "v", "ts"]
        for r in ROWS:
            w.insert(r)
        seen["pending"] = w.pending
        seen["flushed"] = w.flush()
        seen["wm_rows"] = w.current_watermark
        w.watermark(5000)  # closes [2000, 3000) without a new row
        w.watermark(10)  # never back
        seen["wm_explicit"] = w.current_watermark
        w.insert({"k": 0, "v": 99, "ts": 100})  # late: behind the watermark
    with db.writer("t", on_error="skip") as skip:
        skip.insert([{"k": 1, "v": 7, "ts": 6000}, {"k": "x", "v": 1, "ts": 6001}])
    seen["skip"] = (skip.rows_written, skip.rows_rejected)
    seen["errors"] = [_code(lambda: db.writer("per_window")), _code(lambda: db.writer("nope")),
                      _code(lambda: db.writer("t", on_error="drop")), _code(lambda: w.insert(ROWS[0]))]
    db.finish()
    wait_until(lambda: sub.to_arrow().num_rows == WINDOWS, timeout=60, what="every window")
    seen["windows"] = sorted(tuple(r.values()) for r in sub.to_arrow().to_pylist())
    seen["late"] = db.metrics()["late_events_dropped"]
    db.shutdown(timeout_s=30)  # callback subscriptions hand over every batch, then close
    seen["called"] = sorted(tuple(r.values()) for b in called for r in b.to_pylist())
    seen["closed"] = _code(lambda: db.writer("t"))
    return seen


def test_remote_writer_and_shutdown_match_the_embedded_engine(database):
    import laminardb

    expected = run(laminardb.open())
    got = run(database("writer", actors=1))
    assert expected["windows"] == [(0, 10, 45), (1000, 10, 145), (2000, 5, 110), (6000, 1, 7)]
    assert (expected["wm_rows"], expected["wm_explicit"], expected["late"], expected["skip"]) == (2400, 5000, 1, (1, 1))
    assert expected["called"] == expected["windows"]
    assert [c for _, c in expected["errors"]] == ["LDB-3003", "LDB-1003", "LDB-9003", "LDB-3010"]
    assert expected["closed"][0] == "ConnectionClosedError"
    assert got == expected
