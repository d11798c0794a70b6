"""bench_scale's three Ray nodes (``RayNodes``): the reactor actors land on the worker nodes,
their CPU is counted there and not on the head node, and without ``--shared-shm`` they read
batches as Ray objects — the head keeps no shared-memory ring, as on separate machines."""

from __future__ import annotations

import glob
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

pytest.importorskip("ray")
pytestmark = pytest.mark.integration


def test_three_nodes_put_the_actors_work_on_the_worker_nodes(tmp_path):
    import bench_scale
    from bench_engine import AGG_DDL, SOURCE_DDL, make_batches

    import laminardb

    nodes = bench_scale.RayNodes(3, 2, shared_shm=False)
    try:
        db = laminardb.connect("ray://auto", database="nodes-smoke", actors=2, config={"checkpoint_dir": ":memory:"})
        try:
            db.execute(SOURCE_DDL + "; " + AGG_DDL)
            head_pid = db.metrics()["database"]["head_pid"]
            with bench_scale.Metered(db, None, nodes) as m:
                for b in make_batches(200_000, 20_000):
                    db.insert("trades", b)
                db.finish()
            s = m.summary(200_000, None)
            ring = glob.glob(f"/dev/shm/laminardb-{head_pid}-*")
        finally:
            db.drop_database()
    finally:
        nodes.shutdown()
    assert s["placement"] == {"worker1": 1, "worker2": 1}
    by_node = s["by_node"]
    assert by_node["worker1"]["actors"] > 0 and by_node["worker2"]["actors"] > 0
    assert by_node["head"]["actors"] == 0 and by_node["head"]["head"] > 0
    assert ring == []
