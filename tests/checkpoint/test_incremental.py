"""Incremental checkpoints of joins (``checkpoint/state_chains.py``, ``operators/join_changelog.py``).

A join's checkpoint is a whole snapshot followed by deltas. Each test compares a run that
crashes (no close, no final checkpoint) and recovers from such a chain with the unbroken run
of the same rows: the committed sink output and the view must be equal. The joins cover the
three ways a join's state changes: rows appended (inner), rows evicted by the watermark with
compaction renumbering the rows (interval), and match counts changing (left and full outer).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

import laminardb

PIPELINE = """
CREATE SOURCE IF NOT EXISTS a (k BIGINT, ts BIGINT NOT NULL, v BIGINT,
                               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE SOURCE IF NOT EXISTS b (k BIGINT, ts BIGINT NOT NULL, w VARCHAR,
                               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM IF NOT EXISTS inner_j AS SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k;
CREATE STREAM IF NOT EXISTS interval_j AS
    SELECT a.k, a.v, b.w FROM a LEFT JOIN b
    ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts + INTERVAL '1' SECOND;
CREATE MATERIALIZED VIEW IF NOT EXISTS outer_counts AS
    SELECT b.w AS w, count(*) AS n, sum(a.v) AS s FROM a FULL JOIN b ON a.k = b.k GROUP BY b.w;
CREATE SINK IF NOT EXISTS inner_out FROM inner_j INTO FILE (path = '${OUT}/inner', format = 'jsonl');
CREATE SINK IF NOT EXISTS interval_out FROM interval_j INTO FILE (path = '${OUT}/interval', format = 'jsonl');
"""

BATCH = 1500  # rows per side per step; the interval join's eviction reaches compaction


def a_rows(step: int) -> list[dict]:
    base = step * BATCH
    return [{"k": (i * 7919) % 3001, "ts": 1_000_000 + i * 5, "v": i} for i in range(base, base + BATCH)]


def b_rows(step: int) -> list[dict]:
    base = step * BATCH
    return [{"k": (i * 104729) % 3001, "ts": 1_000_000 + i * 5 + 300, "w": f"w{i % 13}"}
            for i in range(base, base + BATCH)]


def insert_step(db, step: int) -> None:
    db.insert("a", a_rows(step))
    db.insert("b", b_rows(step))


def open_db(path: Path, out: Path, **config):
    cfg = {"checkpoint_interval": "off", "vars": {"OUT": str(out)}}
    cfg.update(config)
    db = laminardb.open(path, config=cfg)
    db.execute(PIPELINE)
    return db


def crash(db) -> None:
    """Abandon the connection as a SIGKILL would: no close, no final checkpoint."""
    db.engine.durable._stop.set()
    db.engine._release_directory()
    db.engine.durable.wal.close()


def committed(path: Path) -> list[tuple]:
    files = sorted(str(p) for p in path.glob("*.jsonl"))
    if not files:
        return []
    return duckdb.sql(f"SELECT * FROM read_json_auto({files!r}) ORDER BY ALL").fetchall()


def run(tmp: Path, name: str, steps: int, *, checkpoint_every: int = 1, crash_after: set[int] = frozenset(),
        **config):
    """Insert ``steps`` steps, a checkpoint after every ``checkpoint_every`` ones; crash and
    reopen after the steps in ``crash_after``. Returns the output and what recovery restored."""
    path, out = tmp / name, tmp / f"{name}-out"
    db = open_db(path, out, **config)
    deltas_restored = 0
    for step in range(steps):
        insert_step(db, step)
        if (step + 1) % checkpoint_every == 0:
            db.checkpoint()
        if step in crash_after:
            deltas_restored += len(_latest_chain(path))
            crash(db)
            db = open_db(path, out, **config)
    view = sorted(db.query("SELECT * FROM outer_counts").to_pylist(), key=lambda r: str(r["w"]))
    db.finish()
    db.close()
    return {"inner": committed(out / "inner"), "interval": committed(out / "interval"), "view": view,
            "deltas_restored": deltas_restored}


def _latest_chain(path: Path) -> list[str]:
    """The delta files the newest checkpoint's join nodes are restored from."""
    ckpts = sorted((path / "checkpoints").glob("ckpt-*"))
    doc = json.loads((ckpts[-1] / "MANIFEST").read_text())
    return [f for meta in doc["nodes"].values() for f in meta.get("op_deltas", [])]


def test_recovery_from_a_chain_gives_the_unbroken_answer(tmp_path):
    unbroken = run(tmp_path, "unbroken", 8, checkpoint_incremental=False)
    crashed = run(tmp_path, "crashed", 8, crash_after={3, 6})
    assert crashed["deltas_restored"] > 0, "the crashes must recover from deltas, or the test proves nothing"
    for what in ("inner", "interval", "view"):
        assert crashed[what] == unbroken[what], what
    assert len(unbroken["inner"]) > 1000 and len(unbroken["interval"]) > 1000 and len(unbroken["view"]) > 5


def test_chains_end_after_max_deltas_and_unused_state_files_go(tmp_path):
    path, out = tmp_path / "db", tmp_path / "out"
    db = open_db(path, out, checkpoint_max_deltas=2, checkpoint_retain=2)
    for step in range(7):
        insert_step(db, step)
        db.checkpoint()
    chain = _latest_chain(path)
    state = {p.name for p in (path / "checkpoints" / "state").iterdir()}
    named = set()
    for ckpt in (path / "checkpoints").glob("ckpt-*"):
        doc = json.loads((ckpt / "MANIFEST").read_text())
        named |= {f.split("/")[-1] for f in doc["files"] if f.startswith("../state/")}
    db.close()
    assert 0 < len(chain) <= 2 * 3  # at most 2 deltas per join node (3 join nodes)
    assert state == named, "a state file no manifest names was left behind, or a named one is missing"
    assert any(n.endswith(".delta") for n in state)


def test_a_damaged_whole_snapshot_falls_back_without_losing_rows(tmp_path):
    """Every checkpoint built on one whole snapshot fails with it: recovery must fall back to
    a checkpoint that does not share it, and the WAL kept since then rebuilds the rest."""
    unbroken = run(tmp_path, "unbroken", 6, checkpoint_incremental=False)
    path, out = tmp_path / "db", tmp_path / "db-out"
    db = open_db(path, out, checkpoint_max_deltas=2, checkpoint_retain=1)
    for step in range(5):
        insert_step(db, step)
        db.checkpoint()
    crash(db)
    newest = sorted((path / "checkpoints").glob("ckpt-*"))[-1]
    doc = json.loads((newest / "MANIFEST").read_text())
    bases = [m["op"] for m in doc["nodes"].values() if m.get("op_deltas")]
    assert bases, "the newest checkpoint must be built on a shared whole snapshot"
    victim = newest / bases[0]
    victim.write_bytes(b"\0" * victim.stat().st_size)  # same size, wrong bytes: only the CRC knows
    db = open_db(path, out)
    insert_step(db, 5)
    view = sorted(db.query("SELECT * FROM outer_counts").to_pylist(), key=lambda r: str(r["w"]))
    db.finish()
    db.close()
    assert view == unbroken["view"]
    assert committed(out / "inner") == unbroken["inner"]
    assert committed(out / "interval") == unbroken["interval"]


def test_incremental_off_writes_whole_snapshots_only(tmp_path):
    path, out = tmp_path / "db", tmp_path / "out"
    db = open_db(path, out, checkpoint_incremental=False)
    for step in range(3):
        insert_step(db, step)
        db.checkpoint()
    db.close()
    state = path / "checkpoints" / "state"
    assert state.is_dir() and not [p for p in state.iterdir() if p.name.endswith(".delta")]


def test_an_aborted_epoch_is_never_the_base_of_a_delta(tmp_path):
    """The Delta coordinator's two phases: a delta prepared on top of an epoch it then aborts
    must not be extended; the next checkpoint is whole, and recovery from it is exact."""
    unbroken = run(tmp_path, "unbroken", 6, checkpoint_incremental=False)
    path, out = tmp_path / "db", tmp_path / "db-out"
    db = open_db(path, out)
    coord = db.engine.durable
    for step in range(5):
        insert_step(db, step)
        if step < 2:
            continue  # the whole snapshot of epoch 10 is three steps big: a step's delta is small
        epoch = 8 + step
        coord.prepare(epoch)
        if epoch == 11:
            coord.discard(11)  # aborted: its delta is never named by a published manifest
        else:
            assert coord.publish(epoch)
    doc = json.loads((sorted((path / "checkpoints").glob("ckpt-*"))[-1] / "MANIFEST").read_text())
    assert doc["epoch"] == 12
    assert not any(m.get("op_deltas") for m in doc["nodes"].values()), "epoch 12 must not build on 11"
    crash(db)
    db = open_db(path, out)
    insert_step(db, 5)
    view = sorted(db.query("SELECT * FROM outer_counts").to_pylist(), key=lambda r: str(r["w"]))
    db.close()
    assert view == unbroken["view"]
