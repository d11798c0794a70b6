"""A durable embedded database: the catalog, views, windows and offsets survive a reopen;
finish() is durable; damaged checkpoints fall back; the in-memory mode is unchanged.

Each test compares against the same pipeline run without a restart (the unbroken run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

import laminardb
from laminardb.checkpoint.exceptions import CheckpointUnsupportedError, SnapshotFormatError
from tests._services.disk import tiny_tmpfs

PIPELINE = """
CREATE SOURCE IF NOT EXISTS ev (k VARCHAR, ts BIGINT NOT NULL, v BIGINT,
                                WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM IF NOT EXISTS per_sec AS
    SELECT k, window_start, count(*) AS n, sum(v) AS s, max(v) AS mx, min(k) AS mk
    FROM ev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW IF NOT EXISTS totals AS
    SELECT k, count(*) AS n, sum(v) AS s, count(DISTINCT v % 7) AS d FROM ev GROUP BY k;
CREATE STREAM IF NOT EXISTS sess AS
    SELECT k, window_start, window_end, count(*) AS n FROM ev GROUP BY k, session(ts, INTERVAL '2' SECOND);
CREATE SINK IF NOT EXISTS per_sec_out FROM per_sec INTO FILE (path = '${OUT}/per_sec', format = 'jsonl');
CREATE SINK IF NOT EXISTS sess_out FROM sess INTO FILE (path = '${OUT}/sess', format = 'parquet');
"""


def rows(start: int, stop: int) -> list[dict]:
    """Deterministic rows by global index: keys cycle, time grows 37 ms per row."""
    return [{"k": f"k{i % 5}", "ts": 1_000_000 + i * 37 + (i % 3) * 400, "v": i} for i in range(start, stop)]


def committed(path: Path, fmt: str) -> list[dict]:
    files = sorted(str(p) for p in path.glob(f"*.{fmt}"))
    if not files:
        return []
    fn = "read_json_auto" if fmt == "jsonl" else "read_parquet"
    return duckdb.sql(f"SELECT * FROM {fn}({files!r}) ORDER BY ALL").fetchall()


def totals(db) -> list[dict]:
    return sorted(db.query("SELECT * FROM totals").to_pylist(), key=lambda r: r["k"])


def reference_totals(n: int) -> list[dict]:
    """The view of the first ``n`` rows from an in-memory run (the unbroken answer)."""
    ref = laminardb.open()
    ref.execute(PIPELINE.split("CREATE SINK")[0])
    ref.insert("ev", rows(0, n))
    out = totals(ref)
    ref.close()
    return out


def open_db(tmp_path: Path, name: str = "db", **config):
    out = tmp_path / f"{name}-out"
    cfg = {"checkpoint_interval": "off", "vars": {"OUT": str(out)}}
    cfg.update(config)
    db = laminardb.open(tmp_path / name, config=cfg)
    db.execute(PIPELINE)
    return db, out


def run(tmp_path: Path, name: str, chunks: list[tuple[int, int]], *, reopen_after: set[int] = frozenset(),
        checkpoint_after: set[int] = frozenset()):
    db, out = open_db(tmp_path, name)
    for i, (a, b) in enumerate(chunks):
        db.insert("ev", rows(a, b))
        if i in checkpoint_after:
            db.checkpoint()
        if i in reopen_after:
            db.close()
            db, out = open_db(tmp_path, name)
    view = totals(db)
    db.finish()
    db.close()
    return view, committed(out / "per_sec", "jsonl"), committed(out / "sess", "parquet")


CHUNKS = [(0, 300), (300, 700), (700, 1000), (1000, 1600), (1600, 2000)]


def test_reopen_after_close_gives_the_unbroken_answer(tmp_path):
    unbroken = run(tmp_path, "a", CHUNKS)
    reopened = run(tmp_path, "b", CHUNKS, reopen_after={0, 2, 3})
    assert unbroken == reopened
    assert len(unbroken[1]) > 20 and len(unbroken[2]) >= 5


def test_windows_match_duckdb(tmp_path):
    _, per_sec, _ = run(tmp_path, "w", CHUNKS, reopen_after={1, 3}, checkpoint_after={0, 2})
    import pyarrow as pa

    t = pa.Table.from_pylist(rows(0, 2000))  # noqa: F841 - read by DuckDB below
    want = duckdb.sql(
        "SELECT k, (ts // 1000) * 1000 AS window_start, count(*) AS n, sum(v) AS s, max(v) AS mx, min(k) AS mk "
        "FROM t GROUP BY ALL ORDER BY ALL").fetchall()
    assert per_sec == want


def test_restart_without_close_replays_the_wal(tmp_path):
    """No checkpoint and no close: everything comes back from the WAL alone."""
    db, _ = open_db(tmp_path, "c")
    db.insert("ev", rows(0, 500))
    # abandon the connection as a crash would (no close, no checkpoint)
    db.engine.durable._stop.set()
    db.engine._release_directory()
    db.engine.durable.wal.close()
    db2, _ = open_db(tmp_path, "c")
    assert db2.offset("ev") == 500
    db2.insert("ev", rows(500, 1000))
    got = totals(db2)
    db2.close()
    assert got == reference_totals(1000)


def test_catalog_survives_and_if_not_exists_serves_both(tmp_path):
    db, _ = open_db(tmp_path, "cat")
    db.execute("CREATE STREAM extra AS SELECT k, v FROM ev WHERE v > 10")
    db.execute("DROP STREAM extra")
    db.execute("CREATE STREAM extra2 AS SELECT k FROM ev")
    db.close()
    db, _ = open_db(tmp_path, "cat")  # runs the IF NOT EXISTS script again: no error
    names = set(db.execute("SHOW ALL").table.column("name").to_pylist())
    assert {"ev", "per_sec", "totals", "sess", "per_sec_out", "sess_out", "extra2"} <= names
    assert "extra" not in names
    db.close()


def test_offset_counts_durably_accepted_rows(tmp_path):
    db, _ = open_db(tmp_path, "off")
    assert db.offset("ev") == 0
    db.insert("ev", rows(0, 123))
    db.checkpoint()
    db.insert("ev", rows(123, 200))
    db.close()
    db, _ = open_db(tmp_path, "off")
    assert db.offset("ev") == 200
    db.close()


def test_finish_is_durable(tmp_path):
    db, out = open_db(tmp_path, "fin")
    db.insert("ev", rows(0, 100))
    db.finish()
    db.close()
    before = committed(out / "per_sec", "jsonl")
    db, out = open_db(tmp_path, "fin")
    with pytest.raises(laminardb.EngineError) as e:
        db.insert("ev", rows(100, 101))
    assert e.value.code == "LDB-3004"
    db.finish()  # a no-op
    db.close()
    assert committed(out / "per_sec", "jsonl") == before and before


def test_nothing_is_visible_before_a_checkpoint_commits(tmp_path):
    db, out = open_db(tmp_path, "vis")
    db.insert("ev", rows(0, 1000))
    assert committed(out / "per_sec", "jsonl") == []  # closed windows are staged, not visible
    epoch = db.checkpoint()
    assert epoch >= 1
    assert len(committed(out / "per_sec", "jsonl")) > 0
    assert not list((out / "per_sec").glob(f"_staging/part-{epoch:012d}-*"))
    db.close()


def test_corrupt_latest_manifest_falls_back_to_the_previous_checkpoint(tmp_path):
    db, _ = open_db(tmp_path, "cor")
    db.insert("ev", rows(0, 400))
    db.checkpoint()
    db.insert("ev", rows(400, 800))
    e2 = db.checkpoint()
    db.insert("ev", rows(800, 900))
    db.close()  # a third checkpoint on close
    ckpts = sorted((tmp_path / "cor" / "checkpoints").glob("ckpt-*"))
    latest = ckpts[-1] / "MANIFEST"
    latest.write_bytes(latest.read_bytes()[:-40] + b"garbage")
    db, _ = open_db(tmp_path, "cor")
    assert db.metrics()["checkpoints"]["recovery"]["epoch"] == e2
    assert db.offset("ev") == 900  # the WAL after the previous checkpoint was kept
    got = totals(db)
    db.close()
    assert got == reference_totals(900)


def test_snapshot_of_an_unknown_version_is_refused(tmp_path):
    db, _ = open_db(tmp_path, "ver")
    db.insert("ev", rows(0, 50))
    db.checkpoint()
    db.close()
    (ckpt,) = sorted((tmp_path / "ver" / "checkpoints").glob("ckpt-*"))[-1:]
    doc = json.loads((ckpt / "MANIFEST").read_bytes())
    doc["version"] = 99
    (ckpt / "MANIFEST").write_text(json.dumps(doc))
    with pytest.raises(SnapshotFormatError) as e:
        open_db(tmp_path, "ver")
    assert e.value.code == "LDB-5001" and "99" in str(e.value)
    with pytest.raises(SnapshotFormatError):  # the failed open released the directory
        open_db(tmp_path, "ver")


def test_retention_and_wal_truncation_bound_disk_use(tmp_path):
    db, _ = open_db(tmp_path, "ret", checkpoint_retain=2)
    for i in range(6):
        db.insert("ev", rows(i * 200, (i + 1) * 200))
        db.checkpoint()
    assert len(db.engine.durable.store.complete()) == 2
    segs = db.engine.durable.wal.segments()
    assert len(segs) <= 3
    db.close()


def test_second_open_of_the_same_directory_is_refused(tmp_path):
    db, _ = open_db(tmp_path, "lock")
    with pytest.raises(laminardb.EngineError) as e:
        laminardb.open(tmp_path / "lock")
    assert e.value.code == "LDB-3005"
    db.close()


def test_in_memory_database_has_no_checkpoints():
    with laminardb.open() as db:
        with pytest.raises(CheckpointUnsupportedError) as e:
            db.checkpoint()
        assert e.value.code == "LDB-5007"
        assert db.metrics()["checkpoints"] is None


def test_periodic_checkpoints_run_on_their_own(tmp_path):
    import time

    db, out = open_db(tmp_path, "timer", checkpoint_interval="100ms")
    db.insert("ev", rows(0, 1000))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not committed(out / "per_sec", "jsonl"):
        time.sleep(0.05)
    assert committed(out / "per_sec", "jsonl")
    assert db.metrics()["checkpoints"]["checkpoints"] >= 1
    db.close()


def test_a_script_applies_whole_or_not_at_all(tmp_path):
    db, _ = open_db(tmp_path, "atomic")
    with pytest.raises(laminardb.LaminarError):
        db.execute("CREATE SOURCE a (x INT); CREATE STREAM b AS SELECT x FROM a; CREATE SOURCE a (x INT)")
    names = set(db.execute("SHOW ALL").table.column("name").to_pylist())
    assert "a" not in names and "b" not in names
    db.execute("CREATE SOURCE a (x INT); CREATE STREAM b AS SELECT x FROM a")
    db.close()
    db, _ = open_db(tmp_path, "atomic")  # the failed script left nothing in the WAL either
    names = set(db.execute("SHOW ALL").table.column("name").to_pylist())
    assert {"a", "b"} <= names
    db.close()


def test_in_memory_script_is_atomic_too():
    with laminardb.open() as db:
        with pytest.raises(laminardb.LaminarError):
            db.execute("CREATE SOURCE a (x INT); CREATE SOURCE a (x INT)")
        assert db.execute("SHOW ALL").table.num_rows == 0


@pytest.fixture
def tiny_disk(tmp_path):
    """A 6 MiB tmpfs: room for a few checkpoints of 40k groups, then a real ENOSPC."""
    with tiny_tmpfs(tmp_path, "6m") as mnt:
        yield mnt


def test_disk_full_checkpoint_is_a_typed_error_and_keeps_the_previous_one(tiny_disk):
    from laminardb.checkpoint.exceptions import CheckpointWriteError

    cfg = {"checkpoint_interval": "off", "vars": {"OUT": str(tiny_disk / "out")}}
    script = PIPELINE.replace("GROUP BY k;", "GROUP BY k;\nCREATE MATERIALIZED VIEW IF NOT EXISTS wide AS "
                              "SELECT v, count(*) AS n FROM ev GROUP BY v;")
    db = laminardb.open(tiny_disk / "db", config=cfg)
    db.execute(script)
    db.insert("ev", rows(0, 20_000))
    e1 = db.checkpoint()
    visible = committed(tiny_disk / "out" / "per_sec", "jsonl")
    db.insert("ev", rows(20_000, 40_000))
    free = os.statvfs(tiny_disk).f_bavail * os.statvfs(tiny_disk).f_frsize
    filler = tiny_disk / "filler"
    with open(filler, "wb") as f:  # leave less room than a checkpoint of 40k groups needs
        f.write(b"\0" * max(0, free - 64 * 1024))
    with pytest.raises(CheckpointWriteError) as e:
        db.checkpoint()
    assert e.value.code == "LDB-5002" and "disk is full" in str(e.value)
    assert db.metrics()["checkpoints"]["failures"] == 1
    assert committed(tiny_disk / "out" / "per_sec", "jsonl") == visible  # nothing half-visible
    filler.unlink()
    db.close()
    db = laminardb.open(tiny_disk / "db", config=cfg)
    assert db.metrics()["checkpoints"]["recovery"]["epoch"] >= e1
    assert db.offset("ev") == 40_000
    got = totals(db)
    db.close()
    assert got == reference_totals(40_000)


def test_open_on_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "data.db"
    f.write_text("not a directory")
    with pytest.raises(laminardb.ConfigError) as e:
        laminardb.open(f)
    assert e.value.code == "LDB-9004" and "directory" in str(e.value)
