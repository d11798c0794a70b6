"""Change data capture: rows/s from PostgreSQL and MariaDB into a keyed aggregate, beside the raw
rate of the replication client alone over the same changes.

Run from the repository root (starts its own servers, as the tests do):

    .venv/bin/python bench/bench_cdc.py                  # 200k changes, twice, both databases
    .venv/bin/python bench/bench_cdc.py --rows 500k --repeat 3 --only postgres

Per database and run, the same changes are read twice from the server's log:

- ``raw client``: the replication client alone — psycopg2's ``LogicalReplicationConnection``
  receiving the pgoutput messages (no decoding), or ``mysql-replication``'s
  ``BinLogStreamReader`` yielding its decoded row events;
- ``laminardb``: a durable database with ``CREATE SOURCE … FROM POSTGRES_CDC / MYSQL_CDC`` and
  a materialized view ``SELECT k, COUNT(*), SUM(v) … GROUP BY k`` over it, reopened after the
  changes were written so that it streams them from its checkpointed position; timed until the
  source has ingested every change (the view is then checked against the database's own
  GROUP BY).

The changes are ``--rows`` inserts then ``--rows // 4`` updates, written before either reader
starts, so both read the same log at full speed. Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._services.databases import start_mariadb, start_postgres  # noqa: E402

KEYS = 1000


def parse_count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


# ----------------------------------------------------------------------------- PostgreSQL
def pg_source_ddl(pg, db: str, slot: str) -> str:
    return f"""
    CREATE SOURCE cdc (id BIGINT, k BIGINT, v DOUBLE, PRIMARY KEY (id) NOT ENFORCED)
    FROM POSTGRES_CDC (hostname = '{pg.host}', port = '{pg.port}', username = 'postgres', password = '',
                       database-name = '{db}', schema-name = 'public', table-name = 't', slot.name = '{slot}');
    CREATE MATERIALIZED VIEW totals AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k;
    """


def pg_write_changes(conn, rows: int) -> int:
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO t SELECT g, g % {KEYS}, g * 0.5 FROM generate_series(1, {rows}) g")
        cur.execute(f"UPDATE t SET v = v + 1 WHERE id <= {rows // 4}")
    return rows + 2 * (rows // 4)  # an update is a retraction and an insertion


def pg_raw(pg, db: str, slot: str, messages: int) -> float:
    """Seconds for psycopg2 to receive ``messages`` row messages of the slot (undecoded)."""
    import select

    import psycopg2
    import psycopg2.extras

    rc = psycopg2.connect(host=pg.host, port=pg.port, user="postgres", dbname=db,
                          connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = rc.cursor()
        t0 = time.perf_counter()
        cur.start_replication(slot_name=slot, decode=False,
                              options={"proto_version": "1", "publication_names": "bench_pub"})
        seen = 0
        while seen < messages:
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 1.0)
                continue
            kind = msg.payload[:1]
            if kind in (b"I", b"U", b"D"):
                seen += 1 if kind != b"U" else 2
        return time.perf_counter() - t0
    finally:
        rc.close()


def run_postgres(rows: int) -> dict:
    import laminardb

    pg = start_postgres()
    work = Path(tempfile.mkdtemp(prefix="bench-cdc-pg-"))
    try:
        db = pg.create_database("bench")
        conn = pg.connect(db)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k BIGINT, v DOUBLE PRECISION)")
            cur.execute("ALTER TABLE t REPLICA IDENTITY FULL")
            cur.execute("CREATE PUBLICATION bench_pub FOR TABLE t")
            cur.execute("SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')")
        ldb = laminardb.open(str(work / "db"), config={"checkpoint_interval": "1s"})
        ldb.execute(pg_source_ddl(pg, db, "bench_ldb"))
        ldb.start()
        time.sleep(1.0)
        ldb.checkpoint()
        ldb.close()
        changes = pg_write_changes(conn, rows)
        raw_s = pg_raw(pg, db, "bench_raw", changes)
        ldb_s, ok = _laminardb_time(work / "db", changes, conn_check=lambda: _server_group_by(conn))
        return {"changes": changes, "raw_rows_s": changes / raw_s, "laminardb_rows_s": changes / ldb_s,
                "view_equals_database": ok}
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def _server_group_by(conn) -> list:
    """The view's rows as the database computes them (the oracle), for either server."""
    with conn.cursor() as cur:
        cur.execute("SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k ORDER BY k")
        return [(int(k), int(n), round(float(s), 6)) for k, n, s in cur.fetchall()]


# ----------------------------------------------------------------------------- MariaDB
def my_source_ddl(my, db: str) -> str:
    return f"""
    CREATE SOURCE cdc (id BIGINT, k BIGINT, v DOUBLE, PRIMARY KEY (id) NOT ENFORCED)
    FROM MYSQL_CDC (hostname = '{my.host}', port = '{my.port}', username = '{my.user}', password = '{my.password}',
                    database-name = '{db}', table-name = 't', server-id = '5401');
    CREATE MATERIALIZED VIEW totals AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k;
    """


def my_write_changes(conn, rows: int) -> int:
    with conn.cursor() as cur:
        step = 10_000
        for lo in range(1, rows + 1, step):
            hi = min(rows, lo + step - 1)
            cur.execute(f"INSERT INTO t (id, k, v) SELECT seq, seq % {KEYS}, seq * 0.5 FROM seq_{lo}_to_{hi}")
        cur.execute(f"UPDATE t SET v = v + 1 WHERE id <= {rows // 4}")
    return rows + 2 * (rows // 4)


def my_raw(my, db: str, file: str, pos: int, changes: int) -> float:
    """Seconds for mysql-replication to yield ``changes`` row images from (file, pos)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    settings = {"host": my.host, "port": my.port, "user": my.user, "passwd": my.password}
    t0 = time.perf_counter()
    stream = BinLogStreamReader(connection_settings=settings, server_id=5402, log_file=file, log_pos=pos,
                                resume_stream=True, blocking=True, only_schemas=[db],
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], is_mariadb=True)
    try:
        seen = 0
        for event in stream:
            seen += len(event.rows) * (2 if isinstance(event, UpdateRowsEvent) else 1)
            if seen >= changes:
                break
        return time.perf_counter() - t0
    finally:
        stream.close()


def run_mariadb(rows: int) -> dict:
    import laminardb

    my = start_mariadb()
    work = Path(tempfile.mkdtemp(prefix="bench-cdc-my-"))
    try:
        db = my.create_database("bench")
        conn = my.connect(db)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k BIGINT, v DOUBLE)")
        ldb = laminardb.open(str(work / "db"), config={"checkpoint_interval": "1s"})
        ldb.execute(my_source_ddl(my, db))
        ldb.start()
        time.sleep(1.0)
        ldb.checkpoint()
        ldb.close()
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        changes = my_write_changes(conn, rows)
        raw_s = my_raw(my, db, file, int(pos), changes)
        ldb_s, ok = _laminardb_time(work / "db", changes, conn_check=lambda: _server_group_by(conn))
        return {"changes": changes, "raw_rows_s": changes / raw_s, "laminardb_rows_s": changes / ldb_s,
                "view_equals_database": ok}
    finally:
        my.stop()
        shutil.rmtree(work, ignore_errors=True)




# ----------------------------------------------------------------------------- laminardb side
def _laminardb_time(directory: Path, changes: int, conn_check) -> tuple[float, bool]:
    """Reopen the database (it streams from its checkpointed position) and time until its
    source ingested ``changes`` rows; then compare the view with the database's GROUP BY."""
    import laminardb

    ldb = laminardb.open(str(directory), config={"checkpoint_interval": "10s"})
    try:
        base = _rows_in(ldb)
        t0 = time.perf_counter()  # from start(): the reopen's own recovery is not the reader's rate
        ldb.start()
        deadline = time.monotonic() + 600
        while _rows_in(ldb) - base < changes:
            if time.monotonic() > deadline:
                raise TimeoutError(f"laminardb ingested {_rows_in(ldb) - base} of {changes} changes")
            time.sleep(0.01)
        took = time.perf_counter() - t0
        got = sorted((int(r["k"]), int(r["n"]), round(float(r["s"]), 6))
                     for r in ldb.query("SELECT k, n, s FROM totals").to_pylist())
        return took, got == conn_check()
    finally:
        ldb.close()


def _rows_in(ldb) -> int:
    return int(ldb.metrics()["sources"]["cdc"]["rows_in"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="200k")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", choices=["postgres", "mariadb"], default=None)
    args = ap.parse_args()
    rows = parse_count(args.rows)
    results: dict[str, list[dict]] = {}
    for name, run in (("postgres", run_postgres), ("mariadb", run_mariadb)):
        if args.only and name != args.only:
            continue
        for i in range(args.repeat):
            r = run(rows)
            results.setdefault(name, []).append(r)
            print(f"{name} run {i + 1}: {r['changes']:,} changes; raw client {r['raw_rows_s']:,.0f} rows/s, "
                  f"laminardb {r['laminardb_rows_s']:,.0f} rows/s "
                  f"({r['laminardb_rows_s'] / r['raw_rows_s']:.2f} of raw); view = database: "
                  f"{r['view_equals_database']}", flush=True)
    for name, runs in results.items():
        ratio = [r["laminardb_rows_s"] / r["raw_rows_s"] for r in runs]
        print(f"{name}: laminardb/raw median {statistics.median(ratio):.2f} (spread {min(ratio):.2f}-{max(ratio):.2f})")
    print("BENCH_JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
