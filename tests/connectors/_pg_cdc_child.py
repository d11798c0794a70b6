"""The durable CDC pipeline the crash test kills: run as ``python _pg_cdc_child.py CONFIG.json``.

It opens (or recovers) a durable database with a PostgreSQL CDC source and a materialized
GROUP BY view over it, starts polling, prints ``started``, and every 100 ms writes the view's
rows to ``cfg["view_out"]`` (atomically) until the parent SIGKILLs it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import laminardb


def main() -> None:
    # the source logs "streaming from <LSN>" when it makes its slot: the test's floor until a
    # checkpoint holds the source's position (the snapshot covers every change before it)
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
    logging.getLogger("laminardb.source").setLevel(logging.INFO)
    cfg = json.loads(open(sys.argv[1]).read())
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": cfg.get("interval", "200ms")})
    db.execute(cfg["source_ddl"])
    db.execute("CREATE MATERIALIZED VIEW IF NOT EXISTS agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s "
               "FROM cdc GROUP BY k")
    db.start()
    print("started", flush=True)
    out, tmp = cfg["view_out"], cfg["view_out"] + ".tmp"
    while True:
        rows = sorted(tuple(r.values()) for r in db.query("SELECT k, n, s FROM agg").to_pylist())
        with open(tmp, "w") as fh:
            json.dump(rows, fh)
        os.replace(tmp, out)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
