"""Database connectors in the Delta mode, against real PostgreSQL, MariaDB and Ray.

- CDC sources: one actor reads the change log, the rows go to their keys' owners actor → actor,
  and a killed reader loses and doubles nothing. The oracle is the database itself: the
  cluster's view ends equal to ``SELECT k, COUNT(*), SUM(v) … GROUP BY k`` run on the server.
- PostgreSQL and Iceberg sinks: staged by the head, committed by the Delta coordinator once per
  epoch, through an actor kill; the committed tables hold every (key, seq) once and the window
  aggregates of the embedded engine over the same rows.
"""

from __future__ import annotations

import os
import random
import signal

import pytest

from tests._services.fixtures import mariadb_server, postgres_server  # noqa: F401
from tests._services.procs import wait_until
from tests.delta.workload import DDL, ROWS, batch, reference, rows
from tests.delta.workload import KEYS as WORKLOAD_KEYS

pytestmark = pytest.mark.integration

VIEW = "CREATE MATERIALIZED VIEW totals AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k"
KEYS = 7


def _pg_table(server) -> tuple[str, object]:
    db = server.create_database("cdcray")
    conn = server.connect(db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k BIGINT, v DOUBLE PRECISION)")
        cur.execute("ALTER TABLE t REPLICA IDENTITY FULL")
        cur.execute(f"INSERT INTO t SELECT g, g % {KEYS}, g FROM generate_series(1, 200) g")  # the snapshot
    return db, conn


def _changes(conn, rng: random.Random, next_id: list[int], n: int) -> None:
    """``n`` random transactions of inserts, updates (also moving rows between keys) and deletes."""
    with conn.cursor() as cur:
        for _ in range(n):
            op = rng.random()
            if op < 0.5:
                ids = range(next_id[0], next_id[0] + rng.randint(1, 20))
                next_id[0] += len(ids)
                cur.execute("INSERT INTO t (id, k, v) VALUES " +
                            ", ".join(f"({i}, {rng.randrange(KEYS)}, {rng.randint(-50, 50)})" for i in ids))
            elif op < 0.8:
                cur.execute(f"UPDATE t SET v = v + 1, k = (k + {rng.randint(0, 1)}) % {KEYS} "
                            f"WHERE id % 13 = {rng.randrange(13)}")
            else:
                cur.execute(f"DELETE FROM t WHERE id % 29 = {rng.randrange(29)}")


def _truth(conn) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute("SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k ORDER BY k")
        return [(int(k), int(n), float(s)) for k, n, s in cur.fetchall()]


def _view(db) -> list[tuple]:
    rows = db.query("SELECT k, n, s FROM totals").to_pylist()
    return sorted((int(r["k"]), int(r["n"]), float(r["s"])) for r in rows if r["n"])


def test_postgres_cdc_on_two_actors_through_a_killed_reader(database, postgres_server) -> None:  # noqa: F811
    """The snapshot, then random changes; the reading actor SIGKILLed mid-stream; the view ends
    equal to PostgreSQL's own GROUP BY, and the slot never confirms past a committed checkpoint."""
    pg = postgres_server
    name, conn = _pg_table(pg)
    db = database(checkpoint_interval="1s")
    db.execute(f"""
        CREATE SOURCE cdc (id BIGINT, k BIGINT, v DOUBLE, PRIMARY KEY (id) NOT ENFORCED)
        FROM POSTGRES_CDC (hostname = '{pg.host}', port = '{pg.port}', username = 'postgres',
                           database-name = '{name}', table-name = 't', slot.name = 'ray_slot');
        {VIEW};""")
    db.start()
    rng, next_id = random.Random(7), [1000]
    _changes(conn, rng, next_id, 40)
    wait_until(lambda: db.metrics()["checkpoints"]["checkpoints"] >= 2, timeout=60, what="two checkpoints")
    reader = db.metrics()["sources"]["cdc"]["changelog"]["reader"]
    os.kill(db.metrics()["cluster"]["members"][reader]["pid"], signal.SIGKILL)
    _changes(conn, rng, next_id, 40)
    truth = _truth(conn)
    wait_until(lambda: _view(db) == truth, timeout=120, interval=0.5, what="the view to equal PostgreSQL's GROUP BY")
    assert len(db.metrics()["database"]["recoveries"]) >= 1


def test_mysql_cdc_on_two_actors(database, mariadb_server) -> None:  # noqa: F811
    """The same pipeline from MariaDB's binlog, read by one actor, equals MariaDB's GROUP BY."""
    my = mariadb_server
    name = my.create_database("cdcray")
    conn = my.connect(name)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k BIGINT, v DOUBLE)")
        cur.execute("INSERT INTO t (id, k, v) SELECT seq, seq % 7, seq FROM seq_1_to_200")
    db = database(checkpoint_interval="1s")
    db.execute(f"""
        CREATE SOURCE cdc (id BIGINT, k BIGINT, v DOUBLE, PRIMARY KEY (id) NOT ENFORCED)
        FROM MYSQL_CDC (hostname = '{my.host}', port = '{my.port}', username = '{my.user}',
                        password = '{my.password}', database-name = '{name}', table-name = 't');
        {VIEW};""")
    db.start()
    rng, next_id = random.Random(11), [1000]
    _changes(conn, rng, next_id, 60)
    truth = _truth(conn)
    wait_until(lambda: _view(db) == truth, timeout=120, interval=0.5, what="the view to equal MariaDB's GROUP BY")
    assert db.metrics()["sources"]["cdc"]["changelog"]["reader"] in (0, 1)  # read on an actor


SINK_BATCHES = 8


def test_postgres_and_iceberg_sinks_commit_exactly_once_through_an_actor_kill(
        database, postgres_server, tmp_path) -> None:  # noqa: F811
    import psycopg2
    from pyiceberg.catalog import load_catalog

    pg = postgres_server
    name = pg.create_database("sinkray")
    url = f"postgresql://postgres@{pg.host}:{pg.port}/{name}"
    warehouse = tmp_path / "lake"
    warehouse.mkdir()
    db = database(checkpoint_interval="1s")
    db.execute(DDL + f"""
        ; CREATE SINK pg_seqs FROM passthru INTO POSTGRES (url = '{url}', table = 'seqs')
        ; CREATE SINK ice_windows FROM per_window INTO ICEBERG (warehouse = '{warehouse}', table = 'ldb.windows')""")
    for i in range(SINK_BATCHES):
        db.insert("t", batch(i))
        if i == SINK_BATCHES // 2:
            db.checkpoint()
            os.kill(db.metrics()["cluster"]["members"][1]["pid"], signal.SIGKILL)
    db.finish()
    db.checkpoint()

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT k, count(*), count(DISTINCT seq), min(seq), max(seq) FROM seqs GROUP BY k ORDER BY k")
            per_key = SINK_BATCHES * ROWS // WORKLOAD_KEYS
            assert cur.fetchall() == [(k, per_key, per_key, 0, per_key - 1) for k in range(WORKLOAD_KEYS)]
    finally:
        conn.close()
    catalog = load_catalog("laminardb", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                           warehouse=f"file://{warehouse}")
    table = catalog.load_table("ldb.windows")
    got = table.scan().to_arrow()
    expected, _ = reference(SINK_BATCHES)
    assert rows(got.select(["window_start", "c", "s"])) == rows(expected["per_window"])
    epochs = [s.summary.additional_properties.get("laminardb.epoch") for s in table.snapshots()]
    assert len(epochs) == len(set(epochs))  # one snapshot per epoch
    assert len(db.metrics()["database"]["recoveries"]) >= 1
