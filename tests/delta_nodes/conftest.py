"""A Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``): the head
node holds the database heads (no CPUs), each worker node one CPU for one reactor actor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests._services

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()
