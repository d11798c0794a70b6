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

Breakdown (``--no-breakdown`` skips it): one more 2-actor run with cProfile on the client
(where the client's wall time goes: Arrow IPC write, ``ray.put``, waiting on actors, reading
outputs) and ``ray.timeline()`` (how long each actor actually executed ``process`` and
``on_watermark``), plus in-process micro-timings of the actor-side steps on the same batches.

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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import AGG_DDL, N_SYMBOLS, SOURCE_DDL, machine_info, make_batches  # noqa: E402

WARM_SOURCE = SOURCE_DDL.replace("CREATE SOURCE trades", "CREATE SOURCE warm_trades")
WARM_AGG = AGG_DDL.replace("CREATE STREAM agg", "CREATE STREAM warm_agg").replace("FROM trades", "FROM warm_trades")
TARGET_SCALING = 1.8


def load() -> tuple[float, float, float]:
    return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]


# ---------------------------------------------------------------------------- one run
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
    db.execute(WARM_SOURCE)
    db.execute(WARM_AGG)
    for b in warm:
        db.insert("warm_trades", b)
    db.execute("DROP STREAM warm_agg")
    db.execute("DROP SOURCE warm_trades")
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg")
    gc.collect()
    prof = cProfile.Profile() if profile else None
    l0 = load()
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    for b in batches:
        db.insert("trades", b)
    db.finish()
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t0
    l1 = load()
    result = sub.to_arrow()
    m = db.metrics()
    db.close()
    out = {"actors": actors, "elapsed_s": elapsed, "open_s": open_s, "load_start": l0, "load_end": l1,
           "result": result, "events_ingested": m["events_ingested"]}
    if "cluster" in m:
        out["rows_per_actor"] = m["cluster"].get("rows_per_actor")
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
    ("client: Arrow IPC write (_wire.to_ipc)", lambda f, n: f.endswith("_wire.py") and n == "to_ipc"),
    ("client: ray.put of the IPC bytes", lambda f, n: n == "put" and "ray" in f and "worker.py" in f),
    ("client: call_each (submit + wait on actors)", lambda f, n: f.endswith("client.py") and n == "call_each"),
    ("client: ray.get (waiting inside call_each)", lambda f, n: n == "get" and "worker.py" in f and "ray" in f),
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


def actor_replay(batches: list[pa.RecordBatch], n_actors: int) -> dict:
    """Actor-side work without Ray: the actor body (``ReactorActorImpl``) instantiated in this
    process, fed exactly what the client sends (IPC bytes, wm_before, then on_watermark).

    Per actor: seconds in ``process`` (IPC read + vnode hash of every row + filter + engine)
    and ``on_watermark``; ``critical_path_s`` = Σ over batches of the slowest actor, i.e. the
    time N perfectly overlapped actors would need with zero client and Ray cost.
    """
    from laminardb.actors._wire import to_ipc
    from laminardb.actors.reactor_actor import ReactorActorImpl
    from laminardb.actors.routing import Routing
    from laminardb.operators.group_aggregate import END_OF_TIME

    affinity = os.sched_getaffinity(0)
    try:
        impls = [ReactorActorImpl(i, n_actors) for i in range(n_actors)]  # pins this process: restored below
    finally:
        os.sched_setaffinity(0, affinity)
    routing = Routing.from_members(n_actors, 256)
    for i, a in enumerate(impls):
        a.set_ownership(routing.owned_mask(i).tobytes())
        a.execute(SOURCE_DDL)
        a.execute(AGG_DDL)
    proc = np.zeros(n_actors)
    wmk = np.zeros(n_actors)
    critical = 0.0
    wm = -(2**62)
    max_ts = -(2**62)
    clock = time.perf_counter
    ipc_s = 0.0

    def step(fn) -> np.ndarray:
        ts = np.zeros(n_actors)
        for i, a in enumerate(impls):
            t = clock()
            fn(a)
            ts[i] = clock() - t
        return ts

    gc.collect()
    for b in batches:
        t = clock()
        ipc = to_ipc(b)
        ipc_s += clock() - t
        tp = step(lambda a, ipc=ipc, wm=wm: a.process("agg", ipc, wm, "keyed"))
        proc += tp
        max_ts = max(max_ts, int(pc.max(b.column("ts")).as_py()))
        new_wm = max_ts - 100
        tw = np.zeros(n_actors)
        if new_wm > wm:
            wm = new_wm
            tw = step(lambda a, wm=wm: a.on_watermark("agg", wm))
            wmk += tw
        critical += float((tp + tw).max())
    tw = step(lambda a: a.on_watermark("agg", END_OF_TIME))
    wmk += tw
    critical += float(tw.max())
    rows_in = [a.rows_in for a in impls]
    for a in impls:
        a.conn.close()
    return {"actors": n_actors, "process_s": proc.round(4).tolist(), "on_watermark_s": wmk.round(4).tolist(),
            "busy_s": (proc + wmk).round(4).tolist(), "critical_path_s": round(critical, 4),
            "client_to_ipc_s": round(ipc_s, 4), "rows_in": rows_in}


def micro_breakdown(batches: list[pa.RecordBatch]) -> dict:
    """In this process, the per-batch steps an insert goes through in Delta mode (no Ray)."""
    import ray

    from laminardb.actors._wire import from_ipc, to_ipc
    from laminardb.actors.routing import Routing, vnode_of

    sample = batches[: min(20, len(batches))]
    rows = sum(b.num_rows for b in sample)
    routing = Routing.from_members(2, 256)
    owned = routing.owned_mask(0)
    res = {}

    def timeit(label, fn):
        fn(sample[0])
        t = time.perf_counter()
        for b in sample:
            fn(b)
        res[label] = (time.perf_counter() - t) / len(sample) * 1e3  # ms per 64k batch

    ipcs = [to_ipc(b) for b in sample]
    timeit("to_ipc (client)", to_ipc)
    timeit("ray.put(bytes) (client)", lambda b: ray.put(ipcs[0]))
    it = iter(ipcs * 2)
    timeit("from_ipc (actor)", lambda b: from_ipc(next(it)))
    timeit("vnode_of over all rows (each actor)", lambda b: vnode_of([b.column("sym")], 256))
    timeit("filter own rows (each actor)",
           lambda b: b.filter(pa.array(owned[vnode_of([b.column("sym")], 256)])))
    res["_batch_rows"] = rows / len(sample)
    res["_ipc_bytes"] = len(ipcs[0])
    return res


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2], help="actor counts to compare")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per engine (fresh actors each); best reported")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the profiled 2-actor run")
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
                      f"load {r['load_start']} → {r['load_end']}  (connect {r['open_s']:.1f} s)")

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
            print("  actor replay in-process (ReactorActorImpl without Ray) …")
            replay = [actor_replay(batches, n) for n in sorted(set(args.actors))]
            micro = micro_breakdown(batches)
            breakdown = {"elapsed_s": pr["elapsed_s"], "load": [pr["load_start"], pr["load_end"]],
                         "client": buckets, "replay": replay, "micro_ms_per_batch": micro,
                         "rows_per_actor": pr.get("rows_per_actor"), "top": top}
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
        print("  actor side, replayed in this process without Ray (same IPC bytes, same watermarks):")
        for r in breakdown["replay"]:
            print(f"    {r['actors']} actor(s): process {r['process_s']} s, on_watermark {r['on_watermark_s']} s, "
                  f"busy per actor {r['busy_s']} s; critical path (slowest actor per batch, summed) "
                  f"{r['critical_path_s']:.3f} s → at most {args.rows / r['critical_path_s']:,.0f} ev/s "
                  f"if client + Ray were free")
        if len(breakdown["replay"]) >= 2:
            r1, r2 = breakdown["replay"][0], breakdown["replay"][-1]
            print(f"    ideal actor-side scaling {r2['actors']}/{r1['actors']}: "
                  f"{r1['critical_path_s'] / r2['critical_path_s']:.2f}× (upper bound of the current design)")
        print("  per 64k batch, measured in-process (ms):")
        for k, v in breakdown["micro_ms_per_batch"].items():
            if not k.startswith("_"):
                print(f"    {k:<40}{v:>8.3f}")
        print(f"    (IPC bytes per batch: {breakdown['micro_ms_per_batch']['_ipc_bytes']:,})")
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
        "verified": True, "groups": groups.get(max_actors),
        "breakdown": None if not breakdown else {k: v for k, v in breakdown.items() if k != "top"},
    }
    print("BENCH_JSON " + json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
