"""A PostgreSQL lookup join in the Delta mode: a query that calls PROCTIME() itself runs whole
in the database head (``cluster/backend.py``); one whose processing-time column comes from
another stream runs its join on the actors, partitioned by the lookup key (each actor
fetches and caches its keys). Both give the embedded engine's answer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests._services.fixtures import postgres_server  # noqa: F401
from tests._services.procs import wait_until

_TABLE = ("CREATE TABLE customers (id BIGINT, name VARCHAR, tier INT, PRIMARY KEY (id) NOT ENFORCED) "
          "WITH ('connector' = 'postgres', 'url' = 'postgresql://127.0.0.1:{port}/{db}', 'table-name' = 'customers', "
          "'username' = 'postgres', 'lookup.cache.max-rows' = '100', 'lookup.cache.ttl' = '1 min')")
_QUERIES = {
    "head": "CREATE STREAM j AS SELECT o.id, c.name FROM (SELECT *, PROCTIME() AS pt FROM orders) AS o "
            "LEFT JOIN customers FOR SYSTEM_TIME AS OF o.pt AS c ON o.cid = c.id",
    "actors": "CREATE STREAM o2 AS SELECT *, PROCTIME() AS pt FROM orders; CREATE STREAM j AS SELECT o.id, c.name "
              "FROM o2 AS o LEFT JOIN customers FOR SYSTEM_TIME AS OF o.pt AS c ON o.cid = c.id",
}


def _drain_into(sub, got: list) -> int:
    while (b := sub.try_next()) is not None:
        got.extend(pa.Table.from_batches([b]).to_pylist())
    return len(got)


@pytest.mark.parametrize("where", ["head", "actors"])
def test_lookup_join_in_the_cluster_gives_the_embedded_answer(database, postgres_server, where):  # noqa: F811
    import laminardb

    dbname = postgres_server.create_database("lookup_delta")
    conn = postgres_server.connect(dbname)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, tier INT)")
        cur.execute("INSERT INTO customers SELECT g, 'name ' || g, g % 3 FROM generate_series(1, 100) g")
    conn.close()
    orders = [{"id": i, "cid": i % 130} for i in range(600)]
    answers = []
    for db in (laminardb.open(), database()):
        try:
            db.execute(_TABLE.format(port=postgres_server.port, db=dbname))
            db.execute("CREATE SOURCE orders (id BIGINT, cid BIGINT)")
            db.execute(_QUERIES[where])
            sub = db.subscribe_stream("j")
            for i in range(0, len(orders), 100):
                db.insert("orders", orders[i : i + 100])
            got: list[dict] = []
            wait_until(lambda sub=sub, got=got: _drain_into(sub, got) >= len(orders), timeout=30,
                       what="the join's output")
            answers.append(sorted((r["id"], r["name"]) for r in got))
        finally:
            db.close()
    assert answers[0] == answers[1]
    assert sum(1 for _, name in answers[0] if name is None) == 600 - sum(1 for o in orders if 1 <= o["cid"] <= 100)
