"""laminardb Delta-mode benchmark: the engine workload through ``connect("ray://auto")`` with
1 and 2 Ray actors, beside the embedded engine, on the same rows.

Run from the repository root:

    .venv/bin/python bench/bench_cluster.py                   # 5M rows (the issue's workload)
    .venv/bin/python bench/bench_cluster.py --rows 1000000    # quicker
    .venv/bin/python bench/bench_cluster.py --no-breakdown    # skip the profiled run

Workload (data generator imported from bench_engine.py): 1,000 VARCHAR symbols, 1-second
tumbling windows, COUNT/SUM/AVG, 65,536-row Arrow batches. For each engine — embedded
``laminardb.open()``, ``connect(actors=1)``, ``connect(actors=2)`` — a fresh connection gets
the DDL and one subscriber, a warm-up source/stream on the same connection runs a few batches
(numba kernels in every actor process) and is dropped, then ``insert()`` of every batch +
``finish()`` is timed. Best of ``--repeat`` runs per engine (each run on new actors). Before
any speed is printed, each cluster result is compared with the embedded one: same groups,
and every (sym, window) group equal exactly (count, sum, avg).

Per run, each actor reports how long it ran batches (``busy``) and how much of that it was
on a CPU (``cpu``; the rest it waited for a core). The machine's own parallel ceiling is
measured first, before Ray starts: 1 and then 2 independent embedded engines, one process
pinned per core, nothing shared (``parallel_ceiling``) — no distributed design can scale
past it on this machine.

Breakdown (``--no-breakdown`` skips it): one more 2-actor run with cProfile on the client
(where the client's time goes: split by owner, Arrow IPC write, ``ray.put``, waiting).

Ray is started here with ``ray.init(num_cpus=N+1)`` (N = max actors) and shut down at the
end. The last stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import AGG_DDL, N_SYMBOLS, SOURCE_DDL, load, machine_info, make_batches  # noqa: E402

WARM_SOURCE = SOURCE_DDL.replace("CREATE SOURCE trades", "CREATE SOURCE warm_trades")
WARM_AGG = AGG_DDL.replace("CREATE STREAM agg", "CREATE STREAM warm_agg").replace("FROM trades", "FROM warm_trades")
TARGET_SCALING = 1.8



# ---------------------------------------------------------------------------- one run

def warm_up(db, warm: list[pa.RecordBatch]) -> None:
    """numba kernels loaded in every actor process, on a source dropped before timing."""
    db.execute(WARM_SOURCE)
    db.execute(WARM_AGG)
    for b in warm:
        db.insert("warm_trades", b)
    db.execute("DROP STREAM warm_agg")
    db.execute("DROP SOURCE warm_trades")

def open_engine(actors: int):
    import laminardb

    if actors == 0:
        return laminardb.open()
    import ray

    # connect() needs `actors` free CPUs; the previous connection's actors are released async
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < actors and time.monotonic() < deadline:
        time.sleep(0.2)
    return laminardb.connect("ray://auto", actors=actors)


def run_once(actors: int, batches: list[pa.RecordBatch], warm: list[pa.RecordBatch],
             profile: bool = False) -> dict:
    """Fresh connection; warm-up on a separate source; timed insert() of every batch + finish()."""
    t_open = time.perf_counter()
    db = open_engine(actors)
    open_s = time.perf_counter() - t_open
    warm_up(db, warm)
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg")
    gc.collect()
    prof = cProfile.Profile() if profile else None
    l0 = load()
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    for b in batches:
        db.insert("trades", b)
    db.finish()
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - c0  # every thread of this process, Ray's own included
    l1 = load()
    result = sub.to_arrow()
    m = db.metrics()
    db.close()
    out = {"actors": actors, "elapsed_s": elapsed, "open_s": open_s, "client_cpu_s": client_cpu, "load_start": l0, "load_end": l1,
           "result": result, "events_ingested": m["events_ingested"]}
    if "cluster" in m:
        out["rows_per_actor"] = m["cluster"].get("rows_per_actor")
        out["busy_s_per_actor"] = m["cluster"].get("busy_s_per_actor")
        out["cpu_s_per_actor"] = m["cluster"].get("cpu_s_per_actor")
        out["members"] = [{k: v for k, v in mem.items() if k in ("index", "pid", "core", "vnodes")}
                          for mem in m["cluster"]["members"]]
    if prof:
        out["profile"] = prof
    return out


# ---------------------------------------------------------------------------- verification
def keyed(t: pa.Table) -> pa.Table:
    k = pa.table({"sym": t["sym"], "ws": t["window_start"].cast(pa.int64()), "we": t["window_end"].cast(pa.int64()),
                  "n": t["n"].cast(pa.int64()), "s": t["s"], "a": t["a"]})
    return k.sort_by([("sym", "ascending"), ("ws", "ascending")])


def verify(ref: pa.Table, got: pa.Table, rows: int, label: str) -> int:
    """Every (sym, window) group equal exactly to the embedded engine's; raises AssertionError."""
    n = pc.sum(got["n"]).as_py()
    assert n == rows, f"{label}: counted {n} events, {rows} were inserted"
    assert got.num_rows == ref.num_rows, f"{label}: {got.num_rows} groups vs embedded {ref.num_rows}"
    a, b = keyed(ref), keyed(got)
    for col in a.column_names:
        x, y = a[col].combine_chunks(), b[col].combine_chunks()
        if not x.equals(y):
            bad = pc.index(pc.not_equal(x, y), True).as_py()
            raise AssertionError(f"{label}: column {col!r} differs at sorted group {bad}: embedded "
                                 f"{a.slice(bad, 1).to_pylist()} vs {b.slice(bad, 1).to_pylist()}")
    return got.num_rows


# ---------------------------------------------------------------------------- breakdown
CLIENT_BUCKETS = [  # (label, cProfile function-name matcher on (file, func)) — cumulative time
    ("client: ingest.to_batch (schema check/copy)", lambda f, n: f.endswith("ingest.py") and n == "to_batch"),
    ("client: split by vnode owner (hash + gather)", lambda f, n: f.endswith("routing.py") and n == "split_by_owner"),
    ("client: Arrow IPC write (_wire.to_ipc_array)", lambda f, n: f.endswith("_wire.py") and n == "to_ipc_array"),
    ("client: shared-memory ring write (same machine)", lambda f, n: f.endswith("shm_ring.py") and n == "write"),
    ("client: ray.put of the IPC bytes (other machines)", lambda f, n: n == "put" and "ray" in f and "worker.py" in f),
    ("client: merge of closed windows' partials", lambda f, n: f.endswith("partial.py") and n == "close"),
    ("client: actor method submit (.remote)", lambda f, n: n == "_remote" and "actor.py" in f),
    ("client: ray.get (waiting for the oldest round)", lambda f, n: n == "get" and "worker.py" in f and "ray" in f),
    ("client: Arrow IPC read of outputs (_wire.from_ipc)", lambda f, n: f.endswith("_wire.py") and n == "from_ipc"),
    ("client: _merge of actor outputs", lambda f, n: f.endswith("distributed.py") and n == "_merge"),
    ("client: DistributedOperator.process (all per-batch)", lambda f, n: f.endswith("distributed.py") and n == "process"),
    ("client: DistributedOperator.on_watermark", lambda f, n: f.endswith("distributed.py") and n == "on_watermark"),
    ("client: subscription delivery", lambda f, n: f.endswith("subscription.py") and n == "_deliver"),
]


def client_breakdown(prof: cProfile.Profile) -> tuple[list[tuple[str, float, int]], str]:
    st = pstats.Stats(prof)
    rows = []
    for label, match in CLIENT_BUCKETS:
        ct, calls = 0.0, 0
        for (fname, _line, func), (_cc, nc, _tt, cum, _callers) in st.stats.items():  # type: ignore[attr-defined]
            if match(fname, func):
                ct += cum
                calls += nc
        rows.append((label, ct, calls))
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    return rows, buf.getvalue()


def _ceiling_worker(core: int, rows: int, batch_rows: int, ready, go, done) -> None:
    """One embedded engine pinned to ``core``: warm up, wait for the start signal, run."""
    import laminardb

    os.sched_setaffinity(0, {core})
    batches = make_batches(rows, batch_rows, seed=core)
    db = laminardb.open()
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    for b in batches[:3]:
        db.insert("trades", b)
    db.close()
    db = laminardb.open()
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    db.subscribe_stream("agg")
    gc.collect()
    ready.put(core)
    go.wait(120)
    t = time.perf_counter()
    for b in batches:
        db.insert("trades", b)
    db.finish()
    done.put(time.perf_counter() - t)


def parallel_ceiling(rows: int, batch_rows: int, n: int) -> float:
    """Events/s of ``n`` independent embedded engines, one process pinned per core, all at
    once, nothing shared: what this machine's cores can give in parallel (memory bandwidth,
    shared caches, the hypervisor), before any cost of distribution."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Queue(), ctx.Event(), ctx.Queue()
    cores = sorted(os.sched_getaffinity(0))
    procs = [ctx.Process(target=_ceiling_worker, args=(cores[i % len(cores)], rows, batch_rows, ready, go, done))
             for i in range(n)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)  # every engine generated its rows and warmed up
    go.set()
    times = [done.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    return n * rows / max(times)


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2], help="actor counts to compare")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per engine (fresh actors each); best reported")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the profiled 2-actor run")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the 1-vs-2 independent engines run")
    args = ap.parse_args()

    import ray

    info = machine_info()
    print("laminardb Delta-mode (Ray actors) benchmark")
    print(f"  machine: {info['cpu']}, {info['cores']} cores; python {info['python']}, ray {ray.__version__}, "
          f"pyarrow {info['pyarrow']}, numba {info['numba']}")
    t = time.perf_counter()
    batches = make_batches(args.rows, args.batch_rows)
    warm = make_batches(4 * args.batch_rows, args.batch_rows, seed=1)
    print(f"  data: {args.rows:,} rows in {len(batches)} batches of {args.batch_rows:,}, generated in "
          f"{time.perf_counter() - t:.1f} s (bench_engine.make_batches, not timed)")
    max_actors = max(args.actors)
    ceiling = {}
    if not args.no_ceiling:
        for n in (1, 2):
            ceiling[n] = parallel_ceiling(args.rows, args.batch_rows, n)
            print(f"  parallel ceiling: {n} independent embedded engine(s), one per core: "
                  f"{ceiling[n]:,.0f} ev/s in total")
        print(f"  → this machine gives at most {ceiling[2] / ceiling[1]:.2f}× on 2 cores for this workload")
    ray.init(num_cpus=max_actors + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    print(f"  ray.init(num_cpus={max_actors + 1}); load average at start {load()}")

    engines = [0] + list(args.actors)
    runs: dict[int, list[dict]] = {a: [] for a in engines}
    try:
        for _ in range(args.repeat):
            for a in engines:  # interleaved, so a burst of load hits every engine alike
                r = run_once(a, batches, warm)
                runs[a].append(r)
                name = "embedded" if a == 0 else f"{a} actor(s)"
                print(f"    run {name:<11} {r['elapsed_s']:7.3f} s  {args.rows / r['elapsed_s']:>13,.0f} ev/s  "
                      f"load {r['load_start']} → {r['load_end']}  client cpu {r['client_cpu_s']:.3f} s"
                      + (f"  actors busy {r['busy_s_per_actor']} s, on cpu {r['cpu_s_per_actor']} s" if r.get("busy_s_per_actor") else ""))

        ref = runs[0][-1]["result"]
        groups = {}
        for a in args.actors:
            for i, r in enumerate(runs[a]):
                groups[a] = verify(ref, r["result"], args.rows, f"{a} actor(s) run {i}")
        ref_n = pc.sum(ref["n"]).as_py()
        assert ref_n == args.rows, f"embedded counted {ref_n} of {args.rows}"

        best = {a: min(runs[a], key=lambda r: r["elapsed_s"]) for a in engines}
        eps = {a: args.rows / best[a]["elapsed_s"] for a in engines}

        breakdown = None
        if not args.no_breakdown and max_actors >= 2:
            print("\n  breakdown run (2 actors, cProfile on the client + ray.timeline) …")
            pr = run_once(2, batches, warm, profile=True)
            verify(ref, pr["result"], args.rows, "2 actors, profiled run")
            buckets, top = client_breakdown(pr["profile"])
            breakdown = {"elapsed_s": pr["elapsed_s"], "load": [pr["load_start"], pr["load_end"]],
                         "client": buckets, "rows_per_actor": pr.get("rows_per_actor"), "top": top}
    finally:
        ray.shutdown()

    print()
    print(f"Throughput — {args.rows:,} events, {N_SYMBOLS} VARCHAR symbols, 1 s tumbling windows, COUNT/SUM/AVG, "
          f"{args.batch_rows:,}-row batches; insert() of every batch + finish(), best of {args.repeat}")
    print(f"  {'engine':<22}{'seconds':>9}{'events/s':>14}   load at start→end   all runs (s)")
    for a in engines:
        name = "embedded open()" if a == 0 else f"connect(actors={a})"
        b = best[a]
        print(f"  {name:<22}{b['elapsed_s']:>9.3f}{eps[a]:>14,.0f}   {str(b['load_start']):<19} "
              + ", ".join(f"{r['elapsed_s']:.3f}" for r in runs[a]))
    ratio = None
    if 1 in eps and 2 in eps:
        ratio = eps[2] / eps[1]
        print(f"  scaling 2 actors / 1 actor: {ratio:.2f}×   [target ≥ {TARGET_SCALING}: "
              f"{'PASS' if ratio >= TARGET_SCALING else 'MISS'}]")
        if ceiling:
            print(f"  machine ceiling, 2 independent engines / 1: {ceiling[2] / ceiling[1]:.2f}×")
    for a in args.actors:
        print(f"  connect(actors={a}) / embedded: {eps[a] / eps[0]:.2f}×")
    print(f"  verified: every run of every actor count equals the embedded result exactly — "
          f"{groups.get(max_actors, 0):,} (sym, window) groups, count/sum/avg, {args.rows:,} events")
    for a in args.actors:
        print(f"  rows per actor ({a} actor(s)): {best[a].get('rows_per_actor')}  members {best[a].get('members')}")

    if breakdown:
        el = breakdown["elapsed_s"]
        print(f"\nWhere the time goes — one 2-actor run under cProfile: {el:.3f} s wall "
              f"(cProfile inflates client-side Python), load {breakdown['load'][0]} → {breakdown['load'][1]}")
        print(f"  {'client (cumulative, overlapping)':<54}{'seconds':>9}{'share':>8}{'calls':>8}")
        for label, sec, calls in breakdown["client"]:
            print(f"  {label:<54}{sec:>9.3f}{sec / el:>8.0%}{calls:>8}")
        print("  client top functions by own time (cProfile):")
        print("\n".join("    " + line for line in breakdown["top"].splitlines()[6:34]))

    summary = {
        "machine": info, "rows": args.rows, "batch_rows": args.batch_rows, "repeat": args.repeat,
        "eps": {("embedded" if a == 0 else f"actors_{a}"): round(eps[a]) for a in engines},
        "seconds": {("embedded" if a == 0 else f"actors_{a}"): [round(r["elapsed_s"], 4) for r in runs[a]]
                    for a in engines},
        "load": {("embedded" if a == 0 else f"actors_{a}"): [[r["load_start"], r["load_end"]] for r in runs[a]]
                 for a in engines},
        "scaling_2_over_1": None if ratio is None else round(ratio, 3),
        "ceiling_eps": {str(k): round(v) for k, v in ceiling.items()},
        "ceiling_2_over_1": round(ceiling[2] / ceiling[1], 3) if ceiling else None,
        "verified": True, "groups": groups.get(max_actors),
        "breakdown": None if not breakdown else {k: v for k, v in breakdown.items() if k != "top"},
    }
    print("BENCH_JSON " + json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
