"""A dead reactor actor is a clear error on the client and in metrics(), never silent loss."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


@pytest.mark.integration
def test_dead_actor_is_a_clear_error(ray_local):
    from laminardb.cluster.backend import connect_in_process as connect
    from laminardb.cluster.exceptions import ActorLostError

    db = connect("ray://auto", actors=2, vnodes=32)
    try:
        db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts);"
                   "CREATE STREAM c AS SELECT k, count(*) AS n FROM t GROUP BY k")
        db.insert("t", [{"ts": 1, "k": "a"}])
        ray.kill(db.engine.backend.cluster.actors[1])
        with pytest.raises(ActorLostError) as err:
            for i in range(50):  # the kill lands asynchronously; a bounded number of tries
                db.insert("t", [{"ts": 2 + i, "k": "a"}, {"ts": 2 + i, "k": "b"}, {"ts": 2 + i, "k": "c"}])
        assert err.value.code == "LDB-8002"
        assert "actor 1" in str(err.value)
        assert 1 in db.metrics()["cluster"]["dead"]
    finally:
        db.close()


@pytest.mark.integration
def test_dead_actor_surfaces_on_a_read_of_pipelined_outputs(ray_local):
    """Batches still on the actors when one dies: the next read raises, nothing is silent."""
    from laminardb.cluster.backend import connect_in_process as connect
    from laminardb.cluster.exceptions import ActorLostError

    db = connect("ray://auto", actors=2, vnodes=32, max_in_flight=16)
    try:
        db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts);"
                   "CREATE STREAM c AS SELECT k, count(*) AS n FROM t GROUP BY k")
        sub = db.subscribe_stream("c")
        db.engine.backend.drainer.stop()  # keep the rounds pending: the read below must be what meets the loss
        ray.kill(db.engine.backend.cluster.actors[0])
        with pytest.raises(ActorLostError):
            for i in range(20):  # bounded: the kill lands asynchronously
                db.insert("t", [{"ts": i, "k": k} for k in "abcdef"])
                sub.to_arrow()
        assert 0 in db.metrics()["cluster"]["dead"]
    finally:
        db.close()
