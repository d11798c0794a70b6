"""Delta-mode durability benchmark: what checkpoints cost a database that lives in the cluster,
how long a checkpoint epoch and a committed row take, how fast a killed actor is recovered —
and PySpark Structured Streaming beside it, with its own checkpointing, on the same rows.

Run from the repository root:

    .venv/bin/python bench/bench_delta.py            # the issue's figures (~4 min on 2 vCPUs)
    .venv/bin/python bench/bench_delta.py --quick    # a smoke run (~2 min): runs of 0.2-0.4 s,
                                                     # so its overhead % is the final checkpoint's

Starts ``ray.init(num_cpus=3)`` itself (two reactor actors of one CPU each; the database head
and the checkpoint coordinator take none) and shuts it down before the Spark part. Every
database is ``laminardb.connect("ray://auto", database=…, actors=2, config=…)``, fresh, and
dropped after its run. A warm-up database with a FILE sink first starts the coordinator's
Spark driver (JVM start and first job excluded from every figure).

1. Checkpoint overhead. The workload of ``bench_cluster.py`` (``bench_engine.make_batches``:
   1,000 symbols, 1 s tumbling windows, COUNT/SUM/AVG, 65,536-row batches), ``--rows`` rows
   repeated ``--passes`` (6) times with event time shifted (``bench_durability.shifted``) so a
   run lasts long enough for several 1 s checkpoints (30M rows, ~4 s). Timed: ``insert()`` of
   every batch + ``finish()`` (which takes a last checkpoint on a durable database), on
   (a) ``checkpoint_interval="1s"``, coordinator ``"spark"``;
   (a+sink) the same with ``CREATE SINK … FROM agg INTO FILE (format = 'parquet')``, so each
   epoch's Spark job has rows to write; (b) ``checkpoint_interval="off"`` (WAL, checkpoint at
   finish only); (c) ``checkpoint_dir=":memory:"`` (no WAL, no checkpoints). Interleaved, best
   of ``--repeat``. Every run's windows are checked equal to the first in-memory run's
   (``bench_cluster.verify``: every (sym, window) group exact), and the FILE sink's committed
   Parquet rows equal the subscriber's (exactly once, nothing missing).
2. The coordinator's view after (a) and (a+sink): barrier → manifest p50/p99, the Spark job's
   share, the head's prepare and stall (``metrics()["database"]["coordinator"]``). End-to-end
   latency: a paced run (one 65,536-row batch per ``--pace`` s, interval 1 s, the FILE sink on
   ``agg``) with ``--probes`` one-row probes on their own source → stream → FILE sink, spaced
   1.1 s apart (so they land at every phase of the interval); each probe's latency is from
   before its ``insert()`` to its row readable in the committed sink directory (the loop polls
   new part files with pyarrow), beside the same row's arrival at a subscriber.
3. Recovery: a keyed unwindowed ``GROUP BY k`` materialized view with 100k and 1M live groups,
   ``db.checkpoint()``, 3 more 65,536-row batches (WAL only), SIGKILL of actor 1, then the
   next ``insert()``: the head detects the loss (that insert, or its watchdog), builds new
   actors, restores the checkpoint and replays the WAL. Times from the kill: detected
   (recovery start), restored (recovery end; ``metrics()["database"]["recoveries"][-1]``),
   caught up (the insert returned and ``SELECT count(*), sum(n)`` on the view answers right).
   Each size twice: the next insert sent at once (a busy client: that insert meets the dead
   actor), and sent only once ``status()`` shows the recovery (an idle database: the head's
   watchdog detects it). Then the floor: a fresh ``ActorPool`` of two actors started alone.
4. PySpark Structured Streaming (``bench_spark.py``'s pieces: data, session, query, checks):
   throughput over ``--spark-rows`` rows as JSON-lines files with ``checkpointLocation`` set
   (``availableNow``), and end-to-end latency: the windowed query and a probe query with
   Parquet file sinks (exactly-once through ``_spark_metadata``), ``processingTime='1 second'``,
   trades files dropped at the same pace, probes as one-line files; a probe is visible when a
   committed batch of ``_spark_metadata`` lists the file holding it.

The last stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_spark  # noqa: E402
from bench_cluster import verify as verify_windows  # noqa: E402
from bench_cluster import warm_up  # noqa: E402
from bench_durability import fill_groups, shifted  # noqa: E402
from bench_engine import AGG_DDL, N_SYMBOLS, SOURCE_DDL, load, machine_info, make_batches  # noqa: E402

TARGET_OVERHEAD = 0.15  # (a) vs (b): checkpoints every 1 s cost at most 15 % of throughput
TARGET_RESTORE_S = 2.0  # SIGKILL → state restored on new actors
FLINK_RECOVERY = "Flink Nexmark V2 recovery 0.001–9 s"
_ACTORS = 2
_PROBE_SPACING_S = 1.1  # not a multiple of the 1 s interval: probes land at every phase of it
_DRAIN_TIMEOUT_S = 30.0  # after the last probe: wait this long for every probe to be committed
_FEED_AFTER_S = 3.0  # the background batches go on this long after the last probe
_EXTRA_BATCHES = 3  # recovery: batches after the checkpoint, replayed from the WAL
_EXTRA_ROWS = 65_536

STATE_DDL = ("CREATE SOURCE s (k BIGINT NOT NULL, ts BIGINT NOT NULL, v BIGINT, WATERMARK FOR ts AS ts); "
             "CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS sv FROM s GROUP BY k")
PROBE_DDL = ("CREATE SOURCE probes (id BIGINT NOT NULL, sent DOUBLE); "
             "CREATE STREAM probe_s AS SELECT id, sent FROM probes")


def sink_ddl(name: str, stream: str, path: Path) -> str:
    return f"CREATE SINK {name} FROM {stream} INTO FILE (path = '{path}', format = 'parquet')"


# ---------------------------------------------------------------------------- databases
def connect(name: str, root: Path, actors: int = _ACTORS, **config):
    """A fresh database of ``actors`` actors; waits for the CPUs of the last one's actors (freed async)."""
    import ray

    import laminardb

    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < actors and time.monotonic() < deadline:
        time.sleep(0.2)
    if config.get("checkpoint_dir") != ":memory:":
        config.setdefault("checkpoint_dir", str(root / "ckpt"))
    return laminardb.connect("ray://auto", database=name, actors=actors, config=config)


def read_sink(path: Path, columns: list[str] | None = None) -> pa.Table | None:
    """The committed rows of a FILE sink (pyarrow.dataset skips ``_staging`` and ``.inprogress``)."""
    if not path.is_dir() or not any(path.glob("*.parquet")):
        return None
    return ds.dataset(str(path), format="parquet").to_table(columns=columns)


def coordinator_figures(st: dict | None) -> dict:
    keys = ("checkpoints", "failures", "last_epoch", "duration_p50_s", "duration_p99_s", "spark_share",
            "spark_p50_s", "prepare_p50_s", "stall_p50_s", "last_rows", "last_error")
    return {k: (st or {}).get(k) for k in keys}


# ---------------------------------------------------------------------------- 1. overhead
VARIANTS = {  # label → (config, with a FILE sink on agg)
    "ckpt_1s": ({"checkpoint_interval": "1s", "coordinator": "spark"}, False),
    "ckpt_1s_sink": ({"checkpoint_interval": "1s", "coordinator": "spark"}, True),
    "ckpt_off": ({"checkpoint_interval": "off", "coordinator": "spark"}, False),
    "no_wal": ({"checkpoint_dir": ":memory:"}, False),
}


def run_overhead(label: str, run: int, batches, warm, root: Path) -> dict:
    config, with_sink = VARIANTS[label]
    name = f"bench-{label}-{run}"
    db = connect(name, root, **dict(config))
    try:
        warm_up(db, warm)
        db.execute(SOURCE_DDL)
        db.execute(AGG_DDL)
        out = root / "sinks" / name
        if with_sink:
            db.execute(sink_ddl("agg_out", "agg", out))
        sub = db.subscribe_stream("agg", history_rows=None)
        before = (db.metrics().get("checkpoints") or {}).get("checkpoints") or 0
        gc.collect()
        l0 = load()
        t0 = time.perf_counter()
        for b in batches:
            db.insert("trades", b)
        db.finish()
        elapsed = time.perf_counter() - t0
        result = sub.to_arrow()
        m = db.metrics()
        head = m.get("checkpoints") or {}
        res = {"label": label, "seconds": elapsed, "load": [l0, load()], "result": result,
               "coordinator": coordinator_figures(m["database"].get("coordinator")),
               "checkpoints_in_run": (head.get("checkpoints") or 0) - before,
               "head_max_stall_ms": (head.get("max_stall_s") or 0) * 1000,
               "events_ingested": m["events_ingested"]}
        if with_sink:
            res["sink"] = read_sink(out)
        return res
    finally:
        db.drop_database()
        shutil.rmtree(root / "sinks" / name, ignore_errors=True)


def verify_sink(sink: pa.Table | None, result: pa.Table, rows: int, label: str) -> int:
    """The committed FILE sink holds every window the subscriber got, exactly once."""
    assert sink is not None, f"{label}: the FILE sink committed nothing"
    got = pa.table({c: sink[c] for c in ("sym", "window_start", "window_end", "n", "s", "a")})
    return verify_windows(result, got, rows, f"{label} FILE sink")


# ---------------------------------------------------------------------------- 2. latency
def feed_seconds(n_probes: int) -> float:
    """How long a latency run feeds background batches: until just after the last probe."""
    return 0.5 + (n_probes - 1) * _PROBE_SPACING_S + _FEED_AFTER_S


def latency_batches(base: list[pa.RecordBatch], n_probes: int, pace_s: float) -> list[pa.RecordBatch]:
    """Enough time-shifted batches for one latency run (3 warm-up batches first)."""
    need = math.ceil(feed_seconds(n_probes) / pace_s) + 4
    return shifted(base, math.ceil(need / len(base)))[:need]


class ProbeDir:
    """Rows of a committed FILE sink, read as new part files appear (ids → first seen)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: set[str] = set()
        self.seen: dict[int, float] = {}

    def poll(self) -> None:
        if not self.path.is_dir():
            return
        now = time.perf_counter()
        for f in self.path.glob("part-*.parquet"):  # committed files only: staging is _staging/
            if f.name not in self.files:
                self.files.add(f.name)
                for i in pq.read_table(f, columns=["id"]).column("id").to_pylist():
                    self.seen.setdefault(i, now)


def run_latency(batches, root: Path, n_probes: int, pace_s: float) -> dict:
    name = "bench-latency"
    db = connect(name, root, checkpoint_interval="1s", coordinator="spark")
    agg_out, probe_out = root / "sinks" / "lat-agg", root / "sinks" / "lat-probe"
    try:
        db.execute(SOURCE_DDL)
        db.execute(AGG_DDL)
        db.execute(sink_ddl("agg_out", "agg", agg_out))
        db.execute(PROBE_DDL)
        db.execute(sink_ddl("probe_out", "probe_s", probe_out))
        sub = db.subscribe_stream("probe_s", history_rows=None)
        for b in batches[:3]:  # warm: kernels, the first epoch's sink files
            db.insert("trades", b)
        time.sleep(2.0)
        watch = ProbeDir(probe_out)
        sent: dict[int, float] = {}
        at_sub: dict[int, float] = {}
        gaps: list[float] = []
        l0 = load()
        t0 = time.perf_counter()
        next_batch, bi, pi = t0, 3, 0
        last = t0
        feed_end = t0 + feed_seconds(n_probes)
        end = t0 + (n_probes - 1) * _PROBE_SPACING_S + 0.5 + _DRAIN_TIMEOUT_S
        while time.perf_counter() < end:
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            if now >= next_batch and bi < len(batches) and now < feed_end:
                db.insert("trades", batches[bi])
                bi += 1
                next_batch += pace_s
            if pi < n_probes and now >= t0 + 0.5 + pi * _PROBE_SPACING_S:
                sent[pi] = time.perf_counter()
                db.insert("probes", {"id": pi, "sent": time.time()})
                pi += 1
            while (b := sub.try_next()) is not None:
                t = time.perf_counter()
                for i in b.column("id").to_pylist():
                    at_sub.setdefault(i, t)
            watch.poll()
            if pi == n_probes and len(watch.seen) >= n_probes:
                break
            time.sleep(0.005)
        run_s = time.perf_counter() - t0
        m = db.metrics()
        lat = np.array([watch.seen[i] - sent[i] for i in sorted(sent) if i in watch.seen])
        sub_lat = np.array([at_sub[i] - sent[i] for i in sorted(sent) if i in at_sub])
        probes = read_sink(probe_out)
        ids = sorted(probes.column("id").to_pylist()) if probes is not None else []
        assert ids == list(range(n_probes)), f"latency run: probe sink holds ids {ids}, expected 0..{n_probes - 1}"
        return {"probes": n_probes, "committed": int(lat.size), "pace_s": pace_s,
                "events_per_s": batches[0].num_rows / pace_s, "batches": bi - 3, "seconds": run_s,
                "load": [l0, load()],
                "e2e_p50_s": float(np.percentile(lat, 50)), "e2e_p90_s": float(np.percentile(lat, 90)),
                "e2e_min_s": float(lat.min()), "e2e_max_s": float(lat.max()),
                "subscriber_p50_s": float(np.percentile(sub_lat, 50)) if sub_lat.size else None,
                "loop_gap_p99_s": float(np.percentile(gaps, 99)),
                "coordinator": coordinator_figures(m["database"].get("coordinator"))}
    finally:
        db.drop_database()
        shutil.rmtree(agg_out, ignore_errors=True)
        shutil.rmtree(probe_out, ignore_errors=True)


# ---------------------------------------------------------------------------- 3. recovery
def extra_batch(i: int, groups: int) -> pa.RecordBatch:
    k = (np.arange(i * _EXTRA_ROWS, (i + 1) * _EXTRA_ROWS, dtype=np.int64) * 7919) % groups
    return pa.record_batch({"k": k, "ts": np.full(_EXTRA_ROWS, 2_000 + i, np.int64), "v": np.ones(_EXTRA_ROWS, np.int64)})


def run_recovery(groups: int, root: Path, mode: str) -> dict:
    """``mode`` "insert": the next insert is sent at once after the kill (a busy client);
    "watchdog": nothing is sent until the head reports the recovery (an idle database)."""
    name = f"bench-recover-{groups}-{mode}"
    db = connect(name, root, checkpoint_interval="off", coordinator="spark")
    try:
        db.execute(STATE_DDL)
        t = time.perf_counter()
        fill_groups(db, groups)
        fill_s = time.perf_counter() - t
        t = time.perf_counter()
        epoch = db.checkpoint()
        checkpoint_s = time.perf_counter() - t
        for i in range(_EXTRA_BATCHES):
            db.insert("s", extra_batch(i, groups))
        m = db.metrics()
        pids = [mem["pid"] for mem in m["cluster"]["members"]]
        want = {"g": groups, "rows": groups + (_EXTRA_BATCHES + 1) * _EXTRA_ROWS}
        l0 = load()
        t_kill = time.time()
        os.kill(pids[1], signal.SIGKILL)
        if mode == "watchdog":  # status() takes no engine lock: it answers during the recovery
            deadline = time.monotonic() + 120
            while db.status()["recoveries"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        db.insert("s", extra_batch(_EXTRA_BATCHES, groups))  # the next insert: waits for recovery
        t_insert = time.time()
        got = db.query("SELECT count(*) AS g, sum(n) AS rows FROM per_k").to_pylist()[0]
        t_answer = time.time()
        assert got == want, f"recovery {groups:,} groups: view answers {got}, expected {want}"
        m = db.metrics()
        rec = m["database"]["recoveries"][-1]
        durable = (m.get("checkpoints") or {}).get("recovery") or {}
        new_pids = [mem["pid"] for mem in m["cluster"]["members"]]
        assert not set(new_pids) & {pids[1]}, "the killed actor is still a member"
        start = rec["at"] - rec["seconds"]
        return {"groups": groups, "mode": mode, "fill_s": fill_s, "checkpoint_s": checkpoint_s, "epoch": epoch,
                "load": [l0, load()], "cause": rec.get("cause"), "recovered_from_epoch": rec.get("epoch"),
                "wal_records_replayed": rec.get("wal_records_replayed"),
                "detected_s": start - t_kill, "recovery_s": rec["seconds"],
                "restore_replay_s": durable.get("seconds"), "restored_s": rec["at"] - t_kill,
                "insert_returned_s": t_insert - t_kill, "caught_up_s": t_answer - t_kill,
                "pids_before": pids, "pids_after": new_pids, "recoveries": len(m["database"]["recoveries"])}
    finally:
        db.drop_database()


def actor_start_floor(samples: int) -> list[float]:
    """Seconds to start a fresh ``ActorPool`` of two reactor actors (processes, imports, numba
    kernels, ownership) and nothing else: what every recovery pays before restoring state,
    since the head replaces all its actors."""
    import ray

    from laminardb.cluster.actor_pool import ActorPool
    from laminardb.cluster.ownership import RaftConfig
    from laminardb.cluster.routing import DEFAULT_VNODES

    out = []
    for _ in range(samples):
        deadline = time.monotonic() + 60
        while ray.available_resources().get("CPU", 0) < _ACTORS and time.monotonic() < deadline:
            time.sleep(0.05)
        t = time.perf_counter()
        cluster = ActorPool(_ACTORS, DEFAULT_VNODES, RaftConfig.from_env())
        out.append(time.perf_counter() - t)
        cluster.shutdown()
    return out


# ---------------------------------------------------------------------------- 4. Spark
def spark_throughput(spark, batches, work: Path) -> dict:
    paths = bench_spark.write_jsonl(batches, work / "in")
    warm_dir = work / "warm"
    warm_dir.mkdir()
    shutil.copy(paths[0], warm_dir / paths[0].name)
    want = bench_spark.expected(batches)
    t = time.perf_counter()
    bench_spark.spark_run(spark, warm_dir, work / "ckpt-warm", "warm")
    warm_s = time.perf_counter() - t
    l0 = load()
    el, trig, nb, out = bench_spark.spark_run(spark, work / "in", work / "ckpt", "agg_run")
    chk = bench_spark.verify(out, want, "spark")
    rows = sum(b.num_rows for b in batches) - 1  # the end marker is not an event
    return {"rows": rows, "seconds": el, "events_per_s": rows / el, "trigger_s": trig, "micro_batches": nb,
            "warmup_s": warm_s, "load": l0, "verified": chk,
            "checkpoint_files": sum(1 for _ in (work / "ckpt").rglob("*") if _.is_file())}


class SparkCommitted:
    """Probe ids in the Parquet files a Spark file sink has committed (its ``_spark_metadata``)."""

    def __init__(self, path: Path) -> None:
        self.log = path / "_spark_metadata"
        self.logs: set[str] = set()
        self.files: set[str] = set()
        self.seen: dict[int, float] = {}

    def poll(self) -> None:
        if not self.log.is_dir():
            return
        now = time.perf_counter()
        for entry in self.log.iterdir():
            if entry.name.startswith(".") or entry.name.endswith(".crc") or entry.name in self.logs:
                continue
            self.logs.add(entry.name)
            lines = entry.read_text().splitlines()[1:]  # "v1", then one JSON object per file
            for line in lines:
                f = unquote(urlparse(json.loads(line)["path"]).path)
                if f not in self.files:
                    self.files.add(f)
                    for i in pq.read_table(f, columns=["id"]).column("id").to_pylist():
                        self.seen.setdefault(i, now)


def spark_latency(spark, batches, work: Path, n_probes: int, pace_s: float) -> dict:
    from pyspark.sql import functions as F  # noqa: N812

    from laminardb.connectors.files import json_lines

    stage, trades_in, probes_in = work / "stage", work / "trades_in", work / "probes_in"
    for d in (stage, trades_in, probes_in):
        d.mkdir(parents=True)
    total = math.ceil(feed_seconds(n_probes) / pace_s) + 4
    files = []
    for i in range(min(total, len(batches))):  # written before timing; renamed in at the pace
        p = stage / f"part-{i:05d}.jsonl"
        p.write_text("\n".join(json_lines(batches[i]).to_pylist()) + "\n")
        files.append(p)
    agg = (spark.readStream.schema("ts LONG, sym STRING, price DOUBLE").json(str(trades_in))
           .withColumn("et", F.timestamp_millis("ts")).withWatermark("et", "100 milliseconds")
           .groupBy(F.window("et", "1 second"), "sym")
           .agg(F.count(F.lit(1)).alias("n"), F.sum("price").alias("s"), F.avg("price").alias("a"))
           .select("sym", F.unix_millis(F.col("window.start")).alias("ws"), "n", "s", "a"))
    probe = spark.readStream.schema("id LONG, sent DOUBLE").json(str(probes_in))
    queries = [
        agg.writeStream.outputMode("append").format("parquet").option("path", str(work / "agg_out"))
        .option("checkpointLocation", str(work / "ckpt-agg")).trigger(processingTime="1 second").start(),
        probe.writeStream.outputMode("append").format("parquet").option("path", str(work / "probe_out"))
        .option("checkpointLocation", str(work / "ckpt-probe")).trigger(processingTime="1 second").start(),
    ]
    try:
        for i in range(3):  # warm: first micro-batches of both queries
            os.rename(files[i], trades_in / files[i].name)
        warm = stage / "probe-warm.json"
        warm.write_text(json.dumps({"id": -1, "sent": time.time()}) + "\n")
        os.rename(warm, probes_in / warm.name)
        watch = SparkCommitted(work / "probe_out")
        deadline = time.monotonic() + 120
        while -1 not in watch.seen and time.monotonic() < deadline:
            watch.poll()
            time.sleep(0.05)
        sent: dict[int, float] = {}
        l0 = load()
        t0 = time.perf_counter()
        next_batch, bi, pi = t0, 3, 0
        end = t0 + (n_probes - 1) * _PROBE_SPACING_S + 0.5 + _DRAIN_TIMEOUT_S
        while time.perf_counter() < end:
            now = time.perf_counter()
            if now >= next_batch and bi < len(files) and now < t0 + feed_seconds(n_probes):
                os.rename(files[bi], trades_in / files[bi].name)
                bi += 1
                next_batch += pace_s
            if pi < n_probes and now >= t0 + 0.5 + pi * _PROBE_SPACING_S:
                sent[pi] = time.perf_counter()
                tmp = stage / f"probe-{pi}.json"
                tmp.write_text(json.dumps({"id": pi, "sent": time.time()}) + "\n")
                os.rename(tmp, probes_in / tmp.name)
                pi += 1
            watch.poll()
            if pi == n_probes and all(i in watch.seen for i in range(n_probes)):
                break
            time.sleep(0.005)
        lat = np.array([watch.seen[i] - sent[i] for i in sorted(sent) if i in watch.seen])
        progress = queries[0].recentProgress
    finally:
        spark.sparkContext.setLogLevel("OFF")  # stopping a running micro-batch logs its interruption
        for q in queries:
            q.stop()
        spark.sparkContext.setLogLevel("ERROR")
    assert lat.size == n_probes, f"Spark latency: {lat.size} of {n_probes} probes committed in time"
    dur = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress if p.get("numInputRows")]
    return {"probes": n_probes, "committed": int(lat.size), "pace_s": pace_s, "batches": bi - 3,
            "load": [l0, load()], "e2e_p50_s": float(np.percentile(lat, 50)),
            "e2e_p90_s": float(np.percentile(lat, 90)), "e2e_min_s": float(lat.min()),
            "e2e_max_s": float(lat.max()),
            "agg_trigger_p50_s": float(np.percentile(dur, 50)) if dur else None}


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the workload (one pass)")
    ap.add_argument("--passes", type=int, default=6, help="the rows repeated, time shifted (a longer run)")
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per variant (fresh database each)")
    ap.add_argument("--probes", type=int, default=20, help="end-to-end latency probes per engine")
    ap.add_argument("--pace", type=float, default=0.5, help="seconds between batches in the latency runs")
    ap.add_argument("--groups", type=int, nargs="+", default=[100_000, 1_000_000], help="recovery: live groups")
    ap.add_argument("--spark-rows", type=int, default=1_000_000)
    ap.add_argument("--no-spark", action="store_true", help="skip the PySpark Structured Streaming part")
    ap.add_argument("--quick", action="store_true",
                    help="1M rows × 1 pass, 1 repeat, 8 probes, 100k groups, 200k Spark rows")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.passes, args.repeat, args.probes = 1_000_000, 1, 1, 8
        args.groups, args.spark_rows = [100_000], 200_000

    import pyspark
    import ray

    info = machine_info()
    print("laminardb Delta mode: checkpoints, latency, recovery — vs PySpark Structured Streaming")
    print(f"  machine: {info['cpu']}, {info['cores']} cores; python {info['python']}, ray {ray.__version__}, "
          f"pyspark {pyspark.__version__}, pyarrow {info['pyarrow']}, numba {info['numba']}; load {load()}")
    root = Path(args.dir or tempfile.mkdtemp(prefix="ldb-bench-delta-"))
    root.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    base = make_batches(args.rows, args.batch_rows)
    batches = shifted(base, args.passes)
    rows = sum(b.num_rows for b in batches)
    warm = make_batches(4 * args.batch_rows, args.batch_rows, seed=1)
    print(f"  data: {rows:,} rows ({args.passes} pass(es) of {args.rows:,}) in {len(batches)} batches, "
          f"generated in {time.perf_counter() - t:.1f} s; work dir {root}")
    report: dict = {"machine": info, "rows": rows, "passes": args.passes, "repeat": args.repeat}
    ray.init(num_cpus=_ACTORS + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        # warm-up: the coordinator actor and its Spark driver (JVM start + first job)
        t = time.perf_counter()
        db = connect("bench-warm", root, checkpoint_interval="off", coordinator="spark")
        warm_up(db, warm)
        db.execute(SOURCE_DDL + "; " + AGG_DDL + "; " + sink_ddl("agg_out", "agg", root / "sinks" / "warm"))
        for b in warm:
            db.insert("trades", b)
        db.finish()
        db.drop_database()
        print(f"  warm-up database (coordinator + Spark driver start, first Spark job): "
              f"{time.perf_counter() - t:.1f} s, not timed")

        # 1. overhead ---------------------------------------------------------------------
        print(f"\n1. checkpoint overhead: {rows:,} rows, insert() of every batch + finish()")
        runs: dict[str, list[dict]] = {k: [] for k in VARIANTS}
        for r in range(args.repeat):
            for label in ("no_wal", "ckpt_off", "ckpt_1s", "ckpt_1s_sink"):
                res = run_overhead(label, r, batches, warm, root)
                runs[label].append(res)
                c = res["coordinator"]
                print(f"    {label:<13} {res['seconds']:7.3f} s  {rows / res['seconds']:>12,.0f} ev/s  "
                      f"load {res['load'][0]}  checkpoints in the run {res['checkpoints_in_run']} "
                      f"(database's life {c['checkpoints']}), longest barrier stall {res['head_max_stall_ms']:.1f} ms")
        ref = runs["no_wal"][0]["result"]
        groups_n = 0
        for label, rs in runs.items():
            for i, res in enumerate(rs):
                groups_n = verify_windows(ref, res.pop("result"), rows, f"{label} run {i}")
                if "sink" in res:
                    verify_sink(res.pop("sink"), ref, rows, f"{label} run {i}")
        best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
        eps = {k: rows / b["seconds"] for k, b in best.items()}
        overhead = {"vs_off": best["ckpt_1s"]["seconds"] / best["ckpt_off"]["seconds"] - 1,
                    "vs_no_wal": best["ckpt_1s"]["seconds"] / best["no_wal"]["seconds"] - 1,
                    "sink_vs_off": best["ckpt_1s_sink"]["seconds"] / best["ckpt_off"]["seconds"] - 1}
        med = {k: float(np.median([r["seconds"] for r in v])) for k, v in runs.items()}
        overhead.update(median_vs_off=med["ckpt_1s"] / med["ckpt_off"] - 1,
                        median_vs_no_wal=med["ckpt_1s"] / med["no_wal"] - 1,
                        median_sink_vs_off=med["ckpt_1s_sink"] / med["ckpt_off"] - 1)
        report["overhead"] = {"runs": runs, "events_per_s": eps, "overhead": overhead, "groups": groups_n,
                              "median_s": med}

        # 2. latency ----------------------------------------------------------------------
        print(f"\n2. end-to-end latency: {args.probes} probes, one batch per {args.pace} s, interval 1 s")
        lat_batches = latency_batches(base, args.probes, args.pace)
        lat = run_latency(lat_batches, root, args.probes, args.pace)
        print(f"    laminardb: committed FILE sink p50 {lat['e2e_p50_s']:.3f} s (p90 {lat['e2e_p90_s']:.3f}, "
              f"max {lat['e2e_max_s']:.3f}); subscriber p50 {lat['subscriber_p50_s']:.3f} s")
        report["latency"] = lat

        # 3. recovery ---------------------------------------------------------------------
        print("\n3. recovery after SIGKILL of actor 1")
        report["recovery"] = []
        for g, mode in [(g, m) for g in args.groups for m in ("insert", "watchdog")]:
            rec = run_recovery(g, root, mode)
            report["recovery"].append(rec)
            print(f"    {g:>9,} groups, {mode:<8}: detected {rec['detected_s']:.2f} s, restored "
                  f"{rec['restored_s']:.2f} s, caught up {rec['caught_up_s']:.2f} s ({rec['cause']}; "
                  f"{rec['wal_records_replayed']} WAL records)")
        report["actor_start_s"] = actor_start_floor(3)
        print(f"    a fresh ActorPool of 2 actors alone starts in {min(report['actor_start_s']):.2f}–"
              f"{max(report['actor_start_s']):.2f} s (the floor of every recovery above)")
    finally:
        ray.shutdown()

    # 4. Spark ----------------------------------------------------------------------------
    if not args.no_spark:
        print(f"\n4. PySpark Structured Streaming, local[2], checkpointLocation set, {args.spark_rows:,} rows")
        work = root / "spark"
        l0 = load()
        spark, startup = bench_spark.spark_session(2)
        try:
            sb = bench_spark.make_data(args.spark_rows, args.batch_rows)
            thr = spark_throughput(spark, sb, work / "thr")
            thr.update(startup_s=startup, startup_load=l0)
            print(f"    throughput: {thr['seconds']:.3f} s = {thr['events_per_s']:,.0f} ev/s "
                  f"({thr['micro_batches']} micro-batches; startup {startup:.1f} s, warm-up {thr['warmup_s']:.1f} s)")
            slat = spark_latency(spark, latency_batches(base, args.probes, args.pace), work / "lat",
                                 args.probes, args.pace)
            print(f"    latency: committed file sink p50 {slat['e2e_p50_s']:.3f} s (p90 {slat['e2e_p90_s']:.3f}, "
                  f"max {slat['e2e_max_s']:.3f})")
            report["spark"] = {"throughput": thr, "latency": slat}
        finally:
            spark.stop()

    print_table(report, args)
    report["load_after"] = load()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    print("BENCH_JSON " + json.dumps(report, default=str))
    return 0


def print_table(report: dict, args) -> None:
    ov = report["overhead"]
    rows, eps, best = report["rows"], ov["events_per_s"], {k: min(v, key=lambda r: r["seconds"])
                                                            for k, v in ov["runs"].items()}
    print(f"\nCheckpoint overhead — {rows:,} events, {N_SYMBOLS} symbols, 1 s tumbling windows, "
          f"COUNT/SUM/AVG, connect(actors=2), best of {report['repeat']}")
    print(f"  {'variant':<46}{'seconds':>9}{'events/s':>13}  ckpts in run  all runs (s)")
    names = {"ckpt_1s": "(a) checkpoint_interval=1s, coordinator spark", "ckpt_1s_sink": "(a+sink) same + FILE sink on agg",
             "ckpt_off": "(b) checkpoint_interval=off (WAL only)", "no_wal": "(c) checkpoint_dir=':memory:'"}
    for k in ("ckpt_1s", "ckpt_1s_sink", "ckpt_off", "no_wal"):
        b = best[k]
        print(f"  {names[k]:<46}{b['seconds']:>9.3f}{eps[k]:>13,.0f}  {b['checkpoints_in_run']:>12}  "
              + ", ".join(f"{r['seconds']:.3f}" for r in ov["runs"][k]))
    o = ov["overhead"]
    verdict = "PASS" if o["vs_off"] <= TARGET_OVERHEAD else "MISS"
    print(f"  overhead of (a): {o['vs_off']:+.1%} vs (b) [target ≤ {TARGET_OVERHEAD:.0%}: {verdict}], "
          f"{o['vs_no_wal']:+.1%} vs (c); (a+sink) {o['sink_vs_off']:+.1%} vs (b)")
    print(f"  same on the medians: (a) {o['median_vs_off']:+.1%} vs (b), {o['median_vs_no_wal']:+.1%} vs (c); "
          f"(a+sink) {o['median_sink_vs_off']:+.1%} vs (b)")
    print(f"  verified: every run's {ov['groups']:,} (sym, window) groups equal exactly; the FILE sink's committed "
          f"rows equal the subscriber's")
    print("\nCheckpoint epochs (coordinator status, best run):")
    for k in ("ckpt_1s", "ckpt_1s_sink"):
        c = best[k]["coordinator"]
        if c["duration_p50_s"] is not None:
            print(f"  {k:<13} {c['checkpoints']} epochs: barrier→manifest p50 {c['duration_p50_s'] * 1000:.0f} ms, "
                  f"p99 {c['duration_p99_s'] * 1000:.0f} ms; prepare p50 {c['prepare_p50_s'] * 1000:.0f} ms, "
                  f"stall p50 {c['stall_p50_s'] * 1000:.1f} ms; Spark p50 {c['spark_p50_s'] * 1000:.0f} ms = "
                  f"{c['spark_share']:.0%} of epoch time; failures {c['failures']}")
    lat = report["latency"]
    c = lat["coordinator"]
    print(f"  latency run {c['checkpoints']} epochs: p50 {(c['duration_p50_s'] or 0) * 1000:.0f} ms, "
          f"p99 {(c['duration_p99_s'] or 0) * 1000:.0f} ms, Spark share {(c['spark_share'] or 0):.0%}")
    print(f"\nEnd-to-end latency, event → row in the committed sink ({lat['probes']} probes, "
          f"{lat['events_per_s']:,.0f} ev/s background, interval 1 s)")
    print(f"  laminardb Delta, FILE sink (parquet)       p50 {lat['e2e_p50_s']:.3f} s  p90 {lat['e2e_p90_s']:.3f} s  "
          f"min {lat['e2e_min_s']:.3f}  max {lat['e2e_max_s']:.3f}   (subscriber p50 {lat['subscriber_p50_s']:.3f} s; "
          f"poll loop gap p99 {lat['loop_gap_p99_s'] * 1000:.0f} ms)")
    sp = report.get("spark")
    if sp:
        s = sp["latency"]
        print(f"  Spark SS, parquet sink, trigger 1 s         p50 {s['e2e_p50_s']:.3f} s  p90 {s['e2e_p90_s']:.3f} s  "
              f"min {s['e2e_min_s']:.3f}  max {s['e2e_max_s']:.3f}   (agg micro-batch p50 {s['agg_trigger_p50_s'] or 0:.2f} s)")
    print(f"\nRecovery after SIGKILL of actor 1 (seconds from the kill; target restored ≤ {TARGET_RESTORE_S:.0f} s; "
          f"{FLINK_RECOVERY})")
    print(f"  {'groups':>9}  {'next insert':<11}  checkpoint  detected  restored  caught up  restore+replay  WAL recs  cause")
    for r in report["recovery"]:
        when = "at once" if r["mode"] == "insert" else "after it"
        print(f"  {r['groups']:>9,}  {when:<11}  {r['checkpoint_s']:>9.2f}s {r['detected_s']:>8.2f}s {r['restored_s']:>8.2f}s "
              f"{r['caught_up_s']:>9.2f}s {r['restore_replay_s'] or 0:>14.2f}s {r['wal_records_replayed']:>9}  {r['cause']}")
    a = report.get("actor_start_s") or [0.0]
    print(f"  starting 2 fresh actors alone (no state): {min(a):.2f}–{max(a):.2f} s — recovery starts one "
          f"replacement (the live actor is kept), which bounds 'restored' from below")
    if sp:
        t = sp["throughput"]
        print(f"\nThroughput with checkpointing, same workload (laminardb {rows:,} rows; Spark {t['rows']:,})")
        print(f"  laminardb Delta (a), connect(actors=2)      {eps['ckpt_1s']:>12,.0f} ev/s")
        print(f"  Spark SS local[2], JSON files, availableNow {t['events_per_s']:>12,.0f} ev/s   "
              f"(laminardb / Spark {eps['ckpt_1s'] / t['events_per_s']:.1f}×; Spark verified vs DuckDB)")


if __name__ == "__main__":
    sys.exit(main())
