"""Every Nexmark query that runs (``status == "runs"``, and q10's SELECT) on a 2-actor cluster: its
output equals the embedded engine's over the same generated rows, and DuckDB's (``tests/nexmark/test_nexmark.py``
checks the embedded engine against the same oracle at a larger scale).

All queries run side by side in one database per mode (one pass of the generator each), with
q14's UDF registered (the actors import it by reference), q12's processing-time clock injected
(the client's clock, moved 1.7 s per batch: PROCTIME() is stamped at the client, never by an
actor's wall clock) and q13's side-input CSV file named by ``NEXMARK_SIDE_INPUT``. Ray starts
once for the module with 2 CPUs. Also here: UDFs on the cluster that cannot be imported by name
are refused cleanly, and the runner (``laminardb nexmark``, ``bench/bench_nexmark.py``) writes
q13's side input itself.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import laminardb
from laminardb.cli.commands import main
from laminardb.nexmark import QUERIES, SOURCES_DDL, UDFS, NexmarkConfig, generate, run_query, tables
from laminardb.nexmark.runner import SIDE_INPUT_ROWS, write_side_input
from laminardb.nexmark.udfs import count_char
from tests._services.ray_local import start_local_ray
from tests.engine.oracle import duck
from tests.nexmark.test_nexmark import ORACLE, _fold, _normalize

EVENTS = 50_000
SEED = 5
BATCH_EVENTS = 4_096
SLOW = NexmarkConfig(rate=1000.0)  # 1,000 events/s of event time: windows open and close as rows arrive
# every query that runs ("runs"; q10 with its partitioned sink, of which this compares the SELECT)
NAMES = [q.name for q in QUERIES.values() if q.runnable]
Q13_ORACLE = ('SELECT B.auction, B.bidder, B.price, epoch_ms(B."dateTime"), S.value FROM bid B '
              "JOIN side_input S ON B.auction % 10000 = S.key")

# name → why it cannot run on the cluster yet (an xfail(strict=True): it must fail until fixed);
# empty: every query runs
XFAIL: dict[str, str] = {}
CASES = [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n])) if n in XFAIL else n for n in NAMES]


@pytest.fixture(scope="module")
def side_input(tmp_path_factory) -> tuple[str, pa.Table]:
    # keys 0…6999 only: bids whose auction % 10000 ≥ 7000 find no row and the inner join drops them
    t = pa.table({"key": pa.array(range(7000), pa.int64()), "value": [f"v{k % 97}" for k in range(7000)]})
    path = str(tmp_path_factory.mktemp("q13") / "side_input.csv")
    pacsv.write_csv(t, path)
    return path, t


def _run(make_db, side_path: str) -> tuple[dict[str, pa.Table | BaseException], list[pa.RecordBatch], float, dict]:
    """Every query in one database fed the same batches; each query's folded output (or the
    error that kept it from being installed), the bid batches stamped with their processing
    time, the seconds taken and where each query ran (its operator's class and mode) with the
    rows each actor took."""
    t0 = time.perf_counter()
    clock = {"ms": 1_700_000_000_000}
    db = make_db({"udfs": UDFS, "clock": lambda: clock["ms"], "vars": {"NEXMARK_SIDE_INPUT": side_path}})
    out: dict[str, pa.Table | BaseException] = {}
    stamped = []
    info: dict = {}
    try:
        db.execute(SOURCES_DDL)
        subs = {}
        for name in NAMES:
            try:
                db.execute(QUERIES[name].statement())
                subs[name] = db.subscribe_stream(name)
            except Exception as e:  # noqa: BLE001 - reported by that query's test
                out[name] = e
        db.start()
        db.flush()  # q13: the side-input file is read, its lookup table whole before any bid
        for stream, batch in generate(EVENTS, seed=SEED, batch_events=BATCH_EVENTS, config=SLOW):
            clock["ms"] += 1_700
            db.insert(stream, batch)
            if stream == "bid":
                stamped.append(batch.append_column("p", pa.array([clock["ms"]] * batch.num_rows, pa.int64())))
        db.finish()
        m = db.metrics()
        assert m["late_events_dropped"] == 0
        info["rows_per_actor"] = m.get("cluster", {}).get("rows_per_actor")
        info["placement"] = {n.name: (type(n.op).__name__, getattr(n.op, "mode", None))
                             for n in db.engine.reactor.nodes.values() if n.op is not None}
        for name, sub in subs.items():
            out[name] = _fold(sub.to_arrow())
    finally:
        db.close()
    return out, stamped, time.perf_counter() - t0, info


@pytest.fixture(scope="module")
def embedded(side_input):
    return _run(lambda config: laminardb.open(config=config), side_input[0])


@pytest.fixture(scope="module")
def pool():
    """Two reactor actors on a local Ray of 2 CPUs, for the whole module (connections reset them)."""
    ray = pytest.importorskip("ray")
    from laminardb.cluster.actor_pool import ActorPool

    start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    actors = None
    try:
        actors = ActorPool(2, 64)
        yield actors
    finally:
        if actors is not None:
            actors.shutdown()
        ray.shutdown()


def _connect(pool, config=None):
    from laminardb.cluster.backend import cluster_connection

    return cluster_connection(pool, config=config, shutdown_on_close=False)


@pytest.fixture(scope="module")
def cluster(pool, side_input):
    return _run(lambda config: _connect(pool, config), side_input[0])


@pytest.fixture(scope="module")
def oracle_rows() -> dict[str, pa.Table]:
    rows = tables(EVENTS, seed=SEED, config=SLOW)
    rows["bid_seq"] = rows["bid"].append_column("seq", pa.array(range(rows["bid"].num_rows), pa.int64()))
    return rows


def test_every_query_that_runs_is_here():
    assert set(NAMES) == set(ORACLE) | {"q13"}
    assert {q.name for q in QUERIES.values() if q.status == "runs"} <= set(NAMES)
    assert set(XFAIL) <= set(NAMES)


@pytest.mark.integration
@pytest.mark.parametrize("name", CASES)
def test_query_on_two_actors_equals_embedded_and_duckdb(name, embedded, cluster, oracle_rows, side_input):
    want, stamped, _, _ = embedded
    got, stamped_c, _, _ = cluster
    if isinstance(got[name], BaseException):
        raise got[name]
    assert not isinstance(want[name], BaseException), want[name]
    assert [b.column("p") for b in stamped] == [b.column("p") for b in stamped_c]
    assert got[name].num_rows == want[name].num_rows > 0
    assert _normalize(got[name]) == _normalize(want[name])
    if name == "q13":
        oracle = duck(Q13_ORACLE, side_input=side_input[1], bid=oracle_rows["bid"])
    else:
        oracle = duck(ORACLE[name], bid_p=pa.Table.from_batches(stamped), **oracle_rows)
    assert _normalize(got[name]) == _normalize(oracle)


@pytest.mark.integration
def test_work_runs_on_both_actors_and_processing_time_at_the_client(cluster, embedded):
    info = cluster[3]
    assert all(r > 0 for r in info["rows_per_actor"]), info["rows_per_actor"]
    where = info["placement"]
    # single-operator queries run on the actors — q14's UDF and q12's processing-time windows too
    for name in ("q0", "q1", "q2", "q10", "q11", "q12", "q14", "q15", "q16", "q17", "q21", "q22"):
        assert where[name][0] == "DistributedOperator", (name, where[name])
    # plan trees (joins, OVER, Top-N, subqueries): every stateful node on the actors, each
    # partitioned by its own key; the head keeps the tree's stateless nodes
    trees = [n for n in NAMES if n not in ("q0", "q1", "q2", "q10", "q11", "q12", "q13", "q14", "q15",
                                           "q16", "q17", "q21", "q22")]
    assert len(trees) == 11
    for name in trees:
        assert where[name] == ("DistributedPlanOperator", "keyed"), (name, where[name])
    # PROCTIME() is stamped by the client's clock: q12's view B and q13's lookup join (FOR
    # SYSTEM_TIME AS OF a PROCTIME() column) run there
    assert where["b"] == ("_AtClient", None)
    assert where["q13"] == ("PlanOperator", None)
    print(f"\nembedded {embedded[2]:.1f} s, 2-actor cluster {cluster[2]:.1f} s for {len(NAMES)} queries")


def _twice(a: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.multiply(a, 2)


def _not_installed(a: pa.Array) -> pa.Array:
    return a


_not_installed.__module__ = "laminardb_tests_no_such_module"  # as if only the client had its module


@pytest.mark.integration
def test_udfs_on_the_cluster_registered_after_connecting_or_refused_by_name(pool):
    db = _connect(pool)
    try:
        db.execute(SOURCES_DDL)
        db.register_udf("count_char", count_char, "BIGINT")  # after connect: shipped with the DDL
        db.register_udf("twice", _twice, "BIGINT")
        db.register_udf("later", lambda a: a, "BIGINT")  # a lambda nobody calls: no harm
        db.execute("CREATE STREAM c AS SELECT auction, count_char(extra, 'c') AS n, twice(price) AS p2 FROM bid")
        db.register_udf("local_only", lambda a: a, "BIGINT")
        with pytest.raises(laminardb.LaminarError) as err:
            db.execute("CREATE STREAM l AS SELECT local_only(price) AS x FROM bid")
        assert err.value.code == "LDB-1012" and "local_only" in str(err.value) and "module level" in str(err.value)
        assert "l" not in db.engine.reactor.nodes  # refused whole: neither here nor on an actor
        db.execute("CREATE STREAM l AS SELECT price AS x FROM bid")  # so the name is free again
        db.register_udf("elsewhere", _not_installed, "BIGINT")
        with pytest.raises(laminardb.LaminarError) as err:
            db.execute("CREATE STREAM e AS SELECT elsewhere(price) AS x FROM bid")
        assert err.value.code == "LDB-1012" and "laminardb_tests_no_such_module" in str(err.value)
        assert "e" not in db.engine.reactor.nodes
        sub = db.subscribe_stream("c")
        bids = tables(2_000, seed=1, config=SLOW)["bid"]
        db.insert("bid", bids)
        db.finish()
        got = sub.to_arrow()
    finally:
        db.close()
    assert got.num_rows == bids.num_rows
    assert sorted(got["n"].to_pylist()) == sorted(count_char(bids["extra"].combine_chunks(), pa.array(["c"])).to_pylist())
    assert sorted(got["p2"].to_pylist()) == sorted(2 * p for p in bids["price"].to_pylist())


# --------------------------------------------------------------------------- q13 in the runner
def test_runner_writes_q13s_side_input_when_none_is_given(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NEXMARK_SIDE_INPUT", raising=False)
    side = pacsv.read_csv(write_side_input(str(tmp_path / "s.csv")),
                          convert_options=pacsv.ConvertOptions(column_types={"value": pa.string()}))
    assert side.num_rows == SIDE_INPUT_ROWS and side["value"].to_pylist()[:3] == ["0", "1", "2"]
    bids = tables(20_000, seed=2)["bid"].num_rows
    assert run_query("q13", events=20_000, seed=2).rows_out == bids  # every auction % 10000 has its key
    short = write_side_input(str(tmp_path / "short.csv"), rows=5_000)
    want = duck("SELECT count(*) FROM bid WHERE auction % 10000 < 5000", bid=tables(20_000, seed=2)["bid"])
    assert run_query("q13", events=20_000, seed=2, side_input=short).rows_out == want.column(0)[0].as_py()
    monkeypatch.setenv("NEXMARK_SIDE_INPUT", short)
    assert run_query("q13", events=20_000, seed=2).rows_out == want.column(0)[0].as_py()
    monkeypatch.delenv("NEXMARK_SIDE_INPUT")
    assert main(["nexmark", "--query", "q13", "--events", "20k"]) == 0
    assert "q13: 20,000 events" in capsys.readouterr().out
