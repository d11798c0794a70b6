"""A node removed under a running database: its actor dies with it, the head (on the head
node) recovers on the nodes left, and every result comes out exactly once."""

from __future__ import annotations

import pytest

from tests.delta.workload import DDL, STREAMS, assert_exactly_once, batch

pytestmark = pytest.mark.integration

BATCHES = 30


def test_a_removed_node_is_recovered_from(nodes, tmp_path):
    import laminardb

    cluster, workers = nodes
    db = laminardb.connect("ray://auto", database="nodes", actors=2,
                           config={"checkpoint_dir": str(tmp_path), "checkpoint_interval": "off"})
    try:
        db.execute(DDL)
        subs = {s: db.subscribe_stream(s) for s in STREAMS}
        for i in range(BATCHES):
            db.insert("t", batch(i))
            if i == 8:
                db.checkpoint()
            if i == 14:
                victim = db.metrics()["cluster"]["members"][1]["node_id"]
                node = next(w for w in workers if w.node_id == victim)
                cluster.remove_node(node)
        db.finish()
        got = {s: subs[s].to_arrow() for s in STREAMS}
        assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
        recoveries = db.metrics()["database"]["recoveries"]
        assert len(recoveries) >= 1 and recoveries[0]["epoch"] >= 1
        nodes_now = {m["node_id"] for m in db.metrics()["cluster"]["members"]}
        assert victim not in nodes_now
    finally:
        db.drop_database()
