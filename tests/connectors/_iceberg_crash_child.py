"""The pipeline the Iceberg crash test kills: run as ``python _iceberg_crash_child.py CONFIG.json``.

It opens (or recovers) a durable database, inserts the deterministic rows from where
``offset()`` says the database stopped, and writes two Iceberg sinks (a projection and a
windowed aggregate). ``LAMINARDB_TEST_CRASH_AT`` kills it at a checkpoint step; with
``"crash_after_append": true`` it kills itself right after its first Iceberg commit, before
the staged epoch is dropped. With ``"finish": true`` it finishes and exits cleanly; otherwise
it keeps inserting slowly until the parent SIGKILLs it.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import laminardb
from tests._services.crash_child import feed_until_killed

KEYS = 7

PIPELINE = """
CREATE SOURCE IF NOT EXISTS ev (k VARCHAR, seq BIGINT, ts BIGINT NOT NULL, v BIGINT,
                                WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE STREAM IF NOT EXISTS ev_seq AS SELECT k, seq FROM ev;
CREATE STREAM IF NOT EXISTS ev_win AS
    SELECT k, window_start, count(*) AS n, sum(v) AS s FROM ev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE SINK IF NOT EXISTS seq_out FROM ev_seq INTO ICEBERG (warehouse = '${WH}', table = 'db.seq');
CREATE SINK IF NOT EXISTS win_out FROM ev_win INTO ICEBERG (warehouse = '${WH}', table = 'db.win');
"""


def row(i: int) -> dict:
    # per-key sequence numbers: key i % KEYS gets seq i // KEYS; event time strictly grows
    return {"k": f"k{i % KEYS}", "seq": i // KEYS, "ts": 1_700_000_000_000 + i * 13, "v": i % 1000}


def _die_after_first_append() -> None:
    from pyiceberg.table import Table

    append = Table.append

    def append_then_die(self, *args, **kwargs):  # the snapshot is in; the stage not yet dropped
        append(self, *args, **kwargs)
        print("appended, dying", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    Table.append = append_then_die


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    if cfg.get("crash_after_append") == "in_recovery":
        _die_after_first_append()
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": cfg.get("interval", "150ms"),
                                           "vars": {"WH": cfg["warehouse"]}})
    db.execute(PIPELINE)
    db.start()
    if cfg.get("crash_after_append") == "running":
        _die_after_first_append()

    def arm_crash_point(i: int) -> None:
        if cfg.get("crash_at") and i >= cfg.get("crash_from", 0):
            from laminardb.checkpoint import local

            local._CRASH_AT = cfg["crash_at"]  # read by local._crash_point at each checkpoint

    feed_until_killed(db, "ev", row, cfg, before_batch=arm_crash_point)


if __name__ == "__main__":
    main()
