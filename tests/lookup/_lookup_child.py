"""The pipeline ``test_lookup_crash.py`` kills: ``python _lookup_child.py CONFIG.json``.

A durable database: orders inserted from Python (resuming at ``offset('orders')``), looked up
in PostgreSQL (LEFT JOIN … FOR SYSTEM_TIME AS OF), written to an exactly-once FILE sink. An
insert whose lookups fail (the parent revoked access) is accepted and held by the join: the
child goes on. With ``"finish": true`` it finishes and exits; otherwise it waits to be killed.
"""

from __future__ import annotations

import json
import sys

import laminardb
from laminardb.connectors.exceptions import LookupTableUnavailableError
from tests._services.crash_child import feed_until_killed

SCRIPT = """
CREATE TABLE IF NOT EXISTS customers (id BIGINT, name VARCHAR, tier INT, PRIMARY KEY (id) NOT ENFORCED)
  WITH ('connector' = 'jdbc', 'url' = '${URL}', 'table-name' = 'customers', 'username' = 'lkp',
        'password' = '${PASSWORD}', 'lookup.cache.max-rows' = '100', 'lookup.cache.ttl' = '1 min',
        'lookup.max-retries' = '0');
CREATE SOURCE IF NOT EXISTS orders (id BIGINT, cid BIGINT);
CREATE STREAM IF NOT EXISTS j AS SELECT o.id, o.cid, c.name FROM (SELECT *, PROCTIME() AS pt FROM orders) AS o
  LEFT JOIN customers FOR SYSTEM_TIME AS OF o.pt AS c ON o.cid = c.id;
CREATE SINK IF NOT EXISTS j_out FROM j INTO FILE (path = '${OUT}/j', format = 'jsonl');
"""


def row(i: int) -> dict:
    return {"id": i, "cid": i % 230}


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": "150ms",
                                           "vars": {"URL": cfg["url"], "PASSWORD": cfg["password"],
                                                    "OUT": cfg["out"]}})
    db.execute(SCRIPT)
    def insert(source: str, rows: list) -> None:
        try:
            db.insert(source, rows)
        except LookupTableUnavailableError:
            print("held", flush=True)  # accepted (WAL) and held by the join until PostgreSQL answers

    feed_until_killed(db, "orders", row, cfg, insert=insert)


if __name__ == "__main__":
    main()
