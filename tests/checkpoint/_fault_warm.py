"""Imported by the file-fault tests' forkserver before it forks any child: runs the fault
pipeline once in a throw-away directory, so every lazy import, parse and kernel load a child
needs has happened and each forked child starts warm (about 0.3 s instead of 2 s)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import laminardb
from tests.checkpoint._crash_child import row

with tempfile.TemporaryDirectory(prefix="ldb-fault-warm-") as _tmp:
    _sql = (Path(__file__).resolve().parent / "fault_pipeline.sql").read_text()
    with laminardb.open(Path(_tmp) / "db", config={"checkpoint_interval": "off",
                                                   "vars": {"OUT": str(Path(_tmp) / "out")}}) as _db:
        _db.execute(_sql)
        _db.insert("ev", [row(i) for i in range(300)])
        _db.checkpoint()
        _db.finish()
