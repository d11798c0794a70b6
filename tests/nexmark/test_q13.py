"""Nexmark q13 as published: bids joined to a bounded side input read from a CSV file by a
processing-time lookup join (``JOIN side_input FOR SYSTEM_TIME AS OF B.p_time``), against DuckDB
over the same rows. The side input is loaded (``start()`` + ``flush()``) before the bids arrive,
so each bid sees the whole table, as in Flink once its lookup cache is filled."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pacsv

import laminardb
from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate, tables
from tests.engine.oracle import duck

EVENTS = 50_000
SLOW = NexmarkConfig(rate=1000.0)


def _side_input(path) -> pa.Table:
    # keys 0…6999 only, so some bids (auction % 10000 ≥ 7000) find no row and an inner join drops them
    t = pa.table({"key": pa.array(range(7000), pa.int64()), "value": [f"v{k % 97}" for k in range(7000)]})
    pacsv.write_csv(t, path)
    return t


def test_q13_runs_as_published_and_equals_duckdb(tmp_path):
    q = QUERIES["q13"]
    assert q.status == "runs"
    side = _side_input(tmp_path / "side_input.csv")
    db = laminardb.open(config={"vars": {"NEXMARK_SIDE_INPUT": str(tmp_path / "side_input.csv")}})
    db.execute(SOURCES_DDL)
    db.execute(q.statement())
    sub = db.subscribe_stream("q13")
    db.start()
    db.flush()  # the file is read: the lookup table is whole
    for stream, batch in generate(EVENTS, seed=3, batch_events=4_096, config=SLOW):
        db.insert(stream, batch)
    db.finish()
    got = sub.to_arrow()
    assert "__weight" not in got.column_names  # append-only
    assert db.engine.reactor.nodes["q13"].op.joins()[0].state_rows() == (0, 7000)  # bids are not kept
    db.close()
    want = duck('SELECT B.auction, B.bidder, B.price, epoch_ms(B."dateTime"), S.value FROM bid B '
                "JOIN side_input S ON B.auction % 10000 = S.key", side_input=side, **tables(EVENTS, seed=3, config=SLOW))
    assert got.num_rows == want.num_rows > 0
    got_rows = sorted(zip(*[c.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(c.type) else c.to_pylist()
                            for c in got.columns], strict=True))
    want_rows = sorted(zip(*[c.to_pylist() for c in want.columns], strict=True))
    assert got_rows == want_rows


def test_q13_without_its_side_input_file_says_which_variable():
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    try:
        db.execute(QUERIES["q13"].statement())
    except laminardb.LaminarError as e:
        assert "NEXMARK_SIDE_INPUT" in str(e)
    else:  # pragma: no cover - the variable is required
        raise AssertionError("q13 ran without its side input")
    db.close()
