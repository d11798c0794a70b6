"""Join state: snapshot → restore into a fresh operator mid-stream gives the same final output
(whole, and split by vnode into two blobs); interval-join state is empty once the watermark
has passed; ``state_ttl`` bounds a join without a time condition."""

from __future__ import annotations

import pytest

from laminardb.operators.plan_operator import PlanOperator
from tests.joins.harness import (
    SOURCES,
    Driver,
    fold,
    make_rows,
    oracle,
    plan_for,
    resumed_output,
    rows,
    run_db,
    same,
)

QUERIES = {
    "inner": "SELECT l.k, l.v, r.w FROM l JOIN r ON l.k = r.k",
    "full": "SELECT l.k, l.v, r.w FROM l FULL JOIN r ON l.k = r.k AND r.w > 2",
    "interval_left": ("SELECT l.k, l.v, r.w, l.ts FROM l LEFT JOIN r ON l.k = r.k "
                      "AND l.ts BETWEEN r.ts - INTERVAL '2' SECOND AND r.ts"),
    "agg_over_join": "SELECT l.v, count(*) AS n FROM l JOIN r ON l.k = r.k GROUP BY l.v",
}


def _unbroken(query: str, batches):
    d = Driver(PlanOperator(plan_for(query)))
    for src, b in batches:
        d.feed(src, b)
    return d.finish()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", list(QUERIES))
def test_restore_mid_stream_gives_the_same_output(name, split):
    query = QUERIES[name]
    batches = make_rows(11)
    whole = fold(_unbroken(query, batches))
    # a changelog's second half retracts rows of the first: fold both halves together
    both = resumed_output(lambda: plan_for(query), batches, split=split)
    assert rows(fold(both)) == rows(whole)


def test_interval_join_state_is_empty_once_the_watermark_has_passed():
    query = QUERIES["interval_left"]
    batches = make_rows(12)
    d = Driver(PlanOperator(plan_for(query)))
    peak = 0
    for src, b in batches:
        d.feed(src, b)
        left, right = d.op.joins()[0].state_rows()
        peak = max(peak, left + right)
        # bounded: nothing older than the interval behind the watermark stays
        assert left + right <= 200, (left, right)
    assert peak > 0
    d.out += d.op.on_watermark(max(d.max_ts.values()) + 10_000)
    assert d.op.joins()[0].state_rows() == (0, 0)
    same(d.finish(), oracle("SELECT l.k, l.v, r.w, l.ts FROM l LEFT JOIN r ON l.k = r.k "
                            "AND l.ts BETWEEN r.ts - 2000 AND r.ts", batches))


def test_regular_join_keeps_state_and_state_ttl_bounds_it():
    batches = make_rows(13)
    _, db = run_db("SELECT l.k, r.w FROM l JOIN r ON l.k = r.k", batches)
    op = db.engine.reactor.nodes["j"].op
    assert sum(op.joins()[0].state_rows()) > 500  # without a time bound every row stays
    db.close()
    import laminardb

    db = laminardb.open()
    db.execute(SOURCES)
    db.execute("CREATE STREAM j WITH (state_ttl = INTERVAL '3' SECOND) AS SELECT l.k, r.w FROM l JOIN r ON l.k = r.k")
    join = db.engine.reactor.nodes["j"].op.joins()[0]
    assert join.join.ttl == 3000
    for src, b in batches:
        db.insert(src, b)
        assert sum(join.state_rows()) <= 250
    db.close()


def test_restore_refuses_a_snapshot_of_another_join():
    import laminardb

    a = PlanOperator(plan_for(QUERIES["inner"]))
    b = PlanOperator(plan_for(QUERIES["full"]))
    with pytest.raises(laminardb.LaminarError):
        b.restore(a.snapshot().encode())
