"""How ``make test`` shares the machine's two cores (pytest-xdist, ``-n 2``).

Tests that start a Ray cluster run one after another on one worker (work unit ``ray``), as
the directories' own conftests expect: one Ray instance at a time, module fixtures kept, in
the collected order. Tests that use the session's real services — the Kafka broker,
PostgreSQL, MariaDB, the coordinator's local Spark, Raft voters, Spark's standalone daemons —
run the same way as one unit (``services``), so each service starts once. Every other test
(the engine, SQL, operators, joins, embedded connectors) is a unit of its own, handed to
whichever worker is free. The two long units start first (xdist orders units by size).

Why a scheduler of our own: xdist's ``--dist loadgroup`` marks groups by rewriting node ids,
which pytest 9 no longer lets it do, so its groups silently spread over both workers. The
scheduler hook is xdist's public way to choose the units. Without ``-n`` nothing here runs.
"""

from __future__ import annotations

import os

import pytest

# Every JVM the tests start (the coordinator's Spark, Spark's standalone daemons) lives seconds
# to a minute: C1 only, one compiler thread and the serial collector save a third of the CPU
# the JVM-heavy tests spend (tests/coordinator/test_crash.py with tests/delta/test_actor_stages.py:
# 127 → 88 CPU s on 2 cores), and `make test` is CPU-bound. Set it yourself to override.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC")

# Files and directories whose tests start Ray (ray.init, a `ray start` head, ray://local).
_RAY = (
    "tests/cluster/", "tests/cluster_backend/", "tests/delta/", "tests/delta_coordinator/",
    "tests/delta_nodes/", "tests/dashboard/", "tests/discovery/test_static_and_ray.py",
    "tests/nexmark/test_nexmark_cluster.py", "tests/coordinator/test_actor.py",
    "tests/bench/test_bench_scale_nodes.py",
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
    if path.startswith(_RAY):
        return "ray"
    if path.startswith(_SERVICES):
        return "services"
    return None


# The long tier (``make test-long``; ``make test`` leaves it out, CI runs both): the fault-injection
# matrices and the cluster-operations scenarios — kills of actors, heads, coordinators and CDC
# readers in many places, `ray up`, the autoscalers, multi-node clusters, the dependency floors.
# Why two tiers: the whole suite is CPU-bound on two cores (the machine busy for 1,449 + 1,514
# CPU s over the two tiers, 13.5 + 17.5 minutes; as one tier it took 31-40 minutes, the Ray
# tests alone 27 in one process), so `make test` can stay under 20 minutes only without them.
# The machine's speed varies by the hour: the quick tier took 13:30 and 19:22 on the same code,
# so three more Delta files (plan trees, direct inserts, the Spark merge) moved here for margin.
# On 2026-12-07 CI's quick tier took 25 minutes (15 here, 1,633 tests). The files listed last
# moved here, and the quick tier took 8:56 (1,465 tests; Ray unit 441 s, the rest 567 s). The
# long tier took 29:54 before the last five moved (221 tests), 31:23 after (241). Its Ray unit
# is its critical path, and its other worker idles for about 1,000 s, so non-Ray files cost
# it little wall time.
# The quick tier still has a killed actor, a killed head and a rescale that must stay exactly
# once (tests/delta/test_subscription_pump.py, test_actor_stages.py, test_database.py), so a
# change that breaks recovery fails there too.
_LONG = (
    "tests/cluster/test_ray_up.py", "tests/cluster/test_ray_autoscaler.py", "tests/cluster/test_ray_auth.py",
    "tests/delta/test_autoscale.py", "tests/delta/test_faults.py", "tests/delta/test_operator_findings.py",
    "tests/delta/test_head_kill.py", "tests/delta/test_cluster_metrics.py",
    "tests/delta/test_database_connectors.py", "tests/delta/test_plan_trees.py", "tests/delta/test_direct_inserts.py",
    "tests/delta/test_spark_merge_delta.py", "tests/delta_coordinator/", "tests/delta_nodes/",
    "tests/cluster_backend/test_three_nodes.py", "tests/cluster_backend/test_operator_failures.py",
    "tests/bench/test_bench_scale_nodes.py",
    "tests/test_dependency_floors.py", "tests/spark/test_standalone.py", "tests/coordinator/test_native_epoch.py",
    "tests/coordinator/test_crash.py", "tests/checkpoint/test_crash_loop.py",
    "tests/connectors/test_mysql_cdc_crash.py", "tests/lookup/test_lookup_crash.py",
    # moved 2026-12-07 (see above): the Ray unit's slowest end-to-end files, the restore and
    # one-row differential matrices, a crash loop, Spark's executor sinks, the slowest CLI files
    "tests/nexmark/test_nexmark_cluster.py", "tests/dashboard/", "tests/delta/test_actor_snapshots.py",
    "tests/delta/test_lookup_postgres_delta.py",
    "tests/delta/test_database.py::test_cluster_status_lists_databases_and_drop_ends_one",
    "tests/connectors/test_iceberg_sink.py::test_sigkill_loop_gives_the_unbroken_answer",
    "tests/operators/test_snapshot.py", "tests/operators/test_one_row_agg.py",
    "tests/engine/test_missing_extras.py", "tests/test_cli_more.py",
    "tests/coordinator/test_executor_sinks.py", "tests/coordinator/test_spark_job.py",
    "tests/connectors/test_postgres_sink.py",
    "tests/engine/test_laminardb_forms.py::test_session_allowed_lateness_follows_flink",
    "tests/engine/test_laminardb_forms.py::test_stream_allowed_lateness_follows_flink",
)


# Ray tests whose bounded waits or timings suffer most from the other worker's load: last in
# the ray unit, by when the other worker has usually run out of tests.
_RAY_LAST = ("tests/delta/test_autoscale.py", "tests/cluster/test_ray_autoscaler.py",
             "tests/delta/test_cluster_metrics.py", "tests/delta/test_operator_findings.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if _SESSION_SERVICES.intersection(item.fixturenames) and unit_of(item.nodeid) is None})
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} use a session service (kafka_broker, postgres_server, "
                                "mariadb_server, spark): add them to _SERVICES in tests/conftest.py, so "
                                "that `make test -n 2` starts each service once")
    for item in items:
        if item.nodeid.startswith(_LONG):
            item.add_marker(pytest.mark.long)
    if hasattr(config, "workerinput"):  # an xdist worker (make test)
        items.sort(key=lambda item: item.nodeid.startswith(_RAY_LAST))  # stable: modules stay whole


# How nice (Unix priority) each unit's tests run under `make test`. The Ray unit is the suite's
# critical path, and its tests are chains of small IPC round trips between a dozen processes:
# beside CPU-bound tests at the same priority each hop waits for a time slice (the unit's tests
# took 1,858-2,141 s in full runs against 1,609 s alone in one process). Lower priority for the
# other units (their children inherit it) gives Ray the cores when it wants them; they take
# the rest. Services get a milder step: their Raft voters and brokers have bounded waits too.
_NICENESS = {"ray": 0, "services": 5, None: 10}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not hasattr(item.config, "workerinput"):
        return
    want = _NICENESS[unit_of(item.nodeid)]
    if os.getpriority(os.PRIO_PROCESS, 0) != want:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, want)
        except PermissionError:  # lowering niceness needs root: stays where it is
            pass


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByService(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid) or nodeid

    return ByService(config, log)
