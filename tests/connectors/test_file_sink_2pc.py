"""Exactly-once FILE sink: rows are visible only once their epoch commits, exactly once across
crashes at every phase, in every format, to the readers people use (DuckDB, Polars,
pyarrow.dataset); a full disk leaves committed output intact and nothing half-visible."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from laminardb.connectors import file_sink
from laminardb.connectors.exceptions import SinkSchemaError, SinkWriteError
from laminardb.connectors.file_sink import TransactionalFileSink
from laminardb.connectors.files import FileSink
from laminardb.connectors.sinks import make_sink
from laminardb.sql import ddl
from laminardb.sql.exceptions import UnsupportedSqlError
from tests._services.disk import tiny_tmpfs

FORMATS = ["jsonl", "csv", "parquet"]
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("ms")),
    pa.field("name", pa.string()),
    pa.field("price", pa.float64()),
])
_T0 = datetime(2024, 1, 2, 9, 30)


def rows(lo: int, hi: int) -> pa.RecordBatch:
    """Rows with ids lo..hi-1."""
    ids = list(range(lo, hi))
    return pa.RecordBatch.from_pydict({
        "id": ids,
        "ts": [_T0 + timedelta(milliseconds=250 * i) for i in ids],
        "name": [f"n{i}" for i in ids],
        "price": [i / 4 for i in ids],
    }, schema=SCHEMA)


# -- readers: each sees only what a glob or a directory scan that skips '_'/'.' names sees ---


def duckdb_ids(path: Path, fmt: str) -> list[int]:
    if not list(path.glob(f"*.{fmt}")):
        return []  # DuckDB raises on a glob that matches nothing
    fn = {"jsonl": "read_json_auto", "csv": "read_csv_auto", "parquet": "read_parquet"}[fmt]
    got = duckdb.connect().sql(f"SELECT id FROM {fn}('{path}/*.{fmt}') ORDER BY id").fetchall()
    return [r[0] for r in got]


def polars_ids(path: Path, fmt: str) -> list[int]:
    if not list(path.glob(f"*.{fmt}")):
        return []  # Polars raises on a glob that matches nothing
    scan = {"jsonl": pl.scan_ndjson, "csv": pl.scan_csv, "parquet": pl.scan_parquet}[fmt]
    return sorted(scan(f"{path}/*.{fmt}").collect()["id"].to_list())


def arrow_ids(path: Path, fmt: str) -> list[int]:
    dataset = ds.dataset(path, format={"jsonl": "json"}.get(fmt, fmt))  # default ignore_prefixes
    table = dataset.to_table()
    return sorted(table.column("id").to_pylist()) if table.num_rows else []


def visible(path: Path, fmt: str) -> list[int]:
    """The ids every reader sees; they must agree."""
    seen = duckdb_ids(path, fmt)
    assert polars_ids(path, fmt) == seen
    assert arrow_ids(path, fmt) == seen
    return seen


def staging(path: Path) -> list[str]:
    return sorted(os.listdir(path / "_staging"))


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


def sink(out: Path, fmt: str, **kw) -> TransactionalFileSink:
    return TransactionalFileSink(out, format=fmt, schema=SCHEMA, **kw)


def checkpoint(s: TransactionalFileSink, epoch: int) -> dict:
    """What the coordinator does at a checkpoint that succeeds: pre_commit, manifest, commit."""
    info = s.pre_commit(epoch)
    s.commit(epoch)
    return info


# -- the phases -------------------------------------------------------------------------------


def test_rows_become_visible_at_commit_exactly_once(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 3))
    s.write(rows(3, 5))
    assert visible(out, fmt) == []
    info = s.pre_commit(1)
    assert info == {"files": [f"part-000000000001-0-0000.{fmt}"]}
    assert visible(out, fmt) == []  # sealed under _staging/, not visible yet
    s.commit(1)
    assert visible(out, fmt) == [0, 1, 2, 3, 4]
    assert staging(out) == []
    s.commit(1)  # idempotent
    assert visible(out, fmt) == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in out.iterdir()) == ["_staging", info["files"][0]]


def test_epochs_commit_in_order_and_abort_discards(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 2))
    s.pre_commit(1)
    s.write(rows(2, 4))
    s.pre_commit(2)
    s.abort(2)
    s.commit(2)  # commits everything staged up to 2: epoch 1 only
    assert visible(out, fmt) == [0, 1]
    s.write(rows(4, 6))
    s.pre_commit(3)
    s.write(rows(6, 7))
    s.pre_commit(4)
    s.commit(4)  # a commit that failed earlier is caught up by a later one
    assert visible(out, fmt) == [0, 1, 4, 5, 6]
    assert sorted(p.name for p in out.glob(f"*.{fmt}")) == [
        f"part-00000000000{e}-0-0000.{fmt}" for e in (1, 3, 4)]


def test_epoch_without_rows_writes_no_file(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    assert s.pre_commit(1) == {"files": []}
    s.write(rows(0, 0))
    assert s.pre_commit(2) == {"files": []}
    s.commit(2)
    assert list(out.glob("part-*")) == [] and staging(out) == []


def test_large_epoch_rolls_to_several_files(out: Path, fmt: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_sink, "_ROLL_ROWS", 4)
    s = sink(out, fmt)
    for lo in range(0, 10, 2):
        s.write(rows(lo, lo + 2))
    info = s.pre_commit(1)
    assert info["files"] == [f"part-000000000001-0-{n:04d}.{fmt}" for n in range(3)]
    s.commit(1)
    assert visible(out, fmt) == list(range(10))


def test_writers_share_a_directory(out: Path, fmt: str) -> None:
    a, b = sink(out, fmt, writer="a"), sink(out, fmt, writer="b")
    a.write(rows(0, 2))
    b.write(rows(2, 4))
    a.pre_commit(1)
    b.pre_commit(1)
    a.commit(1)
    assert visible(out, fmt) == [0, 1]  # b's epoch 1 is b's to commit
    b.recover(0, None)  # b restarts from before checkpoint 1: its staged epoch 1 is aborted
    assert visible(out, fmt) == [0, 1] and staging(out) == []


# -- recovery ---------------------------------------------------------------------------------


def test_crash_between_pre_commit_and_commit(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 3))
    info = s.pre_commit(1)
    # crash: the manifest of checkpoint 1 was written, commit(1) never ran
    again = sink(out, fmt)
    again.recover(1, info)
    assert visible(out, fmt) == [0, 1, 2]
    again.recover(1, info)  # a second restart
    assert visible(out, fmt) == [0, 1, 2]


def test_recover_aborts_epochs_after_the_manifest(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 2))
    info = s.pre_commit(1)
    s.commit(1)
    s.write(rows(2, 4))
    s.pre_commit(2)  # crash before the manifest of checkpoint 2
    s.write(rows(4, 6))  # rows of the open epoch 3, in progress
    again = sink(out, fmt)
    again.recover(1, info)
    assert visible(out, fmt) == [0, 1]
    assert staging(out) == []  # epoch 2 aborted, in-progress file gone
    again.write(rows(2, 4))  # replay rebuilds epoch 2
    checkpoint(again, 2)
    assert visible(out, fmt) == [0, 1, 2, 3]


def test_recover_after_commit_does_not_duplicate(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 3))
    info = s.pre_commit(1)
    s.commit(1)
    again = sink(out, fmt)
    again.recover(1, info)
    assert visible(out, fmt) == [0, 1, 2]


def test_recover_without_a_checkpoint_discards_everything(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 3))
    s.pre_commit(1)
    s.write(rows(3, 4))
    sink(out, fmt).recover(0, None)
    assert visible(out, fmt) == [] and staging(out) == []


def test_close_keeps_staged_epochs_for_recovery(out: Path, fmt: str) -> None:
    s = sink(out, fmt)
    s.write(rows(0, 2))
    info = s.pre_commit(1)
    s.write(rows(2, 3))
    s.close()
    assert staging(out) == [info["files"][0]]
    again = sink(out, fmt)
    again.recover(1, info)
    assert visible(out, fmt) == [0, 1]


def test_a_skipped_checkpoints_committed_files_are_set_aside(out: Path, fmt: str) -> None:
    """Checkpoint 2 committed its files, then recovery skipped it (its snapshot was damaged)
    and restores 1: the epoch-2 files go to _abandoned/ (readers skip it), the sink reports
    epoch 2 as used, and the replayed rows commit under epoch 3 — every row once. Twice:
    setting aside is idempotent."""
    s = sink(out, fmt)
    s.write(rows(0, 2))
    info = s.pre_commit(1)
    s.commit(1)
    s.write(rows(2, 4))
    checkpoint(s, 2)
    for _ in range(2):
        again = sink(out, fmt)
        again.recover(1, info)
        assert visible(out, fmt) == [0, 1]
        assert [p.name for p in (out / "_abandoned").iterdir()] == [f"part-000000000002-0-0000.{fmt}"]
        assert again.highest_epoch() == 2
    again.write(rows(2, 5))  # the replay, and a row after it
    checkpoint(again, 3)
    assert visible(out, fmt) == [0, 1, 2, 3, 4]


def test_a_skipped_checkpoint_in_a_partitioned_sink(out: Path) -> None:
    from laminardb.connectors.partitioned_sink import PartitionedTransactionalFileSink

    def part_sink() -> PartitionedTransactionalFileSink:
        return PartitionedTransactionalFileSink(out, format="jsonl", schema=SCHEMA, partition_by="name")

    s = part_sink()
    s.write(rows(0, 2))
    info = s.pre_commit(1)
    s.commit(1)
    s.write(rows(2, 4))
    s.pre_commit(2)
    s.commit(2)
    again = part_sink()
    again.recover(1, info)
    assert again.highest_epoch() == 2
    assert sorted(p.parent.parent.name for p in out.glob("*/_abandoned/part-*")) == ["name=n2", "name=n3"]
    assert sorted(p.parent.name for p in out.glob("*/part-*.jsonl")) == ["name=n0", "name=n1"]


# -- errors -----------------------------------------------------------------------------------


def test_bad_batch_is_a_schema_error(out: Path) -> None:
    s = sink(out, "jsonl")
    with pytest.raises(SinkSchemaError, match="expects columns") as err:
        s.write(pa.record_batch({"other": [1]}))
    assert err.value.code == "LDB-4005"
    s.write(rows(0, 1))  # the sink goes on
    checkpoint(s, 1)
    assert visible(out, "jsonl") == [0]


def test_a_file_of_another_run_is_never_overwritten(out: Path) -> None:
    out.mkdir()
    (out / "part-000000000001-0-0000.jsonl").write_text('{"id": 99}\n')
    s = sink(out, "jsonl")
    s.write(rows(0, 1))
    with pytest.raises(SinkWriteError, match="new directory"):
        s.pre_commit(1)
    assert (out / "part-000000000001-0-0000.jsonl").read_text() == '{"id": 99}\n'


def test_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_text("")
    with pytest.raises(SinkWriteError, match="directory") as err:
        TransactionalFileSink(tmp_path / "out.jsonl", format=None, schema=SCHEMA)
    assert err.value.code == "LDB-4004"


def _fill_disk(s: TransactionalFileSink, fmt: str) -> SinkWriteError:
    """Write ~4 MiB into the open epoch; return the error of the write or the pre_commit."""
    big = pa.RecordBatch.from_pydict({
        "id": list(range(1000)), "ts": [_T0] * 1000,
        "name": [os.urandom(1000).hex() for _ in range(1000)], "price": [0.5] * 1000,
    }, schema=SCHEMA)
    with pytest.raises(SinkWriteError) as err:
        for _ in range(2):
            s.write(big)
        s.pre_commit(2)
    return err.value


def _assert_disk_full_handled(s: TransactionalFileSink, out: Path, fmt: str,
                              err: SinkWriteError) -> None:
    assert err.code == "LDB-4004"
    assert "disk is full" in str(err) and "reopen the database" in str(err)
    assert visible(out, fmt) == [0, 1]  # epoch 1 intact, nothing of epoch 2
    assert staging(out) == []  # the broken in-progress file is deleted
    s.write(rows(5, 6))  # dropped: the epoch is rebuilt by replay after reopen
    with pytest.raises(SinkWriteError, match="reopen the database"):
        s.pre_commit(2)  # no checkpoint may cover the lost rows


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: real ENOSPC from the kernel."""
    with tiny_tmpfs(tmp_path, "1m") as d:
        yield d


def test_disk_full_on_tmpfs(tiny_disk: Path, fmt: str) -> None:
    out = tiny_disk / "out"
    s = sink(out, fmt)
    s.write(rows(0, 2))
    info = s.pre_commit(1)
    s.commit(1)
    err = _fill_disk(s, fmt)
    _assert_disk_full_handled(s, out, fmt, err)
    again = sink(out, fmt)  # reopen: recovery settles, the space is free again
    again.recover(1, info)
    again.write(rows(2, 4))
    checkpoint(again, 2)
    assert visible(out, fmt) == [0, 1, 2, 3]


def test_disk_full_via_dev_full(out: Path, fmt: str) -> None:
    """The same without mounting: the in-progress file is a symlink to /dev/full (ENOSPC)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    s = sink(out, fmt)
    s.write(rows(0, 2))
    checkpoint(s, 1)
    (out / "_staging" / f".inprogress-0-0000.{fmt}").symlink_to("/dev/full")
    err = _fill_disk(s, fmt)
    _assert_disk_full_handled(s, out, fmt, err)


# -- make_sink ----------------------------------------------------------------------------------


def _stmt(connector: str, **options: str) -> ddl.CreateSink:
    return ddl.CreateSink("s", connector, dict(options), from_name="stream")


def test_make_sink_file(tmp_path: Path) -> None:
    durable = make_sink(_stmt("file", path=str(tmp_path / "d"), format="parquet"), SCHEMA,
                        durable=True, stage_root=str(tmp_path / "db" / "sinks"))
    assert isinstance(durable, TransactionalFileSink) and durable.format == "parquet"
    memory = make_sink(_stmt("file", path=str(tmp_path / "o.jsonl")), SCHEMA, durable=False,
                       stage_root=None)
    assert isinstance(memory, FileSink)
    memory.close()
    with pytest.raises(UnsupportedSqlError, match="needs path"):
        make_sink(_stmt("file"), SCHEMA, durable=True, stage_root=None)
    with pytest.raises(UnsupportedSqlError, match="DELTA_LAKE"):
        make_sink(_stmt("nosuch"), SCHEMA, durable=True, stage_root=None)
