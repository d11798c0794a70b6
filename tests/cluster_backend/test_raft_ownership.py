"""Delta actors own exactly the vnodes committed in Raft (3 real voter processes), and
closing the connection releases them — raising the epochs, so old tokens are fenced."""

from __future__ import annotations

import pytest

from laminardb.cluster.backend import connect_in_process
from tests._services.fixtures import raft_cluster  # noqa: F401

ray = pytest.importorskip("ray")


RAY_CPUS = 2  # read by the ray_local fixture (tests/cluster_backend/conftest.py)


@pytest.mark.integration
def test_routing_comes_from_committed_raft_state(ray_local, raft_cluster):  # noqa: F811
    from laminardb.cluster.ownership import OWNERSHIP_SOURCE, RaftConfig
    from laminardb.raft.exceptions import StaleEpochError

    voters = raft_cluster(3)
    cfg = RaftConfig(tuple(voters.rpc_addresses), voters.secret)
    db = connect_in_process("ray://auto", actors=2, vnodes=32, raft=cfg)
    try:
        status = db.metrics()["cluster"]
        assert status["raft"] is True
        assert status["raft_leader"] in [v.raft for v in voters.voters] and status["raft_term"] >= 1
        snap = voters.client().ownership(OWNERSHIP_SOURCE, barrier=True)["sources"][OWNERSHIP_SOURCE]
        members = db.engine.backend.cluster.members
        # the client's routing is exactly the committed owner of every vnode
        assert [members[i] for i in db.engine.backend.cluster.routing.owner.tolist()] == snap["owner"]
        assert sorted(m["vnodes"] for m in status["members"]) == [16, 16]
        tokens = db.engine.backend.cluster.ownership.tokens
        assert sum(len(t) for t in tokens.values()) == 32
        any_token = tokens[0][0]
        assert voters.client().check_fence(any_token) == any_token.epoch

        db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts);"
                   "CREATE STREAM c AS SELECT k, count(*) AS n FROM t GROUP BY k")
        sub = db.subscribe_stream("c")
        db.insert("t", [{"ts": i, "k": f"k{i % 7}"} for i in range(70)])
        assert sorted(r["n"] for r in sub.to_arrow().to_pylist() if r["__weight"] == 1) == [10] * 7
    finally:
        db.close()
    # closing deregistered the actors: their vnodes moved on, the old tokens are stale
    with pytest.raises(StaleEpochError):
        voters.client().check_fence(any_token)


@pytest.mark.integration
def test_cluster_evict_removes_a_crashed_clients_member(raft_cluster, monkeypatch, capsys):  # noqa: F811
    """A client killed without close() leaves its members registered; ``laminardb cluster
    evict MEMBER`` deregisters one through Raft: its vnodes move to the live member and its
    old fencing tokens are refused."""
    from laminardb.raft.cli import SECRET_ENV, main
    from laminardb.raft.exceptions import StaleEpochError

    voters = raft_cluster(3)
    client = voters.client()
    for m in ("reactor-crashed-0", "reactor-live-0"):
        client.register_node(m, address="test", cores=1)
    client.commit_plan("laminardb", members=["reactor-crashed-0", "reactor-live-0"], vnode_count=16)
    stale = client.tokens("laminardb", "reactor-crashed-0")[0]
    monkeypatch.setenv(SECRET_ENV, voters.secret)
    assert main(["cluster", "evict", "reactor-crashed-0", "--voters", ",".join(voters.rpc_addresses)]) == 0
    assert "evicted reactor-crashed-0: 8 vnodes released" in capsys.readouterr().out
    snap = client.ownership(barrier=True)
    assert "reactor-crashed-0" not in snap["nodes"]
    assert "reactor-crashed-0" not in snap["sources"]["laminardb"]["owner"]
    with pytest.raises(StaleEpochError):
        client.check_fence(stale)
    client.close()
