"""laminardb one-row latency: insert() → the row held by a subscriber, per query kind and delivery mode.

Issue 23 (engine speed: microsecond delivery of one row), item 4. One row is in flight at a
time: the clock (time.perf_counter_ns) starts just before ``insert()`` and stops when the
consumer holds the output batch; the next row is inserted only after that.

```sh
.venv/bin/python bench/bench_latency.py                      # ~35 s on 2 vCPUs
.venv/bin/python bench/bench_latency.py --n 2000 --warmup 500 --competitor-python /tmp/benchvenv/bin/python
.venv/bin/python bench/bench_latency.py --profile-loop filter --rows 200000   # for py-spy (not timed)
.venv/bin/python bench/bench_latency.py --summarize-raw out.txt                # py-spy -f raw → top functions
```

Query kinds: ``filter`` (WHERE), ``projection`` (an expression), ``agg`` (GROUP BY key EMIT
CHANGES: the −old/+new batch), ``window`` (a 10 ms tumbling window emitted on close: the
row whose watermark closes window k is timed, to window k's row at the subscriber), ``join``
(an interval join: the left row is inserted untimed, the matching right row is timed).

Delivery modes: ``same`` (insert then ``sub.try_next()`` in the same thread), ``thread`` (a
consumer thread blocked in ``sub.next_timeout``; it stamps the time and hands an ack back,
untimed), ``callback`` (``subscribe_callback``: the engine's callback thread stamps it).

Beside it, in the same run: the floor (the same filter / aggregate as a plain Python loop,
same thread and across a ``queue.SimpleQueue``), and Bytewax / Quix Streams single-row
pipelines when they can be imported by ``--competitor-python`` (the ``bench`` extra; run in
a subprocess, so laminardb's own venv needs neither). The last line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import queue
import resource
import subprocess
import sys
import threading
import time

import numpy as np

clock = time.perf_counter_ns
TARGETS_US = {  # issue 23: p99 same-thread / cross-thread
    "filter": (20, 50), "projection": (20, 50), "agg": (50, 100),
}
KINDS = ("filter", "projection", "agg", "window", "join")
MODES = ("same", "thread", "callback")
TRADES = ("CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, "
          "WATERMARK FOR ts AS ts - INTERVAL '100' MILLISECOND)")
N_SYMS = 100


def trade(i: int) -> dict:
    return {"ts": 1_000_000 + i, "sym": f"S{i % N_SYMS:03d}", "price": 1.0 + (i % 977) * 0.25}


# ---------------------------------------------------------------------------- laminardb workloads
def setup(db, kind: str):
    """DDL for ``kind``; returns (stream, source, row(i), untimed_before(i) or None)."""
    if kind in ("filter", "projection", "agg"):
        db.execute(TRADES)
        sql = {
            "filter": "SELECT ts, sym, price FROM trades WHERE price > 0",
            "projection": "SELECT ts, sym, price * 2 AS p2 FROM trades",
            "agg": "SELECT sym, count(*) AS n, sum(price) AS s FROM trades GROUP BY sym EMIT CHANGES",
        }[kind]
        db.execute(f"CREATE STREAM q AS {sql}")
        return "q", "trades", trade, None
    if kind == "window":  # row i (ts = 10·i) closes window i-1 (watermark = ts, no delay)
        db.execute("CREATE SOURCE ticks (ts BIGINT NOT NULL, price DOUBLE, WATERMARK FOR ts AS ts)")
        db.execute("CREATE STREAM q AS SELECT window_start, count(*) AS n, sum(price) AS s FROM ticks "
                   "GROUP BY tumble(ts, INTERVAL '10' MILLISECOND)")
        db.insert("ticks", {"ts": 1_000_000 - 10, "price": 1.0})  # opens the first window
        return "q", "ticks", lambda i: {"ts": 1_000_000 + 10 * i, "price": 1.0 + i % 7}, None
    if kind == "join":
        wm = "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND"
        db.execute(f"CREATE SOURCE orders (id BIGINT, ts BIGINT NOT NULL, {wm})")
        db.execute(f"CREATE SOURCE payments (order_id BIGINT, ts BIGINT NOT NULL, amount DOUBLE, {wm})")
        db.execute("CREATE STREAM q AS SELECT o.id, o.ts, p.amount FROM orders o JOIN payments p "
                   "ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '10' SECOND")

        def left(i: int) -> tuple[str, dict]:
            return "orders", {"id": i, "ts": 1_000_000 + i}
        return "q", "payments", lambda i: {"order_id": i, "ts": 1_000_001 + i, "amount": 2.0}, left
    raise ValueError(kind)


def expected(kind: str, i: int) -> dict:
    """The last row row ``i`` must produce (checked after the clock stopped)."""
    t = trade(i)
    if kind == "filter":
        return t
    if kind == "projection":
        return {"ts": t["ts"], "sym": t["sym"], "p2": t["price"] * 2}
    if kind == "agg":  # warm-up rows included: row i is the (i // N_SYMS + 1)-th of its key
        prices = [trade(j)["price"] for j in range(i % N_SYMS, i + 1, N_SYMS)]
        return {"sym": t["sym"], "n": len(prices), "s": sum(prices), "__weight": 1}
    if kind == "window":  # the window row i closed: window i-1 (the first one: the opener)
        return {"window_start": 1_000_000 + 10 * (i - 1), "n": 1, "s": 1.0 + (i - 1) % 7 if i else 1.0}
    return {"id": i, "ts": 1_000_000 + i, "amount": 2.0}


def check(kind: str, i: int, batch, checked: list) -> None:
    """Every 50th row: the output is the right one (a fast wrong answer is no answer)."""
    if i % 50:
        return
    got, want = batch.to_pylist()[-1], expected(kind, i)
    if got != want:
        raise AssertionError(f"{kind}: row {i} gave {got}, expected {want}")
    checked[0] += 1


def stats(lat_ns: np.ndarray, **extra) -> dict:
    us = lat_ns / 1000.0
    out = {"p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
           "p99_9": float(np.percentile(us, 99.9)), "max": float(us.max()), "mean": float(us.mean())}
    out.update(extra)
    return out


def run_laminardb(kind: str, mode: str, warmup: int, n: int, as_batch: bool = False) -> dict:
    import pyarrow as pa

    import laminardb

    db = laminardb.open()
    stream, source, row, before = setup(db, kind)
    total = warmup + n
    rows = [row(i) for i in range(total)]
    if as_batch:  # built before timing: the caller already holds a RecordBatch
        schema = pa.schema([pa.field("ts", pa.int64(), nullable=False), ("sym", pa.string()),
                            ("price", pa.float64())])  # the trades source's
        rows = [pa.RecordBatch.from_pylist([r], schema=schema) for r in rows]
    lefts = [before(i) for i in range(total)] if before else None
    lat = np.zeros(total, dtype=np.int64)
    insert = db.insert
    ack = threading.Event()
    extra = {"extra_batches": 0, "late": 0}
    sub = handle = consumer = None
    slot = [0]
    checked = [0]
    if mode in ("same", "thread"):
        sub = db.subscribe_stream(stream, history_rows=0)
    if mode == "thread":
        def consume() -> None:
            for i in range(total):
                got = sub.next_timeout(2000)
                t1 = clock()
                if got is None:
                    return
                lat[i] = t1
                check(kind, i, got, checked)
                while sub.try_next() is not None:
                    extra["extra_batches"] += 1
                ack.set()
        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
    elif mode == "callback":
        def on_data(batch) -> None:
            t1 = clock()
            i = slot[0]
            if lat[i] == 0:
                lat[i] = t1
                check(kind, i, batch, checked)
                ack.set()
            else:
                extra["extra_batches"] += 1
        handle = db.subscribe_callback(stream, on_data)
    gc.collect()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0s = np.zeros(total, dtype=np.int64)
    for i in range(total):
        if lefts:
            insert(*lefts[i])
        if mode == "same":
            t0 = clock()
            insert(source, rows[i])
            got = sub.try_next()
            if got is None:  # not delivered within insert(): wait (counted, still timed)
                extra["late"] += 1
                got = sub.next_timeout(2000)
            t1 = clock()
            if got is None:
                raise AssertionError(f"{kind}/{mode}: row {i} produced nothing within 2 s")
            while sub.try_next() is not None:
                extra["extra_batches"] += 1
            lat[i] = t1 - t0
            check(kind, i, got, checked)
        else:
            slot[0] = i
            t0s[i] = clock()
            insert(source, rows[i])
            if not ack.wait(2.0):
                raise AssertionError(f"{kind}/{mode}: row {i} not at the consumer within 2 s")
            ack.clear()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if mode != "same":
        lat = lat - t0s
    if handle is not None:
        handle.cancel()
    db.close()
    if consumer is not None:
        consumer.join(5)
    if checked[0] < total // 50:
        raise AssertionError(f"{kind}/{mode}: {checked[0]} of {total // 50} outputs checked")
    return stats(lat[warmup:], **extra, checked=checked[0], invol_ctx_switches=ru1.ru_nivcsw - ru0.ru_nivcsw)


# ---------------------------------------------------------------------------- floors and competitors
def py_filter(r: dict):
    return {"ts": r["ts"], "sym": r["sym"], "price": r["price"]} if r["price"] > 0 else None


def py_agg_fn():
    state: dict = {}

    def agg(r: dict):
        old = state.get(r["sym"])
        n, s = (old[0] + 1, old[1] + r["price"]) if old else (1, r["price"])
        state[r["sym"]] = (n, s)
        return (old, (r["sym"], n, s))
    return agg


def run_floor(kind: str, mode: str, warmup: int, n: int) -> dict:
    """The same per-row work as a plain Python function: what a row costs with no engine."""
    fn = py_filter if kind == "filter" else py_agg_fn()
    total = warmup + n
    rows = [trade(i) for i in range(total)]
    lat = np.zeros(total, dtype=np.int64)
    if mode == "same":
        out = collections.deque()
        for i in range(total):
            t0 = clock()
            out.append(fn(rows[i]))
            got = out.popleft()
            lat[i] = clock() - t0
            assert got is not None
        return stats(lat[warmup:])
    q_in: queue.SimpleQueue = queue.SimpleQueue()
    q_ack: queue.SimpleQueue = queue.SimpleQueue()

    def consume() -> None:
        for i in range(total):
            r = q_in.get()
            fn(r)
            lat[i] = clock()
            q_ack.put(None)
    th = threading.Thread(target=consume, daemon=True)
    th.start()
    t0s = np.zeros(total, dtype=np.int64)
    for i in range(total):
        t0s[i] = clock()
        q_in.put(rows[i])
        q_ack.get(timeout=2)
    th.join(5)
    return stats((lat - t0s)[warmup:])


def run_bytewax(kind: str, mode: str, warmup: int, n: int) -> dict:
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import run_main

    total = warmup + n
    rows = [trade(i) for i in range(total)]
    lat = np.zeros(total, dtype=np.int64)
    st = {"i": 0, "inflight": False}
    q_in: queue.SimpleQueue = queue.SimpleQueue()
    ack = threading.Event()

    class Part(StatelessSourcePartition):
        def next_batch(self):
            if mode == "thread":  # fed by the producer thread; the dataflow runs on this one
                if st["i"] >= total:
                    raise StopIteration
                try:
                    return [q_in.get(timeout=0.05)]
                except queue.Empty:
                    return []
            if st["inflight"]:
                return []
            i = st["i"]
            if i >= total:
                raise StopIteration
            st["inflight"] = True
            lat[i] = -clock()
            return [rows[i]]

        def next_awake(self):
            return None

    class Src(DynamicSource):
        def build(self, step_id, worker_index, worker_count):
            return Part()

    class SinkPart(StatelessSinkPartition):
        def write_batch(self, items):
            t1 = clock()
            i = st["i"]
            lat[i] += t1
            st["i"] = i + 1
            st["inflight"] = False
            if mode == "thread":
                ack.set()

    class Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return SinkPart()

    flow = Dataflow(f"lat_{kind}")
    s = op.input("in", flow, Src())
    if kind == "filter":
        s = op.filter_map("filter", s, py_filter)
    else:
        def agg(state, r):
            n_, s_ = state or (0, 0.0)
            n_, s_ = n_ + 1, s_ + r["price"]
            return (n_, s_), (r["sym"], n_, s_)
        s = op.stateful_map("agg", op.key_on("key", s, lambda r: r["sym"]), agg)
    op.output("out", s, Sink())
    if mode == "same":
        run_main(flow)
    else:
        th = threading.Thread(target=run_main, args=(flow,), daemon=True)
        th.start()
        for i in range(total):
            lat[i] = -clock()
            q_in.put(rows[i])
            if not ack.wait(2.0):
                raise AssertionError(f"bytewax {kind}: row {i} not at the sink within 2 s")
            ack.clear()
        th.join(5)
    return stats(lat[warmup:])


def run_quix(kind: str, mode: str, warmup: int, n: int) -> dict:
    """Quix Streams' composed StreamingDataFrame called directly: no Kafka consume/produce."""
    import types

    from quixstreams.dataframe.dataframe import StreamingDataFrame
    from quixstreams.dataframe.registry import DataFrameRegistry
    from quixstreams.models.topics import Topic

    if kind != "filter":
        raise RuntimeError("Quix Streams' state (a RocksDB store per topic partition) is opened only by "
                           "Application.run() after a Kafka partition assignment: no broker-free mode")

    class TopicNames:
        def stream_id_from_topics(self, topics):
            return "trades"
    topic = Topic("trades", create_config=None)
    registry = DataFrameRegistry()
    sdf = StreamingDataFrame(topic, topic_manager=TopicNames(), registry=registry,
                             processing_context=types.SimpleNamespace(producer=None))
    registry.register_root(sdf)
    sdf = sdf.filter(lambda r: r["price"] > 0).apply(lambda r: {"ts": r["ts"], "sym": r["sym"], "price": r["price"]})
    total = warmup + n
    rows = [trade(i) for i in range(total)]
    lat = np.zeros(total, dtype=np.int64)
    held = []
    run = sdf.compose(sink=lambda v, k, ts, h: held.append(clock()))[topic.name]
    if mode == "same":
        for i in range(total):
            t0 = clock()
            run(rows[i], b"k", rows[i]["ts"], None)
            lat[i] = held.pop() - t0
        return stats(lat[warmup:])
    q_in: queue.SimpleQueue = queue.SimpleQueue()
    q_ack: queue.SimpleQueue = queue.SimpleQueue()

    def consume() -> None:
        for _ in range(total):
            r = q_in.get()
            run(r, b"k", r["ts"], None)
            q_ack.put(held.pop())
    th = threading.Thread(target=consume, daemon=True)
    th.start()
    for i in range(total):
        t0 = clock()
        q_in.put(rows[i])
        lat[i] = q_ack.get(timeout=2) - t0
    th.join(5)
    return stats(lat[warmup:])


def competitors_main(warmup: int, n: int) -> dict:
    """Run in the competitor venv (a subprocess): every figure or the reason it is missing."""
    out: dict = {}
    for name, fn, mod in (("bytewax", run_bytewax, "bytewax"), ("quixstreams", run_quix, "quixstreams")):
        try:
            m = __import__(mod)
            out[name] = {"version": getattr(m, "__version__", None) or _dist_version(mod)}
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            out[name] = {"error": f"not importable: {type(exc).__name__}: {exc}"}
            continue
        for kind in ("filter", "agg"):
            for mode in ("same", "thread"):
                try:
                    fn(kind, mode, min(warmup, 100), min(n, 200))  # its own warm-up
                    out[name][f"{kind}/{mode}"] = fn(kind, mode, warmup, n)
                except Exception as exc:  # noqa: BLE001
                    out[name][f"{kind}/{mode}"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _dist_version(mod: str) -> str:
    from importlib.metadata import version
    return version(mod)


def competitor_python(arg: str | None) -> str | None:
    """The python that runs Bytewax / Quix: ``arg`` when given, else the first that imports bytewax."""
    if arg:
        return arg
    for cand in (os.environ.get("LDB_BENCH_PYTHON"), sys.executable, "/tmp/benchvenv/bin/python"):
        if cand and os.path.exists(cand):
            if subprocess.run([cand, "-c", "import bytewax"], capture_output=True).returncode == 0:
                return cand
    return None


def run_competitors(py: str | None, warmup: int, n: int) -> dict:
    if py is None:
        reason = ("bytewax not importable by this python nor LDB_BENCH_PYTHON / --competitor-python "
                  "(install the `bench` extra: uv pip install -e .[bench])")
        return {"bytewax": {"error": reason}, "quixstreams": {"error": reason}}
    try:
        proc = subprocess.run([py, os.path.abspath(__file__), "--competitors-only", "--warmup", str(warmup),
                               "--n", str(n)], capture_output=True, text=True, timeout=600)
    except OSError as exc:
        err = f"cannot run {py}: {exc}"
        return {"bytewax": {"error": err}, "quixstreams": {"error": err}}
    for line in proc.stdout.splitlines():
        if line.startswith("COMPETITORS_JSON "):
            return json.loads(line.split(" ", 1)[1])
    err = f"subprocess failed (rc {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"
    return {"bytewax": {"error": err}, "quixstreams": {"error": err}}


# ---------------------------------------------------------------------------- profile helpers
def profile_loop(kind: str, rows: int) -> None:
    """``rows`` single-row inserts, same thread, untimed: the process py-spy records."""
    import laminardb

    db = laminardb.open()
    stream, source, row, before = setup(db, kind)
    sub = db.subscribe_stream(stream, history_rows=0)
    insert, try_next = db.insert, sub.try_next
    t = time.perf_counter()
    for i in range(rows):
        if before:
            insert(*before(i))
        insert(source, row(i))
        while try_next() is not None:
            pass
    el = time.perf_counter() - t
    print(f"profile loop {kind}: {rows:,} rows in {el:.1f} s ({el / rows * 1e6:.1f} µs/row)")
    db.close()


LOOP_CALLS = ("Connection.insert ", "Subscription.try_next ")


def summarize_raw(path: str, top: int = 15) -> str:
    """py-spy ``-f raw`` (one ``frame;frame;… count`` line per stack) → top self / inclusive,
    over the samples inside ``profile_loop``'s insert / try_next calls (or its own line)."""
    self_n: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, cnt = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            c = int(cnt)
            frames = [_frame_name(fr) for fr in stack.split(";")]
            loop = next((i for i, fr in enumerate(frames) if fr.startswith("profile_loop ")), None)
            if loop is None or (loop + 1 < len(frames) and not frames[loop + 1].startswith(LOOP_CALLS)):
                continue  # imports, DDL, open/close: not the per-row path
            frames = frames[loop:]
            total += c
            self_n[frames[-1]] += c
            for fr in set(frames):
                incl[fr] += c
    lines = [f"{total:,} samples in the insert loop"]
    for title, ctr in (("self", self_n), ("inclusive", incl)):
        lines.append(f"top {top} by {title} time:")
        lines += [f"  {100 * c / total:5.1f} %  {name}" for name, c in ctr.most_common(top)]
    return "\n".join(lines)


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``func (to/file.py)``: lines of one function merged."""
    func, _, loc = frame.partition(" (")
    loc = loc.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/laminardb/", "/site-packages/", "/lib/python3"):
        if marker in loc:
            loc = marker.strip("/") + "/" + loc.split(marker, 1)[1]
            break
    return f"{func} ({loc})"


# ---------------------------------------------------------------------------- main
def fmt(r: dict) -> str:
    if "error" in r:
        return "— (" + r["error"][:60] + ")"
    return f"{r['p50']:8.1f} {r['p99']:8.1f} {r['p99_9']:8.1f} {r['max']:9.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5000, help="timed rows per measurement")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--competitor-python", help="a python with bytewax/quixstreams (the bench extra)")
    ap.add_argument("--competitors-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile-loop", choices=KINDS, help="run N single-row inserts for py-spy; no timing")
    ap.add_argument("--rows", type=int, default=200_000, help="rows for --profile-loop")
    ap.add_argument("--summarize-raw", help="a py-spy raw file: print top functions")
    args = ap.parse_args()
    if args.competitors_only:
        print("COMPETITORS_JSON " + json.dumps(competitors_main(args.warmup, args.n)))
        return 0
    if args.profile_loop:
        profile_loop(args.profile_loop, args.rows)
        return 0
    if args.summarize_raw:
        print(summarize_raw(args.summarize_raw))
        return 0

    import pyarrow as pa

    import laminardb
    t_start = time.perf_counter()
    print(f"laminardb one-row latency (issue 23): {args.n:,} rows per cell after {args.warmup:,} warm-up, "
          f"one row in flight, GC on; µs")
    print(f"  python {sys.version.split()[0]}, laminardb {getattr(laminardb, '__version__', '?')}, "
          f"pyarrow {pa.__version__}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs")
    kinds = args.kinds.split(",")
    for k in kinds:  # warm-up of code paths (numba caches, pyarrow kernels), separate connections
        run_laminardb(k, "same", 50, 50)
    res: dict = {"laminardb": {}, "floor": {}}
    for k in kinds:
        for m in MODES:
            res["laminardb"][f"{k}/{m}"] = run_laminardb(k, m, args.warmup, args.n)
    res["laminardb"]["filter/same/recordbatch"] = run_laminardb("filter", "same", args.warmup, args.n, as_batch=True)
    for k in ("filter", "agg"):
        for m in ("same", "thread"):
            res["floor"][f"{k}/{m}"] = run_floor(k, m, args.warmup, args.n)
    py = competitor_python(args.competitor_python)
    res.update(run_competitors(py, args.warmup, args.n))
    res["competitor_python"] = py

    hdr = f"{'':34s} {'p50':>8s} {'p99':>8s} {'p99.9':>8s} {'max':>9s}   target p99"
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for system in ("laminardb", "floor", "bytewax", "quixstreams"):
        cells = res.get(system, {})
        if "error" in cells:
            print(f"{system:34s} — {cells['error']}")
            continue
        for key, r in cells.items():
            if key == "version":
                continue
            kind, mode = key.split("/")[:2]
            tgt = TARGETS_US.get(kind)
            t = "" if not tgt or system != "laminardb" or key.endswith("recordbatch") else (
                f"≤ {tgt[0] if mode == 'same' else tgt[1]:>3d}  {'✔' if r['p99'] <= (tgt[0] if mode == 'same' else tgt[1]) else '✘'}")
            label = f"{system} {key}" + (f" ({cells['version']})" if system in ("bytewax", "quixstreams") and key == "filter/same" else "")
            print(f"{label:34s} {fmt(r)}   {t}")
    print(f"\n  total {time.perf_counter() - t_start:.0f} s; load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rounded = json.loads(json.dumps(res), parse_float=lambda s: round(float(s), 1))
    print("BENCH_JSON " + json.dumps(rounded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
