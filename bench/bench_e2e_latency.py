"""End-to-end latency, event in → committed sink row, at 1 s checkpoints: laminardb beside
PySpark Structured Streaming on the same rows (issue 21, item 5).

Run from the repository root:

    .venv/bin/python bench/bench_e2e_latency.py                     # 1,000 rows/s for 30 s per system
    .venv/bin/python bench/bench_e2e_latency.py --seconds 10 --systems laminardb,spark-file-1s

A generator (``e2e_common.generate``) emits ``--rate`` rows/s for ``--seconds``, each stamped
with its creation time (wall clock, ns) and one of 16 keys. Two queries run on them at once:
**stateless** (``WHERE v % 5 <> 0``, a projection) and **windowed** (1 s tumbling COUNT/SUM per
key, watermark 100 ms, emitted when the window closes). Each system writes both to exactly-once
file sinks; a watcher thread per sink polls for newly *committed* files every 5 ms and records,
per row, seen time − creation time. A windowed row's latency counts from the newest event of
its group (``max(created_ns)``, carried in the row): the event that completed the output, as
Spark's RTM benchmark (SPARK-56543) measures from the timestamp of the source record behind an
output record to the sink's. Its floor is the watermark delay (a window cannot close before an
event 100 ms past its end arrives). Before measuring, 200 warm-up rows (10 s in the past, never
measured) go through both queries until committed: query start-up is not in the figures.

Systems (``--systems``; each runs alone, one after the other, in this process tree):

- ``laminardb``: ``laminardb.open(dir, config={"checkpoint_interval": "1s"})``, rows
  ``insert()``ed as generated, FILE sinks (Parquet): part files are renamed into the sink's
  path when their checkpoint commits (``docs/durability.md``). ``--ckpt-stats`` also reports
  each checkpoint's duration (``metrics()`` polled: off by default, it takes the engine's time).
- ``laminardb-delta``: the Delta mode on a local Ray started here (one reactor actor), its
  checkpoints every 1 s driven by the Spark coordinator (``docs/coordinator.md``); the same
  DDL and FILE sinks, rows ``insert()``ed from this process.
- ``spark-file-1s`` / ``spark-file-asap``: the generator writes its rows as JSON-lines files
  (one per ``--file-ms``, default 100 ms, as a producer's linger; renamed into place) that ``readStream.json`` lists; Parquet file
  sink, checkpointLocation, ``trigger(processingTime="1 second")`` or the default trigger
  (next batch as soon as the last ends). Committed = listed in ``_spark_metadata``.
- ``spark-pyds-1s`` / ``spark-pyds-asap``: a Python ``DataSourceStreamReader``
  (``e2e_pyds.py``) that asks this process for the rows over HTTP: no file listing.
- ``spark-rtm``: Real-Time Mode, ``trigger(realTime="1 second")``, on Spark's in-memory RTM
  source and a foreach sink; a row is timed as it reaches the sink (``e2e_rtm.py``).
  ``spark-rtm-stateless``: the same with the stateless query alone (fewer always-running tasks
  on the 2 cores; the published RTM figure is for one query too).

Every generated row must be committed exactly once (stateless: the ids; windowed: every
(key, window) group once, count and sum equal to the generated rows), or that system prints
no figure, only its failure (exit status 1). CPU seconds per process (``proc_cpu``) are reported per system. Ends with
``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import e2e_common as ec  # noqa: E402
import proc_cpu  # noqa: E402
from bench_engine import load, machine_info  # noqa: E402

SYSTEMS = ("laminardb", "laminardb-delta", "spark-file-1s", "spark-file-asap", "spark-pyds-1s", "spark-pyds-asap", "spark-rtm",
           "spark-rtm-stateless")
_DRAIN_S = 60.0  # after the last row, how long a system may take to commit the rest
_CKPT_SAMPLE_S = 0.1  # laminardb's checkpoint duration is read this often (10× per interval)
_WARM_S = 180.0  # Spark's first batches on a loaded 2-core machine: tens of seconds

LAMINAR_DDL = f"""
CREATE SOURCE events (id BIGINT, key VARCHAR, ts BIGINT NOT NULL, created_ns BIGINT, v BIGINT,
    WATERMARK FOR ts AS ts - INTERVAL '{ec.WATERMARK_MS}' MILLISECOND);
CREATE STREAM passed AS SELECT id, key, created_ns, v * 2 AS v2 FROM events WHERE v % 5 <> 0;
CREATE STREAM per_key AS SELECT key, window_start AS ws, count(*) AS n, sum(v) AS sv,
    max(created_ns) AS last_ns FROM events GROUP BY key, tumble(ts, INTERVAL '1' SECOND);
CREATE SINK passed_out FROM passed INTO FILE (path = '${{OUT}}/stateless', format = 'parquet');
CREATE SINK per_key_out FROM per_key INTO FILE (path = '${{OUT}}/windowed', format = 'parquet');
"""


def run_laminardb(work: Path, args) -> dict:
    import laminardb

    out = work / "lam-out"
    db = laminardb.open(work / "lam-db", config={"checkpoint_interval": "1s"})
    db.execute(LAMINAR_DDL.replace("${OUT}", str(out)))
    col = ec.Collector()
    watchers = [ec.Watcher(ec.laminar_files(out / "stateless"), lambda p, t: col.stateless(ec.read_parquet(p), t)),
                ec.Watcher(ec.laminar_files(out / "windowed"), lambda p, t: col.windowed(ec.read_parquet(p), t))]
    durations: dict[int, float] = {}  # epoch → seconds: how much of the latency is the commit
    stop = threading.Event()

    def sample_checkpoints() -> None:
        while not stop.wait(_CKPT_SAMPLE_S):
            c = db.metrics()["checkpoints"]
            durations[c["last_epoch"]] = c["last_duration_s"]

    sampler = threading.Thread(target=sample_checkpoints, daemon=True)
    if args.ckpt_stats:
        sampler.start()
    try:
        res = measure(col, watchers, lambda batch: db.insert("events", batch), args)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(timeout=5)
        db.close()
    if args.ckpt_stats:
        took = [v for v in durations.values() if v is not None]
        res["checkpoint_ms"] = {**ec.summary([v * 1e9 for v in took]), "epochs": len(took)}
    return res


def run_laminardb_delta(work: Path, args) -> dict:
    """The Delta mode: a local Ray (started here, stopped after), 1 reactor actor, the Spark
    checkpoint coordinator at 1 s; the same DDL, rows ``insert()``ed from this process."""
    import ray
    from bench_delta import connect

    out = work / "delta-out"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    db = None
    try:
        db = connect("e2e", work / "delta", 1, checkpoint_interval="1s", coordinator="spark")
        db.execute(LAMINAR_DDL.replace("${OUT}", str(out)))
        col = ec.Collector()
        watchers = [ec.Watcher(ec.laminar_files(out / "stateless"), lambda p, t: col.stateless(ec.read_parquet(p), t)),
                    ec.Watcher(ec.laminar_files(out / "windowed"), lambda p, t: col.windowed(ec.read_parquet(p), t))]
        return measure(col, watchers, lambda batch: db.insert("events", batch), args)
    finally:
        if db is not None:
            db.drop_database()
        ray.shutdown()


def measure(col: ec.Collector, watchers: list[ec.Watcher], emit, args, *, updates: bool = False) -> dict:
    """Generate, wait until every row is committed (bounded), stop the watchers, check, summarize."""
    for w in watchers:
        w.start()
    emit(ec.warm_rows())
    deadline = time.monotonic() + _WARM_S
    while not col.warm() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert col.warm(), f"the warm-up rows were not committed in {_WARM_S:.0f} s"
    before = proc_cpu.sample()
    t0 = time.monotonic()
    rows = ec.generate(emit, rate=args.rate, seconds=args.seconds)
    gen_s = time.monotonic() - t0
    want_windows = len(ec.expected_windows(rows))
    complete = ec.wait_complete(col, watchers, ec.expected_counts(args.rate, args.seconds), want_windows,
                                int(args.rate * args.seconds), _DRAIN_S)
    after = proc_cpu.sample()
    for w in watchers:
        w.halt.set()
        w.join(timeout=10)
    res = col.report(rows, updates=updates)  # raises, naming what is missing, if not complete
    res["complete"] = complete
    res["generate_s"] = gen_s
    res["cpu_s"] = cpu_by_process(proc_cpu.used(before, after))
    return res


def cpu_by_process(procs) -> dict[str, float]:
    """CPU s per process name (this process is "bench"; Spark's JVM "java", its workers "python")."""
    import os

    out: dict[str, float] = {}
    for p in procs:
        name = "bench (generator, watchers, embedded engine)" if p.pid == os.getpid() else p.name
        out[name] = round(out.get(name, 0.0) + p.cpu_s, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def print_table(results: dict, args) -> None:
    print()
    print(f"End-to-end latency, event created → row seen in a committed sink file; {args.rate:,} rows/s "
          f"for {args.seconds:g} s; ms")
    print(f"  {'system':<21}{'query':<11}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'rows checked':>14}   CPU s")
    for name, r in results.items():
        if "error" in r:
            print(f"  {name:<21}not run: {r['error']}")
            continue
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_s"].items() if v >= 0.05)
        for q in ("stateless", "windowed"):
            if q not in r:
                continue
            s = r[q]
            print(f"  {name:<21}{q:<11}{s['p50_ms']:>8.0f}{s['p90_ms']:>8.0f}{s['p99_ms']:>8.0f}{s['max_ms']:>8.0f}"
                  f"{s['rows_checked']:>14,}   {cpu if q == 'stateless' else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=1000, help="rows per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--file-ms", type=int, default=100, help="Spark file source: one input file per this many ms")
    ap.add_argument("--ckpt-stats", action="store_true",
                    help="laminardb: read metrics() 10×/s for each checkpoint's duration (perturbs the run a little)")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")

    info = machine_info()
    print(f"End-to-end latency bench: {info['cpu']}, {info['cores']} cores; load {load()}")
    work = Path(tempfile.mkdtemp(prefix="ldb-e2e-lat-"))
    results: dict = {}
    spark = None
    try:
        for name in systems:
            t = time.monotonic()
            l0 = load()
            try:
                if name == "laminardb":
                    results[name] = run_laminardb(work, args)
                elif name == "laminardb-delta":
                    results[name] = run_laminardb_delta(work, args)
                else:
                    import e2e_spark

                    spark = spark or e2e_spark.Spark.start()
                    results[name] = e2e_spark.run(spark, name, work / name, args, measure)
            except Exception as exc:  # noqa: BLE001 - a missing row or a failed system: recorded, the next runs
                results[name] = {"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
            results[name]["load"] = [l0, load()]
            print(f"  {name}: done in {time.monotonic() - t:.0f} s, load {l0} → {load()}")
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, args)
    print("BENCH_JSON " + json.dumps({"rate": args.rate, "seconds": args.seconds, "machine": info,
                                      "results": results}, default=str))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
