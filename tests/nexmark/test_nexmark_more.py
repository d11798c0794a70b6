"""Nexmark q5, q8, q12 and q14 as published, beyond the DuckDB check of ``test_nexmark.py``:
window joins and window-bound GROUP BYs keep bounded state and resume from a checkpoint;
several window TVFs in one query each reach their own SELECT block; processing-time windows
close as the injected clock moves (no event needed) and a bad clock is a typed error; q14 runs
from the command line with its UDF."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import laminardb
from laminardb.cli.commands import main
from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate, tables
from laminardb.sql._lexer import rewrite_window_tvfs
from tests.engine.oracle import duck
from tests.nexmark.test_nexmark import ORACLE, _fold, _normalize

SLOW = NexmarkConfig(rate=1000.0)  # 1,000 events/s of event time: 10-second windows close often
EVENTS = 60_000


@pytest.fixture(scope="module")
def rows() -> dict[str, pa.Table]:
    return tables(EVENTS, seed=5, config=SLOW)


def _batches():
    return list(generate(EVENTS, seed=5, batch_events=4_096, config=SLOW))


# --------------------------------------------------------------------------- several window TVFs
def test_each_window_tvf_is_rewritten_in_the_order_written():
    sql = QUERIES["q5"].flink
    text, tvfs = rewrite_window_tvfs(sql)
    assert [(t.kind, t.table, t.time_col) for t in tvfs] == [("HOP", "bid", "dateTime")] * 2
    assert "__tvf0" in text and "__tvf1" in text and "TABLE(" not in text.upper().replace(" ", "")


def test_two_windows_of_two_sizes_over_two_sources_each_take_their_own():
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute("""CREATE STREAM j AS
        SELECT P.id, P.n, A.m, P.ws FROM (
          SELECT id, count(*) AS n, window_start AS ws, window_end AS we
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
          GROUP BY id, window_start, window_end) P
        JOIN (
          SELECT seller, count(*) AS m, window_start AS ws, window_end AS we
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
          GROUP BY seller, window_start, window_end) A
        ON P.id = A.seller AND P.ws = A.ws AND P.we = A.we""")
    sub = db.subscribe_stream("j")
    for stream, batch in _batches():
        db.insert(stream, batch)
    db.finish()
    got = sub.to_arrow()
    assert "__weight" not in got.column_names  # a window join of closed windows is append-only
    t = 'epoch_ms("dateTime") // 10000 * 10000'
    want = duck(f"""WITH p AS (SELECT id, count(*) AS n, {t} AS ws FROM person GROUP BY id, ws),
                         a AS (SELECT seller, count(*) AS m, {t} AS ws FROM auction GROUP BY seller, ws)
                    SELECT p.id, p.n, a.m, p.ws FROM p JOIN a ON p.id = a.seller AND p.ws = a.ws""",
                **tables(EVENTS, seed=5, config=SLOW))
    assert got.num_rows == want.num_rows > 0
    assert _normalize(got) == _normalize(want)
    db.close()


# --------------------------------------------------------------------------- GROUP BY window bounds
_COUNTS = """CREATE STREAM counts AS SELECT auction, count(*) AS num, window_start AS starttime,
    window_end AS endtime FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end"""


def test_group_by_both_window_bounds_closes_with_the_window(rows):
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute(_COUNTS)
    db.execute("CREATE STREAM m AS SELECT max(num) AS maxn, starttime, endtime FROM counts GROUP BY starttime, endtime")
    # one bound alone is no window: a plain aggregate, a changelog
    db.execute("CREATE STREAM s AS SELECT starttime, sum(num) AS total FROM counts GROUP BY starttime")
    m, s = db.subscribe_stream("m"), db.subscribe_stream("s")
    for stream, batch in _batches():
        db.insert(stream, batch)
    assert db.engine.reactor.nodes["m"].op.agg.state_groups <= 10  # closed windows are gone
    db.finish()
    got_m = m.to_arrow()
    assert "__weight" not in got_m.column_names
    assert "__weight" in s.to_arrow().column_names
    hop = """unnest(generate_series(CAST(floor((epoch_ms("dateTime") - 10000) / 2000) AS BIGINT) + 1,
                                    CAST(floor(epoch_ms("dateTime") / 2000) AS BIGINT))) * 2000"""
    want = duck(f"""SELECT max(num), ws, ws + 10000 FROM (SELECT auction, count(*) AS num, ws
                    FROM (SELECT auction, {hop} AS ws FROM bid) GROUP BY auction, ws) GROUP BY ws""", **rows)
    assert _normalize(got_m) == _normalize(want)
    db.close()


@pytest.mark.parametrize("name", ["q5", "q8"])
def test_window_join_state_stays_bounded(name):
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute(QUERIES[name].statement())
    op = db.engine.reactor.nodes[name].op
    (join,) = op.joins()
    assert join.join.interval is not None  # equal window bounds bound the state
    peak = 0
    for stream, batch in _batches():
        db.insert(stream, batch)
        peak = max(peak, sum(join.state_rows()))
    # both sides of a window arrive when it closes, and leave when the watermark passes it:
    # the join holds at most the rows of windows closing together, never the whole run's
    assert peak < 2_000, peak
    db.finish()
    assert sum(join.state_rows()) == 0
    db.close()


# --------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("name", ["q5", "q8"])
def test_a_durable_database_resumes_q5_and_q8_from_a_checkpoint(name, rows, tmp_path):
    """open(dir) → half the events → checkpoint → close → open(dir) → the rest: the two runs'
    output equals DuckDB's over all the rows (the join and window state came back)."""
    batches = _batches()
    cut = len(batches) // 2
    db = laminardb.open(str(tmp_path))
    db.execute(SOURCES_DDL)
    db.execute(QUERIES[name].statement())
    sub = db.subscribe_stream(name)
    for stream, batch in batches[:cut]:
        db.insert(stream, batch)
    db.checkpoint()
    before = sub.to_arrow()
    db.close()
    db = laminardb.open(str(tmp_path))
    sub = db.subscribe_stream(name)
    for stream, batch in batches[cut:]:
        db.insert(stream, batch)
    db.finish()
    after = sub.to_arrow()
    db.close()
    got = _fold(pa.concat_tables([before, after]))
    want = duck(ORACLE[name], **rows)
    assert before.num_rows > 0 and after.num_rows > 0
    assert _normalize(got) == _normalize(want)


# --------------------------------------------------------------------------- processing time (q12)
def _q12(clock):
    db = laminardb.open(config={"clock": clock})
    db.execute(SOURCES_DDL)
    db.execute(QUERIES["q12"].statement())
    return db


def test_processing_time_windows_close_on_the_clock_without_events():
    now = {"ms": 1_000_000}
    db = _q12(lambda: now["ms"])
    sub = db.subscribe_stream("q12")
    bids = [(s, b) for s, b in _batches() if s == "bid"][:3]
    for _, b in bids:
        db.insert("bid", b)  # stamped 1,000,000: window [1,000,000, 1,010,000)
    assert sub.try_next() is None  # open until the clock passes its end
    now["ms"] = 1_010_000
    person = next(b for s, b in _batches() if s == "person")
    db.insert("person", person)  # any batch stamps the clock: the window closes
    out = sub.try_next()
    assert out is not None
    assert sum(out.column("bid_count").to_pylist()) == sum(b.num_rows for _, b in bids)
    assert set(out.column("starttime").cast(pa.int64()).to_pylist()) == {1_000_000}
    db.close()


def test_proctime_is_the_batchs_instant_and_never_goes_back():
    times = iter([5_000, 9_000, 7_000])  # the clock steps back: processing time holds
    db = laminardb.open(config={"clock": lambda: next(times)})
    db.execute(SOURCES_DDL)
    db.execute("CREATE TEMPORARY VIEW B AS SELECT *, PROCTIME() as p_time FROM bid")
    sub = db.subscribe_stream("b")
    bids = [b for s, b in _batches() if s == "bid"][:3]
    for b in bids:
        db.insert("bid", b)
    got = [set(x.column("p_time").cast(pa.int64()).to_pylist()) for x in iter(sub.try_next, None)]
    assert got == [{5_000}, {9_000}, {9_000}]
    db.close()


def test_published_q12_script_runs_unchanged_with_an_injected_clock(rows):
    """q12.sql as published (its blackhole table, CREATE VIEW B … PROCTIME(), INSERT INTO): the
    counts per bidder equal DuckDB's over the bids with the processing times the clock gave."""
    script = (Path(__file__).parents[1] / "sql_functions" / "nexmark" / "q12.sql").read_text()
    now = {"ms": 1_700_000_000_000}
    db = laminardb.open(config={"clock": lambda: now["ms"]})
    db.execute(SOURCES_DDL)
    db.execute(script)
    sub = db.subscribe_stream("nexmark_q12")
    stamped = []
    for stream, batch in _batches():
        now["ms"] += 2_300
        db.insert(stream, batch)
        if stream == "bid":
            stamped.append(batch.append_column("p", pa.array([now["ms"]] * batch.num_rows, pa.int64())))
    db.finish()
    got = sub.to_arrow()
    db.close()
    want = duck("""SELECT bidder, count(*), p // 10000 * 10000 AS ws, p // 10000 * 10000 + 10000
                   FROM bid_p GROUP BY bidder, ws""", bid_p=pa.Table.from_batches(stamped))
    assert got.num_rows == want.num_rows > 0
    assert _normalize(got) == _normalize(want)


@pytest.mark.parametrize("clock", ["12:00", lambda: "noon"])
def test_a_clock_that_is_no_clock_is_a_typed_error(clock):
    if callable(clock):
        db = _q12(clock)
        with pytest.raises(laminardb.LaminarError) as err:
            db.insert("bid", next(b for s, b in _batches() if s == "bid"))
        db.close()
    else:
        with pytest.raises(laminardb.LaminarError) as err:
            laminardb.open(config={"clock": clock})
    assert err.value.code == "LDB-9060"


# --------------------------------------------------------------------------- q14 from the CLI
def test_cli_runs_q14_with_its_udf(capsys):
    assert main(["nexmark", "--query", "q14", "--events", "20k", "--seed", "1"]) == 0
    assert "q14: 20,000 events" in capsys.readouterr().out


def test_q14_without_its_udf_names_it():
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    with pytest.raises(laminardb.LaminarError) as err:
        db.execute(QUERIES["q14"].statement())
    assert "count_char" in str(err.value)
    db.close()
