"""Exactly-once through a PostgreSQL lookup join under SIGKILL (the way
``tests/checkpoint/test_crash_loop.py`` proves it): a durable pipeline (``_lookup_child.py``)
is killed at random moments — once while PostgreSQL refuses its lookups, so rows are held in
the join when the process dies — and restarted from the same directory; the committed FILE
output must hold every order once, joined with the row PostgreSQL has for it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

from tests._services.crash_child import spawn_child  # noqa: E402
from tests.lookup.test_lookup_postgres import PASSWORD, _snapshot, pg  # noqa: E402,F401

ROWS = 3000
_CHILD_TIMEOUT_S = 90


def _spawn(cfg_path: Path, log: Path) -> subprocess.Popen:
    return spawn_child(HERE / "_lookup_child.py", cfg_path, log)


def _wait_for(log: Path, text: str, before: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + _CHILD_TIMEOUT_S
    while log.read_text(errors="replace").count(text) <= before:
        assert proc.poll() is None, f"child exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in time: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def _kill(p: subprocess.Popen) -> None:
    p.kill()
    p.wait(30)


@pytest.mark.timeout(300)
def test_sigkill_loop_through_a_lookup_join_gives_the_unbroken_answer(tmp_path, pg):  # noqa: F811
    server, dbname, conn = pg
    seed = int(os.environ.get("LAMINARDB_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    out = tmp_path / "out"
    cfg = {"db": str(tmp_path / "db"), "out": str(out), "rows": ROWS, "batch": 40, "password": PASSWORD,
           "url": f"jdbc:postgresql://127.0.0.1:{server.port}/{dbname}"}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    log = tmp_path / "child.log"
    log.touch()
    for k in range(4):
        before = log.read_text(errors="replace").count("resume at")
        p = _spawn(cfg_path, log)
        try:
            _wait_for(log, "resume at", before, p)
            if k == 0:  # an outage: the lookups fail, the rows are held, then the process dies
                with conn.cursor() as cur:
                    cur.execute("REVOKE SELECT ON customers FROM lkp")
                held = log.read_text(errors="replace").count("held")
                _wait_for(log, "held", held + 3, p)
                time.sleep(0.3)  # a checkpoint or two with held rows in it
            else:
                time.sleep(rng.uniform(0.2, 1.2))
        finally:
            _kill(p)
            with conn.cursor() as cur:
                cur.execute("GRANT SELECT ON customers TO lkp")
    cfg["finish"] = True
    cfg_path.write_text(json.dumps(cfg))
    p = _spawn(cfg_path, log)
    p.wait(_CHILD_TIMEOUT_S)
    assert p.returncode == 0, f"seed {seed}: final run failed: {log.read_text()[-4000:]}"
    assert "held" in log.read_text()
    got = []
    for f in sorted((out / "j").glob("*.jsonl")):
        got += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    assert sorted(r["id"] for r in got) == list(range(ROWS)), f"seed {seed}: orders lost or duplicated"
    names = {r["id"]: r["name"] for r in _snapshot(conn).to_pylist()}
    assert all(r["name"] == names.get(r["cid"]) for r in got), f"seed {seed}: a wrong lookup"
