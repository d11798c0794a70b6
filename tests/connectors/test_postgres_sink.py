"""PostgreSQL sinks against a real PostgreSQL 15: COPY of append-only streams, upserts and
deletes of changelogs, exactly-once under SIGKILL, failed commits retried, typed errors.

The oracle is DuckDB over the same input rows; the table is read back with psycopg2.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import laminardb
from laminardb.connectors.exceptions import (
    PostgresAuthError,
    PostgresConfigError,
    PostgresPrivilegeError,
    PostgresSchemaError,
    PostgresUnavailableError,
)
from laminardb.connectors.postgres_sink import ExactlyOncePostgresSink
from tests._services.crash_child import spawn_child, wait_for_more  # noqa: E402
from tests._services.procs import free_port
from tests.connectors._pg_crash_child import BUCKET, KEYS, row

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECRET = "S3cret-pw-xyzzy"  # with trust auth any password is accepted: it must never be shown
_CHILD_TIMEOUT_S = 90


class Pg:
    """One fresh database of the session server: its URL, and SQL as the superuser."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.name = server.create_database("sink")
        self.conn = server.connect(self.name)

    def url(self, user: str = "postgres", password: str = SECRET) -> str:
        return f"postgresql://{user}:{password}@{self.server.host}:{self.server.port}/{self.name}"

    def rows(self, sql: str) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if cur.description else []


@pytest.fixture
def pg(postgres_server: Any) -> Any:
    db = Pg(postgres_server)
    yield db
    db.conn.close()


def duck(sql: str, **tables: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.sql(sql).fetchall()


def open_db(kind: str, tmp_path: Path) -> Any:
    return laminardb.open(str(tmp_path / "db"), config={"checkpoint_interval": "off"}) if kind == "durable" \
        else laminardb.open()


def settle(db: Any, kind: str) -> None:
    db.flush(timeout_s=30)
    if kind == "durable":
        db.checkpoint()


# -- append-only: COPY ------------------------------------------------------------------------

_T0 = datetime(2024, 3, 1, 12, 0, 0)
_WORDS = ["plain", "a,b", 'quo"te', "new\nline", "", None, "ünïcødé", "\\N", " pad "]


def events(lo: int, hi: int) -> list[dict]:
    return [{"k": _WORDS[i % len(_WORDS)], "v": i, "x": i / 7, "ok": i % 2 == 0 if i % 5 else None,
             "ts": _T0 + timedelta(milliseconds=1001 * i)} for i in range(lo, hi)]


@pytest.mark.parametrize("kind", ["durable", "memory"])
def test_append_only_stream_equals_duckdb(pg: Pg, tmp_path: Path, kind: str) -> None:
    batches = [events(0, 40), events(40, 41), events(41, 120)]
    with open_db(kind, tmp_path) as db:
        db.execute("CREATE SOURCE ev (k VARCHAR, v BIGINT, x DOUBLE, ok BOOLEAN, ts TIMESTAMP(3))")
        db.execute("CREATE STREAM out AS SELECT k, v, x * 3 AS x3, ok, ts FROM ev WHERE v % 4 <> 1")
        db.execute(f"CREATE SINK s FROM out INTO POSTGRES (url = '{pg.url()}', table = 'public.out_t')")
        db.start()
        for b in batches:
            db.insert("ev", b)
            settle(db, kind)
        m = db.metrics()["sinks"]["s"]
    ev = pa.Table.from_pylist([r for b in batches for r in b]).cast(
        pa.schema([("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("ok", pa.bool_()),
                   ("ts", pa.timestamp("ms"))]))
    want = duck("SELECT k, v, x * 3, ok, ts FROM ev WHERE v % 4 <> 1 ORDER BY v", ev=ev)
    got = pg.rows("SELECT k, v, x3, ok, ts FROM out_t ORDER BY v")
    assert got == want and len(got) == 90
    assert m["connector"] == ("ExactlyOncePostgresSink" if kind == "durable" else "PostgresSink")
    assert m["rows_committed"] == 90
    types = dict(pg.rows("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'out_t'"))
    assert types == {"k": "text", "v": "bigint", "x3": "double precision", "ok": "boolean",
                     "ts": "timestamp without time zone"}
    if kind == "durable":  # one transaction per epoch with rows, each recorded once
        assert pg.rows("SELECT sink, epoch, rows FROM laminardb_epochs ORDER BY epoch") == [
            ("s", 1, 30), ("s", 2, 1), ("s", 3, 59)]


# -- changelogs: upserts and deletes ----------------------------------------------------------

def _keyed_rows(n: int) -> list[dict]:
    return [row(i) for i in range(n)]


@pytest.mark.parametrize("kind", ["durable", "memory"])
def test_changelog_upserts_and_deletes_equal_duckdb(pg: Pg, tmp_path: Path, kind: str) -> None:
    from tests.connectors._pg_crash_child import pipeline

    n, step = 742, 37  # uneven batches: buckets fill across batches and epochs (deletes)
    with open_db(kind, tmp_path) as db:
        db.execute(pipeline(pg.url()))
        db.start()
        for lo in range(0, n, step):
            db.insert("ev", _keyed_rows(min(n, lo + step))[lo:])
            if lo % (3 * step) == 0:
                settle(db, kind)
        settle(db, kind)
    _check_pipeline(pg, n)


def _check_pipeline(pg: Pg, n: int) -> None:
    ev = pa.Table.from_pylist(_keyed_rows(n))
    assert pg.rows("SELECT k, seq, v FROM seq_out ORDER BY k, seq") == duck(
        "SELECT k, seq, v FROM ev ORDER BY k, seq", ev=ev)
    assert pg.rows("SELECT k, n, s, last_seq FROM agg_out ORDER BY k") == duck(
        "SELECT k, count(*), sum(v), max(seq) FROM ev GROUP BY k ORDER BY k", ev=ev)
    want_part = duck(f"SELECT k, seq // {BUCKET} AS b, count(*) FROM ev GROUP BY k, b "
                     f"HAVING count(*) < {BUCKET} ORDER BY k, b", ev=ev)
    assert pg.rows("SELECT k, b, n FROM part_out ORDER BY k, b") == want_part
    assert 0 < len(want_part) < n // BUCKET  # full buckets were deleted, partial ones kept (n % KEYS*BUCKET)


# -- exactly-once under SIGKILL ---------------------------------------------------------------

def _spawn(cfg_path: Path, log: Path, crash_at: str = "") -> subprocess.Popen:
    return spawn_child(HERE / "_pg_crash_child.py", cfg_path, log, crash_at)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sigkill_loop_gives_the_unbroken_answer(pg: Pg, tmp_path: Path) -> None:
    seed = int(os.environ.get("LAMINARDB_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    n = 2135
    cfg = {"db": str(tmp_path / "db"), "url": pg.url(), "rows": n, "batch": 20, "pause": 0.02,
           "interval": "100ms"}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    log = tmp_path / "child.log"
    log.touch()
    procs: list[subprocess.Popen] = []

    def kill_at_random() -> None:
        before = log.read_text(errors="replace").count("resume at")
        p = _spawn(cfg_path, log)
        procs.append(p)
        assert wait_for_more(log, "resume at", before, p, _CHILD_TIMEOUT_S), log.read_text()[-3000:]
        time.sleep(rng.uniform(0.2, 1.2))
        p.kill()
        p.wait(30)

    try:
        kill_at_random()  # first, so that the crash points below strike checkpoints with rows
        # the dangerous steps: sinks pre-committed; manifest written; an epoch's transaction
        # committed in PostgreSQL but its staged rows not yet dropped
        for crash_at in ("after_pre_commit", "after_manifest", "after_postgres_commit"):
            p = _spawn(cfg_path, log, crash_at)
            procs.append(p)
            p.wait(_CHILD_TIMEOUT_S)
            assert p.returncode == -9, f"child should have died at {crash_at}: {log.read_text()[-3000:]}"
        kill_at_random()
        cfg["finish"] = True
        cfg_path.write_text(json.dumps(cfg))
        p = _spawn(cfg_path, log)
        procs.append(p)
        p.wait(_CHILD_TIMEOUT_S)
        assert p.returncode == 0, f"seed {seed}: final run failed: {log.read_text()[-4000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    resumed = [int(line.split()[-1]) for line in log.read_text().splitlines() if line.startswith("resume at")]
    # (a crash point may strike before "resume at": a restart checkpoints its replay at once)
    assert len({r for r in resumed if 0 < r < n}) >= 2, f"seed {seed}: {resumed}"
    per_key = pg.rows("SELECT k, count(*), count(DISTINCT seq), min(seq), max(seq) FROM seq_out GROUP BY k ORDER BY k")
    assert per_key == [(f"k{k}", c, c, 0, c - 1) for k, c in
                       ((k, len(range(k, n, KEYS))) for k in range(KEYS))], f"seed {seed}: gaps or duplicates"
    _check_pipeline(pg, n)
    epochs = pg.rows("SELECT sink, count(DISTINCT writer), count(*), count(DISTINCT epoch), sum(rows) "
                     "FROM laminardb_epochs GROUP BY sink ORDER BY sink")
    assert [e[0] for e in epochs] == ["agg_out", "part_out", "seq_out"]
    assert all(e[1] == 1 and e[2] == e[3] for e in epochs), f"seed {seed}: {epochs}"
    assert epochs[2][4] == n  # the COPY sink's epochs hold every row once


# -- failed commits keep their rows -----------------------------------------------------------

KV = pa.schema([("k", pa.string()), ("v", pa.int64())])


def kv(lo: int, hi: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"k": f"k{i}", "v": i} for i in range(lo, hi)], schema=KV)


@pytest.fixture
def role(pg: Pg) -> Any:
    name = f"w_{pg.name}"
    pg.rows(f'CREATE ROLE "{name}" LOGIN')
    pg.rows(f'GRANT USAGE, CREATE ON SCHEMA public TO "{name}"')
    yield name
    pg.rows(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'")
    pg.rows(f'DROP OWNED BY "{name}"')
    pg.rows(f'DROP ROLE "{name}"')


def test_failed_commits_keep_rows_until_a_later_checkpoint(pg: Pg, role: str, tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    opts = {"url": pg.url(role), "table": "t"}
    s = ExactlyOncePostgresSink(name="s", schema=KV, options=opts, stage_dir=stage)
    try:
        s.write(kv(0, 3))
        s.pre_commit(1)
        s.commit(1)
        assert pg.rows("SELECT count(*) FROM t") == [(3,)]
        pg.rows(f'REVOKE INSERT ON t FROM "{role}"')
        s.write(kv(3, 6))
        s.pre_commit(2)
        with pytest.raises(PostgresPrivilegeError) as err:
            s.commit(2)
        assert SECRET not in str(err.value) and "INSERT" in str(err.value).upper()
        assert s._stage.epochs() == [2] and pg.rows("SELECT count(*) FROM t") == [(3,)]
        pg.rows(f'GRANT INSERT ON t TO "{role}"')
        s.write(kv(6, 8))
        s.pre_commit(3)
        s.commit(3)  # epoch 2 first, then 3
        assert pg.rows("SELECT epoch, rows FROM laminardb_epochs ORDER BY epoch") == [(1, 3), (2, 3), (3, 2)]
        # the server drops the sink's connection between checkpoints: the commit reconnects
        killed = pg.rows(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
        assert killed == [(True,)]
        s.write(kv(8, 10))
        s.pre_commit(4)
        s.commit(4)
        # a crash after PostgreSQL committed epoch 5 but before its staged file went
        s.write(kv(10, 12))
        s.pre_commit(5)
        table = s._stage.read(5)
        assert s._t.transaction("commit", lambda cur: s._apply_in(cur, 5, table)) is True
    finally:
        s.close()
    again = ExactlyOncePostgresSink(name="s", schema=KV, options=opts, stage_dir=stage)
    try:
        assert again._stage.epochs() == [5] and again.highest_epoch() == 5
        again.recover(5, None)
        assert again._stage.epochs() == [] and again.epochs_committed == 0
    finally:
        again.close()
    assert pg.rows("SELECT k, v FROM t ORDER BY v") == [(f"k{i}", i) for i in range(12)]
    assert pg.rows("SELECT count(*), count(DISTINCT epoch) FROM laminardb_epochs") == [(5, 5)]


def test_a_checkpoint_whose_commit_fails_is_written_by_the_next(pg: Pg, role: str, tmp_path: Path) -> None:
    """Through the database's own coordinator: the failed commit is counted, not raised, and
    the next checkpoint applies both epochs, in order."""
    with laminardb.open(str(tmp_path / "db"), config={"checkpoint_interval": "off"}) as db:
        db.execute("CREATE SOURCE ev (k VARCHAR, v BIGINT)")
        db.execute("CREATE STREAM agg AS SELECT k, sum(v) AS s FROM ev GROUP BY k EMIT CHANGES")
        db.execute(f"CREATE SINK s FROM agg INTO POSTGRES (url = '{pg.url(role)}', table = 'agg_t', primary_key = 'k')")
        db.start()
        db.insert("ev", [{"k": "a", "v": 1}, {"k": "b", "v": 2}])
        db.checkpoint()
        pg.rows(f'REVOKE UPDATE ON agg_t FROM "{role}"')
        db.insert("ev", [{"k": "a", "v": 10}])
        db.checkpoint()  # the commit of epoch 2 fails: logged and counted, the rows kept
        failures = db.metrics()["checkpoints"]["sink_commit_failures"]
        assert failures == 1 and pg.rows("SELECT k, s FROM agg_t ORDER BY k") == [("a", 1), ("b", 2)]
        pg.rows(f'GRANT UPDATE ON agg_t TO "{role}"')
        db.insert("ev", [{"k": "c", "v": 5}])
        db.checkpoint()
        assert pg.rows("SELECT k, s FROM agg_t ORDER BY k") == [("a", 11), ("b", 2), ("c", 5)]
        assert pg.rows("SELECT epoch FROM laminardb_epochs ORDER BY epoch") == [(1,), (2,), (3,)]


def test_unreachable_server_at_commit_keeps_rows(pg: Pg, tmp_path: Path) -> None:
    """The server goes away (here: a proxy in front of it closes) and comes back."""
    from tests.connectors._tcp_proxy import TcpProxy

    proxy = TcpProxy(pg.server.host, pg.server.port)
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{proxy.port}/{pg.name}"
    s = ExactlyOncePostgresSink(name="s", schema=KV, options={"url": url, "table": "t"},
                                stage_dir=tmp_path / "stage")
    try:
        s.write(kv(0, 2))
        s.pre_commit(1)
        proxy.stop()
        with pytest.raises(PostgresUnavailableError) as err:
            s.commit(1)
        assert SECRET not in str(err.value)
        assert s._stage.epochs() == [1]
        proxy.start()
        s.write(kv(2, 3))
        s.pre_commit(2)
        s.commit(2)
        assert s._stage.epochs() == []
    finally:
        s.close()
        proxy.stop()
    assert pg.rows("SELECT v FROM t ORDER BY v") == [(0,), (1,), (2,)]


# -- bad options and tables -------------------------------------------------------------------

def _sink_sql(pg: Pg, options: str, stream: str = "evs") -> str:
    return f"CREATE SINK s FROM {stream} INTO POSTGRES ({options})"


def test_bad_options_and_tables_give_typed_errors(pg: Pg, role: str) -> None:
    host, port = pg.server.host, pg.server.port
    good = f"url = '{pg.url()}'"
    pg.rows("CREATE TABLE wrong_type (k text, v text)")
    pg.rows("CREATE TABLE missing_col (k text)")
    pg.rows("CREATE TABLE no_key (k text, n bigint)")
    pg.rows("CREATE TABLE extra_required (k text, v bigint, z int NOT NULL)")
    cases = [
        (f"{good}, table = 't', tabel = 'x'", PostgresConfigError, "tabel"),
        (good, PostgresConfigError, "table"),
        ("url = 'mysql://h/db', table = 't'", PostgresConfigError, "postgresql://"),
        (f"{good}, table = 'agg_t'", PostgresConfigError, "primary_key"),  # a changelog without a key
        (f"{good}, table = 'agg_t', primary_key = 'kk'", PostgresConfigError, "kk"),
        (f"url = 'postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/{pg.name}', table = 't'",
         PostgresUnavailableError, "server runs"),
        (f"url = 'postgresql://nobody_here:{SECRET}@{host}:{port}/{pg.name}', table = 't'",
         PostgresAuthError, "nobody_here"),
        (f"url = 'postgresql://postgres:{SECRET}@{host}:{port}/no_such_db', table = 't'",
         PostgresConfigError, "no_such_db"),
        (f"{good}, table = 'wrong_type'", PostgresSchemaError, "'v' is text"),
        (f"{good}, table = 'missing_col'", PostgresSchemaError, "'v' is missing"),
        (f"{good}, table = 'no_key', primary_key = 'k'", PostgresSchemaError, "no primary key"),
        (f"{good}, table = 'extra_required'", PostgresSchemaError, "'z' is NOT NULL"),
        (f"{good}, table = 'nosuchschema.t'", PostgresConfigError, "schema"),
        (f"url = '{pg.url(role)}', table = 'private.t'", PostgresPrivilegeError, "GRANT"),
        (f"url = '{pg.url(role)}', table = 'readonly_t'", PostgresPrivilegeError, "INSERT ON"),
    ]
    pg.rows("CREATE TABLE readonly_t (k text, v bigint)")
    pg.rows(f'GRANT SELECT ON readonly_t TO "{role}"')
    pg.rows("CREATE SCHEMA private")
    with laminardb.open() as db:
        db.execute("CREATE SOURCE ev (k VARCHAR, v BIGINT)")
        db.execute("CREATE STREAM evs AS SELECT k, v FROM ev")
        db.execute("CREATE STREAM agg AS SELECT k, count(*) AS n FROM ev GROUP BY k EMIT CHANGES")
        for options, error, hint in cases:
            stream = "agg" if "agg_t" in options or "no_key" in options else "evs"
            with pytest.raises(error) as err:
                db.execute(_sink_sql(pg, options, stream))
            text = str(err.value)
            assert hint in text and SECRET not in text, (options, text)
            assert err.value.code.startswith("LDB-409"), text
        # a JDBC URL (user in its query) works; nothing above left a table behind
        jdbc = f"jdbc:postgresql://{host}:{port}/{pg.name}?user=postgres&password={SECRET}"
        db.execute(_sink_sql(pg, f"url = '{jdbc}', table = 'ok_t'"))
        db.start()
        db.insert("ev", [{"k": "a", "v": 1}])
        db.flush(timeout_s=10)
    assert pg.rows("SELECT k, v FROM ok_t") == [("a", 1)]
    assert pg.rows("SELECT to_regclass('t'), to_regclass('agg_t')") == [(None, None)]
