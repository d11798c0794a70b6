"""Rows that go to subscribers alone stay on the actors (issue 20, item 1): the actors return
each query's output as an object of its own, the database head hands the subscribers its
reference (``RemoteBatch``) and decodes no row; each client fetches and decodes its rows.
Checked against real Ray and the embedded engine over the same rows, for every kind of query
on the actors — stateless, keyed, local-global, a join tree — fed by ``insert()`` and by a
real Kafka broker; a query whose rows a view or a second query needs still gets them through
the head."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401
from tests._services.procs import wait_until
from tests.delta.workload import batch, new_topic, produce, rows

pytestmark = pytest.mark.integration

DDL = """
CREATE SOURCE t (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL,
                 WATERMARK FOR ts AS ts - INTERVAL '0' SECOND){source};
CREATE SOURCE dim (k BIGINT NOT NULL, name VARCHAR);
CREATE STREAM passthru AS SELECT k, seq, v FROM t WHERE v >= 10;
CREATE STREAM per_key AS SELECT k, window_start, count(*) AS c, sum(v) AS s
    FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE;
CREATE STREAM totals AS SELECT k, count(*) AS c, max(v) AS top FROM t GROUP BY k;
CREATE STREAM per_key_text AS SELECT k, window_start, min(CAST(v AS VARCHAR)) AS lo
    FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE;
CREATE STREAM named AS SELECT t.k, t.seq, dim.name FROM t JOIN dim ON t.k = dim.k WHERE t.v < 50;
CREATE STREAM per_window AS SELECT window_start, count(*) AS c FROM t GROUP BY tumble(ts, INTERVAL '1' SECOND);
"""
# single operators: stateless, local-global, keyed, keyed with windows (a text MIN does not merge)
BY_REFERENCE = ("passthru", "per_key", "totals", "per_key_text")
STREAMS = (*BY_REFERENCE, "named", "per_window")  # a join tree; an unkeyed aggregate (merged in the head)
BATCHES = 6
ROWS = 2_000  # 64 KB a batch: inserted through an actor, not the head
SMALL = 200  # 6.4 KB: through the head, which sends whole batches together while the actors are busy
DIM = pa.table({"k": pa.array(range(0, 40, 2), pa.int64()), "name": [f"k{i}" for i in range(0, 40, 2)]})


def _net(table: pa.Table) -> list[tuple]:
    """A stream's rows as a multiset with its retractions applied: the Kafka reader's batches
    are not the inserted ones, so a changelog's updates in between differ, its net does not."""
    cols = sorted(c for c in table.column_names if c != "__weight")
    net: Counter = Counter()
    for r in table.to_pylist():
        net[tuple(r[c] for c in cols)] += r.get("__weight", 1)
    return sorted(((r, n) for r, n in net.items() if n), key=repr)


def _reference(inputs: list[pa.Table], finish: bool) -> dict[str, pa.Table]:
    import laminardb

    with laminardb.open() as db:
        db.execute(DDL.format(source=""))
        subs = {s: db.subscribe_stream(s) for s in STREAMS}
        db.insert("dim", DIM)
        for b in inputs:
            db.insert("t", b)
        if finish:
            db.finish()
        return {s: subs[s].to_arrow() for s in STREAMS}


def _by_reference(db) -> dict[str, int]:
    cluster = db.metrics()["cluster"]
    return {**cluster["rows_by_ref"], "named": cluster["plan_exchange"]["named"]["root_rows_by_ref"]}


def _check(db, subs: dict, inputs: list[pa.Table], *, finished: bool, same=rows) -> None:
    want = _reference(inputs, finished)
    got = {s: subs[s].to_arrow() for s in STREAMS}
    for s in STREAMS:
        assert same(got[s]) == same(want[s]), s
    by_ref = _by_reference(db)
    for s in (*BY_REFERENCE, "named"):
        assert by_ref[s] == got[s].num_rows > 0, (s, by_ref)
    assert by_ref["per_window"] == 0  # an unkeyed aggregate's windows are merged in the head
    assert db.metrics()["cluster"]["plan_exchange"]["named"]["root_rows"] == 0


def _parts(i: int) -> list[pa.Table]:
    """Batch ``i`` as it is inserted: whole (through an actor) for the first half, then in
    small parts (through the head)."""
    b = batch(i, ROWS)
    return [b] if i < BATCHES // 2 else [b.slice(lo, SMALL) for lo in range(0, ROWS, SMALL)]


def test_inserted_rows_reach_subscribers_by_reference_until_a_query_needs_them(database):
    db = database(checkpoint_interval="off")
    db.execute(DDL.format(source=""))
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    db.insert("dim", DIM)
    inputs = [part for i in range(BATCHES) for part in _parts(i)]
    for part in inputs:
        db.insert("t", part)
    sentinel = pa.table({"k": [0], "seq": [-1], "v": [0], "ts": [10**9]})  # closes every window
    db.insert("t", sentinel)
    db.flush(timeout_s=60)
    _check(db, subs, [*inputs, sentinel], finished=False)

    before = _by_reference(db)
    db.execute("CREATE MATERIALIZED VIEW passthru_count AS SELECT count(*) AS n FROM passthru")
    more = batch(BATCHES, ROWS)
    more = more.set_column(3, "ts", pa.array([10**9 + 1] * ROWS, pa.int64()))
    db.insert("t", more)
    db.flush(timeout_s=60)
    after = _by_reference(db)
    assert after["passthru"] == before["passthru"], after  # a view reads it now: through the head
    assert after["totals"] > before["totals"], after  # the others still by reference
    assert db.query("SELECT n FROM passthru_count").to_arrow()["n"].to_pylist() == [
        sum(1 for v in more["v"].to_pylist() if v >= 10)]
    assert rows(subs["passthru"].to_arrow()) == rows(pa.concat_tables(
        [b.filter(pc.greater_equal(b["v"], 10)) for b in [*inputs, sentinel, more]]).select(["k", "seq", "v"]))
    db.finish()


def test_kafka_rows_reach_subscribers_by_reference(database, kafka_broker):  # noqa: F811
    bootstrap = kafka_broker.bootstrap
    topic = new_topic(bootstrap, "by-ref")
    db = database(checkpoint_interval="off")
    db.execute(DDL.format(source=f" FROM KAFKA (brokers = '{bootstrap}', topic = '{topic}', format = 'json', "
                                 "idle_timeout_ms = '60000')"))
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    db.insert("dim", DIM)
    inputs = [batch(i, ROWS) for i in range(BATCHES)]
    records = [r for b in inputs for r in b.to_pylist()]
    sentinels = [{"k": p, "seq": -1, "v": 0, "ts": 10**9} for p in range(2)]  # one per partition
    db.start()
    produce(bootstrap, topic, records + sentinels)
    wait_until(lambda: db.metrics()["events_ingested"] >= len(records) + 2, timeout=120, what="every record read")
    db.flush(timeout_s=60)
    db.finish()
    # the embedded engine over the same rows: those of a partition in order, the sentinels last
    _check(db, subs, [*inputs, pa.Table.from_pylist(sentinels, schema=inputs[0].schema)], finished=True, same=_net)
