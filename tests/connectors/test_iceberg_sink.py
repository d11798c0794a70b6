"""Exactly-once Iceberg sink against real pyiceberg SQL catalogs (SQLite in tmp dirs, and one
PostgreSQL database): one snapshot per epoch carrying laminardb.sink / laminardb.epoch, never
appended twice — also when a crash falls between the Iceberg commit and dropping the staged
rows; a SQL pipeline's table equals DuckDB's answer over the same rows."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest

pytest.importorskip("pyiceberg")  # the 'iceberg' extra, part of 'dev'

from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402

from laminardb.checkpoint.sink import EpochStage  # noqa: E402
from laminardb.connectors.exceptions import (  # noqa: E402
    IcebergCatalogError,
    IcebergChangelogError,
    IcebergCommitError,
    IcebergConfigError,
    SinkSchemaError,
)
from laminardb.connectors.iceberg_sink import IcebergSink  # noqa: E402
from laminardb.connectors.sinks import make_sink, sink_class_name  # noqa: E402
from laminardb.sql import ddl  # noqa: E402
from laminardb.sql.exceptions import UnsupportedSqlError  # noqa: E402
from tests._services.fixtures import postgres_server  # noqa: E402,F401
from tests._services.procs import kill_proc, wait_until  # noqa: E402

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("ms")),
    pa.field("name", pa.string()),
])
_T0 = datetime(2024, 1, 2, 9, 30)


def rows(lo: int, hi: int) -> pa.RecordBatch:
    ids = list(range(lo, hi))
    return pa.RecordBatch.from_pydict({
        "id": ids, "ts": [_T0 + timedelta(milliseconds=250 * i) for i in ids],
        "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def stage(tmp_path: Path) -> Path:
    return tmp_path / "db" / "sinks" / "s"


@pytest.fixture
def catalog(warehouse: Path) -> Iterator[SqlCatalog]:
    """A reader's own connection to the catalog the sinks write (SQLite beside the lake)."""
    warehouse.mkdir(parents=True, exist_ok=True)
    cat = load_catalog("laminardb", type="sql", uri=f"sqlite:///{warehouse / 'catalog.db'}",
                       warehouse=warehouse.as_uri())
    yield cat
    cat.engine.dispose()


@pytest.fixture
def sinks(warehouse: Path, stage: Path) -> Iterator:
    """Factory: an IcebergSink on ``db.t`` in the tmp warehouse; all closed at teardown."""
    made: list[IcebergSink] = []

    def make(*, stage_dir: Path = stage, name: str = "s", schema: pa.Schema = SCHEMA,
             **options: str) -> IcebergSink:
        opts = {"warehouse": str(warehouse), "table": "db.t", **options}
        s = IcebergSink(name=name, schema=schema, options=opts, stage_dir=stage_dir)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def ids(catalog: SqlCatalog, table: str = "db.t") -> list[int]:
    return sorted(catalog.load_table(table).scan().to_arrow().column("id").to_pylist())


def snapshots(catalog: SqlCatalog, table: str = "db.t") -> list[dict[str, str]]:
    """The table's snapshots' laminardb summary properties, oldest first."""
    t = catalog.load_table(table)
    return [{k: v for k, v in s.summary.additional_properties.items() if k.startswith("laminardb.")}
            for s in t.metadata.snapshots]


def checkpoint(s: IcebergSink, epoch: int) -> dict:
    info = s.pre_commit(epoch)
    s.commit(epoch)
    return info


# -- the phases -------------------------------------------------------------------------------


def test_each_epoch_is_one_snapshot_with_its_epoch(sinks, catalog: SqlCatalog) -> None:
    s = sinks()
    assert ids(catalog) == []  # created empty at CREATE SINK
    s.write(rows(0, 3))
    s.write(rows(3, 5))
    assert s.pre_commit(1) == {"rows": 5}
    assert ids(catalog) == []  # staged only
    s.write(rows(5, 7))
    s.pre_commit(2)
    s.commit(2)  # both epochs, in order, one snapshot each
    assert ids(catalog) == list(range(7))
    assert snapshots(catalog) == [{"laminardb.sink": "s", "laminardb.epoch": "1"},
                                  {"laminardb.sink": "s", "laminardb.epoch": "2"}]
    s.commit(2)  # idempotent
    assert len(snapshots(catalog)) == 2
    assert checkpoint(s, 3) == {"rows": 0}  # no rows, no snapshot
    assert len(snapshots(catalog)) == 2 and s.epochs_committed == 2 and s.rows_committed == 7


def test_timestamps_are_timestamptz(sinks, catalog: SqlCatalog) -> None:
    s = sinks()
    s.write(rows(0, 3))
    checkpoint(s, 1)
    t = catalog.load_table("db.t")
    assert str(t.schema().find_field("ts").field_type) == "timestamptz"
    assert t.schema().find_field("id").required
    got = t.scan().to_arrow().sort_by("id")
    assert got.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert got.column("ts").cast(pa.timestamp("ms")).to_pylist() == rows(0, 3).column("ts").to_pylist()


def test_abort_discards_and_recover_aborts_epochs_after_the_manifest(
        sinks, catalog: SqlCatalog, stage: Path) -> None:
    s = sinks()
    s.write(rows(0, 2))
    s.pre_commit(1)
    s.write(rows(2, 4))
    s.pre_commit(2)
    s.abort(2)
    s.commit(2)
    assert ids(catalog) == [0, 1]
    s.write(rows(4, 6))
    s.pre_commit(3)  # crash before the manifest of checkpoint 3
    s.write(rows(6, 7))  # open epoch 4
    again = sinks()
    again.recover(2, {})
    assert ids(catalog) == [0, 1] and os.listdir(stage) == []
    again.write(rows(4, 6))  # replay rebuilds epoch 3
    checkpoint(again, 3)
    assert ids(catalog) == [0, 1, 4, 5]


def test_crash_after_pre_commit_is_committed_by_recovery(sinks, catalog: SqlCatalog) -> None:
    s = sinks()
    s.write(rows(0, 3))
    info = s.pre_commit(1)  # manifest 1 written, commit(1) never ran
    again = sinks()
    again.recover(1, info)
    again.recover(1, info)
    assert ids(catalog) == [0, 1, 2] and len(snapshots(catalog)) == 1
    assert again.highest_epoch() == 1


def test_crash_between_iceberg_commit_and_dropping_the_stage(
        sinks, catalog: SqlCatalog, stage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = sinks()
    s.write(rows(0, 3))
    info = s.pre_commit(1)

    def crash(self: EpochStage, epoch: int) -> None:
        raise KeyboardInterrupt("killed after the Iceberg commit")

    monkeypatch.setattr(EpochStage, "drop", crash)
    with pytest.raises(KeyboardInterrupt):
        s.commit(1)
    monkeypatch.undo()
    assert ids(catalog) == [0, 1, 2]
    assert EpochStage(stage, SCHEMA).epochs() == [1]  # still staged
    again = sinks()
    again.recover(1, info)  # reads epoch 1 back from the snapshot summary: not appended again
    assert ids(catalog) == [0, 1, 2] and len(snapshots(catalog)) == 1
    assert EpochStage(stage, SCHEMA).epochs() == []


def test_other_writers_snapshots_in_between(sinks, catalog: SqlCatalog, tmp_path: Path) -> None:
    a = sinks(name="a", stage_dir=tmp_path / "stage-a")
    b = sinks(name="b", stage_dir=tmp_path / "stage-b")
    a.write(rows(0, 2))
    checkpoint(a, 1)
    b.write(rows(2, 4))
    b.pre_commit(1)
    b.commit(1)  # its own sink name: not mistaken for a's epoch 1
    a.write(rows(4, 5))
    a.pre_commit(2)
    t = catalog.load_table("db.t")  # another writer, no laminardb summary
    t.append(pa.Table.from_batches([rows(5, 6)]).cast(t.schema().as_arrow()))
    a.commit(2)  # a's newest snapshot is two back in the ancestry
    a.commit(2)
    assert ids(catalog) == list(range(6))
    assert [p.get("laminardb.sink") for p in snapshots(catalog)] == ["a", "b", None, "a"]


def test_a_lost_commit_is_retried_at_the_next_checkpoint(sinks, catalog: SqlCatalog, warehouse: Path) -> None:
    s = sinks()
    s.write(rows(0, 2))
    s.pre_commit(1)
    (warehouse / "catalog.db").rename(warehouse / "catalog.away")  # the catalog is gone
    with pytest.raises(IcebergCommitError, match="kept and committed at the next checkpoint") as err:
        s.commit(1)
    assert err.value.code == "LDB-4062"
    (warehouse / "catalog.away").rename(warehouse / "catalog.db")
    s.write(rows(2, 3))
    checkpoint(s, 2)
    assert ids(catalog) == [0, 1, 2]
    assert [p["laminardb.epoch"] for p in snapshots(catalog)] == ["1", "2"]


def test_a_concurrent_commit_that_wins_is_retried_at_the_next_checkpoint(
        sinks, catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    s = sinks()
    with catalog.load_table("db.t").transaction() as tx:  # no retries inside pyiceberg
        tx.set_properties({"commit.retry.num-retries": "0"})
    other = catalog.load_table("db.t")
    refresh = s._table.refresh

    def refresh_then_another_writer_commits():  # a real commit between our read and our append
        table = refresh()
        other.refresh().append(pa.Table.from_batches([rows(100, 101)]).cast(other.schema().as_arrow()))
        return table

    s.write(rows(0, 2))
    s.pre_commit(1)
    monkeypatch.setattr(s._table, "refresh", refresh_then_another_writer_commits)
    with pytest.raises(IcebergCommitError, match="another writer kept changing the table") as err:
        s.commit(1)
    assert err.value.code == "LDB-4062"
    monkeypatch.undo()
    assert ids(catalog) == [100] and EpochStage(s._stage.dir, SCHEMA).epochs() == [1]  # kept
    s.write(rows(2, 3))
    checkpoint(s, 2)
    assert ids(catalog) == [0, 1, 2, 100]
    assert [p.get("laminardb.epoch") for p in snapshots(catalog)] == [None, "1", "2"]


# -- existing tables and options --------------------------------------------------------------


def test_existing_table_of_other_columns_is_refused(sinks, catalog: SqlCatalog) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=pa.schema([pa.field("id", pa.string()),
                                                   pa.field("other", pa.int64(), nullable=False)]))
    with pytest.raises(SinkSchemaError) as err:
        sinks()
    msg = str(err.value)
    assert "'ts' is not in the table" in msg and "Write to a new table" in msg
    with pytest.raises(SinkSchemaError, match="'id' is string in the table, long in the stream; the table's required column 'other'"):
        sinks(schema=pa.schema([pa.field("id", pa.int64())]))


def test_existing_compatible_table_is_appended_to(sinks, catalog: SqlCatalog) -> None:
    catalog.create_namespace("db")  # a wider type, and an optional column the stream lacks
    catalog.create_table("db.t", schema=pa.schema([
        pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", "UTC")),
        pa.field("name", pa.string()), pa.field("note", pa.string())]))
    narrow = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("ts", pa.timestamp("ms")),
                        pa.field("name", pa.string())])
    s = sinks(schema=narrow)
    s.write(rows(0, 2).cast(narrow))
    checkpoint(s, 1)
    assert ids(catalog) == [0, 1]
    nullable = pa.schema([f.with_nullable(True) for f in SCHEMA])
    catalog.create_table("db.req", schema=SCHEMA)
    with pytest.raises(SinkSchemaError, match="'id' is required in the table and may be NULL"):
        sinks(schema=nullable, table="db.req")


@pytest.mark.parametrize("options, match", [
    ({"partition_by": "id"}, "unknown option 'partition_by'; the options are catalog, catalog.type"),
    ({"table": "t"}, "table = 't' has no namespace"),
    ({"table": ""}, "needs table = 'namespace.name'"),
    ({"catalog.type": "hive"}, "catalog.type 'hive' is not supported; use 'sql'"),
    ({"catalog.type": "rest"}, r"needs catalog.uri = 'http://…'"),
    ({"warehouse": "s3://bucket/lake"}, "no default SQLite catalog"),
    ({"delivery.guarantee": "at-least-once"}, "always 'exactly-once'"),
])
def test_bad_options_are_refused(sinks, options: dict, match: str) -> None:
    with pytest.raises(IcebergConfigError, match=match) as err:
        sinks(**options)
    assert err.value.code == "LDB-4060"


def test_sql_layer_knows_the_same_keys() -> None:
    from laminardb.connectors._iceberg_options import OPTIONS
    from laminardb.sql.options import known_sink_options

    assert known_sink_options("ICEBERG") == OPTIONS


def test_sql_catalog_needs_a_warehouse(stage: Path) -> None:
    with pytest.raises(IcebergConfigError, match="needs warehouse"):
        IcebergSink(name="s", schema=SCHEMA, options={"table": "db.t"}, stage_dir=stage)


@pytest.mark.filterwarnings("ignore:Deprecated in 0.8.0:DeprecationWarning")  # pyiceberg REST OAuth default
def test_unreachable_catalog_is_a_catalog_error_without_the_password(sinks) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    uri = f"postgresql+psycopg2://ldb:hunter2secret@127.0.0.1:{port}/nowhere"
    with pytest.raises(IcebergCatalogError, match="check catalog.uri") as err:
        sinks(**{"catalog.uri": uri, "catalog.token": "tok-very-secret"})
    assert err.value.code == "LDB-4061"
    assert "hunter2secret" not in str(err.value) and "ldb:***@" in str(err.value)
    with pytest.raises(IcebergCatalogError, match="could not load the rest catalog"):
        sinks(**{"catalog.type": "rest", "catalog.uri": f"http://127.0.0.1:{port}",
                 "catalog.credential": "client:tok-very-secret"})


def test_make_sink_builds_it_on_durable_databases_only(warehouse: Path, tmp_path: Path) -> None:
    stmt = ddl.CreateSink("s", "iceberg", {"warehouse": str(warehouse), "table": "db.t"},
                          from_name="stream")
    assert sink_class_name(stmt, durable=True) == "IcebergSink"
    s = make_sink(stmt, SCHEMA, durable=True, stage_root=str(tmp_path / "db" / "sinks"))
    try:
        assert isinstance(s, IcebergSink)
        s.write(rows(0, 1))
        s.pre_commit(1)
        assert os.listdir(tmp_path / "db" / "sinks" / "s") == ["epoch-000000000001.arrow"]
    finally:
        s.close()
    with pytest.raises(UnsupportedSqlError, match=r"laminardb\.open"):
        make_sink(stmt, SCHEMA, durable=False, stage_root=None)


# -- through SQL ------------------------------------------------------------------------------


def _events(n: int) -> list[dict]:
    return [{"k": f"k{i % 5}", "seq": i // 5, "ts": 1_700_000_000_000 + i * 37, "v": i % 97}
            for i in range(n)]


def test_sql_pipeline_equals_duckdb(tmp_path: Path, catalog: SqlCatalog, warehouse: Path) -> None:
    import laminardb

    events = _events(600)
    with laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"}) as db:
        db.execute(f"""
            CREATE SOURCE ev (k VARCHAR, seq BIGINT, ts BIGINT NOT NULL, v BIGINT, WATERMARK FOR ts AS ts);
            CREATE STREAM big AS SELECT k, seq, v * 2 AS v2 FROM ev WHERE v > 10;
            CREATE STREAM win AS SELECT k, window_start, count(*) AS n, sum(v) AS s
                FROM ev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
            CREATE SINK big_out FROM big INTO ICEBERG (warehouse = '{warehouse}', table = 'db.big');
            CREATE SINK win_out FROM win INTO ICEBERG (warehouse = '{warehouse}', table = 'db.win')""")
        for lo in range(0, 600, 200):
            db.insert("ev", events[lo:lo + 200])
            db.checkpoint()
        db.finish()
        assert db.metrics()["sinks"]["win_out"]["connector"] == "IcebergSink"
    ev = pa.Table.from_pylist(events)  # noqa: F841 - read by DuckDB
    for table, sql in [("db.big", "SELECT k, seq, v * 2 AS v2 FROM ev WHERE v > 10"),
                       ("db.win", "SELECT k, (ts // 1000) * 1000 AS window_start, count(*) AS n, "
                                  "sum(v) AS s FROM ev GROUP BY ALL")]:
        got = catalog.load_table(table).scan().to_arrow()  # noqa: F841 - read by DuckDB
        want = duckdb.sql(f"{sql} ORDER BY ALL").fetchall()
        assert duckdb.sql("SELECT * FROM got ORDER BY ALL").fetchall() == want, table
    epochs = [p["laminardb.epoch"] for p in snapshots(catalog, "db.big")]
    assert epochs == sorted(set(epochs), key=int) and len(epochs) >= 3


def test_changelog_stream_is_refused_at_create_sink(tmp_path: Path, warehouse: Path) -> None:
    import laminardb

    with laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"}) as db:
        db.execute("""CREATE SOURCE ev (k VARCHAR, v BIGINT);
                      CREATE STREAM totals AS SELECT k, sum(v) AS s FROM ev GROUP BY k""")
        with pytest.raises(IcebergChangelogError, match="sink an append-only stream") as err:
            db.execute(f"CREATE SINK o FROM totals INTO ICEBERG (warehouse = '{warehouse}', table = 'db.t')")
        assert err.value.code == "LDB-4063"
        assert "o" not in {r["name"] for r in db.execute("SHOW SINKS").table.to_pylist()}


# -- a catalog in PostgreSQL ------------------------------------------------------------------


def test_catalog_in_postgresql(postgres_server, tmp_path: Path, stage: Path) -> None:  # noqa: F811
    dbname = postgres_server.create_database("iceberg")
    uri = f"postgresql+psycopg2://postgres@127.0.0.1:{postgres_server.port}/{dbname}"
    options = {"catalog.uri": uri, "warehouse": str(tmp_path / "lake"), "table": "db.t"}
    s = IcebergSink(name="s", schema=SCHEMA, options=options, stage_dir=stage)
    try:
        s.write(rows(0, 3))
        info = s.pre_commit(1)
    finally:
        s.close()
    again = IcebergSink(name="s", schema=SCHEMA, options=options, stage_dir=stage)
    try:
        again.recover(1, info)
        again.write(rows(3, 4))
        checkpoint(again, 2)
    finally:
        again.close()
    reader = load_catalog("laminardb", type="sql", uri=uri, warehouse=(tmp_path / "lake").as_uri())
    try:
        assert ids(reader) == [0, 1, 2, 3]
        assert [p["laminardb.epoch"] for p in snapshots(reader)] == ["1", "2"]
    finally:
        reader.engine.dispose()
    conn = postgres_server.connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables")
            assert cur.fetchall() == [("laminardb", "db", "t")]
    finally:
        conn.close()


# -- exactly-once under SIGKILL ---------------------------------------------------------------

_HERE = Path(__file__).resolve().parent
_CRASH_ROWS = 1500
_CHILD_TIMEOUT_S = 90


def _spawn(cfg: dict, cfg_path: Path, log: Path) -> subprocess.Popen:
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=str(_HERE.parents[1]))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(_HERE / "_iceberg_crash_child.py"), str(cfg_path)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def _kill_when_started(proc: subprocess.Popen, log: Path, before: int, after_s: float) -> None:
    """SIGKILL ``proc`` ``after_s`` seconds after it logged its ``before + 1``-th start."""
    def started() -> bool:
        assert proc.poll() is None, f"child died early: {log.read_text()[-3000:]}"
        return log.read_text(errors="replace").count("resume at") > before
    wait_until(started, timeout=_CHILD_TIMEOUT_S, interval=0.02, what="the child to start")
    time.sleep(after_s)
    proc.kill()
    proc.wait(30)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sigkill_loop_gives_the_unbroken_answer(tmp_path: Path, catalog: SqlCatalog, warehouse: Path) -> None:
    seed = int(os.environ.get("LAMINARDB_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    cfg = {"db": str(tmp_path / "db"), "warehouse": str(warehouse), "rows": _CRASH_ROWS,
           "batch": 30, "pause": 0.02, "interval": "150ms"}
    cfg_path, log = tmp_path / "cfg.json", tmp_path / "child.log"
    log.touch()
    proc = None
    try:
        # the dangerous steps: sinks pre-committed; manifest written, Iceberg not committed yet;
        # Iceberg committed (by recovery, then while running), the staged epoch not dropped yet
        for crash in ({"crash_at": "after_pre_commit", "crash_from": 150},
                      {"crash_at": "after_manifest", "crash_from": 450},
                      {"crash_after_append": "in_recovery"}, {"crash_after_append": "running"}):
            proc = _spawn({**cfg, **crash}, cfg_path, log)
            proc.wait(_CHILD_TIMEOUT_S)
            assert proc.returncode == -9, f"seed {seed}: should have died at {crash}: {log.read_text()[-3000:]}"
        text = log.read_text()
        starts = [int(x) for x in re.findall(r"resume at (\d+)", text)]
        assert starts[0] == 0 and starts[1] >= 150 and starts[2] >= 450, starts  # killed with rows at stake
        assert text.count("appended, dying") == 2 and len(starts) == 3  # the 3rd run died recovering
        for _ in range(2):  # random moments
            before = log.read_text(errors="replace").count("resume at")
            proc = _spawn(cfg, cfg_path, log)
            _kill_when_started(proc, log, before, rng.uniform(0.0, 1.5))
        proc = _spawn({**cfg, "finish": True}, cfg_path, log)
        proc.wait(_CHILD_TIMEOUT_S)
        assert proc.returncode == 0, f"seed {seed}: final run failed: {log.read_text()[-4000:]}"
    finally:
        if proc is not None and proc.poll() is None:
            kill_proc(proc, hard=True)

    from tests.connectors._iceberg_crash_child import KEYS, row

    seqs = catalog.load_table("db.seq").scan().to_arrow()
    for k in range(KEYS):
        got = sorted(seqs.filter(pa.compute.equal(seqs["k"], f"k{k}"))["seq"].to_pylist())
        want = list(range(len(range(k, _CRASH_ROWS, KEYS))))
        assert got == want, (f"seed {seed}: key k{k}: {len(got) - len(set(got))} duplicates, "
                             f"missing {sorted(set(want) - set(got))[:10]}")
    ev = pa.Table.from_pylist([row(i) for i in range(_CRASH_ROWS)])  # noqa: F841 - read by DuckDB
    win = catalog.load_table("db.win").scan().to_arrow()  # noqa: F841 - read by DuckDB
    want = duckdb.sql("SELECT k, (ts // 1000) * 1000, count(*), sum(v) FROM ev GROUP BY ALL ORDER BY ALL").fetchall()
    assert duckdb.sql("SELECT k, window_start, n, s FROM win ORDER BY ALL").fetchall() == want, f"seed {seed}"
    for table in ("db.seq", "db.win"):  # no epoch appended twice, in order
        epochs = [int(p["laminardb.epoch"]) for p in snapshots(catalog, table)]
        assert epochs == sorted(set(epochs)), f"seed {seed}: {table} epochs {epochs}"
