"""Exactly-once Delta Lake sink: one Delta commit per epoch, never twice — also when a crash
falls between the Delta commit and dropping the staged rows; read back with deltalake and
Polars (DuckDB's delta_scan needs an extension download, not available offline)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from tests._services.disk import tiny_tmpfs

deltalake = pytest.importorskip("deltalake")  # the 'delta' extra, part of 'dev'

import polars as pl  # noqa: E402

from laminardb.checkpoint.sink import EpochStage  # noqa: E402
from laminardb.connectors.delta_lake import DeltaConfigError, DeltaLakeSink  # noqa: E402
from laminardb.connectors.exceptions import SinkSchemaError, SinkWriteError  # noqa: E402
from laminardb.connectors.sinks import make_sink  # noqa: E402
from laminardb.sql import ddl  # noqa: E402
from laminardb.sql.exceptions import UnsupportedSqlError  # noqa: E402

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("ms")),
    pa.field("ts6", pa.timestamp("us")),
    pa.field("name", pa.string()),
])
_T0 = datetime(2024, 1, 2, 9, 30)


def rows(lo: int, hi: int) -> pa.RecordBatch:
    ids = list(range(lo, hi))
    return pa.RecordBatch.from_pydict({
        "id": ids,
        "ts": [_T0 + timedelta(milliseconds=250 * i) for i in ids],
        "ts6": [_T0 + timedelta(microseconds=7 * i) for i in ids],
        "name": [f"n{i}" for i in ids],
    }, schema=SCHEMA)


def read_delta(path: Path) -> pa.Table:
    """The table through deltalake. A pyarrow filesystem is passed because delta-rs' own
    Python filesystem handler makes the interpreter abort at exit (delta-rs #2184)."""
    if not deltalake.DeltaTable.is_deltatable(str(path)):
        return pa.table({"id": pa.array([], pa.int64())})
    dt = deltalake.DeltaTable(str(path))
    return dt.to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(str(path), pafs.LocalFileSystem()))


def visible(path: Path) -> list[int]:
    """The ids deltalake and Polars see; they must agree."""
    seen = sorted(read_delta(path).column("id").to_pylist())
    if seen:
        assert sorted(pl.read_delta(str(path))["id"].to_list()) == seen
    return seen


def commits(path: Path) -> int:
    """How many Delta commits the table has (the first one creates it)."""
    return len(deltalake.DeltaTable(str(path)).history())


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return tmp_path / "lake" / "t"


@pytest.fixture
def stage(tmp_path: Path) -> Path:
    return tmp_path / "db" / "sinks" / "s"


def sink(table: Path, stage: Path, *, name: str = "s", writer: str = "0",
         **options: str) -> DeltaLakeSink:
    return DeltaLakeSink(name=name, schema=SCHEMA, options={"path": str(table), **options},
                         stage_dir=stage, writer=writer)


def checkpoint(s: DeltaLakeSink, epoch: int) -> dict:
    """A checkpoint that succeeds: pre_commit, (manifest), commit."""
    info = s.pre_commit(epoch)
    s.commit(epoch)
    return info


# -- the phases -------------------------------------------------------------------------------


def test_rows_land_at_commit_exactly_once(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 3))
    s.write(rows(3, 5))
    assert s.pre_commit(1) == {"rows": 5}
    assert visible(table) == []  # staged, no table yet
    s.commit(1)
    assert visible(table) == [0, 1, 2, 3, 4]
    dt = deltalake.DeltaTable(str(table))
    assert dt.transaction_version("laminardb-s-0") == 1
    s.commit(1)  # idempotent
    assert visible(table) == [0, 1, 2, 3, 4] and commits(table) == 1


def test_timestamps_are_delta_timestamps(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 3))
    checkpoint(s, 1)
    got = read_delta(table).sort_by("id")
    assert got.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert got.schema.field("ts6").type == pa.timestamp("us", "UTC")
    want = rows(0, 3)
    assert got.column("ts").cast(pa.timestamp("ms")).to_pylist() == want.column("ts").to_pylist()
    assert got.column("ts6").cast(pa.timestamp("us")).to_pylist() == want.column("ts6").to_pylist()
    protocol = deltalake.DeltaTable(str(table)).protocol()
    assert protocol.min_reader_version == 1  # plain 'timestamp': no timestampNtz feature needed


def test_epochs_commit_in_order_and_abort_discards(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 2))
    s.pre_commit(1)
    s.write(rows(2, 4))
    s.pre_commit(2)
    s.abort(2)
    s.commit(2)
    assert visible(table) == [0, 1]
    s.write(rows(4, 6))
    s.pre_commit(3)
    s.write(rows(6, 7))
    s.pre_commit(4)
    s.commit(4)  # one Delta commit per epoch, in order
    assert visible(table) == [0, 1, 4, 5, 6] and commits(table) == 3
    assert deltalake.DeltaTable(str(table)).transaction_version("laminardb-s-0") == 4


def test_epoch_without_rows_makes_no_commit(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    assert checkpoint(s, 1) == {"rows": 0}
    assert not deltalake.DeltaTable.is_deltatable(str(table))
    s.write(rows(0, 1))
    checkpoint(s, 2)
    assert checkpoint(s, 3) == {"rows": 0}
    assert commits(table) == 1


def test_two_writers_append_to_one_table(table: Path, tmp_path: Path) -> None:
    a = sink(table, tmp_path / "stage-a", writer="a")
    b = sink(table, tmp_path / "stage-b", writer="b")
    a.write(rows(0, 2))
    b.write(rows(2, 4))
    checkpoint(a, 1)
    checkpoint(b, 1)  # its own app id: not mistaken for a's epoch 1
    assert visible(table) == [0, 1, 2, 3]


# -- recovery ---------------------------------------------------------------------------------


def test_crash_between_pre_commit_and_commit(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 3))
    info = s.pre_commit(1)
    again = sink(table, stage)  # restart: manifest 1 written, commit(1) never ran
    again.recover(1, info)
    assert visible(table) == [0, 1, 2]
    again.recover(1, info)
    assert visible(table) == [0, 1, 2] and commits(table) == 1


def test_crash_between_delta_commit_and_dropping_the_stage(
        table: Path, stage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = sink(table, stage)
    s.write(rows(0, 3))
    info = s.pre_commit(1)

    def crash(self: EpochStage, epoch: int) -> None:
        raise KeyboardInterrupt("killed after the Delta commit")

    monkeypatch.setattr(EpochStage, "drop", crash)
    with pytest.raises(KeyboardInterrupt):
        s.commit(1)
    monkeypatch.undo()
    assert visible(table) == [0, 1, 2]
    assert EpochStage(stage, SCHEMA).epochs() == [1]  # still staged
    again = sink(table, stage)
    again.recover(1, info)  # reads the table's version for its app id: epoch 1 is in
    assert visible(table) == [0, 1, 2] and commits(table) == 1
    assert EpochStage(stage, SCHEMA).epochs() == []


def test_recover_aborts_epochs_after_the_manifest(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 2))
    info = checkpoint(s, 1)
    s.write(rows(2, 4))
    s.pre_commit(2)  # crash before the manifest of checkpoint 2
    s.write(rows(4, 6))  # open epoch 3
    again = sink(table, stage)
    again.recover(1, info)
    assert visible(table) == [0, 1]
    assert sorted(os.listdir(stage)) == []  # epoch 2 aborted, the open rows gone
    again.write(rows(2, 4))  # replay rebuilds epoch 2
    checkpoint(again, 2)
    assert visible(table) == [0, 1, 2, 3]


def test_recover_after_commit_does_not_duplicate(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 3))
    info = checkpoint(s, 1)
    again = sink(table, stage)
    again.recover(1, info)
    assert visible(table) == [0, 1, 2] and commits(table) == 1


# -- options and errors -----------------------------------------------------------------------


def test_options_are_checked(table: Path, stage: Path) -> None:
    with pytest.raises(DeltaConfigError, match="the options are path, write_mode") as err:
        sink(table, stage, partition_by="id")
    assert err.value.code == "LDB-4020"
    with pytest.raises(DeltaConfigError, match="'overwrite' is not supported; use 'append'"):
        sink(table, stage, write_mode="overwrite")
    with pytest.raises(DeltaConfigError, match="needs path"):
        DeltaLakeSink(name="s", schema=SCHEMA, options={}, stage_dir=stage)
    assert sink(table, stage, write_mode="APPEND").write_mode == "append"


def test_existing_table_with_other_columns_is_refused(table: Path, stage: Path) -> None:
    deltalake.write_deltalake(str(table), pa.table({"other": [1]}))
    with pytest.raises(SinkSchemaError, match="write to a new path"):
        sink(table, stage)


def test_existing_table_with_the_same_columns_is_appended_to(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    s.write(rows(0, 1))
    checkpoint(s, 1)
    other = sink(table, stage.with_name("s2"), name="s2")
    other.write(rows(1, 2))
    checkpoint(other, 1)
    assert visible(table) == [0, 1]


def test_bad_batch_is_a_schema_error(table: Path, stage: Path) -> None:
    s = sink(table, stage)
    with pytest.raises(SinkSchemaError) as err:
        s.write(pa.record_batch({"x": [1]}))
    assert err.value.code == "LDB-4005"


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: real ENOSPC from the kernel."""
    with tiny_tmpfs(tmp_path, "1m") as d:
        yield d


def test_disk_full_while_staging(table: Path, tiny_disk: Path) -> None:
    s = sink(table, tiny_disk / "stage")
    s.write(rows(0, 2))
    info = checkpoint(s, 1)
    big = pa.RecordBatch.from_pydict({
        "id": list(range(1000)), "ts": [_T0] * 1000, "ts6": [_T0] * 1000,
        "name": [os.urandom(1000).hex() for _ in range(1000)]}, schema=SCHEMA)
    with pytest.raises(SinkWriteError) as err:
        for _ in range(2):
            s.write(big)
        s.pre_commit(2)
    assert err.value.code == "LDB-4004" and "reopen the database" in str(err.value)
    assert visible(table) == [0, 1]  # committed output intact, nothing of epoch 2
    with pytest.raises(SinkWriteError, match="reopen the database"):
        s.pre_commit(2)
    again = sink(table, tiny_disk / "stage")
    again.recover(1, info)
    again.write(rows(2, 3))
    checkpoint(again, 2)
    assert visible(table) == [0, 1, 2]


# -- make_sink ----------------------------------------------------------------------------------


def test_make_sink_delta_lake(table: Path, tmp_path: Path) -> None:
    stmt = ddl.CreateSink("s", "delta_lake", {"path": str(table), "write_mode": "append"},
                          from_name="stream")
    s = make_sink(stmt, SCHEMA, durable=True, stage_root=str(tmp_path / "db" / "sinks"))
    assert isinstance(s, DeltaLakeSink) and s.app_id == "laminardb-s-0"
    s.write(rows(0, 1))
    s.pre_commit(1)
    assert os.listdir(tmp_path / "db" / "sinks" / "s") == ["epoch-000000000001.arrow"]
    with pytest.raises(UnsupportedSqlError, match=r"laminardb\.open"):
        make_sink(stmt, SCHEMA, durable=False, stage_root=None)


def test_a_skipped_checkpoint_never_has_its_epoch_reused(tmp_path: Path) -> None:
    """Checkpoint 3 committed to the table, then its manifest was damaged: recovery falls back
    to 2 and replays. A reused epoch 3 would be taken for the one in the table and skipped,
    losing the replayed rows after it; a fresh epoch appends them (the skipped epoch's rows,
    which a Delta table cannot take back, then appear twice; see docs/durability.md)."""
    import laminardb

    def open_db():
        db = laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"})
        db.execute(f"""
            CREATE SOURCE IF NOT EXISTS ev (id BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts);
            CREATE STREAM IF NOT EXISTS ids AS SELECT id FROM ev;
            CREATE SINK IF NOT EXISTS out FROM ids INTO DELTA_LAKE (path = '{tmp_path / "t"}')""")
        return db

    db = open_db()
    for lo in (0, 100, 200):
        db.insert("ev", [{"id": i, "ts": i} for i in range(lo, lo + 100)])
        db.checkpoint()
    db.insert("ev", [{"id": i, "ts": i} for i in range(300, 350)])
    db.engine.durable._stop.set()  # abandoned as a crash would: no close, no checkpoint
    db.engine._release_directory()
    db.engine.durable.wal.close()
    newest = sorted((tmp_path / "db" / "checkpoints").glob("ckpt-*"))[-1]
    (newest / "MANIFEST").write_bytes((newest / "MANIFEST").read_bytes()[:-30] + b"damaged")
    db = open_db()
    assert db.metrics()["checkpoints"]["recovery"]["epoch"] == 2
    db.insert("ev", [{"id": i, "ts": i} for i in range(350, 400)])
    db.close()
    ids = visible(tmp_path / "t")
    assert set(ids) == set(range(400)), f"rows lost: {sorted(set(range(400)) - set(ids))[:10]}"
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == list(range(200, 300))  # epoch 3 only
