"""The Flink-style SIGKILL loop's two halves, shared by every exactly-once crash test.

Parent side: :func:`spawn_child` (a child script on a JSON config, its output appended to one
log, an optional ``LAMINARDB_TEST_CRASH_AT`` crash point) and :func:`wait_for_more` (the bounded
wait for the child's next log line). Child side: :func:`feed_until_killed`, the insert loop
that resumes at the database's own offset, so each restart goes on where the durable database
says it left off, then waits for the parent's SIGKILL or finishes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests._services.procs import REPO_ROOT


def spawn_child(script: Path, cfg_path: Path, log: Path, crash_at: str = "") -> subprocess.Popen:
    """Run ``script cfg_path`` with this checkout on PYTHONPATH; stdout and stderr go to ``log``."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), LAMINARDB_TEST_CRASH_AT=crash_at)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(script), str(cfg_path)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)


def wait_for_more(log: Path, text: str, before: int, proc: subprocess.Popen, timeout: float) -> bool:
    """Wait (bounded) until ``text`` appears in the log more than ``before`` times; False if the
    child exited or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.read_text(errors="replace").count(text) > before:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def feed_until_killed(db: Any, source: str, make_row: Callable[[int], dict], cfg: dict, *,
                      before_batch: Callable[[int], None] | None = None,
                      insert: Callable[[str, list], Any] | None = None,
                      before_finish: Callable[[], None] | None = None) -> None:
    """Insert rows ``db.offset(source)`` … ``cfg['rows']`` in ``cfg['batch']``-row batches
    (``cfg['pause']`` s apart); then, unless ``cfg['finish']``, wait for the parent's SIGKILL;
    else finish, close and print ``done``. Prints ``resume at <offset>`` first."""
    total, batch = cfg["rows"], cfg["batch"]
    i = db.offset(source)
    print(f"resume at {i}", flush=True)
    put = insert or db.insert
    while i < total:
        if before_batch is not None:
            before_batch(i)
        n = min(batch, total - i)
        put(source, [make_row(j) for j in range(i, i + n)])
        i += n
        time.sleep(cfg.get("pause", 0.01))
    if not cfg.get("finish"):
        time.sleep(3600)  # wait for the parent's SIGKILL
    if before_finish is not None:
        before_finish()
    db.finish()
    db.close()
    print("done", flush=True)
