"""The durable pipeline test_mysql_cdc_crash.py SIGKILLs: ``python _mysql_cdc_crash_child.py CONFIG.json``.

It opens (or recovers) a durable database whose source reads MariaDB's table ``t`` through
MYSQL_CDC into the view ``agg``, prints ``started`` and waits for the parent's SIGKILL; with
``"finish": true`` it catches up with the binlog (``flush``), writes the view's rows to
``out`` as JSON and exits cleanly.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminardb  # noqa: E402
from tests.connectors._mysql_cdc_util import VIEW_SQL, source_sql, view_rows  # noqa: E402


class _Server:
    def __init__(self, cfg: dict) -> None:
        self.host, self.port, self.user, self.password = cfg["host"], cfg["port"], "ldb", "ldb"


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING)
    logging.getLogger("laminardb.connectors.mysql_cdc").setLevel(logging.INFO)  # where it resumes
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": "100ms"})
    db.execute(source_sql(_Server(cfg), cfg["database"], if_not_exists=True, extra=cfg.get("options")))
    db.execute(VIEW_SQL)
    db.start()
    print("started", flush=True)
    if not cfg.get("finish"):
        time.sleep(3600)  # the parent SIGKILLs
    db.flush(timeout_s=60)
    Path(cfg["out"]).write_text(json.dumps(view_rows(db)))
    db.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
