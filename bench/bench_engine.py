"""laminardb embedded-engine benchmark: throughput vs DuckDB, and insert→subscriber latency.

Run from the repository root:

    .venv/bin/python bench/bench_engine.py                 # 5M rows (the issue's workload)
    .venv/bin/python bench/bench_engine.py --rows 1000000  # quicker
    .venv/bin/python bench/bench_engine.py --profile       # also cProfile both hot paths

What it measures, in one run (see bench/README.md for the figures and findings):

1. Throughput. 1,000 VARCHAR symbols, 1-second tumbling windows, COUNT/SUM/AVG, 64k-row
   Arrow batches. Data is generated before timing. laminardb: insert every batch into a
   source with a 100 ms watermark delay plus finish(), timed; DuckDB (threads=1): the same
   GROUP BY over the same rows registered as one Arrow table, fetched as Arrow, timed. Both
   results are compared exactly (every group: count, sum, avg) before any number is reported.
   Prices are multiples of 0.25, so every sum is exact in float64 whatever the summation
   order, and an exact comparison is meaningful.
2. Latency. One-row insert(dict) → the batch arriving at a subscriber, for a filter/project
   stream and an EMIT CHANGES aggregate; p50/p99/p99.9 over 20,000 inserts after 2,000
   warm-up inserts.

The process is pinned to CPU 0 (os.sched_setaffinity) before any measurement, so every
figure is one core. Ends with one line ``BENCH_JSON {...}`` for machines.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import resource
import sys
import time
from importlib import metadata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BASE_TS = 1_700_000_000_000  # epoch ms
ROWS_PER_MS = 100  # event-time rate 100k events/s: 5M rows span 50 s → ~50 windows x 1,000 symbols
JITTER_MS = 50  # < the 100 ms watermark delay: no row is ever late
N_SYMBOLS = 1000

SOURCE_DDL = (
    "CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, "
    "WATERMARK FOR ts AS ts - INTERVAL '100' MILLISECOND)"
)
AGG_DDL = (
    "CREATE STREAM agg AS SELECT sym, window_start, window_end, count(*) AS n, sum(price) AS s, "
    "avg(price) AS a FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)"
)
DUCKDB_SQL = "SELECT sym, floor(ts/1000)*1000 AS ws, count(*), sum(price), avg(price) FROM t GROUP BY ALL"
LAT_QUERIES = {
    "filter_project": "CREATE STREAM q AS SELECT ts, sym, price * 2 AS p2 FROM trades WHERE price > 0",
    "emit_changes_agg": (
        "CREATE STREAM q AS SELECT sym, count(*) AS n, sum(price) AS s FROM trades GROUP BY sym EMIT CHANGES"
    ),
}
TARGETS = {"throughput_eps": 10e6, "ratio": 1.0, "filter_project_p99_us": 200, "emit_changes_agg_p99_us": 300}


# ---------------------------------------------------------------------------- machine
def machine_info() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "-"

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numba": ver("numba"),
        "pyarrow": ver("pyarrow"),
        "duckdb": ver("duckdb"),
        "numpy": ver("numpy"),
        "laminardb": ver("laminardb"),
    }


# ---------------------------------------------------------------------------- data
def make_batches(rows: int, batch_rows: int, seed: int = 42) -> list[pa.RecordBatch]:
    """ts increasing (ROWS_PER_MS rows per ms) minus 0..JITTER_MS ms jitter; 1,000 symbols."""
    rng = np.random.default_rng(seed)
    symbols = pa.array([f"SYM{i:04d}" for i in range(N_SYMBOLS)], pa.string())
    out = []
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        idx = np.arange(start, start + n, dtype=np.int64)
        ts = BASE_TS + idx // ROWS_PER_MS - rng.integers(0, JITTER_MS + 1, n)
        sym = symbols.take(pa.array(rng.integers(0, N_SYMBOLS, n)))
        price = rng.integers(1, 400_001, n) / 4.0  # multiples of 0.25: exact sums in any order
        out.append(pa.record_batch({"ts": pa.array(ts, pa.int64()), "sym": sym, "price": pa.array(price)}))
    return out


# ---------------------------------------------------------------------------- throughput
def run_laminardb(batches: list[pa.RecordBatch]) -> tuple[float, pa.Table]:
    import laminardb

    db = laminardb.open()
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg")
    gc.collect()
    t0 = time.perf_counter()
    for b in batches:
        db.insert("trades", b)
    db.finish()
    elapsed = time.perf_counter() - t0
    result = sub.to_arrow()
    db.close()
    return elapsed, result


def run_duckdb(table: pa.Table) -> tuple[float, pa.Table]:
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    con.register("t", table)
    gc.collect()
    t0 = time.perf_counter()
    result = con.sql(DUCKDB_SQL).to_arrow_table()
    elapsed = time.perf_counter() - t0
    con.close()
    return elapsed, result


def verify(lam: pa.Table, duck: pa.Table, rows: int) -> dict:
    """Exact equality of every (sym, window) group; raises AssertionError otherwise."""
    duck = duck.rename_columns(["sym", "ws", "n", "s", "a"])
    lam_n = pc.sum(lam["n"]).as_py()
    duck_n = pc.sum(duck["n"]).as_py()
    assert lam_n == rows, f"laminardb counted {lam_n} events, {rows} were inserted"
    assert duck_n == rows, f"duckdb counted {duck_n} events, {rows} were inserted"
    assert lam.num_rows == duck.num_rows, f"group count differs: laminardb {lam.num_rows}, duckdb {duck.num_rows}"
    # window_end - window_start must be the 1 s window
    assert pc.all(pc.equal(pc.subtract(lam["window_end"], lam["window_start"]), 1000)).as_py()
    lam_k = pa.table({"sym": lam["sym"], "ws": lam["window_start"].cast(pa.int64()),
                      "n": lam["n"].cast(pa.int64()), "s": lam["s"], "a": lam["a"]})
    duck_k = pa.table({"sym": duck["sym"], "ws": duck["ws"].cast(pa.int64()),
                       "n": duck["n"].cast(pa.int64()), "s": duck["s"], "a": duck["a"]})
    order = [("sym", "ascending"), ("ws", "ascending")]
    lam_k = lam_k.sort_by(order)
    duck_k = duck_k.sort_by(order)
    for col in ("sym", "ws", "n", "s", "a"):
        a, b = lam_k[col].combine_chunks(), duck_k[col].combine_chunks()
        if not a.equals(b):
            bad = pc.index(pc.not_equal(a, b), True).as_py()
            raise AssertionError(
                f"column {col!r} differs at sorted group {bad}: laminardb {lam_k.slice(bad, 1).to_pylist()} "
                f"vs duckdb {duck_k.slice(bad, 1).to_pylist()}"
            )
    # and a readable spot check of a few windows
    rng = np.random.default_rng(7)
    sample = sorted(rng.choice(lam_k.num_rows, size=min(5, lam_k.num_rows), replace=False).tolist())
    return {
        "events": rows,
        "groups": lam.num_rows,
        "windows_compared": lam.num_rows,
        "sample": [lam_k.slice(i, 1).to_pylist()[0] for i in sample[:2]],
    }


# ---------------------------------------------------------------------------- latency
def make_rows(count: int, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    syms = [f"SYM{i:04d}" for i in range(N_SYMBOLS)]
    prices = (rng.integers(1, 400_001, count) / 4.0).tolist()
    return [{"ts": BASE_TS + i, "sym": syms[i % N_SYMBOLS], "price": prices[i]} for i in range(count)]


def run_latency(kind: str, warmup: int, measured: int) -> dict:
    import laminardb

    db = laminardb.open()
    db.execute(SOURCE_DDL)
    db.execute(LAT_QUERIES[kind])
    sub = db.subscribe_stream("q")
    rows = make_rows(warmup + measured)
    lat = np.empty(measured, dtype=np.int64)
    insert, nxt, try_next, clock = db.insert, sub.next_timeout, sub.try_next, time.perf_counter_ns
    extra_batches = 0
    gc.collect()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for i, row in enumerate(rows):
        t0 = clock()
        insert("trades", row)
        got = nxt(1000)
        t1 = clock()
        if got is None or got.num_rows == 0:
            raise AssertionError(f"{kind}: insert {i} produced nothing at the subscriber within 1 s")
        while try_next() is not None:  # an update may come as more than one batch; not timed
            extra_batches += 1
        if i >= warmup:
            lat[i - warmup] = t1 - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    db.close()
    us = lat / 1000.0
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p99_9_us": float(np.percentile(us, 99.9)),
        "mean_us": float(us.mean()),
        "max_us": float(us.max()),
        "extra_batches": extra_batches,
        # preemptions by other processes during the loop: a shared core shows up here and in the tail
        "involuntary_ctx_switches": ru1.ru_nivcsw - ru0.ru_nivcsw,
    }


# ---------------------------------------------------------------------------- profile
def profile(fn, *args, top: int = 25) -> str:
    pr = cProfile.Profile()
    pr.enable()
    fn(*args)
    pr.disable()
    out = io.StringIO()
    st = pstats.Stats(pr, stream=out)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


# ---------------------------------------------------------------------------- main
def load() -> tuple[float, float, float]:
    """The 1/5/15-minute load averages, rounded (printed beside every figure)."""
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def loadavg() -> str:
    try:
        return " ".join(str(x) for x in load())
    except OSError:  # no load average on this system
        return "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=3, help="throughput runs per engine; the best is reported")
    ap.add_argument("--lat-warmup", type=int, default=2_000)
    ap.add_argument("--lat-n", type=int, default=20_000)
    ap.add_argument("--cpu", type=int, default=0, help="CPU to pin to")
    ap.add_argument("--profile", action="store_true", help="afterwards, cProfile both hot paths (not timed)")
    args = ap.parse_args()

    info = machine_info()
    print("laminardb engine benchmark")
    print("  machine: " + info["cpu"] + f", {info['cores']} cores")
    print("  versions: " + ", ".join(f"{k} {info[k]}" for k in ("python", "laminardb", "numba", "pyarrow", "duckdb", "numpy")))

    t = time.perf_counter()
    batches = make_batches(args.rows, args.batch_rows)
    table = pa.Table.from_batches(batches)
    print(f"  data: {args.rows:,} rows in {len(batches)} batches of {args.batch_rows:,} "
          f"({table.nbytes / 1e6:.0f} MB), generated in {time.perf_counter() - t:.1f} s (not timed)")

    load_start = loadavg()
    os.sched_setaffinity(0, {args.cpu})
    print(f"  pinned to CPU {args.cpu} with os.sched_setaffinity: every figure below is ONE core")

    # warm-up: numba kernels compiled / loaded from cache, pyarrow & duckdb code paths touched
    import duckdb  # noqa: F401

    import laminardb  # noqa: F401

    t = time.perf_counter()
    run_laminardb(batches[:4])
    run_duckdb(pa.Table.from_batches(batches[:4]))
    run_latency("filter_project", 50, 50)
    run_latency("emit_changes_agg", 50, 50)
    print(f"  warm-up (separate small connections, not timed): {time.perf_counter() - t:.2f} s")

    # 1. throughput ---------------------------------------------------------------
    lam_times, duck_times = [], []
    lam_res = duck_res = None
    for _ in range(args.repeat):
        el, lam_res = run_laminardb(batches)
        lam_times.append(el)
        el, duck_res = run_duckdb(table)
        duck_times.append(el)
    check = verify(lam_res, duck_res, args.rows)
    lam_best, duck_best = min(lam_times), min(duck_times)
    lam_eps, duck_eps = args.rows / lam_best, args.rows / duck_best
    ratio = lam_eps / duck_eps

    # 2. latency ------------------------------------------------------------------
    lat = {k: run_latency(k, args.lat_warmup, args.lat_n) for k in LAT_QUERIES}

    # report ----------------------------------------------------------------------
    def ok(v: bool) -> str:
        return "PASS" if v else "MISS"

    print()
    print(f"Throughput — {args.rows:,} events, {N_SYMBOLS} VARCHAR symbols, 1 s tumbling windows, "
          f"COUNT/SUM/AVG, {args.batch_rows:,}-row batches, 1 core, best of {args.repeat}")
    print(f"  {'engine':<12}{'seconds':>10}{'events/s':>16}   all runs (s)")
    print(f"  {'laminardb':<12}{lam_best:>10.3f}{lam_eps:>16,.0f}   {', '.join(f'{x:.3f}' for x in lam_times)}")
    print(f"  {'duckdb':<12}{duck_best:>10.3f}{duck_eps:>16,.0f}   {', '.join(f'{x:.3f}' for x in duck_times)}")
    print(f"  ratio laminardb/duckdb: {ratio:.2f}   "
          f"[target ≥ {TARGETS['ratio']}: {ok(ratio >= TARGETS['ratio'])}; "
          f"≥ {TARGETS['throughput_eps'] / 1e6:.0f}M ev/s: {ok(lam_eps >= TARGETS['throughput_eps'])}]")
    print(f"  verified: {check['events']:,} events counted by both; all {check['windows_compared']:,} "
          f"(sym, window) groups equal exactly (count, sum, avg)")
    print(f"  e.g. {check['sample'][0]}")
    print()
    print(f"Latency — one-row insert(dict) → batch at subscriber, {args.lat_n:,} inserts after "
          f"{args.lat_warmup:,} warm-up, 1 core, GC on")
    print(f"  {'query':<20}{'p50 µs':>10}{'p99 µs':>10}{'p99.9 µs':>10}{'max µs':>10}{'preempt':>9}   target p99")
    for k, r in lat.items():
        tgt = TARGETS[f"{k}_p99_us"]
        print(f"  {k:<20}{r['p50_us']:>10.1f}{r['p99_us']:>10.1f}{r['p99_9_us']:>10.1f}{r['max_us']:>10.0f}"
              f"{r['involuntary_ctx_switches']:>9}   ≤ {tgt}: {ok(r['p99_us'] <= tgt)}")

    print(f"  load average now: {loadavg()} on {info['cores']} cores (start: {load_start}); 'preempt' = involuntary "
          "context switches during the loop — if high, the tail is other processes, rerun on a quiet machine")

    summary = {
        "machine": info,
        "rows": args.rows,
        "batch_rows": args.batch_rows,
        "pinned_cpu": args.cpu,
        "laminardb_s": lam_best,
        "laminardb_eps": round(lam_eps),
        "duckdb_s": duck_best,
        "duckdb_eps": round(duck_eps),
        "ratio": round(ratio, 3),
        "laminardb_runs_s": lam_times,
        "duckdb_runs_s": duck_times,
        "groups": check["groups"],
        "verified": True,
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "latency": {k: {m: round(v, 1) for m, v in r.items()} for k, r in lat.items()},
    }

    if args.profile:
        print("\n" + "=" * 100 + "\nPROFILE: laminardb throughput loop (cProfile, one run)\n" + "=" * 100)
        print(profile(run_laminardb, batches))
        for k in LAT_QUERIES:
            print("=" * 100 + f"\nPROFILE: latency loop {k} (cProfile, 2,000 + 5,000 inserts)\n" + "=" * 100)
            print(profile(run_latency, k, 2_000, 5_000))

    print("BENCH_JSON " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
