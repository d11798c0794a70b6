"""Exactly-once of a MySQL CDC source under SIGKILL (the pattern of
tests/checkpoint/test_crash_loop.py): a durable database reading MariaDB's binlog into a view
is killed at random moments while random inserts, updates and deletes flow, restarted from
the same directory, and must end equal to MariaDB's own ``GROUP BY`` — a change read twice
or skipped across a restart would show in COUNT or SUM."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laminardb.checkpoint.store import CheckpointStore
from tests._services.procs import kill_proc
from tests.connectors._mysql_cdc_util import TABLE_DDL, group_by, random_changes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KILLS = 3
_IDS = 2000  # primary keys of the random changes
_CHILD_TIMEOUT_S = 90


def _spawn(cfg: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(log, "ab") as out:  # the child holds its own descriptor
        return subprocess.Popen([sys.executable, str(HERE / "_mysql_cdc_crash_child.py"), str(cfg)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def _wait_child(done: Callable[[], bool], proc: subprocess.Popen, log: Path, what: str) -> None:
    """Wait (bounded) until ``done()``; fail at once with the child's log if it exits first
    (``wait_until`` would take an exit for "not yet" and wait out its timeout)."""
    deadline = time.monotonic() + _CHILD_TIMEOUT_S
    while not done():
        assert proc.poll() is None, f"the child exited: {log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"the child did not {what}"
        time.sleep(0.02)


def _committed_epoch(db_dir: Path) -> int:
    """The newest checkpoint of the durable database with its MANIFEST (its commit point)."""
    if not (db_dir / "checkpoints").is_dir():  # not created yet (CheckpointStore would make it)
        return 0
    return max(CheckpointStore(db_dir).complete(), default=0)


def _wait_checkpoint_after(db_dir: Path, epoch: int, proc: subprocess.Popen, log: Path) -> None:
    """Wait until the child commits a checkpoint newer than ``epoch``: the next restart then
    has something of this run's to resume from, however slowly a loaded machine runs it."""
    _wait_child(lambda: _committed_epoch(db_dir) > epoch, proc, log, f"commit a checkpoint after {epoch}")


def test_sigkilled_durable_pipeline_ends_equal_to_mariadbs_group_by(mariadb_server: Any, tmp_path: Path) -> None:
    database = mariadb_server.create_database("crash")
    conn = mariadb_server.connect(database)
    with conn.cursor() as cur:
        cur.execute(TABLE_DDL)
    random_changes(conn, random.Random(11), 1500, ids=_IDS)  # the snapshot's rows
    # small snapshot chunks: the first kill may land inside the snapshot (a restart goes on there)
    cfg = {"db": str(tmp_path / "db"), "host": mariadb_server.host, "port": mariadb_server.port,
           "database": database, "out": str(tmp_path / "out.json"),
           "options": {"scan.incremental.snapshot.chunk.size": "5"}}
    cfg_path, log = tmp_path / "cfg.json", tmp_path / "child.log"
    cfg_path.write_text(json.dumps(cfg))
    stop = threading.Event()

    def write() -> None:
        w = mariadb_server.connect(database)
        rng = random.Random(12)
        try:
            while not stop.is_set():
                random_changes(w, rng, 3, ids=_IDS)
                time.sleep(0.005)
        finally:
            w.close()

    writer = threading.Thread(target=write)
    writer.start()
    rng = random.Random(13)
    try:
        for kill in range(KILLS):
            before = _committed_epoch(tmp_path / "db")
            proc = _spawn(cfg_path, log)
            try:
                _wait_child(lambda k=kill: log.read_text(errors="replace").count("started") > k, proc, log, "start")
                _wait_checkpoint_after(tmp_path / "db", before, proc, log)
                if kill == KILLS - 1:  # the last run checkpoints the binlog: the final run resumes there
                    _wait_child(lambda: "complete, the binlog follows" in log.read_text(errors="replace"),
                                proc, log, "finish the snapshot")
                    # +1: a checkpoint in flight may hold the state from before the snapshot ended
                    _wait_checkpoint_after(tmp_path / "db", _committed_epoch(tmp_path / "db") + 1, proc, log)
                time.sleep(rng.uniform(0.05, 0.4) if kill == 0 else rng.uniform(0.2, 1.2))
            finally:
                kill_proc(proc, hard=True)
    finally:
        stop.set()
        writer.join(timeout=10)
    cfg_path.write_text(json.dumps({**cfg, "finish": True}))
    proc = _spawn(cfg_path, log)
    try:
        assert proc.wait(timeout=_CHILD_TIMEOUT_S) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        kill_proc(proc, hard=True)
    got = [tuple(r) for r in json.loads(Path(cfg["out"]).read_text())]
    assert got == group_by(conn)
    text = log.read_text(errors="replace")
    # restarts resumed from checkpoints: in the binlog, or in the snapshot when a kill landed
    # there (on a loaded machine the snapshot outlasts more of the random kills)
    resumed = text.count("resumes at GTID") + text.count("goes on after key")
    assert resumed >= 2 and "resumes at GTID" in text, text[-3000:]
    conn.close()
