"""PostgreSQL CDC source against a real PostgreSQL 15 (the ``postgres_server`` fixture).

The oracle is PostgreSQL itself: the same GROUP BY run on the upstream table, and for the
slot's confirmed LSN, a second slot (test_decoding) that lists every transaction's end LSN.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest

import laminardb
from laminardb.connectors.exceptions import (
    CdcConfigError,
    CdcPositionLostError,
    CdcSchemaError,
    ChangelogSourceInsertError,
)
from tests._services.procs import kill_proc, wait_until

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
_KEYS = 5


# ---------------------------------------------------------------- helpers
def _opts(pg, db: str, slot: str, table: str = "t") -> str:
    return (f"hostname = '{pg.host}', port = '{pg.port}', username = 'postgres', database-name = '{db}', "
            f"schema-name = 'public', table-name = '{table}', slot.name = '{slot}'")


def _source_ddl(pg, db: str, slot: str, *, if_not_exists: bool = False) -> str:
    ine = "IF NOT EXISTS " if if_not_exists else ""
    return (f"CREATE SOURCE {ine}cdc (id INT, k VARCHAR, v BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
            f"FROM POSTGRES_CDC ({_opts(pg, db, slot)})")


@pytest.fixture
def pg_db(postgres_server):
    """A fresh database with table t(id, k, v), REPLICA IDENTITY FULL; yields (name, cursor).
    Its replication slots are dropped at teardown."""
    db = postgres_server.create_database("cdc")
    conn = postgres_server.connect(db)
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (id INT PRIMARY KEY, k TEXT, v INT)")
    cur.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    yield db, cur
    _drop_slots(postgres_server, db)
    conn.close()


def _drop_slots(pg, db: str) -> None:
    conn = pg.connect(db)
    try:
        with conn.cursor() as cur:
            def released() -> bool:
                cur.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s AND active", (db,))
                return cur.fetchone()[0] == 0
            wait_until(released, timeout=15, what="the slots' readers to go")
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                        (db,))
    finally:
        conn.close()


def _pg_groupby(cur) -> list[tuple]:
    cur.execute("SELECT k, count(*), sum(v) FROM t GROUP BY k ORDER BY k")
    return [(k, n, int(s)) for k, n, s in cur.fetchall()]


def _view(conn) -> list[tuple]:
    return sorted((r["k"], r["n"], r["s"]) for r in conn.query("SELECT k, n, s FROM agg").to_pylist())


def _random_txn(cur, rng: random.Random, next_id: list[int]) -> None:
    """1-4 random inserts/updates/deletes in one transaction; one in ten rolls back."""
    cur.execute("BEGIN")
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5:
            next_id[0] += 1
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (next_id[0], f"k{rng.randrange(_KEYS)}",
                                                             rng.randrange(1000)))
        elif op < 0.8:
            cur.execute("UPDATE t SET k = %s, v = v + %s WHERE id = %s",
                        (f"k{rng.randrange(_KEYS)}", rng.randrange(100), rng.randint(1, next_id[0])))
        else:
            cur.execute("DELETE FROM t WHERE id = %s", (rng.randint(1, next_id[0]),))
    cur.execute("ROLLBACK" if rng.random() < 0.1 else "COMMIT")


class _Writer(threading.Thread):
    """Random transactions on t until stopped (its own connection)."""

    def __init__(self, pg, db: str, seed: int, next_id: int, pause: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.conn = pg.connect(db)
        self.rng, self.next_id, self.pause = random.Random(seed), [next_id], pause
        self.stop = threading.Event()
        self.txns = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    _random_txn(cur, self.rng, self.next_id)
                    self.txns += 1
                    time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        self.conn.close()
        assert self.error is None, f"writer failed: {self.error!r}"


def _seed_rows(cur, n: int) -> None:
    cur.execute("INSERT INTO t SELECT g, 'k' || (g %% %s), g %% 97 FROM generate_series(1, %s) g", (_KEYS, n))


# ---------------------------------------------------------------- snapshot and stream
def test_snapshot_with_concurrent_changes_has_no_gap_and_no_overlap(postgres_server, pg_db):
    db, cur = pg_db
    _seed_rows(cur, 3000)
    writer = _Writer(postgres_server, db, seed=1, next_id=3000, pause=0.0)
    writer.start()
    conn = laminardb.open()
    try:
        conn.execute(_source_ddl(postgres_server, db, "snap"))
        # per id: how many live rows the changelog holds (1 each, or an overlap/gap shows)
        conn.execute("CREATE MATERIALIZED VIEW per_id AS SELECT id, COUNT(*) AS c, SUM(v) AS s FROM cdc GROUP BY id")
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()  # the snapshot is read while the writer commits
        _wait_streaming(conn)
        before = writer.txns
        wait_until(lambda: writer.txns > before + 200, timeout=30, what="changes after the snapshot")
        assert before > 0  # and changes before and during it
        writer.finish()
        wait_until(lambda: _view(conn) == _pg_groupby(cur), timeout=30, what="the view to equal PostgreSQL's")
        got = sorted((r["id"], r["c"], r["s"]) for r in conn.query("SELECT id, c, s FROM per_id").to_pylist())
        cur.execute("SELECT id, 1, v FROM t ORDER BY id")
        assert got == [tuple(r) for r in cur.fetchall()]
        with pytest.raises(ChangelogSourceInsertError, match="change stream only"):
            conn.insert("cdc", [{"id": 1, "k": "x", "v": 1}])
        conn.flush(timeout_s=20)  # lag() reaches 0 once the stream has caught up
        src = conn.metrics()["sources"]["cdc"]
        assert src["status"] == "connected" and src["changelog"]["slot"] == "snap"
        assert src["changelog"]["lag_bytes"] == 0
    finally:
        writer.stop.set()
        conn.close()


def test_random_changes_end_equal_to_postgres_group_by(postgres_server, pg_db):
    db, cur = pg_db
    _seed_rows(cur, 200)
    conn = laminardb.open()
    try:
        conn.execute(_source_ddl(postgres_server, db, "rnd"))
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()
        _wait_streaming(conn)
        rng = random.Random(7)
        next_id = [200]
        for i in range(400):
            _random_txn(cur, rng, next_id)
            if i == 200:  # the source's connections drop mid-stream: it reconnects
                # (streaming, not still creating the slot: a new slot waits for running transactions)
                wait_until(lambda: conn.metrics()["sources"]["cdc"]["changelog"]["position"] is not None
                           and _slot_pid(cur, "rnd"), timeout=10, what="the slot's reader")
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = 'laminardb-cdc-cdc'")
                assert cur.rowcount == 2  # the replication and the side connection
        conn.flush(timeout_s=30)  # returns once every change committed before it is read
        assert _view(conn) == _pg_groupby(cur)
        health = conn.metrics()["sources"]["cdc"]
        assert health["errors"] >= 1 and health["status"] == "connected", health
        # in memory, ingested rows are confirmed on the slot (nothing could replay them)
        pos = conn.metrics()["sources"]["cdc"]["changelog"]["position"]
        wait_until(lambda: _lsn(_slot_confirmed(cur, "rnd")) >= _lsn(pos), timeout=10,
                   what="the slot to confirm what was ingested")
    finally:
        conn.close()


def _wait_streaming(conn, source: str = "cdc") -> None:
    wait_until(lambda: conn.metrics()["sources"][source]["changelog"]["position"] is not None, timeout=20,
               what="the source to stream")


def _slot_pid(cur, slot: str) -> int | None:
    cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return None if row is None else row[0]


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _slot_confirmed(cur, slot: str) -> str:
    cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return cur.fetchone()[0]


# ---------------------------------------------------------------- exactly-once under SIGKILL
def _checkpoint_lsn(db_dir: Path, *, oldest: bool = False) -> int | None:
    """The CDC source's LSN in the newest committed checkpoint, or in the oldest one kept (how
    far a recovery may fall back); None: no checkpoint has it yet."""
    from laminardb.checkpoint.store import CheckpointStore

    store = CheckpointStore(db_dir)
    if oldest:
        kept = store.complete()
        manifest = store.load(kept[0]) if kept else None
    else:
        manifest, _ = store.latest()
    if manifest is None:
        return None
    state = msgpack.unpackb(store.read_file(manifest, "connectors.msgpack"), raw=False).get("cdc")
    return None if state is None else state["lsn"]


def _commit_ends(cur) -> list[int]:
    """End LSNs of every transaction on t since the oracle slot was made (test_decoding)."""
    cur.execute("SELECT lsn::text FROM pg_logical_slot_peek_changes('oracle', NULL, NULL) WHERE data LIKE 'COMMIT%'")
    return [_lsn(r[0]) for r in cur.fetchall()]


def test_sigkill_loop_ends_equal_to_postgres_and_the_slot_never_passes_the_checkpoint(
        postgres_server, pg_db, tmp_path):
    db, cur = pg_db
    seed = int(os.environ.get("LAMINARDB_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    _seed_rows(cur, 500)
    cur.execute("SELECT pg_create_logical_replication_slot('oracle', 'test_decoding')")
    db_dir, log = tmp_path / "db", tmp_path / "child.log"
    cfg = {"db": str(db_dir), "view_out": str(tmp_path / "view.json"), "interval": "200ms",
           "source_ddl": _source_ddl(postgres_server, db, "crash", if_not_exists=True)}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def spawn() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(HERE / "_pg_cdc_child.py"), str(cfg_path)],
                                stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)  # noqa: SIM115

    def check_slot_behind_checkpoint(when: str) -> None:
        """No transaction of t ends between the oldest kept checkpoint's LSN (the deepest a
        recovery falls back) and what the slot confirmed: PostgreSQL still has all of them."""
        confirmed, ckpt = _lsn(_slot_confirmed(cur, "crash")), _checkpoint_lsn(db_dir, oldest=True)
        # no checkpoint holds the source's position yet: a recovery starts from the slot's
        # consistent point (logged by the child that made the slot), whose snapshot has
        # every change before it; a slot made but not yet logged has confirmed nothing
        made = re.findall(r"streaming from ([0-9A-F]+/[0-9A-F]+)", log.read_text())
        floor = ckpt if ckpt is not None else _lsn(made[-1]) if made else confirmed
        passed = [e for e in _commit_ends(cur) if floor < e <= confirmed]
        assert not passed, (f"seed {seed}, {when}: the slot confirmed {confirmed:X} past the oldest kept "
                            f"checkpoint's (or the new slot's) {floor:X}, over transactions ending at {[f'{e:X}' for e in passed]}")

    writer = _Writer(postgres_server, db, seed=seed, next_id=500, pause=0.003)
    writer.start()
    proc = None
    try:
        for kill in range(4):
            started = log.read_text().count("started") if log.exists() else 0
            proc = spawn()
            wait_until(lambda s=started: log.exists() and log.read_text().count("started") > s, timeout=60,  # noqa: B023
                       what=f"child run {kill} to start")
            time.sleep(rng.uniform(0.3, 2.0))
            proc.kill()
            proc.wait(30)
            check_slot_behind_checkpoint(f"after kill {kill}")
        writer.finish()
        proc = spawn()
        expected = _pg_groupby(cur)
        view_out = Path(cfg["view_out"])

        def caught_up() -> bool:
            try:
                got = [tuple(r) for r in json.loads(view_out.read_text())]
            except (OSError, ValueError):
                return False
            return got == [list(e) for e in expected] or got == [tuple(e) for e in expected]

        wait_until(caught_up, timeout=60, what=f"seed {seed}: the recovered view to equal PostgreSQL's GROUP BY")
        proc.kill()
        proc.wait(30)
        check_slot_behind_checkpoint("at the end")
        assert _checkpoint_lsn(db_dir) is not None
    finally:
        writer.stop.set()
        if proc is not None:
            kill_proc(proc, hard=True)
        cur.execute("SELECT pg_drop_replication_slot('oracle')")


def test_a_first_start_takes_over_a_stale_slot_and_recovery_without_its_slot_stops(postgres_server, pg_db,
                                                                                  tmp_path):
    db, cur = pg_db
    _seed_rows(cur, 30)
    cur.execute("SELECT pg_create_logical_replication_slot('dur', 'pgoutput')")  # left by an earlier run
    cfg = {"checkpoint_retain": 1, "checkpoint_interval": "off"}  # checkpoints only when the test says
    conn = laminardb.open(str(tmp_path / "db"), config=cfg)
    try:
        conn.execute(_source_ddl(postgres_server, db, "dur"))
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()
        _wait_streaming(conn)
        cur.execute("UPDATE t SET v = v + 1 WHERE id < 10")
        wait_until(lambda: _view(conn) == _pg_groupby(cur), timeout=20, what="the view to equal PostgreSQL's")
        conn.checkpoint()
        wait_until(lambda: _lsn(_slot_confirmed(cur, "dur")) >= _checkpoint_lsn(tmp_path / "db"), timeout=10,
                   what="the slot to confirm the checkpoint")
        # the Delta coordinator's two phases: the slot confirms a change at publish, not at prepare
        cur.execute("SELECT pg_create_logical_replication_slot('oracle', 'test_decoding')")
        cur.execute("DELETE FROM t WHERE id < 5")
        wait_until(lambda: _view(conn) == _pg_groupby(cur), timeout=20, what="the delete")
        end = wait_until(lambda: _commit_ends(cur), timeout=10, what="the delete's commit LSN")[-1]
        coord = conn.engine.durable
        epoch = coord.epoch + 1
        coord.prepare(epoch)
        time.sleep(0.3)  # a few polls and keepalives
        assert _lsn(_slot_confirmed(cur, "dur")) < end
        coord.publish(epoch)
        wait_until(lambda: _lsn(_slot_confirmed(cur, "dur")) >= end, timeout=10,
                   what="the slot to confirm the published checkpoint")
    finally:
        conn.close()
    _drop_slots(postgres_server, db)
    conn = laminardb.open(str(tmp_path / "db"), config=cfg)
    try:
        conn.start()
        with pytest.raises(Exception, match="CdcPositionLostError.*LDB-4072.*slot 'dur' is gone"):
            conn.flush(timeout_s=10)
        assert CdcPositionLostError.permanent
    finally:
        conn.close()


# ---------------------------------------------------------------- types and schema changes
def test_types_nulls_and_timestamptz_in_utc(postgres_server, pg_db):
    db, cur = pg_db
    cur.execute("CREATE TABLE ty (id BIGINT PRIMARY KEY, s SMALLINT, i INT, n NUMERIC(12, 3), r REAL, d DOUBLE "
                "PRECISION, t TEXT, vc VARCHAR(10), b BOOLEAN, ts TIMESTAMP, tz TIMESTAMPTZ, dt DATE, j JSON, "
                "jb JSONB)")
    cur.execute("ALTER TABLE ty REPLICA IDENTITY FULL")
    cur.execute("SET TimeZone = 'America/New_York'")  # the writer's zone must not matter
    before = ("INSERT INTO ty VALUES (1, -3, 70000, 12345.678, 1.5, 2.25, 'héllo', 'ab', true, "
              "'2024-02-29 23:59:59.123456', '2024-03-10 01:30:00-05', '2024-02-29', '{\"a\": [1, 2]}', "
              "'{\"b\": null}'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    cur.execute(before)
    conn = laminardb.open()
    try:
        conn.execute(f"CREATE SOURCE ty (id BIGINT, s SMALLINT, i BIGINT, n DOUBLE, r FLOAT, d DOUBLE, t VARCHAR, "
                     f"vc VARCHAR, b BOOLEAN, ts TIMESTAMP(6), tz TIMESTAMP(3), dt DATE, j VARCHAR, jb VARCHAR, "
                     f"PRIMARY KEY (id) NOT ENFORCED) FROM POSTGRES_CDC ({_opts(postgres_server, db, 'ty', 'ty')})")
        conn.execute("CREATE MATERIALIZED VIEW tv AS SELECT * FROM ty")
        conn.start()
        _wait_streaming(conn, "ty")  # one row from the snapshot, the same values again through the stream
        cur.execute(before.replace("(1, ", "(3, ", 1).replace("(2, NULL", "(4, NULL"))
        wait_until(lambda: len(conn.query("SELECT id FROM tv")) == 4, timeout=20, what="4 rows")
        got = {r["id"]: r for r in conn.query("SELECT * FROM tv").to_pylist()}
        cur.execute("SELECT id, s, i, n, r, d, t, vc, b, ts, tz AT TIME ZONE 'UTC', dt, j::text, jb::text FROM ty")
        names = ["id", "s", "i", "n", "r", "d", "t", "vc", "b", "ts", "tz", "dt", "j", "jb"]
        for row in cur.fetchall():
            want = dict(zip(names, row, strict=True))
            if want["n"] is not None:
                want["n"] = float(want["n"])
            assert got[want["id"]] == want
        assert got[1]["tz"] == dt.datetime(2024, 3, 10, 6, 30)  # -05 → UTC, milliseconds kept
    finally:
        conn.close()


def test_an_untouched_toasted_value_comes_from_the_old_row(postgres_server, pg_db):
    """An update that leaves a large (TOASTed, stored out of line) value alone sends it as
    'unchanged': the new row takes it from the old one."""
    db, cur = pg_db
    _seed_rows(cur, 5)
    big = "SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 600)"  # ~19 KB, not compressible away
    conn = laminardb.open()
    try:
        conn.execute(_source_ddl(postgres_server, db, "toast"))
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()
        _wait_streaming(conn)  # the changes below come through the stream, not the snapshot
        cur.execute(f"INSERT INTO t VALUES (100, ({big}), 1), (101, ({big}), 2)")
        cur.execute("UPDATE t SET v = v + 10 WHERE id >= 100")  # k untouched: sent as unchanged
        cur.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 't'")
        cur.execute(f"SELECT count(DISTINCT chunk_id) FROM {cur.fetchone()[0]}")
        assert cur.fetchone()[0] == 2  # both values stored out of line
        conn.flush(timeout_s=20)
        assert _view(conn) == _pg_groupby(cur)
    finally:
        conn.close()


@pytest.mark.parametrize("change, message", [
    ("ALTER TABLE t DROP COLUMN v", "CdcSchemaError: [LDB-4071] .*'v' no longer exists upstream.*Recreate the source"),
    ("ALTER TABLE t ALTER COLUMN v TYPE TEXT", "CdcSchemaError: [LDB-4071] .*'v' changed type upstream"),
    ("TRUNCATE t", "CdcUnsupportedChangeError: [LDB-4074] .*TRUNCATEd.*Recreate the source"),
])
def test_a_dropped_or_retyped_column_or_truncate_stops_the_source_an_added_column_is_ignored(
        postgres_server, pg_db, change, message):
    db, cur = pg_db
    _seed_rows(cur, 10)
    conn = laminardb.open()
    try:
        conn.execute(_source_ddl(postgres_server, db, "schema"))
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()
        _wait_streaming(conn)
        cur.execute("ALTER TABLE t ADD COLUMN extra TEXT DEFAULT 'x'")
        cur.execute("INSERT INTO t VALUES (11, 'k1', 5, 'y')")
        cur.execute("UPDATE t SET extra = 'z' WHERE id = 2")  # an undeclared column only: no change
        wait_until(lambda: _view(conn) == _pg_groupby(cur), timeout=20, what="the added column to be ignored")
        before = _view(conn)
        cur.execute(change)
        cur.execute("INSERT INTO t (id, k) VALUES (12, 'k2')")
        wait_until(lambda: conn.metrics()["sources"]["cdc"]["status"] == "error", timeout=20,
                   what="the source to stop")
        err = conn.metrics()["sources"]["cdc"]["last_error"]
        assert re.search(message.replace("[", r"\[").replace("]", r"\]"), err), err
        assert _view(conn) == before  # nothing written after the change
    finally:
        conn.close()


# ---------------------------------------------------------------- declarations
def test_flink_cdc_ddl_reads_the_table(postgres_server, pg_db):
    db, cur = pg_db
    _seed_rows(cur, 20)
    conn = laminardb.open()
    try:
        conn.execute(f"""CREATE TABLE cdc (id INT, k STRING, v BIGINT, PRIMARY KEY (id) NOT ENFORCED) WITH (
            'connector' = 'postgres-cdc', 'hostname' = '{postgres_server.host}', 'port' = '{postgres_server.port}',
            'username' = 'postgres', 'password' = 'unused', 'database-name' = '{db}', 'schema-name' = 'public',
            'table-name' = 't', 'slot.name' = 'flink', 'decoding.plugin.name' = 'pgoutput')""")
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM cdc GROUP BY k")
        conn.start()
        _wait_streaming(conn)
        cur.execute("DELETE FROM t WHERE id <= 5")
        wait_until(lambda: _view(conn) == _pg_groupby(cur), timeout=20, what="the view to equal PostgreSQL's")
        assert "unused" not in json.dumps(conn.metrics(), default=str)
    finally:
        conn.close()


def test_replica_identity_not_full_and_unsupported_types_are_refused_by_name(postgres_server, pg_db):
    db, cur = pg_db
    cur.execute("CREATE TABLE plain (id INT PRIMARY KEY, u UUID)")
    conn = laminardb.open()
    try:
        with pytest.raises(CdcConfigError, match=r'ALTER TABLE "public"."plain" REPLICA IDENTITY FULL'):
            conn.execute(f"CREATE SOURCE p (id INT, PRIMARY KEY (id) NOT ENFORCED) "
                         f"FROM POSTGRES_CDC ({_opts(postgres_server, db, 'plain', 'plain')})")
        cur.execute("ALTER TABLE plain REPLICA IDENTITY FULL")
        with pytest.raises(CdcSchemaError, match="'u' has upstream type 'uuid'"):
            conn.execute(f"CREATE SOURCE p (id INT, u VARCHAR, PRIMARY KEY (id) NOT ENFORCED) "
                         f"FROM POSTGRES_CDC ({_opts(postgres_server, db, 'plain', 'plain')})")
        with pytest.raises(CdcSchemaError, match="'id' is int4 upstream but declared SMALLINT; declare it INT"):
            conn.execute(f"CREATE SOURCE p (id SMALLINT, PRIMARY KEY (id) NOT ENFORCED) "
                         f"FROM POSTGRES_CDC ({_opts(postgres_server, db, 'plain', 'plain')})")
    finally:
        conn.close()
