"""A database lives in the cluster: clients attach and detach, pipelines stay, drop ends it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

from tests._services.procs import repo_env, wait_until
from tests.delta.workload import DDL, batch

pytestmark = pytest.mark.integration


def test_state_outlives_the_client_and_drop_removes_it(database, tmp_path):
    from laminardb.cluster.head import list_databases

    db = database("keep")
    db.execute(DDL)
    for i in range(3):
        db.insert("t", batch(i))
    totals = db.query("SELECT sum(c) AS n FROM per_key_total").to_pylist()
    assert totals == [{"n": 6000}]
    db.close()
    assert "keep" in list_databases()

    again = database("keep")  # attaches: same catalog, same state
    assert again.query("SELECT sum(c) AS n FROM per_key_total").to_pylist() == totals
    assert set(again.list_streams()) >= {"passthru", "per_key", "per_window", "per_key_total"}
    directory = again.metrics()["database"]["directory"]
    assert os.path.isdir(directory)
    again.drop_database()
    assert "keep" not in list_databases()
    assert not os.path.exists(directory)


def test_two_clients_one_writes_one_subscribes(database):
    writer = database("shared")
    writer.execute(DDL)
    reader = database("shared")
    sub = reader.subscribe_stream("per_window")
    for i in range(4):
        writer.insert("t", batch(i))
    writer.finish()
    got = sub.to_arrow()
    wait_until(lambda: sub.to_arrow().num_rows == 4, timeout=30)
    got = sub.to_arrow()
    assert got.column("c").to_pylist() == [2000] * 4  # 2000 rows per 1 s window
    reader.close()
    writer.close()


def test_errors_keep_their_class_and_code(database):
    from laminardb.sql.exceptions import UnknownColumnError

    db = database("errors")
    db.execute(DDL)
    with pytest.raises(UnknownColumnError) as err:
        db.execute("CREATE STREAM bad AS SELECT nope FROM t")
    assert err.value.code == "LDB-1008"
    res = db.insert("t", [{"k": "x", "seq": 0, "v": 1, "ts": 1}, {"k": 1, "seq": 0, "v": 1, "ts": 1}],
                    on_error="skip")
    assert (int(res), res.rejected) == (1, 1)


def test_a_dropped_connection_detaches(database):
    db = database("gc")
    probe = database("gc")
    db.execute(DDL)
    db.subscribe_stream("passthru")
    assert probe.metrics()["database"]["clients"] == 2
    del db
    gc.collect()
    wait_until(lambda: probe.metrics()["database"]["clients"] == 1, timeout=10)
    assert probe.metrics()["database"]["subscriptions"] == 0


def test_a_script_that_exits_leaves_its_pipeline_running(database, ray_cluster, tmp_path):
    """The script creates the database and a stream, inserts, and exits without close();
    a later client finds everything there."""
    script = tmp_path / "client.py"
    script.write_text(f"""
import laminardb, ray
ray.init(address={ray_cluster!r}, log_to_driver=False)
from tests.delta.workload import DDL, batch
db = laminardb.connect("ray://auto", database="script", actors=2,
                       config={{"checkpoint_dir": {str(tmp_path / 'ckpt')!r}}})
db.execute(DDL)
db.insert("t", batch(0))
""")
    proc = subprocess.run([sys.executable, str(script)], env=repo_env(), timeout=240,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    time.sleep(0.5)
    db = database("script")
    assert db.query("SELECT sum(c) AS n FROM per_key_total").to_pylist() == [{"n": 2000}]


def test_plan_tree_queries_give_the_embedded_results(database):
    """Joins, OVER and Top-N (plan trees: their stateful nodes on the actors, each keyed by its
    own key), over the same rows as the embedded engine, with the same results."""
    import laminardb
    from tests.delta.workload import rows

    ddl = DDL + """
    CREATE STREAM lagged AS SELECT k, seq, v, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS prev FROM t;
    CREATE STREAM top2 AS SELECT * FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC)
        AS rn FROM t) WHERE rn <= 2;
    CREATE STREAM self_join AS SELECT a.k, a.seq, b.v FROM t a JOIN t b ON a.k = b.k AND a.seq = b.seq
        AND a.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts;
    """
    names = ("lagged", "top2", "self_join")

    def run(db):
        db.execute(ddl)
        subs = {n: db.subscribe_stream(n) for n in names}
        for i in range(6):
            db.insert("t", batch(i))
        db.finish()
        return {n: subs[n].to_arrow() for n in names}

    with laminardb.open() as ref:
        expected = run(ref)
    got = run(database("trees"))
    for n in names:
        assert got[n].num_rows > 0
        assert rows(got[n]) == rows(expected[n]), n


def test_cluster_status_lists_databases_and_drop_ends_one(database, ray_cluster):
    """`laminardb cluster status --ray` shows the database, its actors and vnodes;
    `laminardb cluster drop NAME` stops it."""
    from laminardb.cluster.head import list_databases

    db = database("cli-db", coordinator="local")
    db.execute(DDL)
    cli = [sys.executable, "-m", "laminardb.cli.commands", "cluster"]
    status = subprocess.run([*cli, "status", "--ray", ray_cluster], env=repo_env(), capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0, status.stderr[-2000:]
    assert "cli-db: head pid" in status.stdout and status.stdout.count("128 vnodes") == 2
    assert "autoscale: off" in status.stdout
    scaled = subprocess.run([*cli, "scale", "cli-db", "1", "--ray", ray_cluster], env=repo_env(),
                            capture_output=True, text=True, timeout=300)
    assert scaled.returncode == 0 and "2 → 1 actor(s)" in scaled.stdout, scaled.stderr[-2000:]
    assert len(db.metrics()["cluster"]["members"]) == 1
    status = subprocess.run([*cli, "status", "--ray", ray_cluster], env=repo_env(), capture_output=True,
                            text=True, timeout=120)
    assert "256 vnodes" in status.stdout and "rescaled 2 → 1 by manual" in status.stdout, status.stdout
    dropped = subprocess.run([*cli, "drop", "cli-db", "--ray", ray_cluster], env=repo_env(),
                             capture_output=True, text=True, timeout=120)
    assert dropped.returncode == 0 and "dropped database cli-db" in dropped.stdout, dropped.stderr[-2000:]
    assert "cli-db" not in list_databases()


def test_scale_out_then_in_moves_state_and_stays_exactly_once(database):
    """1 → 2 → 1 actors mid-stream (each a checkpoint, then the engine rebuilt from it): keyed
    state moves by vnode; partial and local-global aggregates keep their parts on scale-out and
    add them up on the actor that stays on scale-in; the output equals an unbroken embedded run."""
    from tests.delta.workload import STREAMS, assert_exactly_once

    db = database("scale", actors=1, coordinator="local", checkpoint_interval="off")
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    for i in range(8):
        db.insert("t", batch(i))
    done = db.scale(2)
    assert done["actors"] == 2 and done["previous"] == 1 and done["pause_s"] > 0
    assert len(db.metrics()["cluster"]["members"]) == 2
    for i in range(8, 16):
        db.insert("t", batch(i))
    assert all(n > 0 for n in db.metrics()["cluster"]["rows_per_actor"])
    done = db.scale(1)
    assert done["actors"] == 1 and done["by"] == "manual"
    for i in range(16, 24):
        db.insert("t", batch(i))
    db.finish()
    got = {s: subs[s].to_arrow() for s in STREAMS}
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), 24)
    m = db.metrics()
    assert len(m["cluster"]["members"]) == 1
    assert [(r["previous"], r["actors"]) for r in m["autoscale"]["rescales_done"]] == [(1, 2), (2, 1)]


def test_a_udf_registered_by_a_client_runs_on_the_actors_and_survives_recovery(database):
    """``register_udf`` on a cluster database: the function goes by reference (module level),
    runs on the actors, and is registered again before a recovery replays the catalog; a
    lambda is refused with LDB-1012."""
    import os
    import signal

    from laminardb.nexmark.udfs import count_char
    from laminardb.sql.exceptions import UdfDefinitionError

    db = database("udf-db", checkpoint_interval="off", coordinator="local")
    with pytest.raises(UdfDefinitionError) as refused:
        db.register_udf("twice", lambda a: a, "BIGINT")
    assert refused.value.code == "LDB-1012"
    db.register_udf("count_char", count_char, "BIGINT")
    db.execute("CREATE SOURCE s (k BIGINT, txt VARCHAR); "
               "CREATE STREAM counted AS SELECT k, count_char(txt, 'a') AS n FROM s")
    sub = db.subscribe_stream("counted")
    db.insert("s", [{"k": 1, "txt": "banana"}, {"k": 2, "txt": None}])
    db.checkpoint()
    os.kill(db.metrics()["cluster"]["members"][0]["pid"], signal.SIGKILL)
    db.insert("s", [{"k": 3, "txt": "aardvark"}])  # waits for the recovery, then runs
    wait_until(lambda: sub.to_arrow().num_rows >= 3, timeout=60)
    assert sorted(map(tuple, (r.values() for r in sub.to_arrow().to_pylist()))) == [(1, 3), (2, 0), (3, 3)]
    assert len(db.metrics()["database"]["recoveries"]) == 1


def test_config_udfs_travel_by_reference_and_a_clock_is_refused(database):
    """``config={"udfs": …}`` as ``laminardb.open`` takes it: registered by reference with
    the database; a lambda and a ``config["clock"]`` are refused before anything starts."""
    from laminardb.errors import ConfigError
    from laminardb.nexmark.udfs import count_char
    from laminardb.sql.exceptions import UdfDefinitionError

    with pytest.raises(ConfigError, match="clock"):
        database("clocked", clock=lambda: 0)
    with pytest.raises(UdfDefinitionError, match="cannot import"):
        database("lambda-udf", udfs={"f": (lambda a: a, "BIGINT")})
    db = database("config-udf", udfs={"count_char": (count_char, "BIGINT")}, coordinator="local")
    db.execute("CREATE SOURCE s (x VARCHAR); CREATE STREAM n AS SELECT count_char(x, 'a') AS n FROM s")
    sub = db.subscribe_stream("n")
    db.insert("s", [{"x": "banana"}, {"x": "xyz"}])
    db.finish()
    assert sub.to_arrow().column("n").to_pylist() == [3, 0]
