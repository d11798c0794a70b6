"""MySQL CDC (``FROM MYSQL_CDC``) against the real MariaDB of the ``mariadb_server`` fixture:
snapshot + binlog without gap or overlap under concurrent writes, a view equal to MariaDB's own
GROUP BY, types and NULLs, schema changes, the Flink DDL form and the server-setting checks.
The SIGKILL crash loop is in test_mysql_cdc_crash.py."""

from __future__ import annotations

import collections
import datetime as dt
import random
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

import laminardb
from laminardb.connectors.exceptions import (
    CdcConfigError,
    CdcPositionLostError,
    CdcSchemaError,
    CdcUnsupportedChangeError,
)
from laminardb.connectors.mysql_cdc import MySqlCdcSource, check_binlog_settings
from laminardb.sql.plan import WEIGHT
from tests._services.procs import wait_until
from tests.connectors._mysql_cdc_util import (
    TABLE_DDL,
    VIEW_SQL,
    group_by,
    options,
    random_changes,
    source_sql,
    view_rows,
)

_SCHEMA = pa.schema([("id", pa.int32()), ("k", pa.int32()), ("v", pa.int64())])


@pytest.fixture
def maria(mariadb_server: Any) -> Any:
    """A fresh database with table ``t``; yields ``(server, database, connection)``."""
    db = mariadb_server.create_database("cdc")
    conn = mariadb_server.connect(db)
    with conn.cursor() as cur:
        cur.execute(TABLE_DDL)
    yield mariadb_server, db, conn
    conn.close()


@pytest.fixture
def sources() -> Any:
    """Factory for MySqlCdcSource; every source is closed at teardown."""
    made: list[MySqlCdcSource] = []

    def make(server: Any, db: str, *, schema: pa.Schema = _SCHEMA, table: str = "t",
             key: tuple[str, ...] = ("id",), extra: dict[str, str] | None = None,
             **kw: Any) -> MySqlCdcSource:
        src = MySqlCdcSource(name="src", schema=schema, primary_key=key,
                             options={**options(server, db, table), **(extra or {})}, **kw)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()


def _fold(batches: list[pa.RecordBatch]) -> collections.Counter:
    """Net weight of every full row image the changelog delivered."""
    net: collections.Counter = collections.Counter()
    for b in batches:
        cols = [c for c in b.schema.names if c != WEIGHT]
        for row in b.to_pylist():
            net[tuple(row[c] for c in cols)] += row[WEIGHT]
    return net


def _table(conn: Any, sql: str = "SELECT id, k, v FROM t") -> collections.Counter:
    with conn.cursor() as cur:
        cur.execute(sql)
        return collections.Counter(tuple(r) for r in cur.fetchall())


def _poll_until(src: MySqlCdcSource, got: list[pa.RecordBatch], done: Any, timeout: float = 20) -> None:
    def step() -> bool:
        batch, _ = src.poll(100)
        if batch is not None:
            got.append(batch)
        return done()

    wait_until(step, timeout=timeout, interval=0, what="the changelog to match MariaDB")


def _poll_for_error(src: MySqlCdcSource, timeout: float = 10) -> None:
    """Poll until the source raises (the caller expects the error), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        src.poll(100)
    pytest.fail("the source raised nothing")


def test_snapshot_then_binlog_has_no_gap_and_no_overlap_under_concurrent_writes(maria, sources) -> None:
    server, db, conn = maria
    random_changes(conn, random.Random(1), 80)  # rows for the snapshot
    stop = threading.Event()

    def write() -> None:
        w = server.connect(db)
        rng = random.Random(2)
        try:
            while not stop.is_set():
                random_changes(w, rng, 5)
        finally:
            w.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.2)
        src = sources(server, db)
        got: list[pa.RecordBatch] = []
        snapshot, _ = src.poll(100)  # taken while the writer runs
        assert snapshot is not None and snapshot.num_rows > 0
        got.append(snapshot)
        _poll_until(src, got, lambda: len(got) > 3, timeout=10)  # the binlog flows
    finally:
        stop.set()
        writer.join(timeout=10)
    # an overlap shows as a row of net weight 2, a gap as a row missing or left at weight 1
    _poll_until(src, got, lambda: +_fold(got) == _table(conn))
    net = _fold(got)
    assert all(w in (0, 1) for w in net.values())
    state = src.checkpoint_state()
    assert state["gtid"] and state["file"] and state["pos"]


def test_resume_from_checkpoint_state_reads_each_transaction_once(maria, sources) -> None:
    server, db, conn = maria
    random_changes(conn, random.Random(3), 30)
    src = sources(server, db)
    got: list[pa.RecordBatch] = []
    rng = random.Random(4)
    for _ in range(3):  # stop and resume from the checkpoint state several times
        random_changes(conn, rng, 20)
        _poll_until(src, got, lambda: +_fold(got) == _table(conn))
        state = src.checkpoint_state()
        src.close()
        random_changes(conn, rng, 10)  # while no source runs
        src = sources(server, db, restore_state=state)
    _poll_until(src, got, lambda: +_fold(got) == _table(conn))
    assert all(w in (0, 1) for w in _fold(got).values())


def test_a_restart_inside_a_chunked_snapshot_goes_on_without_gap_or_overlap(maria, sources) -> None:
    server, db, conn = maria
    rng = random.Random(31)
    random_changes(conn, rng, 300, ids=200)
    chunk = {"scan.incremental.snapshot.chunk.size": "9"}
    src = sources(server, db, extra=chunk)
    got: list[pa.RecordBatch] = []
    for _ in range(4):  # stop after two chunks each time: the snapshot spans several positions
        for _ in range(2):
            batch, _ = src.poll(100)
            assert batch is not None and batch.num_rows == 9
            got.append(batch)
        state = src.checkpoint_state()
        assert "snapshot" in state
        src.close()
        # rows on both sides of the chunk boundary change, and move across it
        random_changes(conn, rng, 40, ids=200)
        src = sources(server, db, extra=chunk, restore_state=state)
    assert len(state["snapshot"]) == 4
    random_changes(conn, rng, 40, ids=200)
    _poll_until(src, got, lambda: +_fold(got) == _table(conn))
    assert all(w in (0, 1) for w in _fold(got).values())
    random_changes(conn, rng, 40, ids=200)  # past every snapshot position: the filter is gone
    _poll_until(src, got, lambda: +_fold(got) == _table(conn) and not src.checkpoint_state()["segments"])


def test_latest_offset_skips_the_snapshot(maria, sources) -> None:
    server, db, conn = maria
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1, 10), (2, 2, 20)")
    src = sources(server, db, extra={"scan.startup.mode": "latest-offset"})
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 11 WHERE id = 1")
        cur.execute("INSERT INTO t VALUES (3, 3, 30)")
    got: list[pa.RecordBatch] = []
    _poll_until(src, got, lambda: sum(b.num_rows for b in got) >= 3)
    assert _fold(got) == collections.Counter({(1, 1, 10): -1, (1, 1, 11): 1, (3, 3, 30): 1})


def test_view_over_the_source_equals_mariadbs_group_by(maria) -> None:
    server, db, conn = maria
    random_changes(conn, random.Random(5), 40)
    ldb = laminardb.open()
    try:
        ldb.execute(source_sql(server, db))
        ldb.execute(VIEW_SQL)
        ldb.start()
        rng = random.Random(6)
        for _ in range(10):  # changes while the pipeline runs
            random_changes(conn, rng, 15)
            time.sleep(0.05)
        wait_until(lambda: view_rows(ldb) == group_by(conn), timeout=20,
                   what="the view to equal MariaDB's GROUP BY")
        health = ldb.metrics()["sources"]["src"]
        assert health["status"] != "error" and health["changelog"]["position"].startswith("GTID 0-1-")
        assert health["changelog"]["rows"] > 0 and health["changelog"]["snapshot"] is None
    finally:
        ldb.close()


def test_flink_ddl_form(maria) -> None:
    server, db, conn = maria
    random_changes(conn, random.Random(7), 30)
    opts = ", ".join(f"'{k}' = '{v}'" for k, v in options(server, db).items())
    ldb = laminardb.open()
    try:
        ldb.execute(f"CREATE TABLE src (id INT, k INT, v BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
                    f"WITH ('connector' = 'mysql-cdc', {opts})")
        ldb.execute(VIEW_SQL)
        ldb.start()
        random_changes(conn, random.Random(8), 30)
        wait_until(lambda: view_rows(ldb) == group_by(conn), timeout=20,
                   what="the view to equal MariaDB's GROUP BY")
    finally:
        ldb.close()


def test_types_and_nulls(maria, sources) -> None:
    server, db, conn = maria
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+02:00'")  # TIMESTAMP is stored as UTC and read as UTC
        cur.execute("""CREATE TABLE ty (id BIGINT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED,
            si SMALLINT UNSIGNED, mi MEDIUMINT, iu INT UNSIGNED, bi BIGINT, de DECIMAL(12, 3),
            fl FLOAT, db DOUBLE, vc VARCHAR(30), tx TEXT, ch CHAR(3), bo TINYINT(1),
            dtm DATETIME(6), ts TIMESTAMP(3) NULL, d DATE, js JSON) DEFAULT CHARSET = utf8mb4""")
        row = (1, -5, 250, 65000, -8000000, 4_000_000_000, -(2**62), "12345.678", 1.5, 2.25,
               "héllo ✓", "long text", "abc", 1, "2024-02-29 23:59:58.123456",
               "2024-03-01 02:00:00.250", "2024-02-29", '{"a": [1, 2]}')
        cur.execute(f"INSERT INTO ty VALUES ({', '.join(['%s'] * len(row))})", row)
        cur.execute("INSERT INTO ty (id) VALUES (2)")  # every other column NULL
    schema = pa.schema([("id", pa.int64()), ("ti", pa.int8()), ("tu", pa.int16()), ("si", pa.int32()),
                        ("mi", pa.int32()), ("iu", pa.int64()), ("bi", pa.int64()), ("de", pa.float64()),
                        ("fl", pa.float32()), ("db", pa.float64()), ("vc", pa.string()),
                        ("tx", pa.string()), ("ch", pa.string()), ("bo", pa.bool_()),
                        ("dtm", pa.timestamp("us")), ("ts", pa.timestamp("ms")), ("d", pa.date32()),
                        ("js", pa.string())])
    src = sources(server, db, schema=schema, table="ty")
    snap, _ = src.poll(100)
    with conn.cursor() as cur:  # the same rows again through the binlog
        cur.execute("SET time_zone = '+02:00'")
        cur.execute("INSERT INTO ty SELECT id + 10, ti, tu, si, mi, iu, bi, de, fl, db, vc, tx, ch, bo, dtm, "
                    "ts, d, js FROM ty")
    got: list[pa.RecordBatch] = []
    _poll_until(src, got, lambda: sum(b.num_rows for b in got) >= 2)
    expected = {"ti": -5, "tu": 250, "si": 65000, "mi": -8000000, "iu": 4_000_000_000, "bi": -(2**62),
                "de": 12345.678, "fl": 1.5, "db": 2.25, "vc": "héllo ✓", "tx": "long text", "ch": "abc",
                "bo": True, "dtm": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
                "ts": dt.datetime(2024, 3, 1, 0, 0, 0, 250000), "d": dt.date(2024, 2, 29)}
    for rows in (snap.to_pylist(), pa.Table.from_batches(got).to_pylist()):
        full, empty = sorted(rows, key=lambda r: r["id"])
        assert {c: full[c] for c in expected} == expected
        assert full["js"].replace(" ", "") == '{"a":[1,2]}'
        assert all(empty[c] is None for c in expected) and empty[WEIGHT] == 1


def test_added_column_is_ignored_dropped_column_stops_the_source(maria, sources) -> None:
    server, db, conn = maria
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1, 10)")
    src = sources(server, db)
    got: list[pa.RecordBatch] = []
    got.append(src.poll(100)[0])
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE t ADD COLUMN extra VARCHAR(10) DEFAULT 'x'")
        cur.execute("ALTER TABLE t ADD COLUMN first_col INT FIRST")  # shifts every ordinal
        cur.execute("INSERT INTO t (id, k, v) VALUES (2, 2, 20)")
        cur.execute("UPDATE t SET v = 11 WHERE id = 1")
    _poll_until(src, got, lambda: +_fold(got) == _table(conn))
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE t DROP COLUMN v")
        cur.execute("INSERT INTO t (id, k) VALUES (3, 3)")
    with pytest.raises(CdcSchemaError, match=r"LDB-4071.*'v' is not a column of .*dropped or renamed"):
        _poll_for_error(src)


def test_a_column_replaced_by_one_of_the_same_type_stops_the_source(maria, sources) -> None:
    server, db, conn = maria
    src = sources(server, db)
    src.poll(100)
    with conn.cursor() as cur:  # the binlog's column layout stays the same: only the ALTER tells
        cur.execute("ALTER TABLE t DROP COLUMN v, ADD COLUMN w BIGINT")
        cur.execute("INSERT INTO t VALUES (1, 1, 10)")
    with pytest.raises(CdcSchemaError, match=r"'v' is not a column of .*\(it has id, k, w\)"):
        _poll_for_error(src)


@pytest.mark.parametrize("statement", ["TRUNCATE TABLE t", "DROP TABLE t", "RENAME TABLE t TO t_old"])
def test_a_statement_that_removes_the_rows_stops_the_source_after_what_came_before(
        maria, sources, statement: str) -> None:
    server, db, conn = maria
    src = sources(server, db)
    src.poll(100)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1, 10)")
        cur.execute(statement)
    got: list[pa.RecordBatch] = []
    with pytest.raises(CdcUnsupportedChangeError, match=r"LDB-4074.*\.t was (TRUNCATED|DROPPED|RENAMED) upstream"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            batch, _ = src.poll(100)
            if batch is not None:
                got.append(batch)
    assert _fold(got) == collections.Counter({(1, 1, 10): 1})  # the insert before it was delivered


def test_retyped_column_stops_the_source(maria, sources) -> None:
    server, db, conn = maria
    src = sources(server, db)
    assert src.poll(100)[0] is None  # empty table
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE t MODIFY v VARCHAR(20)")
        cur.execute("INSERT INTO t VALUES (1, 1, 'not a number')")
    with pytest.raises(CdcSchemaError, match=r"'v'.*varchar\(20\) upstream but declared BIGINT"):
        _poll_for_error(src)


def test_dropped_column_stops_the_sql_source_with_its_error(maria) -> None:
    server, db, conn = maria
    ldb = laminardb.open()
    try:
        ldb.execute(source_sql(server, db))
        ldb.execute(VIEW_SQL)
        ldb.start()
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE t DROP COLUMN v")
            cur.execute("INSERT INTO t (id, k) VALUES (1, 1)")
        wait_until(lambda: "LDB-4071" in str(ldb.metrics()["sources"]["src"]["last_error"]),
                   timeout=15, what="the source to stop on the dropped column")
    finally:
        ldb.close()


def test_server_settings_are_checked_by_name() -> None:
    good = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
    check_binlog_settings(good, source="s")
    with pytest.raises(CdcConfigError, match=r"binlog_row_image = MINIMAL.*SET GLOBAL binlog_row_image = 'FULL'"):
        check_binlog_settings({**good, "binlog_row_image": "MINIMAL"}, source="s")
    with pytest.raises(CdcConfigError, match=r"binlog_format = MIXED.*binlog_format = ROW"):
        check_binlog_settings({**good, "binlog_format": "MIXED"}, source="s")
    with pytest.raises(CdcConfigError, match=r"log_bin = OFF.*--log-bin"):
        check_binlog_settings({**good, "log_bin": "OFF"}, source="s")


def test_the_live_server_refuses_a_minimal_row_image(maria, sources) -> None:
    server, db, conn = maria
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(CdcConfigError, match="binlog_row_image = MINIMAL"):
            sources(server, db)
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_image = 'FULL'")


def test_bad_declarations_are_refused_at_start(maria, sources) -> None:
    server, db, conn = maria
    with pytest.raises(CdcConfigError, match="does not exist"):
        sources(server, db, table="nope")
    with pytest.raises(CdcConfigError, match=r"PRIMARY KEY \(k\) is not the primary key .*\(id\)"):
        sources(server, db, key=("k",))
    with pytest.raises(CdcSchemaError, match="declare it BIGINT"):
        sources(server, db, schema=pa.schema([("id", pa.int32()), ("v", pa.int32())]))
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE e (id INT PRIMARY KEY, c ENUM('a', 'b')) DEFAULT CHARSET = utf8mb4")
    with pytest.raises(CdcSchemaError, match="enum.*leave the column out"):
        sources(server, db, table="e", schema=pa.schema([("id", pa.int32()), ("c", pa.string())]))


def test_a_killed_binlog_connection_resumes_from_the_last_whole_transaction(maria, sources) -> None:
    server, db, conn = maria
    random_changes(conn, random.Random(21), 30)
    src = sources(server, db)
    got: list[pa.RecordBatch] = []
    rng = random.Random(22)
    for _ in range(3):
        random_changes(conn, rng, 20)
        _poll_until(src, got, lambda: +_fold(got) == _table(conn))
        for pid in wait_until(lambda: src.poll(10)[0] is None and _binlog_dumps(conn), timeout=10,
                              what="the reader's binlog connection"):
            with conn.cursor() as cur:  # the server drops the reader's binlog connection
                cur.execute(f"KILL {int(pid)}")
    random_changes(conn, rng, 20)
    _poll_until(src, got, lambda: +_fold(got) == _table(conn))
    assert all(w in (0, 1) for w in _fold(got).values())


def _binlog_dumps(conn: Any) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SHOW PROCESSLIST")
        return [r[0] for r in cur.fetchall() if r[4] == "Binlog Dump"]


def test_a_position_no_longer_in_the_binlog_stops_the_source(maria, sources) -> None:
    server, db, conn = maria
    src = sources(server, db)
    src.poll(100)
    state = {**src.checkpoint_state(), "gtid": "0-1-999999999"}  # never written: not in the binlog
    src.close()
    src = sources(server, db, restore_state=state)
    with pytest.raises(CdcPositionLostError, match=r"LDB-4072.*no longer has the binlog at GTID 0-1-999999999"):
        _poll_for_error(src)
