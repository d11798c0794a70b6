"""Each reactor actor writes its own part of a checkpoint (``ClusterImage.write_parts``): the
database head writes only a small envelope naming the parts, and the manifest names and
verifies every part, so retention keeps a part as long as a checkpoint (or an incremental
chain) needs it. A durable database of two real Ray actors, with the real Spark
coordinator. Oracle: DuckDB over the same rows, through an actor SIGKILLed after the
checkpoints; and the same database with ``actor_snapshots=False``, whose head writes every
byte itself as before."""

from __future__ import annotations

import json
import os
import signal

import pyarrow as pa
import pytest

from tests._services.procs import process_alive, wait_until
from tests.delta.test_actor_stages import JOIN_DDL, _insert_both, _joined, _rows_of
from tests.delta.test_spark_merge_delta import _committed

pytestmark = pytest.mark.integration

AGG_DDL = "CREATE STREAM per_k AS SELECT k, count(*) AS c, sum(a) AS s FROM l GROUP BY k"


def _manifest(tmp_path, db) -> dict:
    root = tmp_path / "ckpt" / db.database / "checkpoints"
    newest = max(p for p in root.glob("ckpt-*") if (p / "MANIFEST").exists())
    return json.loads((newest / "MANIFEST").read_bytes())


def _state_files(doc: dict, query: str) -> list[str]:
    meta = doc["nodes"][query]
    return [meta["op"], *meta.get("op_deltas", [])]


def _part_bytes(doc: dict, name: str) -> int:
    return sum(m["bytes"] for f, m in doc["files"].items() if f.startswith(f"{name}.part-"))


def test_the_actors_write_their_parts_and_a_killed_actor_recovers_from_them(database, tmp_path):
    out = tmp_path / "out"
    db = database(checkpoint_interval="off")
    db.execute(JOIN_DDL.format(out=out))
    db.execute(AGG_DDL)
    sides: dict[str, list[pa.Table]] = {"l": [], "r": []}
    for i in range(2):
        _insert_both(db, sides, i)
    db.checkpoint()
    first = _manifest(tmp_path, db)
    for query in ("j", "per_k"):
        name = first["nodes"][query]["op"]
        assert {f"{name}.part-0", f"{name}.part-1"} <= set(first["files"]), (query, sorted(first["files"]))
        assert first["files"][name]["bytes"] < 1024 < _part_bytes(first, name), query  # the head's is an envelope

    _insert_both(db, sides, 2)
    db.checkpoint()
    second = _manifest(tmp_path, db)
    chain = _state_files(second, "j")
    assert len(chain) == 2, chain  # the join's whole snapshot, then its delta: both made of parts
    for name in chain:
        assert _part_bytes(second, name) > 0, name
    assert {f: m for f, m in second["files"].items() if f.startswith(f"{chain[0]}.part-")} == \
        {f: m for f, m in first["files"].items() if f.startswith(f"{chain[0]}.part-")}

    _insert_both(db, sides, 3)
    pid = db.metrics()["cluster"]["members"][1]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid), timeout=10, interval=0.05)
    _insert_both(db, sides, 4)
    db.checkpoint()
    assert db.metrics()["database"]["recoveries"], "the kill was recovered from"
    assert _rows_of(_committed(out)) == _joined(sides)  # restored from the actors' parts, exactly once


def test_with_actor_snapshots_off_the_head_writes_every_byte(database, tmp_path):
    db = database(checkpoint_interval="off", actor_snapshots=False)
    db.execute(JOIN_DDL.format(out=tmp_path / "out"))
    sides: dict[str, list[pa.Table]] = {"l": [], "r": []}
    _insert_both(db, sides, 0)
    db.checkpoint()
    doc = _manifest(tmp_path, db)
    assert not [f for f in doc["files"] if ".part-" in f]
    assert doc["files"][doc["nodes"]["j"]["op"]]["bytes"] > 1024
