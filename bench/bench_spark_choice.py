"""How should the checkpoint coordinator's Spark run in the cluster? (issue 9)

Measures, for whichever interpreter runs it, one way of running Spark (run one at a time):

    .venv/bin/python bench/bench_spark_choice.py --mode local            # pyspark 4.x, local[1] here
    .venv/bin/python bench/bench_spark_choice.py --mode local-actor      # same, in a detached Ray actor
    /tmp/raydp-venv/bin/python bench/bench_spark_choice.py --mode raydp  # RayDP 1.6.5 (pyspark 3.5.7)
    ... --paths arrow pandas parquet [ray-objects]                       # more data paths (below)

- ``local``: ``SparkSession`` ``local[1]`` in this process.
- ``local-actor``: ``ray.init(address='local', num_cpus=2)``, then a *detached* actor
  (``num_cpus=1``) whose constructor starts the same ``local[1]`` session: the lead's
  candidate "Spark driver local[1] inside a detached Ray actor on the head". The jobs run in
  the actor; only their figures (JSON text) come back.
- ``raydp``: ``ray.init(address='local', num_cpus=2)``, then ``raydp.init_spark(app,
  num_executors=1, executor_cores=1, executor_memory='512M')`` with RayDP's documented Java 17
  ``--add-opens`` (``--no-jdk17-opens`` leaves them out): the driver JVM beside this process,
  RayDP's app master (a Python actor, its py4j JVM and a Java actor) and one executor (a Java
  Ray actor).

Every mode: UI off, ``spark.sql.shuffle.partitions`` = 4, ``spark.driver.memory`` =
``--driver-memory`` (2g; 1g ran out of heap in pyspark 4.3, see ``_SPARK_CONF``), Arrow on with
fallback *off* (an Arrow path that does not work fails instead of going through pickled rows).

Figures:

(a) **cold start**: from before ``import pyspark`` to the first job's result
    (``spark.range(1000)`` summed); ``ray.init`` is timed apart (a cluster head has Ray up).
(b) **warm jobs** over 100k and 1M rows of (key int64, ts int64, value float64), each path
    one warm-up run, then p50/min/max of ``--runs``:
    - ``arrow`` / ``pandas`` (the issue's job): the table cut into 4 slices, ``createDataFrame``
      of each (pyspark ≥ 4 takes the Arrow table; 3.5 needs ``table.to_pandas()``, in the
      time), ``union`` of the 4, ``orderBy(key, ts)``, back as Arrow (``toArrow()``; on 3.5
      ``_collect_as_arrow()``, the path 4.0's ``toArrow`` calls) or ``toPandas()``;
    - ``parquet``: the 4 slices written as Parquet files, ``spark.read.parquet`` → ``orderBy``
      → ``write.parquet`` → read back with pyarrow (the checkpoint-store path, any mode);
    - ``ray-objects`` (raydp only): the slices as Arrow IPC bytes in Ray's object store →
      ``ray_dataset_to_spark_dataframe`` → ``orderBy`` → ``spark_dataframe_to_ray_dataset``
      → Arrow here; the rows never pass through the Spark driver.
    Every result is checked equal to pyarrow's ``sort_by`` of the same rows ((key, ts) is
    unique, so the order is total) before its time counts.
(c) **memory** after the first job and after all jobs: RSS and PSS (``/proc/PID/smaps_rollup``)
    of this process and all its descendants (JVMs, Ray's daemons and workers) by role; for the
    Ray modes also Ray's own footprint before Spark started.

Waits are bounded: a watchdog (``--timeout``) dumps the stacks, kills the process tree and
exits 3. Cleanup stops Spark, the py4j JVM, the actor and Ray, then checks that no process
started here is left. The last stdout line is ``BENCH_JSON {…}``. /proc only (no psutil in the
project venv).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import warnings
from importlib import metadata

T_PROCESS = time.perf_counter()

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

# Same settings in every mode. 4 shuffle partitions = the 4 union parts; with 1 core more
# partitions only add task overhead. spark.driver.memory comes from --driver-memory: with the
# default 1g, pyspark 4.3 local[1] ran out of heap on the 8th-9th 1M-row job (the heap after a
# full GC sat at 370-690 MB between jobs) and then hung instead of failing.
_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
}
_PARTS = 4
# RayDP on Java 17 (its doc/spark_on_ray.md and examples): the driver, the executors and the
# app master's Java Ray actor need these opens. Without them plain jobs run, but the first
# Spark → Ray conversion kills the app-master actor (InaccessibleObjectException on
# java.lang.String). pyspark's own launcher adds its opens to the local driver by itself.
_JDK17_OPENS = " ".join(["-XX:+IgnoreUnrecognizedVMOptions"] + [
    f"--add-opens=java.base/{m}=ALL-UNNAMED" for m in (
        "java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math",
        "java.text", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
        "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")])
# pyspark 4.3 warns on every toPandas() that pandas 3 is not fully supported; said once in the report.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
_RAY_CPUS = 2


# ---------------------------------------------------------------------------- /proc
def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root: int) -> list[int]:
    kids, out, todo = _children_map(), [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _mem_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in kB; PSS splits shared pages (libjvm, libray, the JDK's CDS archive)
    among the processes mapping them, so the PSS sum is the real footprint."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def _role(pid: int, root: int) -> str:
    cmd = _cmdline(pid)
    exe = cmd.split(" ", 1)[0]
    if pid == root:
        return "python driver (this process)"
    if exe.endswith("java"):
        if "AppMasterEntryPoint" in cmd:
            return "JVM: RayDP app-master py4j gateway"
        if "-Dray.worker.id=" in cmd:  # a Java Ray worker: the executor gets -Xmx = executor memory
            if " -Xmx" in cmd:
                return "JVM: Spark executor (Java Ray actor)"
            return "JVM: RayDP app master (Java Ray actor)"
        if "SparkSubmit" in cmd or "pyspark-shell" in cmd:
            return "JVM: Spark driver"
        return "JVM: other"
    if not cmd:
        return "exited (zombie, not yet reaped)"
    if cmd.startswith("ray::"):
        return f"Ray worker: {cmd.split(' ', 1)[0][5:]}"
    if "gcs_server" in cmd or "raylet" in cmd or "ray/" in cmd or "ray." in cmd:
        return "Ray daemons (gcs, raylet, agents)"
    return f"other: {exe.rsplit('/', 1)[-1]}"


def memory_report(root: int | None = None) -> dict:
    root = os.getpid() if root is None else root
    roles: dict[str, dict] = {}
    procs = []
    for pid in [root, *descendants(root)]:
        rss, pss = _mem_kb(pid)
        role = _role(pid, root)
        procs.append({"pid": pid, "role": role, "rss_mb": round(rss / 1024, 1),
                      "pss_mb": round(pss / 1024, 1), "cmd": _cmdline(pid)[:300]})
        r = roles.setdefault(role, {"procs": 0, "rss_mb": 0.0, "pss_mb": 0.0})
        r["procs"] += 1
        r["rss_mb"] += rss / 1024
        r["pss_mb"] += pss / 1024
    total = {"procs": sum(r["procs"] for r in roles.values()),
             "rss_mb": sum(r["rss_mb"] for r in roles.values()),
             "pss_mb": sum(r["pss_mb"] for r in roles.values())}
    return {"roles": {k: {kk: round(vv, 1) for kk, vv in v.items()} for k, v in sorted(roles.items())},
            "total": {k: round(v, 1) for k, v in total.items()}, "procs": procs}


def kill_tree(root: int, sig: int = signal.SIGKILL) -> int:
    pids = descendants(root)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return len(pids)


# ---------------------------------------------------------------------------- watchdog
def start_watchdog(seconds: float) -> threading.Event:
    """Bounded run: past ``seconds`` dump every thread's stack, kill what this process
    started and exit 3 (a hung JVM or Ray actor must not keep the shared machine busy)."""
    done = threading.Event()

    def watch():
        if not done.wait(seconds):
            print(f"WATCHDOG: no result after {seconds:.0f} s; killing the process tree", flush=True)
            faulthandler.dump_traceback(all_threads=True)
            kill_tree(os.getpid())
            os._exit(3)

    threading.Thread(target=watch, daemon=True, name="watchdog").start()
    return done


# ---------------------------------------------------------------------------- data + jobs
def make_table(rows: int, seed: int = 7) -> pa.Table:
    """(key, ts) unique so ``orderBy(key, ts)`` has one right answer."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "key": rng.integers(0, 10_000, rows, dtype=np.int64),
        "ts": rng.permutation(rows).astype(np.int64) + 1_700_000_000_000,
        "value": rng.random(rows),
    })


def _collect_arrow(df) -> pa.Table:
    if hasattr(df, "toArrow"):  # pyspark >= 4.0
        return df.toArrow()
    batches = df._collect_as_arrow()  # pyspark 3.5: what 4.0's toArrow() calls
    return pa.Table.from_batches(batches) if batches else None


def _create(spark, part: pa.Table):
    if int(spark.version.split(".")[0]) >= 4:
        return spark.createDataFrame(part)
    return spark.createDataFrame(part.to_pandas())  # 3.5 takes no Arrow table


def sorted_job(spark, table: pa.Table, collect: str):
    n = table.num_rows
    cuts = [n * i // _PARTS for i in range(_PARTS + 1)]
    parts = [_create(spark, table.slice(cuts[i], cuts[i + 1] - cuts[i])) for i in range(_PARTS)]
    df = parts[0]
    for p in parts[1:]:
        df = df.union(p)
    df = df.orderBy("key", "ts")
    return _collect_arrow(df) if collect == "arrow" else df.toPandas()


def _check(result, expected: pa.Table, collect: str) -> None:
    got = result if collect != "pandas" else pa.Table.from_pandas(result, preserve_index=False)
    assert got.num_rows == expected.num_rows, (got.num_rows, expected.num_rows)
    for name in expected.column_names:
        a = got.column(name).combine_chunks()
        b = expected.column(name).combine_chunks()
        assert a.equals(b), f"column {name} differs from pyarrow's sort_by"


def ray_objects_job(spark, table: pa.Table) -> pa.Table:
    """RayDP's own data path: the 4 parts as Arrow IPC bytes in Ray's object store → a Spark
    DataFrame read by the executor (``ray_dataset_to_spark_dataframe``), ``orderBy``, back into
    the object store (``spark_dataframe_to_ray_dataset``), read here as Arrow. The rows never
    pass through the Spark driver — what a multi-node coordinator would use."""
    import ray
    from raydp.spark import (
        ray_dataset_to_spark_dataframe,
        release_spark_recoverable,
        spark_dataframe_to_ray_dataset,
    )

    n = table.num_rows
    cuts = [n * i // _PARTS for i in range(_PARTS + 1)]
    refs = []
    for i in range(_PARTS):
        sink = pa.BufferOutputStream()
        part = table.slice(cuts[i], cuts[i + 1] - cuts[i])
        with pa.ipc.new_stream(sink, part.schema) as w:
            w.write_table(part)
        refs.append(ray.put(sink.getvalue().to_pybytes()))
    df = ray_dataset_to_spark_dataframe(spark, table.schema, refs).orderBy("key", "ts")
    ds = spark_dataframe_to_ray_dataset(df)
    try:
        parts = ray.get(ds.to_arrow_refs(), timeout=300)
    finally:
        release_spark_recoverable(df)
    return pa.concat_tables(parts)


def first_job(spark) -> None:
    assert spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"] == 499_500


def parquet_job(spark, table: pa.Table) -> pa.Table:
    """The store path, any mode: the 4 parts written as Parquet files (as actors would stage
    them in the checkpoint store), ``spark.read.parquet`` → ``orderBy`` → ``write.parquet``,
    read back with pyarrow. Writing and reading the files are in the time."""
    import tempfile

    import pyarrow.parquet as pq

    n = table.num_rows
    cuts = [n * i // _PARTS for i in range(_PARTS + 1)]
    with tempfile.TemporaryDirectory(prefix="bench_spark_choice_") as tmp:
        os.mkdir(f"{tmp}/in")
        for i in range(_PARTS):
            pq.write_table(table.slice(cuts[i], cuts[i + 1] - cuts[i]), f"{tmp}/in/part-{i}.parquet")
        spark.read.parquet(f"{tmp}/in").orderBy("key", "ts").write.parquet(f"{tmp}/out")
        # Spark's range-partitioned output files: part-00000… in key order.
        files = sorted(f for f in os.listdir(f"{tmp}/out") if f.endswith(".parquet"))
        return pa.concat_tables([pq.read_table(f"{tmp}/out/{f}") for f in files])


def _job(spark, table: pa.Table, collect: str):
    if collect == "ray-objects":
        return ray_objects_job(spark, table)
    if collect == "parquet":
        return parquet_job(spark, table)
    return sorted_job(spark, table, collect)


def run_jobs(spark, sizes: list[int], runs: int, paths: list[str]) -> dict:
    out = {}
    for rows in sizes:
        table = make_table(rows)
        expected = table.sort_by([("key", "ascending"), ("ts", "ascending")])
        for collect in paths:
            _check(_job(spark, table, collect), expected, collect)  # warm-up, verified
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                res = _job(spark, table, collect)
                times.append(time.perf_counter() - t)
                _check(res, expected, collect)
            out[f"{rows}_{collect}"] = {"rows": rows, "collect": collect,
                                        "p50_s": round(float(np.median(times)), 4),
                                        "min_s": round(min(times), 4), "max_s": round(max(times), 4),
                                        "runs_s": [round(x, 4) for x in times]}
            print(f"  {rows:>9,} rows → {collect:6}: p50 {out[f'{rows}_{collect}']['p50_s']:.3f} s "
                  f"(min {min(times):.3f}, max {max(times):.3f})", flush=True)
    return out


def _local_session():
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master("local[1]").appName("bench_spark_choice")
    for k, v in _SPARK_CONF.items():
        b = b.config(k, v)
    return b.getOrCreate()


def _stop_py4j_jvm() -> None:
    """``spark.stop()`` leaves pyspark's gateway JVM running until Python exits; stop it."""
    from pyspark import SparkContext

    gw = SparkContext._gateway
    if gw is None:
        return
    proc = getattr(gw, "proc", None)
    try:
        gw.shutdown()
    except Exception:  # noqa: BLE001 - best effort, the JVM is terminated below anyway
        pass
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None


# ---------------------------------------------------------------------------- modes
def mode_local(args) -> dict:
    t0 = time.perf_counter()
    import pyspark  # noqa: F401

    t_import = time.perf_counter()
    spark = _local_session()
    spark.sparkContext.setLogLevel("ERROR")
    t_session = time.perf_counter()
    try:
        first_job(spark)
        t_first = time.perf_counter()
        cold = {"import_s": t_import - t0, "session_s": t_session - t_import,
                "first_job_s": t_first - t_session, "total_s": t_first - t0}
        print(f"cold start: {fmt(cold)}", flush=True)
        idle = memory_report()
        jobs = run_jobs(spark, args.sizes, args.runs, args.paths)
        mem = memory_report()
    finally:
        spark.stop()
        _stop_py4j_jvm()
    return {"cold": cold, "jobs": jobs, "memory": mem, "memory_after_first_job": idle,
            "spark": spark.version}


def _ray_init() -> tuple[dict, dict]:
    t0 = time.perf_counter()
    import ray

    t_import = time.perf_counter()
    # address='local': always a new private cluster, never someone else's `ray start` one.
    ray.init(address="local", num_cpus=_RAY_CPUS, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    t_init = time.perf_counter()
    time.sleep(2)  # let the prestarted workers settle before measuring Ray's own footprint
    return ({"ray_import_s": t_import - t0, "ray_init_s": t_init - t_import}, memory_report())


def mode_local_actor(args) -> dict:
    import ray

    ray_cold, ray_mem = _ray_init()
    print(f"ray: {fmt(ray_cold)}; Ray alone {ray_mem['total']}", flush=True)

    @ray.remote(num_cpus=1)
    class SparkDriver:
        """The coordinator's shape: the Spark driver lives in a detached actor on the head."""

        def __init__(self):
            t0 = time.perf_counter()
            import pyspark  # noqa: F401

            t_import = time.perf_counter()
            self.spark = _local_session()
            self.spark.sparkContext.setLogLevel("ERROR")
            self.cold = {"import_s": t_import - t0, "session_s": time.perf_counter() - t_import}

        def first(self) -> str:
            t = time.perf_counter()
            first_job(self.spark)
            self.cold["first_job_s"] = time.perf_counter() - t
            return json.dumps(self.cold)

        def jobs(self, sizes, runs, paths) -> str:
            return json.dumps({"jobs": run_jobs(self.spark, sizes, runs, paths), "pid": os.getpid(),
                               "spark": self.spark.version})

        def stop(self) -> None:
            self.spark.stop()
            _stop_py4j_jvm()

    t0 = time.perf_counter()
    actor = SparkDriver.options(name="bench_spark_driver", namespace="bench_spark_choice",
                                lifetime="detached").remote()
    inner = json.loads(ray.get(actor.first.remote(), timeout=300))
    t_first = time.perf_counter()
    cold = {**ray_cold, "actor_to_first_job_s": t_first - t0, **inner}
    print(f"cold start: {fmt(cold)}", flush=True)
    idle = memory_report()
    try:
        res = json.loads(ray.get(actor.jobs.remote(args.sizes, args.runs, args.paths), timeout=args.timeout))
        mem = memory_report()
    finally:
        try:
            ray.get(actor.stop.remote(), timeout=60)
        finally:
            ray.kill(actor)  # detached: nothing else would end it
            ray.shutdown()
    return {"cold": cold, "jobs": res["jobs"], "memory": mem, "memory_after_first_job": idle,
            "ray_only_memory": ray_mem,
            "spark": res["spark"]}


def mode_raydp(args) -> dict:
    import ray

    ray_cold, ray_mem = _ray_init()
    print(f"ray: {fmt(ray_cold)}; Ray alone {ray_mem['total']}", flush=True)
    t0 = time.perf_counter()
    import raydp

    t_import = time.perf_counter()
    spark = None
    try:
        conf = dict(_SPARK_CONF)
        if not args.no_jdk17_opens:
            for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions",
                        "spark.ray.raydp_app_master.extraJavaOptions"):
                conf[key] = _JDK17_OPENS
        spark = raydp.init_spark("bench_spark_choice", num_executors=1, executor_cores=1,
                                 executor_memory="512M", configs=conf)
        spark.sparkContext.setLogLevel("ERROR")
        t_session = time.perf_counter()
        first_job(spark)
        t_first = time.perf_counter()
        cold = {**ray_cold, "import_s": t_import - t0, "session_s": t_session - t_import,
                "first_job_s": t_first - t_session, "total_s_excl_ray": t_first - t0}
        print(f"cold start: {fmt(cold)}", flush=True)
        idle = memory_report()
        jobs = run_jobs(spark, args.sizes, args.runs, args.paths)
        mem = memory_report()
        version = spark.version
    finally:
        try:
            raydp.stop_spark()
        finally:
            _stop_py4j_jvm()
            ray.shutdown()
    return {"cold": cold, "jobs": jobs, "memory": mem, "memory_after_first_job": idle,
            "ray_only_memory": ray_mem, "spark": version}


# ---------------------------------------------------------------------------- main
def fmt(d: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in d.items())


def versions() -> dict:
    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "-"

    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              timeout=30).stderr.splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        java = "-"
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"python": platform.python_version(), "executable": sys.executable, "java": java,
            "cpu": cpu, "cores": os.cpu_count(),
            **{p: ver(p) for p in ("pyspark", "ray", "raydp", "pyarrow", "pandas", "numpy", "py4j")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("local", "local-actor", "raydp"), required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--paths", nargs="+", default=["arrow", "pandas"],
                    choices=("arrow", "pandas", "parquet", "ray-objects"),
                    help="data paths to time: the driver's createDataFrame + toArrow / toPandas "
                         "(the issue's job), Parquet files, RayDP's object store (raydp mode)")
    ap.add_argument("--no-jdk17-opens", action="store_true",
                    help="raydp mode: leave out RayDP's documented Java 17 --add-opens options")
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory (every mode)")
    ap.add_argument("--timeout", type=float, default=900.0, help="watchdog for the whole run (s)")
    args = ap.parse_args()
    if "ray-objects" in args.paths and args.mode != "raydp":
        ap.error("--paths ray-objects needs --mode raydp")

    _SPARK_CONF["spark.driver.memory"] = args.driver_memory
    done = start_watchdog(args.timeout)
    info = versions()
    load0 = os.getloadavg()[0]
    print(f"mode {args.mode}: {fmt(info)}; load {load0:.2f}", flush=True)
    run = {"local": mode_local, "local-actor": mode_local_actor, "raydp": mode_raydp}[args.mode]
    try:
        res = run(args)
    finally:
        # Everything started here must be gone (JVMs, Ray daemons, workers); bounded wait.
        deadline = time.monotonic() + 20
        while descendants(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.25)
        left = [f"{p} {_cmdline(p)[:80]}" for p in descendants(os.getpid())]
        if left:
            print(f"leftover processes after cleanup (killed): {left}", flush=True)
            kill_tree(os.getpid())
    done.set()
    res.update(mode=args.mode, versions=info, spark_conf=_SPARK_CONF,
               raydp_jdk17_opens=args.mode == "raydp" and not args.no_jdk17_opens, load_before=round(load0, 2),
               leftover_processes=len(left),
               load_after=round(os.getloadavg()[0], 2),
               process_wall_s=round(time.perf_counter() - T_PROCESS, 1))
    print(f"warm jobs (p50 of {args.runs}; min–max):")
    for j in res["jobs"].values():
        print(f"  {j['rows']:>9,} rows → {j['collect']:6}  p50 {j['p50_s']:.3f} s  "
              f"({j['min_s']:.3f}–{j['max_s']:.3f})")
    print("memory after the jobs (MB):")
    for role, m in res["memory"]["roles"].items():
        print(f"  {role:44} procs {m['procs']:>2}  RSS {m['rss_mb']:>7.1f}  PSS {m['pss_mb']:>7.1f}")
    t = res["memory"]["total"]
    print(f"  {'TOTAL':44} procs {t['procs']:>2}  RSS {t['rss_mb']:>7.1f}  PSS {t['pss_mb']:>7.1f}")
    for label, key in (("after the first job", "memory_after_first_job"), ("Ray alone", "ray_only_memory")):
        if key in res:
            t = res[key]["total"]
            print(f"  {'TOTAL ' + label:44} procs {t['procs']:>2}  RSS {t['rss_mb']:>7.1f}  "
                  f"PSS {t['pss_mb']:>7.1f}")
    print("BENCH_JSON " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
