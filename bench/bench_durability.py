"""Durability benchmark: what the WAL, checkpoints and recovery cost, side by side in one run.

Run from the repository root:

    .venv/bin/python bench/bench_durability.py                  # the issue's figures (~3 min)
    .venv/bin/python bench/bench_durability.py --quick          # smaller, for a smoke run

What it measures (the database directory is on the local disk, under --dir):

1. Throughput on the engine bench's workload (1,000 symbols, 1 s tumbling windows,
   COUNT/SUM/AVG, 64k-row batches), repeated --passes times with time shifted so each pass
   continues the last: in memory; durable with checkpoints off (WAL only); every 10 s;
   every 1 s; every 100 ms (a stress case). Every durable result is checked equal to the in-memory one.
2. Insert cost: 64k-row batch throughput and one-row insert latency (p50/p99) in memory,
   with the WAL (default: to the OS), and with ``wal_sync='always'`` (fsync, group commit).
3. Checkpoint duration and the longest ingest stall with 100k and 1M live groups (keys in
   open windows): a thread inserts one-row batches while the checkpoint runs; the stall is
   the longest of those inserts, and the time the checkpoint held the engine lock.
4. Recovery: a child process builds 1M live groups, checkpoints, inserts 1M more rows (WAL
   only) and is SIGKILLed; the time ``open()`` takes to be ready is measured.

The process is pinned to CPU 0 like the engine bench. Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import AGG_DDL, SOURCE_DDL, loadavg, machine_info, make_batches  # noqa: E402

STATE_DDL = ("CREATE SOURCE s (k BIGINT, ts BIGINT NOT NULL, v BIGINT, WATERMARK FOR ts AS ts); "
             "CREATE STREAM g AS SELECT k, count(*) AS n, sum(v) AS sv, max(v) AS mx "
             "FROM s GROUP BY k, tumble(ts, INTERVAL '1' HOUR)")


def _open(path: Path | None, **config):
    import laminardb

    return laminardb.open() if path is None else laminardb.open(path, config=config)


def _fresh(root: Path, name: str) -> Path:
    p = root / name
    shutil.rmtree(p, ignore_errors=True)
    return p


# ---------------------------------------------------------------------------- 1. throughput
def shifted(batches: list[pa.RecordBatch], passes: int) -> list[pa.RecordBatch]:
    span = int(pc.max(batches[-1].column("ts")).as_py()) - int(pc.min(batches[0].column("ts")).as_py()) + 2000
    out = []
    for p in range(passes):
        for b in batches:
            ts = pc.add(b.column("ts"), pa.scalar(p * span, pa.int64()))
            out.append(pa.record_batch([ts, b.column("sym"), b.column("price")], schema=b.schema))
    return out


def run_throughput(batches, path: Path | None, **config) -> dict:
    db = _open(path, **config)
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg", history_rows=None)
    t0 = time.perf_counter()
    for b in batches:
        db.insert("trades", b)
    db.finish()
    elapsed = time.perf_counter() - t0
    m = db.metrics()["checkpoints"]
    result = sub.to_arrow()
    db.close()
    rows = sum(b.num_rows for b in batches)
    out = {"events_per_s": rows / elapsed, "seconds": elapsed, "rows": rows, "result": result}
    if m:
        out.update(checkpoints=m["checkpoints"], max_stall_ms=m["max_stall_s"] * 1000,
                   last_checkpoint_ms=(m["last_duration_s"] or 0) * 1000)
    return out


# ---------------------------------------------------------------------------- 2. insert cost
def run_inserts(root: Path, batches, n_single: int) -> dict:
    out = {}
    for label, path, cfg in (("memory", None, {}),
                             ("wal", _fresh(root, "ins-wal"), {"checkpoint_interval": "off"}),
                             ("wal_always", _fresh(root, "ins-sync"), {"checkpoint_interval": "off",
                                                                        "wal_sync": "always"})):
        db = _open(path, **cfg)
        db.execute(SOURCE_DDL)
        db.execute(AGG_DDL)
        t0 = time.perf_counter()
        for b in batches:
            db.insert("trades", b)
        bulk = sum(b.num_rows for b in batches) / (time.perf_counter() - t0)
        row = {"ts": 9_000_000_000_000, "sym": "SYM0001", "price": 1.0}
        lat = np.empty(n_single, dtype=np.int64)
        for i in range(n_single):
            row["ts"] += 1
            t = time.perf_counter_ns()
            db.insert("trades", row)
            lat[i] = time.perf_counter_ns() - t
        db.close()
        out[label] = {"batch_rows_per_s": bulk, "one_row_p50_us": float(np.percentile(lat, 50)) / 1000,
                      "one_row_p99_us": float(np.percentile(lat, 99)) / 1000}
    return out


# ---------------------------------------------------------------------------- 3. stall
def fill_groups(db, groups: int, start: int = 0, *, ts: int = 1_000) -> None:
    step = 262_144
    for a in range(start, start + groups, step):
        n = min(step, start + groups - a)
        k = np.arange(a, a + n, dtype=np.int64)
        db.insert("s", pa.record_batch({"k": k, "ts": np.full(n, ts, np.int64), "v": k}))


def run_stall(root: Path, groups: int) -> dict:
    path = _fresh(root, f"stall-{groups}")
    db = _open(path, checkpoint_interval="off")
    db.execute(STATE_DDL)
    fill_groups(db, groups)
    lat: list[int] = []
    stop = threading.Event()

    def ingest() -> None:
        i = 0
        while not stop.is_set():
            t = time.perf_counter_ns()
            db.insert("s", {"k": i % 1000, "ts": 1_000, "v": 1})
            lat.append(time.perf_counter_ns() - t)
            i += 1

    th = threading.Thread(target=ingest)
    th.start()
    time.sleep(0.3)
    before = len(lat)
    t0 = time.perf_counter()
    db.checkpoint()
    dur = time.perf_counter() - t0
    time.sleep(0.1)
    stop.set()
    th.join()
    m = db.metrics()["checkpoints"]
    during = lat[before:]
    db.close()
    return {"groups": groups, "checkpoint_s": dur, "lock_held_ms": m["last_stall_s"] * 1000,
            "max_insert_latency_during_ms": max(during) / 1e6 if during else None,
            "inserts_during": len(during), "snapshot_mb": m["last_bytes"] / 1e6}


# ---------------------------------------------------------------------------- 4. recovery
_CHILD = """
import sys, numpy as np, pyarrow as pa, laminardb
sys.path.insert(0, {bench!r})
from bench_durability import STATE_DDL, fill_groups
db = laminardb.open({path!r}, config={{"checkpoint_interval": "off"}})
db.execute(STATE_DDL)
fill_groups(db, {groups})
db.checkpoint()
fill_groups(db, {wal_rows}, start=10**9, ts=2_000)
print("ready", flush=True)
import time; time.sleep(600)
"""


def run_recovery(root: Path, groups: int, wal_rows: int) -> dict:
    path = _fresh(root, f"recover-{groups}")
    code = _CHILD.format(bench=str(Path(__file__).resolve().parent), path=str(path), groups=groups,
                         wal_rows=wal_rows)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"recovery child failed: {line!r}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    t0 = time.perf_counter()
    db = _open(path, checkpoint_interval="off")
    ready = time.perf_counter() - t0
    rec = db.metrics()["checkpoints"]["recovery"]
    state = db.metrics()
    db.close()
    return {"groups": groups, "wal_rows": wal_rows, "open_to_ready_s": ready,
            "wal_records_replayed": rec["wal_records_replayed"], "events_ingested": state["events_ingested"]}


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--passes", type=int, default=12,
                    help="the workload repeated, time shifted (12: a run of several seconds, so 1 s checkpoints fire)")
    ap.add_argument("--quick", action="store_true", help="1M rows, 1 pass, 100k groups only")
    ap.add_argument("--dir", default=None, help="where the database directories go (default: a temp dir)")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.passes = 1_000_000, 1
    try:
        os.sched_setaffinity(0, {0})
    except (AttributeError, OSError):
        pass
    root = Path(args.dir or tempfile.mkdtemp(prefix="ldb-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    import laminardb  # noqa: F401 - warm the kernels before timing
    from laminardb.operators.warmup import warm_kernels

    warm_kernels()
    report: dict = {"machine": machine_info(), "load_before": loadavg()}
    base = make_batches(args.rows, 65_536)
    batches = shifted(base, args.passes)
    print(f"throughput: {sum(b.num_rows for b in batches):,} rows ({args.passes} passes of {args.rows:,})")
    runs = {"memory": run_throughput(batches, None)}
    for label, interval in (("durable_off", "off"), ("durable_10s", "10s"), ("durable_1s", "1s"),
                            ("durable_100ms", "100ms")):
        runs[label] = run_throughput(batches, _fresh(root, label), checkpoint_interval=interval)
    want = runs["memory"]["result"].sort_by([("sym", "ascending"), ("window_start", "ascending")])
    for label, r in runs.items():
        got = r.pop("result").sort_by([("sym", "ascending"), ("window_start", "ascending")])
        assert got.equals(want), f"{label}: result differs from the in-memory run"
        rel = r["events_per_s"] / runs["memory"]["events_per_s"]
        extra = (f"  checkpoints {r['checkpoints']}, max lock {r['max_stall_ms']:.1f} ms"
                 if "checkpoints" in r else "")
        print(f"  {label:12s} {r['events_per_s'] / 1e6:6.2f} M ev/s  ({rel:5.1%} of memory){extra}")
    report["throughput"] = runs
    print("insert cost (64k-row batches; one-row inserts):")
    ins = run_inserts(root, base[: max(1, len(base) // 4)], 5_000 if args.quick else 20_000)
    for label, r in ins.items():
        print(f"  {label:11s} {r['batch_rows_per_s'] / 1e6:6.2f} M rows/s   one row p50 {r['one_row_p50_us']:7.1f} us"
              f"  p99 {r['one_row_p99_us']:7.1f} us")
    report["inserts"] = ins
    report["stall"] = []
    for groups in ([100_000] if args.quick else [100_000, 1_000_000]):
        r = run_stall(root, groups)
        report["stall"].append(r)
        print(f"checkpoint with {groups:>9,} live groups: {r['checkpoint_s'] * 1000:7.1f} ms, lock held "
              f"{r['lock_held_ms']:6.1f} ms, longest insert during it {r['max_insert_latency_during_ms']:.1f} ms, "
              f"{r['snapshot_mb']:.1f} MB")
    groups = 100_000 if args.quick else 1_000_000
    r = run_recovery(root, groups, groups)
    report["recovery"] = r
    print(f"recovery with {groups:,} groups + {r['wal_rows']:,} WAL rows: open → ready {r['open_to_ready_s']:.2f} s "
          f"({r['wal_records_replayed']} WAL records)")
    report["load_after"] = loadavg()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    print("BENCH_JSON " + json.dumps(report, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
