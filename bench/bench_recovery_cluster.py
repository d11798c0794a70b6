"""Delta mode recovery time with many live groups: an actor SIGKILLed, then the head.

Run from the repository root (``RAY_TMPDIR`` set if other Ray clusters share the machine):

    .venv/bin/python bench/bench_recovery_cluster.py                 # 1M live groups, 2 actors
    .venv/bin/python bench/bench_recovery_cluster.py --groups 100k

A durable database (2 actors, the Spark coordinator) holds ``--groups`` live groups: one row
per key in a 1-hour tumbling window that stays open, checkpointed. Then, in turn:

- **actor kill**: one reactor actor SIGKILLed; timed from the kill until an ``insert()``
  and a ``flush()`` return again (the head rebuilt the actors, restored the checkpoint,
  replayed the WAL);
- **head kill**: the head's process SIGKILLed; timed the same way (Ray restarted the head,
  which recovered from its directory).

Each is reported beside what the head itself recorded (``metrics()["database"]["recoveries"]``:
``restore_s`` = state restored and WAL replayed). After both, every group's count is checked
against the rows inserted (the windows close at ``finish()``). Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DDL = ("CREATE SOURCE t (k BIGINT NOT NULL, ts BIGINT NOT NULL, v BIGINT, WATERMARK FOR ts AS ts); "
       "CREATE STREAM g AS SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k, tumble(ts, INTERVAL '1' HOUR)")


def parse_count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def rows(lo: int, hi: int) -> pa.RecordBatch:
    import numpy as np

    k = np.arange(lo, hi, dtype=np.int64)
    return pa.RecordBatch.from_pydict({"k": k, "ts": np.full(len(k), 1_000, np.int64), "v": k})


def timed_kill(db, pid: int, probe_key: int) -> float:
    """Seconds from SIGKILL of ``pid`` until an insert is answered and delivered again
    (``flush()``: its round reached every actor, so a lost one has been replaced)."""
    before = len(db.metrics()["database"]["recoveries"])
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    db.insert("t", rows(probe_key, probe_key + 1))
    db.flush()
    took = time.perf_counter() - t0
    assert len(db.metrics()["database"]["recoveries"]) == before + 1, "no recovery was recorded"
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="1M")
    ap.add_argument("--actors", type=int, default=2)
    args = ap.parse_args()
    groups = parse_count(args.groups)

    import ray

    import laminardb
    from laminardb.cluster.head import drop_database

    ray.init(num_cpus=args.actors, include_dashboard=False, log_to_driver=False)
    name = "bench-recovery"
    result: dict = {"groups": groups, "actors": args.actors}
    try:
        db = laminardb.connect("ray://auto", database=name, actors=args.actors,
                               config={"checkpoint_dir": tempfile.mkdtemp(prefix="ldb-recovery-"),
                                       "checkpoint_interval": "off"})
        db.execute(DDL)
        sub = db.subscribe_stream("g")  # the windows close at finish(): every group once
        step = 65_536
        for lo in range(0, groups, step):
            db.insert("t", rows(lo, min(groups, lo + step)))
        t0 = time.perf_counter()
        db.checkpoint()
        result["checkpoint_s"] = time.perf_counter() - t0
        actor = db.metrics()["cluster"]["members"][0]["pid"]
        result["actor_kill_s"] = timed_kill(db, actor, groups)
        head = db.metrics()["database"]["head_pid"]
        result["head_kill_s"] = timed_kill(db, head, groups + 1)
        recoveries = db.metrics()["database"]["recoveries"]
        result["recoveries"] = [{k: r.get(k) for k in ("cause", "seconds", "restore_s", "wal_records_replayed")}
                                for r in recoveries]
        db.finish()
        out = sub.to_arrow()
        assert out.num_rows == groups + 2 and sum(out.column("n").to_pylist()) == groups + 2, out.num_rows
        print(f"{groups:,} live groups, {args.actors} actors: checkpoint {result['checkpoint_s']:.2f} s; "
              f"actor SIGKILL -> insert answered {result['actor_kill_s']:.2f} s; "
              f"head SIGKILL -> insert answered {result['head_kill_s']:.2f} s")
        for r in result["recoveries"]:
            print(f"  recovery: {r['cause']}: in the head {r['seconds']} s, of which restore + replay {r['restore_s']} s, "
                  f"{r['wal_records_replayed']} WAL records")
    finally:
        drop_database(name)
        ray.shutdown()
    print("BENCH_JSON " + json.dumps(result))


if __name__ == "__main__":
    main()
