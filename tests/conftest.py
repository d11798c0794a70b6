"""How ``make test`` shares the machine's two cores (pytest-xdist, ``-n 2``).

Tests that start a Ray cluster run one after another on one worker (work unit ``ray``), as
the directories' own conftests expect: one Ray instance at a time, module fixtures kept, in
the collected order. Tests that use the session's real services — the Kafka broker,
PostgreSQL, MariaDB, the coordinator's local Spark, Raft voters, Spark's standalone daemons —
run the same way as one unit (``services``), so each service starts once. Every other test
(the engine, SQL, operators, joins, embedded connectors) is a unit of its own, handed to
whichever worker is free. The two long units start first (xdist orders units by size).

The ``ray`` unit is the longest, so modules that start a Ray of their own for the module and
share nothing with the other Ray tests (``_RAY_BESIDE``) run in the ``services`` unit, beside
it: each worker has its own ``RAY_TMPDIR`` (neither finds the other's cluster), and a lock file
keeps them apart from ``ray up``'s test, whose ``ray stop`` would kill them
(``tests/_services/ray_lock.py``).

Why a scheduler of our own: xdist's ``--dist loadgroup`` marks groups by rewriting node ids,
which pytest 9 no longer lets it do, so its groups silently spread over both workers. The
scheduler hook is xdist's public way to choose the units. Without ``-n`` nothing here runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # tests._services, however pytest was started
    sys.path.insert(0, str(_ROOT))

# Files and directories whose tests start Ray (ray.init, a `ray start` head, ray://local).
_RAY = (
    "tests/cluster/", "tests/cluster_backend/", "tests/delta/", "tests/delta_coordinator/",
    "tests/delta_nodes/", "tests/dashboard/", "tests/discovery/test_static_and_ray.py",
    "tests/nexmark/test_nexmark_cluster.py", "tests/coordinator/test_actor.py",
    "tests/bench/test_bench_scale_nodes.py",
)
# Ray tests run in the services unit, beside the ray unit (module-scoped Ray, no machine-wide
# process counts): ~4 minutes of the ray unit's ~21 on a 2-core machine.
_RAY_BESIDE = (
    "tests/cluster_backend/", "tests/nexmark/test_nexmark_cluster.py", "tests/delta_nodes/",
    "tests/coordinator/test_actor.py", "tests/discovery/test_static_and_ray.py",
)
# Files and directories whose tests use a session service or start their own daemons.
_SERVICES = (
    "tests/coordinator/", "tests/spark/", "tests/raft/", "tests/discovery/", "tests/lookup/",
    "tests/connectors/", "tests/checkpoint/test_crash_loop.py", "tests/engine/test_strict_sql.py",
    "tests/sql_functions/test_flink_ddl.py", "tests/test_dependency_floors.py",
)
# The session fixtures (tests/_services/fixtures.py, tests/coordinator/conftest.py) that
# must start once: a test using one outside the lists above is refused at collection.
_SESSION_SERVICES = frozenset({"kafka_broker", "postgres_server", "mariadb_server", "spark"})


def unit_of(nodeid: str) -> str | None:
    """``"ray"``, ``"services"`` or None (a unit of its own) for a test's node id."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(_RAY_BESIDE):
        return "services"
    if path.startswith(_RAY):
        return "ray"
    if path.startswith(_SERVICES):
        return "services"
    return None


# Ray tests whose bounded waits or timings suffer most from the other worker's load: last in
# the ray unit, by when the other worker has usually run out of tests.
_RAY_LAST = ("tests/delta/test_autoscale.py", "tests/cluster/test_ray_autoscaler.py",
             "tests/delta/test_cluster_metrics.py", "tests/delta/test_operator_findings.py")


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker gets a Ray temp dir of its own: ``ray.init()`` and ``ray://auto`` look
    for a running cluster there (``ray_current_cluster``), and must find only this worker's."""
    if hasattr(config, "workerinput"):
        base = os.environ.get("RAY_TMPDIR") or "/tmp"
        os.environ["RAY_TMPDIR"] = f"{base}/ray-{config.workerinput['workerid']}"


@pytest.fixture(autouse=True, scope="module")
def _ray_beside_the_ray_unit(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module of ``_RAY_BESIDE`` holds the Ray lock shared while its Ray runs (set up before
    and torn down after the module's own Ray fixtures: autouse, same scope)."""
    path = Path(str(request.node.path)).resolve().relative_to(_ROOT).as_posix()
    if not path.startswith(_RAY_BESIDE):
        yield
        return
    from tests._services.ray_lock import ray_lock

    with ray_lock(exclusive=False):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if _SESSION_SERVICES.intersection(item.fixturenames) and unit_of(item.nodeid) is None})
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} use a session service (kafka_broker, postgres_server, "
                                "mariadb_server, spark): add them to _SERVICES in tests/conftest.py, so "
                                "that `make test -n 2` starts each service once")
    if hasattr(config, "workerinput"):  # an xdist worker (make test)
        # stable: modules stay whole. Ray modules beside the ray unit go last in the services
        # unit, long after ray up's test (early in the ray unit) released the Ray lock.
        items.sort(key=lambda item: (item.nodeid.startswith(_RAY_LAST), item.nodeid.startswith(_RAY_BESIDE)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByService(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid) or nodeid

    return ByService(config, log)
