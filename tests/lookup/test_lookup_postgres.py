"""Lookup joins against a real PostgreSQL table (``'connector' = 'jdbc'`` / ``'postgres'``):
output against DuckDB's join of the same orders with a snapshot of the table, the cache's TTL,
one query per input batch (counted by the operator and in the server's own statement log),
metrics, LEFT join NULLs, bad options, and an outage (REVOKE, then GRANT) that loses no row."""

from __future__ import annotations

import random
import time

import duckdb
import pyarrow as pa
import pytest

import laminardb
from laminardb.connectors.exceptions import (
    LookupOnlyTableError,
    LookupTableConfigError,
    LookupTableUnavailableError,
)
from laminardb.sql.exceptions import UnsupportedJoinError, UnsupportedSqlError
from tests._services.procs import wait_until

PASSWORD = "s3cret-pw"
N_CUSTOMERS = 200


@pytest.fixture
def pg(postgres_server):
    """A fresh database with ``customers`` (id 1…200; every 7th name NULL), readable by role
    ``lkp``; every statement is logged (``log_statement = all``) so tests can count queries."""
    name = postgres_server.create_database("lookup")
    conn = postgres_server.connect(name)
    with conn.cursor() as cur:
        cur.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'lkp') THEN "
                    f"CREATE ROLE lkp LOGIN PASSWORD '{PASSWORD}'; END IF; END $$")
        cur.execute("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, tier INT)")
        cur.execute(f"INSERT INTO customers SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'name ' || g END, g % 3 "
                    f"FROM generate_series(1, {N_CUSTOMERS}) g")
        cur.execute("GRANT SELECT ON customers TO lkp")
        cur.execute(f'ALTER DATABASE "{name}" SET log_statement = \'all\'')
    yield postgres_server, name, conn
    conn.close()


def _ddl(server, dbname: str, connector: str = "jdbc", opts: dict[str, str] | None = None) -> str:
    url = (f"jdbc:postgresql://127.0.0.1:{server.port}/{dbname}" if connector == "jdbc"
           else f"postgresql://127.0.0.1:{server.port}/{dbname}")
    base = {"connector": connector, "url": url, "table-name": "customers", "username": "lkp", "password": PASSWORD}
    base.update(opts or {})
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in base.items())
    return ("CREATE TABLE customers (id BIGINT, name VARCHAR, tier INT, PRIMARY KEY (id) NOT ENFORCED) "
            f"WITH ({listed})")


_JOIN = ("CREATE STREAM j AS SELECT o.id, o.cid, c.name, c.tier FROM (SELECT *, PROCTIME() AS proc_time "
         "FROM orders) AS o {kind} JOIN customers FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.cid = c.id {extra}")


def _open(server, dbname: str, opts: dict[str, str] | None = None, *, kind: str = "", extra: str = "",
          connector: str = "jdbc"):
    db = laminardb.open()
    db.execute(_ddl(server, dbname, connector, opts))
    db.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT)")
    db.execute(_JOIN.format(kind=kind, extra=extra))
    return db, db.subscribe_stream("j")


def _drain(sub) -> list[dict]:
    out = []
    while (b := sub.try_next()) is not None:
        out += pa.Table.from_batches([b]).to_pylist()
    return out


def _snapshot(conn) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute("SELECT id, name, tier FROM customers")
        rows = cur.fetchall()
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "name": pa.array([r[1] for r in rows]),
                     "tier": pa.array([r[2] for r in rows], pa.int32())})


def _oracle(orders: pa.Table, customers: pa.Table, kind: str, extra: str) -> list[tuple]:
    sql = (f"SELECT o.id, o.cid, c.name, c.tier FROM orders o {kind} JOIN customers c ON o.cid = c.id "
           f"{extra.replace('AND c.', 'AND c.')}")
    con = duckdb.connect()
    con.register("orders", orders)
    con.register("customers", customers)
    rows = con.execute(sql).fetchall()
    con.close()
    return sorted(rows, key=repr)


def _lookup_metrics(db) -> dict:
    return db.metrics()["queries"]["j"]["lookup"]


def _statements(server, marker: str = 'FROM "customers" WHERE') -> int:
    """Lookup statements PostgreSQL logged (log_statement = all) so far."""
    return (server.data_dir / "server.log").read_text(errors="replace").count(marker)


@pytest.mark.parametrize("kind,extra,connector", [("", "", "jdbc"), ("LEFT", "", "postgres"),
                                                  ("LEFT", "AND c.tier <> 1", "jdbc")])
def test_join_equals_duckdb_over_a_snapshot(pg, kind, extra, connector):
    server, dbname, conn = pg
    db, sub = _open(server, dbname, {"lookup.cache.max-rows": "1000", "lookup.cache.ttl": "1 min"}, kind=kind,
                    extra=extra, connector=connector)
    rng = random.Random(7)
    orders = pa.table({"id": pa.array(range(1500), pa.int64()),
                       "cid": pa.array([None if i % 50 == 0 else rng.randrange(0, 260) for i in range(1500)],
                                       pa.int64())})
    for part in orders.to_batches(max_chunksize=100):
        db.insert("orders", part)
    got = sorted((r["id"], r["cid"], r["name"], r["tier"]) for r in _drain(sub))
    assert got == sorted(_oracle(orders, _snapshot(conn), kind, extra))
    if kind:
        assert any(r[2] is None and r[1] is not None and r[1] > N_CUSTOMERS for r in got)  # unmatched: NULLs
    db.close()


def test_cached_rows_are_used_until_the_ttl_and_no_cache_sees_updates_at_once(pg):
    server, dbname, conn = pg
    cached, sub = _open(server, dbname, {"lookup.cache.max-rows": "100", "lookup.cache.ttl": "1 s"})
    live, live_sub = _open(server, dbname)
    fetched_before = time.monotonic()  # the cached row is fetched after this: it expires 1 s later at the earliest
    for db in (cached, live):
        db.insert("orders", [{"id": 1, "cid": 5}])
    assert [r["name"] for r in _drain(sub)] == [r["name"] for r in _drain(live_sub)] == ["name 5"]
    with conn.cursor() as cur:
        cur.execute("UPDATE customers SET name = 'renamed' WHERE id = 5")
    live.insert("orders", [{"id": 2, "cid": 5}])
    assert [r["name"] for r in _drain(live_sub)] == ["renamed"]  # no cache: the update at once
    cached.insert("orders", [{"id": 2, "cid": 5}])
    assert [r["name"] for r in _drain(sub)] == ["name 5"]  # within the TTL: the cached row

    def renamed() -> bool:
        cached.insert("orders", [{"id": 3, "cid": 5}])
        return [r["name"] for r in _drain(sub)] == ["renamed"]

    wait_until(renamed, timeout=10, interval=0.1, what="the cached row to expire")
    assert time.monotonic() - fetched_before >= 1.0  # not before the TTL ran out
    m = _lookup_metrics(cached)
    assert m["cache_hits"] >= 1 and m["cache_misses"] == 2 and m["queries"] == 2
    cached.close()
    live.close()


def test_misses_are_fetched_in_one_query_per_batch(pg):
    server, dbname, _ = pg
    db, sub = _open(server, dbname, {"lookup.cache.max-rows": "1000", "lookup.cache.ttl": "1 min"})
    before = _statements(server)
    db.insert("orders", [{"id": i, "cid": i % 50 + 1} for i in range(400)])  # 50 distinct keys
    m = _lookup_metrics(db)
    assert (m["queries"], m["cache_misses"], m["cache_hits"], m["rows_fetched"]) == (1, 50, 0, 50)
    db.insert("orders", [{"id": i, "cid": i % 60 + 1} for i in range(400, 700)])  # 50 cached, 10 new
    m = _lookup_metrics(db)
    assert (m["queries"], m["cache_misses"], m["cache_hits"], m["rows_fetched"]) == (2, 60, 50, 60)
    db.insert("orders", [{"id": 800, "cid": 3}])  # all hits: no query at all
    m = _lookup_metrics(db)
    assert (m["queries"], m["cache_hits"]) == (2, 51)
    db.insert("orders", [{"id": 900, "cid": 1000 + i} for i in range(30)])  # absent keys: fetched once, cached
    db.insert("orders", [{"id": 901, "cid": 1000 + i} for i in range(30)])
    m = _lookup_metrics(db)
    assert (m["queries"], m["cache_misses"], m["cache_hits"], m["errors"]) == (3, 90, 81, 0)
    assert _statements(server) - before == 3  # what PostgreSQL itself received
    assert len(_drain(sub)) == 701
    db.close()


def test_lru_keeps_at_most_max_rows_keys(pg):
    server, dbname, _ = pg
    db, sub = _open(server, dbname, {"lookup.cache.max-rows": "10", "lookup.cache.ttl": "1 min"})
    db.insert("orders", [{"id": i, "cid": i + 1} for i in range(10)])  # keys 1…10 cached
    db.insert("orders", [{"id": 10, "cid": 1}])  # 1 is now the most recent
    db.insert("orders", [{"id": 11, "cid": 11}])  # evicts 2, the least recently used
    db.insert("orders", [{"id": 12, "cid": 1}, {"id": 13, "cid": 2}])  # 1 hit, 2 fetched again
    m = _lookup_metrics(db)
    assert (m["cache_hits"], m["cache_misses"], m["cached_keys"], m["queries"]) == (2, 12, 10, 3)
    assert len(_drain(sub)) == 14
    db.close()


@pytest.mark.parametrize("opts,fragment", [
    ({"lookup.cache.max-rows": "10"}, "needs 'lookup.cache.ttl'"),
    ({"lookup.cache.max-rows": "ten", "lookup.cache.ttl": "1 s"}, "whole number"),
    ({"lookup.cache.max-rows": "10", "lookup.cache.ttl": "soon"}, "no duration"),
    ({"lookup.cache.caching-missing-key": "maybe"}, "'true' or 'false'"),
    ({"lookup.cache": "FULL"}, "'NONE' or 'PARTIAL'"),
    ({"scan.fetch-size": "100"}, "'scan.*' does not apply"),
    ({"lookup.cache.size": "1"}, "unknown option 'lookup.cache.size'"),
    ({"url": "jdbc:mysql://127.0.0.1:3306/db"}, "PostgreSQL url"),
    ({"url": "jdbc:postgresql://127.0.0.1:5432/db?useSSL=false"}, "url parameter 'useSSL'"),
    ({"driver": "com.mysql.cj.jdbc.Driver"}, "PostgreSQL only"),
])
def test_bad_options_are_refused_at_create(pg, opts, fragment):
    server, dbname, _ = pg
    db = laminardb.open()
    with pytest.raises(LookupTableConfigError) as e:
        db.execute(_ddl(server, dbname, opts=opts))
    assert e.value.code == "LDB-4080" and fragment in str(e.value) and PASSWORD not in str(e.value)
    db.close()


def test_the_table_can_only_be_looked_up(pg):
    server, dbname, _ = pg
    db = laminardb.open()
    db.execute(_ddl(server, dbname))
    db.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
    for sql in ("CREATE STREAM x AS SELECT * FROM customers",
                "CREATE STREAM x AS SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id",
                "SELECT * FROM customers"):
        with pytest.raises(LookupOnlyTableError) as e:
            db.query(sql) if sql.startswith("SELECT") else db.execute(sql)
        assert e.value.code == "LDB-4082" and "FOR SYSTEM_TIME AS OF" in str(e.value)
        assert PASSWORD not in str(e.value)
    with pytest.raises(UnsupportedJoinError, match="PROCTIME"):  # event time: no versions to pick from
        db.execute("CREATE STREAM x AS SELECT o.id FROM orders o JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c "
                   "ON o.cid = c.id")
    with pytest.raises(UnsupportedJoinError, match="column of c"):
        db.execute("CREATE STREAM x AS SELECT o.id FROM (SELECT *, PROCTIME() AS p FROM orders) o JOIN customers "
                   "FOR SYSTEM_TIME AS OF o.p AS c ON o.cid = c.id + 1")
    with pytest.raises(UnsupportedSqlError, match="read by lookup"):
        db.execute("INSERT INTO customers SELECT cid, 'x', 1 FROM orders")
    with pytest.raises(UnsupportedSqlError, match="computed column"):  # a lookup table has no processing time
        db.execute(_ddl(server, dbname).replace("CREATE TABLE customers (", "CREATE TABLE c2 (pt AS PROCTIME(), "))
    with pytest.raises(laminardb.LaminarError, match="lookup table"):
        db.insert("customers", [{"id": 1, "name": "x", "tier": 1}])
    db.execute(_JOIN.format(kind="", extra="").replace("FROM orders", "FROM orders WHERE id > 0"))
    with pytest.raises(laminardb.LaminarError, match="j read from it"):
        db.execute("DROP TABLE customers")
    db.execute("DROP STREAM j")
    db.execute("DROP TABLE customers")
    db.close()


def test_an_outage_keeps_the_rows_and_joins_them_once_postgres_answers(pg):
    server, dbname, conn = pg
    db, sub = _open(server, dbname, {"lookup.max-retries": "1"}, kind="LEFT")
    orders = pa.table({"id": pa.array(range(300), pa.int64()), "cid": pa.array([i % 230 for i in range(300)],
                                                                                 pa.int64())})
    parts = orders.to_batches(max_chunksize=100)
    db.insert("orders", parts[0])
    with conn.cursor() as cur:
        cur.execute("REVOKE SELECT ON customers FROM lkp")  # lookups now fail: permission denied
    with pytest.raises(LookupTableUnavailableError) as e:
        db.insert("orders", parts[1])
    assert e.value.code == "LDB-4081" and "customers" in str(e.value) and PASSWORD not in str(e.value)
    m = _lookup_metrics(db)
    assert m["pending_rows"] == 100 and m["errors"] == 2  # one try + one retry
    with conn.cursor() as cur:
        cur.execute("GRANT SELECT ON customers TO lkp")
    db.insert("orders", parts[2])  # the held rows first, then these, in one query
    got = sorted(((r["id"], r["cid"], r["name"], r["tier"]) for r in _drain(sub)), key=repr)
    assert got == _oracle(orders, _snapshot(conn), "LEFT", "")
    assert _lookup_metrics(db)["pending_rows"] == 0
    db.close()


def test_an_unreachable_server_is_a_typed_error(pg):
    server, dbname, _ = pg
    from tests._services.procs import free_port

    db = laminardb.open()
    db.execute(_ddl(server, dbname).replace(f":{server.port}/", f":{free_port()}/"))
    db.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT)")
    db.execute(_JOIN.format(kind="", extra=""))
    with pytest.raises(LookupTableUnavailableError) as e:
        db.insert("orders", [{"id": 1, "cid": 1}])
    assert "did not answer" in str(e.value) and PASSWORD not in str(e.value)
    db.close()


def test_a_polled_source_survives_an_outage_without_losing_rows(pg):
    """datagen orders polled by Connection.start(), declared as in Flink (``proc_time AS
    PROCTIME()``): while PostgreSQL refuses, the runner's batches fail (counted, retried) and
    the lookup holds their rows; after GRANT every order is joined exactly once."""
    server, dbname, conn = pg
    n = 4000
    db = laminardb.open()
    db.execute(_ddl(server, dbname, opts={"lookup.max-retries": "0", "lookup.cache.max-rows": "50", "lookup.cache.ttl": "100 ms"}))
    db.execute(f"CREATE TABLE orders (id BIGINT, cid BIGINT, proc_time AS PROCTIME()) WITH ('connector' = "
               f"'datagen', 'rows-per-second' = '2000', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', "
               f"'fields.id.end' = '{n}', 'fields.cid.min' = '1', 'fields.cid.max' = '150')")
    db.execute("CREATE STREAM j AS SELECT o.id, o.cid, c.name FROM orders AS o JOIN customers FOR SYSTEM_TIME AS OF "
               "o.proc_time AS c ON o.cid = c.id")
    sub = db.subscribe_stream("j")
    got: list[dict] = []
    db.start()
    try:
        wait_until(lambda: got.extend(_drain(sub)) or len(got) > 100, timeout=10, what="first joined rows")
        with conn.cursor() as cur:
            cur.execute("REVOKE SELECT ON customers FROM lkp")
        wait_until(lambda: _lookup_metrics(db)["errors"] >= 3, timeout=10, what="failing lookups")
        with conn.cursor() as cur:
            cur.execute("GRANT SELECT ON customers TO lkp")
        wait_until(lambda: got.extend(_drain(sub)) or len(got) >= n, timeout=20, what="every order joined")
    finally:
        db.close()
    got += _drain(sub)
    assert sorted(r["id"] for r in got) == list(range(1, n + 1))  # none lost, none twice
    names = {r["id"]: r["name"] for r in _snapshot(conn).to_pylist()}
    assert all(r["name"] == names[r["cid"]] for r in got)


def test_composite_keys_and_column_types(pg):
    """Two key columns (one statement: (k1, k2) IN unnest(…)), a url with the role in it, and
    the column types PostgreSQL's text form gives Arrow: DOUBLE, BOOLEAN, DATE, TIMESTAMP."""
    server, dbname, conn = pg
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE prices (region VARCHAR, sku INT, price DOUBLE PRECISION, active BOOLEAN, "
                    "since DATE, seen TIMESTAMP, note VARCHAR, PRIMARY KEY (region, sku))")
        cur.execute("INSERT INTO prices SELECT r, s, s * 1.5, s % 2 = 0, DATE '2024-01-01' + s, "
                    "TIMESTAMP '2024-01-01 10:00:00.123' + s * INTERVAL '1 hour', CASE WHEN s = 3 THEN '' END "
                    "FROM unnest(ARRAY['eu', 'us']) r, generate_series(1, 20) s")
        cur.execute("GRANT SELECT ON prices TO lkp")
    db = laminardb.open()
    db.execute("CREATE TABLE prices (region VARCHAR, sku INT, price DOUBLE, active BOOLEAN, since DATE, "
               "seen TIMESTAMP(3), note VARCHAR, PRIMARY KEY (region, sku) NOT ENFORCED) WITH ('connector' = "
               f"'postgres', 'url' = 'postgresql://lkp:{PASSWORD}@127.0.0.1:{server.port}/{dbname}', "
               "'table-name' = 'public.prices')")
    db.execute("CREATE SOURCE sales (id BIGINT, region VARCHAR, sku INT)")
    db.execute("CREATE STREAM j AS SELECT s.id, p.price, p.active, p.since, p.seen, p.note FROM (SELECT *, "
               "PROCTIME() AS pt FROM sales) AS s LEFT JOIN prices FOR SYSTEM_TIME AS OF s.pt AS p "
               "ON s.region = p.region AND s.sku = p.sku")
    sub = db.subscribe_stream("j")
    sales = [{"id": i, "region": ["eu", "us", "asia"][i % 3], "sku": i % 25} for i in range(120)]
    db.insert("sales", sales)
    got = sorted(_drain(sub), key=lambda r: r["id"])
    assert db.metrics()["queries"]["j"]["lookup"]["queries"] == 1
    with conn.cursor() as cur:
        cur.execute("SELECT region, sku, price, active, since, seen, note FROM prices")
        table = {(r[0], r[1]): r[2:] for r in cur.fetchall()}
    for s, r in zip(sales, got, strict=True):
        want = table.get((s["region"], s["sku"]), (None,) * 5)
        assert (r["price"], r["active"], r["since"], r["seen"], r["note"]) == want, (s, r)
    assert any(r["note"] == "" for r in got) and any(r["price"] is None for r in got)  # '' is no NULL
    db.close()


def test_windows_after_the_lookup_wait_for_rows_held_during_an_outage(pg):
    """An event-time window over the join's output: while rows are held, the failing join
    holds the watermark back too, so no window closes without them (none dropped as late)."""
    server, dbname, conn = pg
    db = laminardb.open()
    db.execute(_ddl(server, dbname, opts={"lookup.max-retries": "0"}))
    db.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts)")
    db.execute("CREATE STREAM w AS SELECT window_start, count(*) AS n, count(c.name) AS named FROM (SELECT *, "
               "PROCTIME() AS pt FROM orders) AS o LEFT JOIN customers FOR SYSTEM_TIME AS OF o.pt AS c "
               "ON o.cid = c.id GROUP BY tumble(o.ts, INTERVAL '1' SECOND)")
    sub = db.subscribe_stream("w")
    rows = [{"id": i, "cid": i % 230, "ts": i * 10} for i in range(1000)]  # 10 windows of 100 rows
    batches = [rows[i : i + 50] for i in range(0, len(rows), 50)]
    db.insert("orders", batches[0])
    with conn.cursor() as cur:
        cur.execute("REVOKE SELECT ON customers FROM lkp")
    for b in batches[1:8]:  # the watermark of the source moves on by 350 rows' time
        with pytest.raises(LookupTableUnavailableError):
            db.insert("orders", b)
    assert _drain(sub) == []  # no window closed without its held rows
    with conn.cursor() as cur:
        cur.execute("GRANT SELECT ON customers TO lkp")
    for b in batches[8:]:
        db.insert("orders", b)
    db.finish()
    got = sorted((r["window_start"], r["n"], r["named"]) for r in _drain(sub))
    names = {r["id"]: r["name"] for r in _snapshot(conn).to_pylist()}
    want: dict[int, list[int]] = {}
    for r in rows:
        w = want.setdefault(r["ts"] // 1000 * 1000, [0, 0])
        w[0] += 1
        w[1] += names.get(r["cid"]) is not None
    assert got == sorted((k, n, named) for k, (n, named) in want.items())
    db.close()
