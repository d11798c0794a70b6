"""A 3-node Ray cluster on one machine (ray.cluster_utils.Cluster): one actor per node,
and the same rows as the embedded engine."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def three_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes(timeout=120)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.integration
def test_three_node_cluster_matches_embedded(three_nodes):
    import laminardb
    from tests.cluster_backend.test_cluster_equivalence import STREAMS, _sorted, run_script

    expected, view_e, _ = run_script(laminardb.open())
    db = laminardb.connect("ray://auto", actors=3)
    try:
        nodes = {m["node_id"] for m in db.metrics()["cluster"]["members"]}
        assert len(nodes) == 3, "one actor per node"
        got, view_c, metrics = run_script(db)
    finally:
        db.drop_database()
    for s in STREAMS:
        assert _sorted(got[s]) == _sorted(expected[s]), s
    assert view_c[0].equals(view_e[0])
    assert all(r > 0 for r in metrics["cluster"]["rows_per_actor"])
