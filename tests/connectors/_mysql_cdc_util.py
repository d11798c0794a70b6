"""Helpers shared by the MySQL CDC tests and their crash child: connector options for the test
MariaDB, random changes, and the oracle (MariaDB's own GROUP BY)."""

from __future__ import annotations

import random
from typing import Any

TABLE_DDL = ("CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, v BIGINT NOT NULL) "
             "ENGINE = InnoDB DEFAULT CHARSET = utf8mb4")
VIEW_SQL = "CREATE MATERIALIZED VIEW IF NOT EXISTS agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM src GROUP BY k"
IDS = 60  # primary keys the random changes pick from: small, so updates and deletes hit rows
KEYS = 5  # group keys


def options(server: Any, database: str, table: str = "t") -> dict[str, str]:
    return {"hostname": server.host, "port": str(server.port), "username": server.user,
            "password": server.password, "database-name": database, "table-name": table}


def source_sql(server: Any, database: str, *, name: str = "src", if_not_exists: bool = False,
               extra: dict[str, str] | None = None) -> str:
    opts = ", ".join(f"{k} = '{v}'" for k, v in {**options(server, database), **(extra or {})}.items())
    ine = "IF NOT EXISTS " if if_not_exists else ""
    return (f"CREATE SOURCE {ine}{name} (id INT, k INT, v BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
            f"FROM MYSQL_CDC ({opts})")


def random_changes(conn: Any, rng: random.Random, transactions: int, *, ids: int = IDS) -> None:
    """Inserts, updates (of the value, the group key and the primary key) and deletes, 1-4 per
    transaction, on primary keys below ``ids``."""
    with conn.cursor() as cur:
        for _ in range(transactions):
            ops = rng.randint(1, 4)
            if ops > 1:
                cur.execute("BEGIN")
            for n in range(ops):
                if n == 2:  # a savepoint is logged inside the transaction: it must not end it
                    cur.execute("SAVEPOINT sp")
                i, what = rng.randrange(ids), rng.random()
                if what < 0.45:
                    cur.execute("INSERT INTO t VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE v = v + 1",
                                (i, rng.randrange(KEYS), rng.randint(-50, 100)))
                elif what < 0.65:
                    cur.execute("UPDATE t SET v = %s WHERE id = %s", (rng.randint(-50, 100), i))
                elif what < 0.75:
                    cur.execute("UPDATE t SET k = %s WHERE id = %s", (rng.randrange(KEYS), i))
                elif what < 0.82:  # the row moves to another primary key
                    cur.execute("UPDATE IGNORE t SET id = %s WHERE id = %s", (rng.randrange(ids), i))
                else:
                    cur.execute("DELETE FROM t WHERE id = %s", (i,))
            if ops > 1:
                cur.execute("COMMIT")


def group_by(conn: Any) -> list[tuple[int, int, int]]:
    """The oracle: ``SELECT k, COUNT(*), SUM(v) … GROUP BY k`` run by MariaDB itself."""
    with conn.cursor() as cur:
        cur.execute("SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k ORDER BY k")
        return [(int(k), int(n), int(s)) for k, n, s in cur.fetchall()]


def view_rows(db: Any) -> list[tuple[int, int, int]]:
    rows = db.query("SELECT k, n, s FROM agg").to_pylist()
    return sorted((r["k"], r["n"], r["s"]) for r in rows if r["n"])
