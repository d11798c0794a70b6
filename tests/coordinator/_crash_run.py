"""Child process of test_crash.py: run checkpoints of one database against the fake head
until ``LAMINARDB_TEST_COORD_CRASH_AT`` makes the process exit (or all are done).

Usage: python -m tests.coordinator._crash_run WORKDIR EPOCHS ROWS_PER_EPOCH
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from laminardb.checkpoint.spark_coordinator import CheckpointCoordinator
from tests.coordinator._fake_head import FakeHead


def build(work: Path, rows_per_epoch: int) -> tuple[FakeHead, CheckpointCoordinator]:
    """The head and coordinator of a crash test, over ``work`` (the same in both processes);
    with ``LAMINARDB_TEST_PG_URL`` set, a PostgreSQL sink too."""
    sinks = {
        "out_file": f"CREATE SINK out_file INTO FILE (path = '{work / 'out_file'}', "
                    "format = 'parquet') AS SELECT * FROM src",
        "out_even": f"CREATE SINK out_even INTO DELTA_LAKE (path = '{work / 'lake'}') "
                    "AS SELECT * FROM src WHERE id % 2 = 0",
        "out_parts": f"CREATE SINK out_parts INTO FILE (path = '{work / 'out_parts'}', "
                     "format = 'parquet', partitioned_by = 'k') AS SELECT * FROM src",
    }
    if os.environ.get("LAMINARDB_TEST_PG_URL"):
        sinks["out_pg"] = (f"CREATE SINK out_pg INTO POSTGRES (url = '{os.environ['LAMINARDB_TEST_PG_URL']}', "
                           "table = 'out_pg') AS SELECT * FROM src")
    head = FakeHead(work / "head", sinks, rows_per_epoch=rows_per_epoch)
    coord = CheckpointCoordinator(work / "state", head_resolver=lambda name: head)
    return head, coord


def main() -> None:
    work, epochs, rows = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    _, coord = build(work, rows)
    coord.register("db1", interval_s=None, checkpoint_dir=str(work / "ckpt"))
    for _ in range(epochs):
        coord.checkpoint_now("db1")
    coord.stop()


if __name__ == "__main__":
    main()
