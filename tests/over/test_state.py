"""Top-N and deduplication state: snapshot → restore into a fresh operator mid-stream gives the
output of an unbroken run (whole, and split by vnode into two blobs that add up); a snapshot of
another query is refused; Top-N state holds at most N rows per partition."""

from __future__ import annotations

import pytest

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.operators.plan_operator import PlanOperator
from tests.over.harness import (
    Driver,
    durable_resumed_output,
    fold,
    make_batches,
    plan_for,
    resumed_output,
    rows,
    run_db,
)

QUERIES = {
    "top3": "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM s) WHERE rn <= 3",
    "top2_no_rank": ("SELECT k, v, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k, g ORDER BY v) AS rn "
                     "FROM s) WHERE rn <= 2"),
    "global_top4": "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM s) WHERE rn <= 4",
    "keep_last": ("SELECT k, ts, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn "
                  "FROM s) WHERE rn = 1"),
    "keep_first": ("SELECT k, g, ts, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k, g ORDER BY ts) AS rn "
                   "FROM s) WHERE rn = 1"),
}


def _unbroken(query: str, batches):
    d = Driver(PlanOperator(plan_for(query)))
    for b in batches:
        d.feed(b)
    return d.finish()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", list(QUERIES))
def test_restore_mid_stream_gives_the_same_output(name, split):
    query = QUERIES[name]
    batches = make_batches(11)
    resumed = fold(resumed_output(query, batches, split=split))  # what a subscriber saw
    assert rows(resumed) == rows(fold(_unbroken(query, batches)))


def test_a_snapshot_of_another_query_is_refused():
    batches = make_batches(12)
    d = Driver(PlanOperator(plan_for(QUERIES["top3"])))
    for b in batches[:5]:
        d.feed(b)
    blob = d.op.snapshot().encode()
    other = PlanOperator(plan_for(QUERIES["top3"].replace("rn <= 3", "rn <= 4")))
    with pytest.raises(SnapshotFormatError):
        other.restore(blob)


def test_top_n_state_holds_at_most_n_rows_per_partition():
    d = Driver(PlanOperator(plan_for(QUERIES["top3"])))
    batches = make_batches(13)
    for b in batches:
        d.feed(b)
    (topn,) = [n.op for n in d.op.nodes if type(n.op).__name__ == "TopNOperator"]
    partitions = len({r["k"] for b in batches for r in b.to_pylist()})
    assert topn.state_rows() <= 3 * partitions


@pytest.mark.parametrize("name", ["top3", "keep_first"])
def test_a_durable_database_resumes_from_its_checkpoint(name, tmp_path):
    """open(dir) → checkpoint → close → open(dir): the Top-N state comes back from the
    checkpoint and the two runs' output folds to an unbroken run's."""
    query = QUERIES[name]
    batches = make_batches(21)
    resumed = durable_resumed_output(query, batches, tmp_path)
    whole, db = run_db(query, batches)
    db.close()
    assert rows(fold(resumed)) == rows(fold(whole))
