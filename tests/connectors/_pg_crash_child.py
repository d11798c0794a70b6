"""The pipeline the PostgreSQL crash-loop test kills: ``python _pg_crash_child.py CONFIG.json``.

It opens (or recovers) a durable database, inserts the deterministic rows from where
``offset()`` says the database stopped, and writes three PostgreSQL sinks: the rows themselves
(COPY), a per-key aggregate (upserts) and buckets that are deleted once full (HAVING: upserts
and deletes). With ``"finish": true`` it finishes and exits; otherwise it keeps inserting
slowly until the parent SIGKILLs it (or a crash point does).
"""

from __future__ import annotations

import json
import sys

import laminardb
from tests._services.crash_child import feed_until_killed

KEYS = 7
BUCKET = 10  # rows per (key, bucket): a bucket's row is deleted from part_out when it fills


def row(i: int) -> dict:
    # per-key sequence numbers: key i % KEYS gets seq i // KEYS
    return {"k": f"k{i % KEYS}", "seq": i // KEYS, "v": (i * 37) % 1000}


def pipeline(url: str) -> str:
    sink = f"url = '{url}'"
    return f"""
    CREATE SOURCE IF NOT EXISTS ev (k VARCHAR, seq BIGINT, v BIGINT);
    CREATE STREAM IF NOT EXISTS ev_seq AS SELECT k, seq, v FROM ev;
    CREATE STREAM IF NOT EXISTS ev_agg AS
        SELECT k, count(*) AS n, sum(v) AS s, max(seq) AS last_seq FROM ev GROUP BY k EMIT CHANGES;
    CREATE STREAM IF NOT EXISTS ev_part AS
        SELECT k, CAST(floor(seq / {BUCKET}) AS BIGINT) AS b, count(*) AS n FROM ev
        GROUP BY k, CAST(floor(seq / {BUCKET}) AS BIGINT) HAVING count(*) < {BUCKET} EMIT CHANGES;
    CREATE SINK IF NOT EXISTS seq_out FROM ev_seq INTO POSTGRES ({sink}, table = 'seq_out');
    CREATE SINK IF NOT EXISTS agg_out FROM ev_agg INTO POSTGRES ({sink}, table = 'agg_out', primary_key = 'k');
    CREATE SINK IF NOT EXISTS part_out FROM ev_part
        INTO POSTGRES ({sink}, table = 'public.part_out', primary_key = 'k, b');
    """


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": cfg.get("interval", "100ms")})
    db.execute(pipeline(cfg["url"]))
    db.start()
    feed_until_killed(db, "ev", row, cfg)


if __name__ == "__main__":
    main()
