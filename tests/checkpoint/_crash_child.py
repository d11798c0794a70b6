"""The pipeline the crash-loop test kills: run as ``python _crash_child.py CONFIG.json``.

It opens (or recovers) a durable database, inserts the deterministic rows from where
``offset()`` says the database stopped, reads a Kafka topic from its checkpointed offsets,
and writes FILE (JSONL and Parquet), Kafka (exactly-once) and Delta Lake sinks. With
``"finish": true`` it finishes and exits cleanly; otherwise it keeps inserting slowly until
the parent SIGKILLs it. Every row is a function of its index, so any run can resume.
"""

from __future__ import annotations

import json
import sys

import laminardb
from tests._services.crash_child import feed_until_killed

KEYS = 7


def row(i: int) -> dict:
    # per-key sequence numbers: key i % KEYS gets seq i // KEYS; event time strictly grows
    return {"k": f"k{i % KEYS}", "seq": i // KEYS, "ts": 1_700_000_000_000 + i * 13, "v": i % 1000}


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    db = laminardb.open(cfg["db"], config={"checkpoint_interval": cfg.get("interval", "150ms"),
                                           "vars": {"OUT": cfg["out"], "BROKERS": cfg["brokers"],
                                                    "IN_TOPIC": cfg["in_topic"],
                                                    "OUT_TOPIC": cfg["out_topic"]}})
    db.execute(open(cfg["sql"]).read())
    db.start()
    # before finishing: the Kafka source has read the whole topic
    feed_until_killed(db, "ev", row, cfg, before_finish=lambda: db.flush(timeout_s=60))


if __name__ == "__main__":
    main()
