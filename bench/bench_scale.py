"""The Delta mode's CPU per row per process: where each row's work is done, and how many
actors the cluster could feed before one process saturates a core (issue 20, item 4).

Run from the repository root (``RAY_TMPDIR`` set if other Ray clusters share the machine):

    .venv/bin/python bench/bench_scale.py                                    # every workload, 1,2,4 actors
    .venv/bin/python bench/bench_scale.py --workloads insert-agg,kafka-agg --actors 1,2
    .venv/bin/python bench/bench_scale.py --workloads kafka-nexmark --queries q20 --events 300k
    .venv/bin/python bench/bench_scale.py --nodes 3 --workloads insert-agg,kafka-agg --actors 2,4

Method (``/work/shared/DESIGN.md``, "Measuring the cluster on 2 cores"; ``bench/proc_cpu.py``):
the CPU time (user + system, every thread) of this process and of every process under it —
the local Ray this bench starts (gcs_server, raylet, workers), the database head, the reactor
actors, the checkpoint coordinator with its Spark JVM, the Tansu broker — is read before and
after each timed run, and grouped by kind. The head, actors and coordinator are found by pid
(``metrics()["database"]["head_pid"]``, ``metrics()["cluster"]["members"][i]["pid"]``, the
coordinator actor's ``ping()``); a process under one of them counts with it (the JVM), any
other process under this one is Ray's. Reported per run: CPU s per million rows per kind,
rows/s (wall), the busiest non-actor process and the **scale ceiling** = the actors' CPU per
row ÷ that process's CPU per row. The same SQL runs in this process on ``laminardb.open()``
(in memory) in the same bench; ``actors/embedded`` is the actors' CPU per row over its.
``--embedded-checkpoints off,10s`` adds a durable embedded database checkpointing every 10 s,
as the cluster's do (``finish()`` takes the last checkpoint inside the timing in both): the
like-for-like anchor for the issue's "≤ 1.5× the embedded engine, with checkpoints every 10 s".

Workloads (``--workloads``, comma-separated):

- ``insert-agg``: ``bench_engine.make_batches`` rows (1,000 symbols) by ``insert()`` →
  keyed 1 s tumble COUNT/SUM/AVG → FILE sink (Parquet, exactly once), durable database,
  checkpoints every 1 s; timed: every insert + ``finish()`` (the last checkpoint commits).
  ``--insert-paths direct,head`` runs it once with the rows sent to the actors
  (``cluster/direct_insert.py``, the default) and once through the database head.
  ``--global-phases actors,owners,head`` (insert-agg and kafka-agg) runs each with the
  closed windows merged on the key owners, who stage the sink's rows (the default), merged
  on the owners with the rows staged by the head (``actor_stages=False``), and merged by
  the head (``owner_merge=False``, as before): labels ``+head-stage`` and ``+head-merge``.
  ``merge-calls`` (label ``+merge-calls``): the owners merge and stage, but each close's
  merge is a call of its own to every owner (``fold_merges=False``, as before the merges
  rode with the owners' next batch call).
- ``kafka-agg``: the same rows as JSON in Tansu (2 partitions, produced before timing) →
  the same query → FILE sink, checkpoints every 1 s; timed: ``start()`` until every message
  is ingested, then ``flush()`` + ``finish()``.
- ``kafka-nexmark``: ``laminardb.nexmark.generate`` events as JSON in three topics (2
  partitions each) → Nexmark ``--queries`` (q3, q5, q8, q20 plan trees) → FILE sink,
  checkpoints every 10 s; timed as kafka-agg. With ``--global-phases actors,owners`` each
  tree runs twice: its root's rows staged by the actors for the sink (the default), and sent
  to the head, which stages them (``actor_stages=False``, label ``+head-stage``).
  ``head-snapshots`` (any workload, label ``+head-snapshots``): the head collects and writes
  the actors' checkpoint parts itself (``actor_snapshots=False``), as before they wrote them.
- ``ckpt-q20``: Nexmark events by ``insert()`` → q20 (join, filter) → FILE sink, checkpoints
  every 1 s and off (``checkpoint_interval = "off"``: WAL, one checkpoint at ``finish()``).
  ``--global-phases actors,head-snapshots`` runs each twice: the actors write their state
  parts into the checkpoint (the default), and the head collects and writes them.
- ``kafka-idle``: Kafka → ``--queries`` trees → FILE sink on empty topics, checkpoints every
  10 s, sampled for ``--idle-s`` seconds once started: each process's CPU s per *second* with
  nothing to read (the Kafka polls, the watchdog, the drainer, the checkpoints). A per-row
  figure above is this divided by the run's rows per second, plus the work per row.

Each run is a fresh database, dropped after it; a warm-up database first starts the
coordinator and its JVM and commits ``--warm-epochs`` small epochs, so the JVM has its epoch
path compiled as a long-running coordinator has (excluded). Before timing, the aggregate workloads warm every actor
on a throwaway source (``bench_cluster.warm_up``: numba kernels loaded); the Nexmark runs do
not (their sources are Kafka's), so their actor figures include loading the join kernels.
The embedded engine is warmed likewise on a throwaway connection. A run that fails is
recorded with its error, and the bench goes on (exit status 1). Results are verified before any figure is printed: the
cluster's committed sink equals the embedded engine's (every window exact; Nexmark by an
order-free digest). Ray starts here (``num_cpus`` = the most actors; heads and the
coordinator take none), the broker too; both are stopped at the end. ``--json out.json``
writes every figure; the last stdout line is ``BENCH_JSON {...}``.

``--nodes N`` (N > 1) starts ``ray.cluster_utils.Cluster`` instead: a head node with no CPUs
(database heads and the coordinator are pinned there; the client runs there, as a driver
does) and N-1 worker nodes of ceil(most actors / (N-1)) CPUs, so every reactor actor
(``num_cpus=1``) lands on a worker node. The nodes share this machine, so a worker-node actor
could read the head's shared-memory ring; a worker setup hook makes it unreadable there, and
batches go as Ray objects pulled from the head node's object store, as between machines
(``--shared-shm`` keeps the ring). Each node's Ray processes (raylet, gcs_server, agents)
are known by pid, so every process is also counted on its node: the nearest such ancestor
(``proc_cpu.locate``); the broker is "outside". Per run: actors per node and CPU per kind per node.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import proc_cpu  # noqa: E402
from bench_cluster import verify as verify_windows  # noqa: E402
from bench_cluster import warm_up  # noqa: E402
from bench_delta import connect, read_sink, sink_ddl  # noqa: E402
from bench_engine import AGG_DDL, SOURCE_DDL, load, machine_info, make_batches  # noqa: E402
from bench_nexmark_cluster import _count, _digest  # noqa: E402

#: ``--global-phases``: label suffix and database config of each
_PHASES = {"actors": ("", {}), "owners": ("+head-stage", {"actor_stages": False}),
           "head": ("+head-merge", {"owner_merge": False}),
           "merge-calls": ("+merge-calls", {"fold_merges": False}),
           "head-snapshots": ("+head-snapshots", {"actor_snapshots": False})}
WORKLOADS = ("insert-agg", "kafka-agg", "kafka-nexmark", "ckpt-q20", "kafka-subs", "kafka-idle", "subs-alone")
#: subs-alone: a stateless query over the kafka-agg topic (about half its rows pass)
FILTER_DDL = "CREATE STREAM hot AS SELECT ts, sym, price * 2 AS p2 FROM trades WHERE price > 50"
NEXMARK_TREES = ("q3", "q5", "q8", "q20")
PARTITIONS = 2
_WARM_EVENTS = 20_000
_INGEST_TIMEOUT_S = 600.0
_KAFKA_OPTS = "format = 'json', offset_reset = 'earliest'"
# the coordinator retires (and its JVM stops) when no database is registered 30 s after a drop
# (``coordinator_linger_s``); between runs (the embedded run, waiting for freed CPUs) that
# happens, and the next run would pay a JVM start (~10 CPU s). Ray stops at the end anyway.
KEEP_COORDINATOR = {"coordinator_linger_s": 24 * 3600}


# ---------------------------------------------------------------------------- processes
def checkpoints(db) -> int:
    """Checkpoint epochs the database completed so far (the head's count)."""
    return (db.metrics().get("checkpoints") or {}).get("checkpoints") or 0


def roles(db, broker_pid: int | None) -> dict[int, str]:
    """pid → kind for the processes this bench can name (the rest are Ray's)."""
    import ray

    from laminardb.checkpoint.spark_coordinator import COORDINATOR_NAME, NAMESPACE

    out = {os.getpid(): proc_cpu.CLIENT}
    if db is not None:
        m = db.metrics()
        out[m["database"]["head_pid"]] = proc_cpu.HEAD
        for mem in m["cluster"]["members"]:
            out[mem["pid"]] = proc_cpu.ACTOR
    try:
        coord = ray.get_actor(COORDINATOR_NAME, namespace=NAMESPACE)
        out[ray.get(coord.ping.remote(), timeout=30)] = proc_cpu.COORDINATOR
    except ValueError:
        pass  # no coordinated database yet: no coordinator
    if broker_pid:
        out[broker_pid] = proc_cpu.BROKER
    return out


class Metered:
    """``with Metered(db, broker_pid, nodes) as m: …`` — the run's CPU per process; ``m.wall_s``."""

    def __init__(self, db, broker_pid: int | None, nodes: RayNodes) -> None:
        self.db, self.broker_pid, self.nodes = db, broker_pid, nodes

    def __enter__(self) -> Metered:
        self.roles = roles(self.db, self.broker_pid)
        self.placement = self.nodes.placement(self.db)
        self.epochs = -checkpoints(self.db)
        self.actor_work = actor_work(self.db)
        self.coordinator_restarted = None
        gc.collect()
        self.load = [load()]
        self.before = proc_cpu.sample()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self.t0
        self.after = proc_cpu.sample()
        self.load.append(load())
        if exc[0] is None:
            self.epochs += checkpoints(self.db)
            self.actor_work = {k: v - self.actor_work[k] for k, v in actor_work(self.db).items()}
            after = roles(self.db, self.broker_pid)
            self.coordinator_restarted = _pids(after, proc_cpu.COORDINATOR) != _pids(self.roles, proc_cpu.COORDINATOR)
            self.roles.update(after)  # actors started mid-run (a recovery) are named too

    def summary(self, rows: int, embedded: dict | None) -> dict:
        s = proc_cpu.summarize(rows, self.wall_s, proc_cpu.used(self.before, self.after), self.roles,
                               embedded and embedded["cpu_s"], embedded and embedded["rows"],
                               node_roots=self.nodes.roots(self.broker_pid))
        s["load"] = self.load
        s["nodes"], s["placement"] = self.nodes.count, self.placement
        s["coordinator_restarted"] = self.coordinator_restarted  # then its JVM's start is in the figures
        s["epochs"] = self.epochs  # checkpoints in the run, the one finish() takes included
        s["coordinator_cpu_s_per_epoch"] = s["cpu_s"][proc_cpu.COORDINATOR] / self.epochs if self.epochs > 0 else None
        # the actors' CPU per M rows by what they did: reading sources (fetch and decode),
        # running batches and tree steps, and the rest (Ray's work per call, Kafka's IO threads)
        split = {k: v / rows * 1e6 for k, v in self.actor_work.items()}
        split["other"] = s["cpu_s_per_mrow"][proc_cpu.ACTOR] - sum(split.values())
        s["actor_split"] = split
        return s


@contextmanager
def polls_timed():
    """The CPU seconds this process's Kafka sources spend in ``poll`` meanwhile (fetch and
    decode, as an actor's ``poll_cpu_s`` counts them), in the list it yields."""
    import threading

    from laminardb.connectors.kafka import KafkaSource

    total, poll, lock = [0.0], KafkaSource.poll, threading.Lock()

    def timed(self, timeout_ms: int = 100):  # each source polls on a thread of its own
        c0 = time.thread_time()
        try:
            return poll(self, timeout_ms)
        finally:
            with lock:
                total[0] += time.thread_time() - c0

    KafkaSource.poll = timed  # type: ignore[method-assign]
    try:
        yield total
    finally:
        KafkaSource.poll = poll  # type: ignore[method-assign]


def actor_work(db) -> dict[str, float]:
    """CPU s the actors have spent reading sources and running batches, summed over them."""
    c = db.metrics().get("cluster", {})
    return {"poll": sum(v or 0.0 for v in c.get("poll_cpu_s_per_actor") or []),
            "batches": sum(v or 0.0 for v in c.get("cpu_s_per_actor") or [])}


def _pids(who: dict[int, str], kind: str) -> set[int]:
    return {pid for pid, k in who.items() if k == kind}


def idle_baseline(seconds: float, db=None, broker_pid: int | None = None) -> dict[str, float]:
    """CPU s per second of each kind over ``seconds``: with no database running (Ray, the
    coordinator's JVM), the fixed cost a run pays per second of wall time, whatever its rows;
    with ``db``, also what that database's processes spend meanwhile (``kafka-idle``)."""
    who = roles(db, broker_pid)
    before = proc_cpu.sample()
    time.sleep(seconds)
    procs = proc_cpu.used(before, proc_cpu.sample())
    kinds = proc_cpu.classify(procs, who)
    out = {k: 0.0 for k in proc_cpu.KINDS}
    for p in procs:
        out[kinds[p.pid]] += p.cpu_s / seconds
    return out


def embedded_cpu(run: Callable[[], object]) -> tuple[float, float, object]:
    """(process CPU s, wall s, result) of ``run()`` on the embedded engine in this process."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = run()
    return time.process_time() - c0, time.perf_counter() - t0, out


def read_any_sink(path: Path) -> pa.Table | None:
    """A FILE sink's rows: one Parquet file (embedded, in memory) or a directory of committed parts."""
    if path.is_file():
        return pq.read_table(path)
    return read_sink(path)


def wait_ingested(db, rows: int, what: str) -> None:
    """Until ``rows`` are ingested, asking twice a second: a Delta head answers each
    ``metrics()`` with a few ms of CPU (it asks the actors), and at 10 reads a second that
    was 0.06–0.1 of the 0.83–0.87 CPU s per M events the head spent on Kafka → q20."""
    deadline = time.monotonic() + _INGEST_TIMEOUT_S
    while (n := db.metrics()["events_ingested"]) < rows:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {n:,} of {rows:,} rows ingested after {_INGEST_TIMEOUT_S:.0f} s")
        time.sleep(0.5)


# ---------------------------------------------------------------------------- Ray nodes
_OFF_HEAD = "LAMINARDB_BENCH_OFF_HEAD"  # set in the worker nodes' raylets (and so their workers)


def _no_ring_off_head() -> None:
    """Every Ray worker's setup hook: on a worker node, the head's shared-memory ring is
    unreadable, as it is on another machine — so batches travel as Ray objects, pulled
    from the head node's object store, as in a real cluster (``shm_ring.py``)."""
    if os.environ.get(_OFF_HEAD):
        from laminardb.cluster.shm_ring import ShmReader

        ShmReader.can_read = lambda self, path: False


class RayNodes:
    """Ray for the bench: ``ray.init`` (one node), or ``ray.cluster_utils.Cluster`` with a
    head node of no CPUs (database heads, the coordinator) and ``count - 1`` worker nodes
    sharing ``cpus``, where the reactor actors (``num_cpus=1``) must land."""

    def __init__(self, count: int, cpus: int, shared_shm: bool) -> None:
        import ray

        self.count, self.cluster = count, None
        if count == 1:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
            return
        from ray.cluster_utils import Cluster

        store = 256 << 20
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": store})
        env = {} if shared_shm else {_OFF_HEAD: "1"}
        per_worker = -(-cpus // (count - 1))
        try:
            self.workers = [self.cluster.add_node(num_cpus=per_worker, object_store_memory=store, env_vars=env)
                            for _ in range(count - 1)]
            self.cluster.wait_for_nodes()
            if _no_ring_off_head.__module__ != "__main__":  # imported (a test): workers cannot import bench/
                ray.cloudpickle.register_pickle_by_value(sys.modules[_no_ring_off_head.__module__])
            ray.init(address=self.cluster.address, log_to_driver=False, configure_logging=False,
                     runtime_env=None if shared_shm else {"worker_process_setup_hook": _no_ring_off_head})
        except BaseException:
            self.shutdown()
            raise

    def names(self) -> dict[str, str]:
        """Ray node id → the bench's name for it (head, worker1, …)."""
        if self.cluster is None:
            import ray

            return {ray.get_runtime_context().get_node_id(): "head"}
        out = {self.cluster.head_node.node_id: "head"}
        out.update({w.node_id: f"worker{i}" for i, w in enumerate(self.workers, 1)})
        return out

    def roots(self, broker_pid: int | None) -> dict[int, str]:
        """pid → node for ``proc_cpu.locate``: each node's own processes, the client on the
        head (where a driver runs), the broker outside Ray."""
        out = {os.getpid(): "head"}
        if self.cluster is not None:
            names = self.names()
            for node in self.cluster.list_all_nodes():
                for infos in node.all_processes.values():
                    out.update({i.process.pid: names[node.node_id] for i in infos})
        if broker_pid:
            out[broker_pid] = proc_cpu.OUTSIDE
        return out

    def placement(self, db) -> dict[str, int]:
        """Node name → actors of ``db`` on it."""
        names, out = self.names(), {}
        for m in db.metrics()["cluster"]["members"]:
            name = names.get(m["node_id"], m["node_id"][:8])
            out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()


# ---------------------------------------------------------------------------- Kafka
class Broker:
    """One Tansu broker for the bench (``tests/_services/kafka.py``), topics made once."""

    def __init__(self) -> None:
        from tests._services.kafka import start_kafka_broker

        self.b = start_kafka_broker()
        self.bootstrap, self.pid = self.b.bootstrap, self.b.proc.pid
        self.topics: dict[str, int] = {}

    def stop(self) -> None:
        self.b.stop()


def produce_agg(broker: Broker, rows: int, batch_rows: int) -> tuple[str, int]:
    """``bench_spark.make_data`` rows (with its end marker) as JSON; → (topic, messages)."""
    import bench_spark

    topic = f"trades-{rows}"
    if topic not in broker.topics:
        data = bench_spark.make_data(rows, batch_rows)
        bench_spark.produce(broker.bootstrap, topic, data, PARTITIONS)
        broker.topics[topic] = sum(b.num_rows for b in data) + PARTITIONS - 1
    return topic, broker.topics[topic]


def produce_nexmark(broker: Broker, events: int, batch_events: int) -> tuple[str, int]:
    """Nexmark's three streams as JSON in ``<prefix>-person|auction|bid``; → (prefix, events)."""
    import bench_spark

    from laminardb.nexmark import generate

    prefix = f"nx-{events}"
    if prefix not in broker.topics:
        parts: dict[str, list[pa.RecordBatch]] = {}
        for stream, batch in generate(events, seed=3, batch_events=batch_events):
            parts.setdefault(stream, []).append(batch)
        for stream, batches in parts.items():
            bench_spark.produce(broker.bootstrap, f"{prefix}-{stream}", batches, PARTITIONS, end_markers=False)
        broker.topics[prefix] = sum(b.num_rows for bs in parts.values() for b in bs)
    return prefix, broker.topics[prefix]


def nexmark_kafka_ddl(bootstrap: str, prefix: str) -> str:
    from laminardb.nexmark import SOURCES_DDL

    out = []
    for stmt in (s.strip() for s in SOURCES_DDL.split(";") if s.strip()):
        name = stmt.split()[2]
        out.append(f"{stmt} FROM KAFKA (brokers = '{bootstrap}', topic = '{prefix}-{name}', {_KAFKA_OPTS})")
    return ";\n".join(out)


# ---------------------------------------------------------------------------- workloads
class Bench:
    def __init__(self, args, root: Path, nodes: RayNodes) -> None:
        self.args, self.root, self.nodes = args, root, nodes
        self.broker: Broker | None = None
        self.results: list[dict] = []
        self.idle_pipelines: list[dict] = []  # kafka-idle: CPU s per second, nothing to read
        self._embedded: dict[str, dict] = {}
        self._n = 0

    def kafka(self) -> Broker:
        if self.broker is None:
            self.broker = Broker()
        return self.broker

    def _name(self, label: str) -> str:
        self._n += 1
        return f"scale-{label}-{self._n}"

    def _record(self, workload: str, actors: int, m: Metered, rows: int, embedded: dict, **extra) -> dict:
        r = {"workload": workload, "actors": actors, "nodes": self.nodes.count, **extra, **m.summary(rows, embedded)}
        if embedded:  # the actors' CPU per row over each embedded anchor (--embedded-checkpoints)
            r["actors_over_embedded_by_checkpoints"] = {
                iv: r["cpu_s_per_mrow"][proc_cpu.ACTOR] / e for iv, e in embedded["cpu_s_per_mrow_by_checkpoints"].items()
                if e > 0}
        self.results.append(r)
        print_row(r)
        return r

    def _cluster_run(self, label: str, actors: int, config: dict, setup: Callable, drive: Callable,
                     stream: str, subscribe: bool = False, readers: int = 0,
                     own_connections: bool = False) -> tuple[Metered, pa.Table]:
        """A fresh database: ``setup(db)`` (DDL, warm-up), a FILE sink on ``stream`` (or with
        ``subscribe`` a subscriber), then ``drive(db)`` metered; the committed sink's (or the
        subscriber's) rows; the database dropped. ``readers``: that many more subscribers of
        ``stream``, read continuously by callbacks in this process while the run is metered;
        each must end with the sink's rows (``self.reader_rows``). They share ``db``'s one
        reader (a head call per read for all), or with ``own_connections`` each has a
        connection of its own (a head call per read each, as separate client processes do)."""
        import laminardb

        name = self._name(label)
        out = self.root / "sinks" / name
        db = connect(name, self.root, actors, **{**KEEP_COORDINATOR, **config})
        got: list[list[pa.RecordBatch]] = [[] for _ in range(readers)]
        callbacks = []
        conns = []
        try:
            setup(db, True)
            sub = db.subscribe_stream(stream, history_rows=None) if subscribe else None
            if sub is None:
                db.execute(sink_ddl("out", stream, out))
            if own_connections:
                conns = [laminardb.connect("ray://auto", database=name) for _ in range(readers)]
            callbacks = [(conns[i] if conns else db).subscribe_callback(stream, got[i].append) for i in range(readers)]
            with Metered(db, self.broker.pid if self.broker else None, self.nodes) as m:
                drive(db)
                sink = read_any_sink(out) if sub is None else sub.to_arrow()
                want = 0 if sink is None else sink.num_rows
                deadline = time.monotonic() + 60  # the callbacks' last batches, still metered
                while any(sum(b.num_rows for b in g) < want for g in got) and time.monotonic() < deadline:
                    time.sleep(0.01)
        finally:
            for cb in callbacks:
                cb.cancel()
            for conn in conns:
                conn.close()
            db.drop_database()
            shutil.rmtree(out, ignore_errors=True)
        assert sink is not None, f"{label}, {actors} actor(s): the FILE sink committed nothing"
        self.reader_rows = [pa.Table.from_batches(g, schema=sink.schema) if g else sink.schema.empty_table()
                            for g in got]
        return m, sink

    def _embedded_run(self, key: str, setup: Callable, drive: Callable, stream: str, rows: int,
                      subscribe: bool = False, warm: Callable | None = None) -> dict:
        """The same SQL on ``laminardb.open()`` in this process, once per key: CPU s and output
        rows. ``warm(db)`` runs first on a throwaway connection (numba kernels loaded here)."""
        if key in self._embedded:
            return self._embedded[key]
        import laminardb

        if warm is not None:
            with laminardb.open() as w:
                warm(w)

        e: dict = {}
        for interval in self.args.embedded_checkpoints:
            # in memory ("off"), or a durable database checkpointing every `interval`, as the
            # cluster's do: its state writes are then in the anchor too
            where = ":memory:" if interval == "off" else str(self.root / "embedded" / f"{key}-{interval}")
            out = self.root / "sinks" / f"embedded-{key}-{interval}.parquet"
            db = laminardb.open(where, config=None if interval == "off" else {"checkpoint_interval": interval})
            setup(db, False)
            sub = db.subscribe_stream(stream, history_rows=None) if subscribe else None
            if sub is None:
                db.execute(sink_ddl("out", stream, out))
            with polls_timed() as poll_s:
                cpu, wall, _ = embedded_cpu(lambda db=db: drive(db))
            result = None if sub is None else sub.to_arrow()
            db.close()  # drive() ends with finish(): a durable one took its last checkpoint in the timing
            if sub is None:
                result = read_any_sink(out)  # the sink's file is complete once closed
            print(f"    embedded {key}, checkpoints {interval}: {cpu / rows * 1e6:.3f} CPU s per M rows "
                  f"(reading Kafka {poll_s[0] / rows * 1e6:.3f}), {rows / wall:,.0f} rows/s")
            if not e:  # the first is the anchor: its rows are the ones compared, its CPU the ratio's
                e = {"cpu_s": cpu, "wall_s": wall, "rows": rows, "sink": result, "poll_cpu_s": poll_s[0],
                     "cpu_s_per_mrow_by_checkpoints": {}}
            e["cpu_s_per_mrow_by_checkpoints"][interval] = cpu / rows * 1e6
        self._embedded[key] = e
        return e

    # -- 1. inserts → keyed tumble → FILE sink ------------------------------------------------
    def insert_agg(self, actors: int) -> None:
        a = self.args
        if not hasattr(self, "_agg_batches"):
            self._agg_batches = make_batches(a.rows, a.batch_rows)
            self._warm = make_batches(4 * a.batch_rows, a.batch_rows, seed=1)
        batches, rows = self._agg_batches, a.rows

        def setup(db, cluster: bool) -> None:
            if cluster:  # numba kernels loaded in every actor, on a source dropped before timing
                warm_up(db, self._warm)
            db.execute(SOURCE_DDL)
            db.execute(AGG_DDL)

        def drive(db) -> None:
            for b in batches:
                db.insert("trades", b)
            db.finish()

        emb = self._embedded_run("insert-agg", setup, drive, "agg", rows, warm=lambda w: warm_up(w, self._warm))
        for path in a.insert_paths.split(","):  # rows through the actors, or through the head
            for phase in a.global_phases.split(","):
                label = ("insert-agg" if path == "direct" else f"insert-agg-{path}") + _PHASES[phase][0]
                config = {"checkpoint_interval": "1s", "coordinator": "spark", "direct_inserts": path == "direct",
                          **_PHASES[phase][1]}
                m, sink = self._cluster_run(label, actors, config, setup, drive, "agg")
                verify_windows(emb["sink"], sink, rows, f"{label}, {actors} actor(s)")
                self._record(label, actors, m, rows, emb, checkpoints="1s")

    # -- 2. Kafka → keyed tumble → FILE sink ---------------------------------------------------
    def kafka_agg(self, actors: int) -> None:
        a = self.args
        broker = self.kafka()
        topic, rows = produce_agg(broker, a.kafka_rows, a.batch_rows)
        setup, drive = self._kafka_rows_query(broker, topic, rows, AGG_DDL, "kafka-agg")
        emb = self._embedded_run("kafka-agg", setup, drive, "agg", rows, warm=lambda w: warm_up(w, self._warm))
        for phase in a.global_phases.split(","):
            label = "kafka-agg" + _PHASES[phase][0]
            m, sink = self._cluster_run(label, actors, {"checkpoint_interval": "1s", "coordinator": "spark",
                                                        **_PHASES[phase][1]}, setup, drive, "agg")
            verify_windows(emb["sink"], sink, int(pc.sum(emb["sink"]["n"]).as_py()), f"{label}, {actors} actor(s)")
            self._record(label, actors, m, rows, emb, checkpoints="1s", partitions=PARTITIONS)

    def _kafka_rows_query(self, broker: Broker, topic: str, rows: int, ddl: str, label: str) -> tuple[Callable, Callable]:
        """``(setup, drive)`` of ``ddl`` over the kafka-agg topic (``produce_agg``): the source
        (a cluster's actors warmed up first) and the query; then start, every row ingested,
        flush, finish."""
        if not hasattr(self, "_warm"):
            self._warm = make_batches(4 * self.args.batch_rows, self.args.batch_rows, seed=1)

        def setup(db, cluster: bool) -> None:
            if cluster:  # numba kernels loaded in every actor, on a source dropped before timing
                warm_up(db, self._warm)
            db.execute(SOURCE_DDL + f" FROM KAFKA (brokers = '{broker.bootstrap}', topic = '{topic}', {_KAFKA_OPTS})")
            db.execute(ddl)

        def drive(db) -> None:
            db.start()
            wait_ingested(db, rows, label)
            db.flush(timeout_s=120)
            db.finish()

        return setup, drive

    @staticmethod
    def _kafka_query(broker: Broker, prefix: str, events: int, q: str,
                     exchanges: list | None = None) -> tuple[Callable, Callable]:
        """``(setup, drive)`` of Nexmark query ``q`` over the events in Kafka: the sources and
        the query; then start, every event ingested, flush, finish. ``exchanges[0]``: the
        run's ``plan_exchange`` counts (a cluster's plan tree), read before the finish;
        ``exchanges[1]``: seconds from ``start()`` until every event was ingested (to 0.5 s:
        ``wait_ingested`` asks twice a second) — the rows/s of the table also count the flush
        and the finish's checkpoint."""
        exchanges = exchanges if exchanges is not None else [None, None]
        from laminardb.nexmark import QUERIES

        def setup(db, cluster: bool) -> None:
            db.execute(nexmark_kafka_ddl(broker.bootstrap, prefix))
            db.execute(QUERIES[q].statement())

        def drive(db) -> None:
            t0 = time.perf_counter()
            db.start()
            wait_ingested(db, events, f"kafka {q}")
            exchanges[1] = time.perf_counter() - t0
            db.flush(timeout_s=120)
            # a plan tree's scheduling by the head (before finish() ends the query)
            exchanges[0] = db.metrics().get("cluster", {}).get("plan_exchange", {}).get(q)
            db.finish()

        return setup, drive

    # -- 3. Kafka → Nexmark trees → FILE sink --------------------------------------------------
    def kafka_nexmark(self, actors: int) -> None:

        a = self.args
        broker = self.kafka()
        prefix, events = produce_nexmark(broker, a.events, a.batch_rows)
        for q in a.queries:
            exchanges: list = [None, None]
            setup, drive = self._kafka_query(broker, prefix, events, q, exchanges)
            emb = self._embedded_run(f"kafka-{q}", setup, drive, q, events, warm=lambda w, q=q: warm_nexmark(w, q))
            if exchanges[1]:
                print(f"      embedded: every event ingested {exchanges[1]:.1f} s after start(): "
                      f"{events / exchanges[1]:,.0f} events/s", flush=True)
            # a tree has no global phase: "actors" (they stage the root's rows for the sink)
            # and "owners" (the head stages them) are the two places its output can go
            for phase in (p for p in a.global_phases.split(",") if p != "head"):
                label = f"kafka-nexmark {q}" + _PHASES[phase][0]
                m, sink = self._cluster_run(f"kafka-{q}", actors, {"checkpoint_interval": "10s", "coordinator": "spark",
                                                                   **_PHASES[phase][1]}, setup, drive, q)
                same = _digest(_concat(sink)) == _digest(_concat(emb["sink"]))
                assert same, f"{label}, {actors} actor(s): the sink differs from the embedded engine's"
                self._record(label, actors, m, events, emb, checkpoints="10s", partitions=PARTITIONS,
                             rows_out=sink.num_rows, exchange=exchanges[0], ingest_s=exchanges[1])
                print(f"      every event ingested {exchanges[1]:.1f} s after start(): "
                      f"{events / exchanges[1]:,.0f} events/s", flush=True)
                if exchanges[0]:
                    x = exchanges[0]
                    print(f"      head scheduling: {x['steps']:,} steps, {x['calls']:,} calls "
                          f"({x['calls'] / events * 1e6:,.0f} per M events), {x['messages']:,} messages, "
                          f"root rows {x['root_rows']:,} decoded, {x['root_rows_staged']:,} staged by the actors")

    # -- 4. q20 by inserts: checkpoints 1 s against off ---------------------------------------
    def ckpt_q20(self, actors: int) -> None:
        from laminardb.nexmark import QUERIES, SOURCES_DDL, generate

        a = self.args
        if not hasattr(self, "_q20_batches"):
            self._q20_batches = list(generate(a.q20_events, seed=3, batch_events=a.batch_rows))
        batches, events = self._q20_batches, a.q20_events

        def setup(db, cluster: bool) -> None:
            db.execute(SOURCES_DDL)
            db.execute(QUERIES["q20"].statement())

        def drive(db) -> None:
            for stream, b in batches:
                db.insert(stream, b)
            db.finish()

        # a subscriber, not a FILE sink: with checkpoints off, the one checkpoint at finish()
        # stages every output row in one Spark job, which overflows the coordinator JVM's 512 MB
        # heap (java.lang.OutOfMemoryError at 300k events) — and this compares state checkpoints
        emb = self._embedded_run("insert-q20", setup, drive, "q20", events, subscribe=True,
                                 warm=lambda w: warm_nexmark(w, "q20"))
        want = _digest(_concat(emb["sink"]))
        # where the state parts are written: by the actors (default), or by the head
        phases = [p for p in a.global_phases.split(",") if p in ("actors", "head-snapshots")] or ["actors"]
        for path in a.insert_paths.split(","):  # rows through the actors, or through the head
            for phase, interval in [(p, i) for p in phases for i in ("1s", "off")]:
                label = ("insert q20" if path == "direct" else f"insert q20 ({path})") + _PHASES[phase][0]
                m, sink = self._cluster_run(f"q20-{interval}-{path}", actors, {
                    "checkpoint_interval": interval, "coordinator": "spark", "direct_inserts": path == "direct",
                    **_PHASES[phase][1]}, setup, drive, "q20", subscribe=True)
                assert _digest(_concat(sink)) == want, f"{label} {interval}, {actors} actor(s): output differs from embedded"
                self._record(label, actors, m, events, emb, checkpoints=interval, rows_out=sink.num_rows)


    # -- 5. Kafka → q20 → FILE sink, with 0, 1, 4 … subscribers: the head's fan-out cost ----
    def kafka_subs(self, actors: int) -> None:
        """What each subscriber adds to the head's CPU per row, against the actors' CPU per
        row (issue 20: subscribers read from the actors unless the head's fan-out costs < 2 %
        of the actors'). q20 emits the most per event of the Nexmark trees (0.16 rows, ~690
        B), so its fan-out is the dearest; every subscriber must end with the sink's rows."""
        a = self.args
        broker = self.kafka()
        prefix, events = produce_nexmark(broker, a.events, a.batch_rows)
        setup, drive = self._kafka_query(broker, prefix, events, "q20")
        emb = self._embedded_run("kafka-q20", setup, drive, "q20", events, warm=lambda w: warm_nexmark(w, "q20"))
        want = _digest(_concat(emb["sink"]))
        runs = {}
        for readers in a.subscribers:
            for own in (False, True) if readers > 1 else (False,):
                how = "own connections" if own else "one connection"
                m, sink = self._cluster_run(f"kafka-subs-{readers}{'-own' if own else ''}", actors,
                                            {"checkpoint_interval": "10s", "coordinator": "spark"}, setup, drive,
                                            "q20", readers=readers, own_connections=own)
                assert _digest(_concat(sink)) == want, f"kafka-subs {readers}: the sink differs from the embedded engine's"
                for i, t in enumerate(self.reader_rows):
                    assert t.num_rows == sink.num_rows and _digest(_concat(t)) == want, \
                        f"kafka-subs {readers}, {how}: subscriber {i} has {t.num_rows} of {sink.num_rows} rows"
                runs[(readers, own)] = self._record(
                    f"kafka-subs q20, {readers} sub{', own conns' if own else ''}", actors, m, events, emb,
                    checkpoints="10s", partitions=PARTITIONS, rows_out=sink.num_rows, subscribers=readers,
                    own_connections=own)
        if (0, False) in runs:
            base = runs[(0, False)]["cpu_s_per_mrow"]
            for (readers, own), r in runs.items():
                if readers:
                    c = r["cpu_s_per_mrow"]
                    per_sub = (c[proc_cpu.HEAD] - base[proc_cpu.HEAD]) / readers
                    r["head_per_subscriber"] = per_sub
                    r["head_per_subscriber_over_actors"] = per_sub / c[proc_cpu.ACTOR]
                    print(f"    fan-out, {readers} subscriber(s) on {'own connections' if own else 'one connection'}: "
                          f"the head +{per_sub:.3f} CPU s per M events per subscriber = "
                          f"{100 * per_sub / c[proc_cpu.ACTOR]:.1f} % of the actors' {c[proc_cpu.ACTOR]:.3f}; "
                          f"the client +{(c[proc_cpu.CLIENT] - base[proc_cpu.CLIENT]) / readers:.3f} per subscriber",
                          flush=True)

    # -- 7. Kafka → a filter, a keyed tumble, q20 → one subscriber alone: by reference or not --
    def subs_alone(self, actors: int) -> None:
        """What the head spends on rows that go to subscribers alone: handed on by reference
        (the actors keep them; the client fetches and decodes them), against decoded in the
        head and encoded again for the client (config ``rows_by_reference=False``, the path
        before), in one run. A stateless query (the most output per input row: every row it
        keeps reaches the head), a local-global tumble and a join tree."""
        a = self.args
        broker = self.kafka()
        topic, rows = produce_agg(broker, a.kafka_rows, a.batch_rows)
        prefix, events = produce_nexmark(broker, a.events, a.batch_rows)
        filter_query = self._kafka_rows_query(broker, topic, rows, FILTER_DDL, "subs-alone filter")
        tumble_query = self._kafka_rows_query(broker, topic, rows, AGG_DDL, "subs-alone tumble")
        cases = {"filter": (*filter_query, "hot", rows, lambda w: warm_up(w, self._warm)),
                 "tumble": (*tumble_query, "agg", rows, lambda w: warm_up(w, self._warm)),
                 "q20": (*self._kafka_query(broker, prefix, events, "q20"), "q20", events,
                         lambda w: warm_nexmark(w, "q20"))}
        for case, (setup, drive, stream, n, warm) in cases.items():
            if case not in a.subs_cases:
                continue
            emb = self._embedded_run(f"subs-alone-{case}", setup, drive, stream, n, subscribe=True, warm=warm)
            runs = {}
            for by_ref in a.by_reference:
                label = f"subs-alone {case}, {'by reference' if by_ref else 'through the head'}"
                m, got = self._cluster_run(f"subs-{case}-{int(by_ref)}", actors, {
                    "checkpoint_interval": "10s", "coordinator": "spark", "rows_by_reference": by_ref},
                    setup, drive, stream, subscribe=True)
                if case == "tumble":
                    verify_windows(emb["sink"], got, int(pc.sum(emb["sink"]["n"]).as_py()), label)
                else:
                    assert _digest(_concat(got)) == _digest(_concat(emb["sink"])), f"{label}: rows differ from embedded"
                runs[by_ref] = self._record(label, actors, m, n, emb, checkpoints="10s", partitions=PARTITIONS,
                                            rows_out=got.num_rows, by_reference=by_ref)
            if len(runs) == 2:
                c_on, c_off = runs[True]["cpu_s_per_mrow"], runs[False]["cpu_s_per_mrow"]
                print(f"    {case}: the head {c_off[proc_cpu.HEAD]:.3f} → {c_on[proc_cpu.HEAD]:.3f} CPU s per M rows "
                      f"({100 * c_off[proc_cpu.HEAD] / c_off[proc_cpu.ACTOR]:.1f} % → "
                      f"{100 * c_on[proc_cpu.HEAD] / c_on[proc_cpu.ACTOR]:.1f} % of the actors'); the client "
                      f"{c_off[proc_cpu.CLIENT]:.3f} → {c_on[proc_cpu.CLIENT]:.3f}", flush=True)

    # -- 6. Kafka → Nexmark trees with nothing to read: what each process spends per second ----
    def kafka_idle(self, actors: int) -> None:
        """CPU s per second of each process while Kafka → ``--queries`` pipelines run on empty
        topics, checkpoints every 10 s: the cost a pipeline pays per second, whatever its rows.
        A figure per row above is this cost divided by the rows per second, plus the work per
        row; this separates the two."""
        from laminardb.nexmark import QUERIES

        a = self.args
        broker = self.kafka()
        for q in a.queries:
            prefix = f"nx-idle-{q}-{actors}-{time.monotonic_ns()}"
            db = connect(self._name(f"idle-{q}"), self.root, actors,
                         **{**KEEP_COORDINATOR, "checkpoint_interval": "10s", "coordinator": "spark"})
            try:
                db.execute(nexmark_kafka_ddl(broker.bootstrap, prefix))
                db.execute(QUERIES[q].statement())
                db.execute(sink_ddl("out", q, self.root / "sinks" / prefix))
                db.start()
                time.sleep(3.0)  # the readers' consumers connected, the first polls made
                per_s = idle_baseline(a.idle_s, db, broker.pid)
            finally:
                db.drop_database()
            print(f"    kafka-idle {q}, {actors} actor(s), {a.idle_s:.0f} s with nothing to read: CPU s per second "
                  + ", ".join(f"{k} {v:.3f}" for k, v in per_s.items()), flush=True)
            self.idle_pipelines.append({"workload": f"kafka-idle {q}", "actors": actors, "cpu_s_per_s": per_s})


def warm_nexmark(db, q: str) -> None:
    """Nexmark query ``q`` over a few generated events inserted into ``db`` (kernels loaded)."""
    from laminardb.nexmark import QUERIES, SOURCES_DDL, generate

    db.execute(SOURCES_DDL)
    db.execute(QUERIES[q].statement())
    for stream, b in generate(_WARM_EVENTS, seed=5, batch_events=8_192):
        db.insert(stream, b)
    db.finish()


def _concat(t: pa.Table) -> pa.RecordBatch:
    t = t.combine_chunks()
    return t.to_batches()[0] if t.num_rows else pa.RecordBatch.from_pylist([], schema=t.schema)


# ---------------------------------------------------------------------------- output
COLUMNS = (proc_cpu.ACTOR, proc_cpu.HEAD, proc_cpu.CLIENT, proc_cpu.COORDINATOR, proc_cpu.BROKER, proc_cpu.RAY)


def print_row(r: dict) -> None:
    c = r["cpu_s_per_mrow"]
    b = r["busiest"] or {}
    print(f"    {r['workload']:<20} {r['actors']} actor(s), ckpt {r.get('checkpoints')}: {r['rows_per_s']:>11,.0f} rows/s; "
          f"CPU s/M rows " + ", ".join(f"{k} {c[k]:.3f}" for k in COLUMNS)
          + f"; busiest non-actor {b.get('kind')} ({b.get('name')}) {b.get('cpu_s_per_mrow', 0):.3f}; "
          f"ceiling {_fmt(r['scale_ceiling'])}; actors/embedded "
          + (", ".join(f"{_fmt(v)} (embedded checkpoints {iv})"
                       for iv, v in r["actors_over_embedded_by_checkpoints"].items())
             if r.get("actors_over_embedded_by_checkpoints") else _fmt(r.get("actors_over_embedded"))) + "; "
          f"{r['epochs']} checkpoints, coordinator+spark {_fmt(r['coordinator_cpu_s_per_epoch'])} CPU s each; "
          f"load {r['load'][0]} → {r['load'][1]}"
          + "; actors per M rows: " + ", ".join(f"{k} {v:.2f}" for k, v in (r.get("actor_split") or {}).items())
          + ("; THE COORDINATOR RESTARTED IN THE RUN (its JVM start is counted)" if r.get("coordinator_restarted")
             else ""), flush=True)
    if r.get("nodes", 1) > 1:
        print(f"      actors per node {r['placement']}; by node: " + "; ".join(
            f"{node} " + ", ".join(f"{k} {v:.3f}" for k, v in kinds.items() if v)
            for node, kinds in r["by_node"].items()), flush=True)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def markdown(results: list[dict]) -> str:
    head = ("| workload | ckpt | nodes | actors | rows | rows/s | " + " | ".join(COLUMNS)
            + " | busiest non-actor | scale ceiling | embedded | actors/embedded |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['workload']} | | {r.get('nodes', 1)} | {r['actors']} | failed: {r['error']} |")
            continue
        c, b = r["cpu_s_per_mrow"], r["busiest"] or {}
        lines.append(
            f"| {r['workload']} | {r.get('checkpoints')} | {r.get('nodes', 1)} | {r['actors']} | {r['rows']:,} | {r['rows_per_s']:,.0f} | "
            + " | ".join(f"{c[k]:.3f}" for k in COLUMNS)
            + f" | {b.get('kind')} {b.get('cpu_s_per_mrow', 0):.3f} | {_fmt(r['scale_ceiling'])} | "
            f"{_fmt(r.get('embedded_cpu_s_per_mrow'), 3)} | {_fmt(r.get('actors_over_embedded'))} |")
    return "\n".join(lines)


def markdown_by_node(results: list[dict]) -> str:
    """One row per run and node: where each kind's CPU went (a worker node holds actors only)."""
    head = "| workload | actors | node | actors there | " + " | ".join(COLUMNS) + " | node total |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        for node, kinds in (r.get("by_node") or {}).items():
            lines.append(f"| {r['workload']} | {r['actors']} | {node} | {r['placement'].get(node, 0)} | "
                         + " | ".join(f"{kinds[k]:.3f}" for k in COLUMNS) + f" | {sum(kinds.values()):.3f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--actors", default="1,2,4", help="actor counts, comma-separated")
    ap.add_argument("--rows", type=_count, default=2_000_000, help="insert-agg rows per run")
    ap.add_argument("--insert-paths", default="direct",
                    help="insert-agg and ckpt-q20: direct (rows to the actors), head (through the head), or both: direct,head")
    ap.add_argument("--global-phases", default="actors",
                    help="insert-agg, kafka-agg (and kafka-nexmark: actors, owners): where closed windows merge and their sink rows are staged: "
                         "actors (owners merge and stage), owners (owners merge, the head stages), head (the head "
                         "merges and stages), merge-calls (actors, with a call per close's merge); comma-separated")
    ap.add_argument("--kafka-rows", type=_count, default=300_000, help="kafka-agg messages")
    ap.add_argument("--events", type=_count, default=100_000, help="kafka-nexmark events")
    ap.add_argument("--q20-events", type=_count, default=300_000, help="ckpt-q20 events")
    ap.add_argument("--queries", default=",".join(NEXMARK_TREES), help="kafka-nexmark queries")
    ap.add_argument("--subscribers", default="0,1,4", help="kafka-subs: subscriber counts, comma-separated")
    ap.add_argument("--by-reference", default="on,off",
                    help="subs-alone: rows to subscribers by reference (on) or through the head (off), in this order")
    ap.add_argument("--subs-cases", default="filter,tumble,q20", help="subs-alone: which queries, comma-separated")
    ap.add_argument("--nodes", type=int, default=1,
                    help="Ray nodes: 1 = ray.init; N > 1 = a head node and N-1 worker nodes (ray.cluster_utils.Cluster)")
    ap.add_argument("--shared-shm", action="store_true",
                    help="with --nodes > 1: let worker-node actors read the head's shared-memory ring "
                         "(they share this machine); default: Ray objects, as on separate machines")
    ap.add_argument("--batch-rows", type=_count, default=65_536)
    ap.add_argument("--embedded-checkpoints", default="off",
                    help="the embedded anchors, comma-separated: off (in memory) or a checkpoint interval "
                         "of a durable database (10s: as the cluster runs); the first is the one compared")
    ap.add_argument("--idle-s", type=float, default=5.0, help="idle baseline: seconds sampled with no database")
    ap.add_argument("--warm-epochs", type=int, default=40,
                    help="epochs the warm-up database commits before any run: the coordinator's JVM "
                         "compiles its epoch job's path (a long-running coordinator's steady state); "
                         "1 = only the JVM start, as before 2026-12-07")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args()
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = set(workloads) - set(WORKLOADS)
    if bad:
        ap.error(f"unknown workload(s) {sorted(bad)}; choose from {', '.join(WORKLOADS)}")
    if set(args.global_phases.split(",")) - set(_PHASES):
        ap.error(f"--global-phases: choose from {', '.join(_PHASES)}")
    actors = [int(x) for x in args.actors.split(",")]
    args.queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    args.subscribers = [int(x) for x in args.subscribers.split(",")]
    args.by_reference = [x.strip() == "on" for x in args.by_reference.split(",")]
    args.subs_cases = [x.strip() for x in args.subs_cases.split(",")]
    args.embedded_checkpoints = [x.strip() for x in args.embedded_checkpoints.split(",") if x.strip()]

    import ray

    info = machine_info()
    print("laminardb Delta mode: CPU per row per process (issue 20)")
    print(f"  machine: {info['cpu']}, {info['cores']} cores; python {info['python']}, ray {ray.__version__}; "
          f"load {load()}")
    root = Path(args.dir or tempfile.mkdtemp(prefix="ldb-bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    nodes = bench = None
    try:
        nodes = RayNodes(args.nodes, max(actors), args.shared_shm)
        bench = Bench(args, root, nodes)
        if args.nodes > 1:
            print(f"  {args.nodes} Ray nodes (ray.cluster_utils.Cluster): head (0 CPUs), "
                  f"{args.nodes - 1} worker node(s) of {-(-max(actors) // (args.nodes - 1))} CPUs; "
                  f"ring {'shared' if args.shared_shm else 'head node only'}")
        t = time.perf_counter()  # the coordinator and its JVM start, the first Spark job: not measured
        db = connect("scale-warm", root, 1, checkpoint_interval="off", coordinator="spark", **KEEP_COORDINATOR)
        db.execute(SOURCE_DDL + "; " + AGG_DDL + "; " + sink_ddl("out", "agg", root / "sinks" / "warm"))
        warm = make_batches(2 * args.batch_rows, args.batch_rows, seed=1)
        for b in warm:
            db.insert("trades", b)
        for i in range(1, args.warm_epochs):  # each a small epoch, as a 1 s checkpoint commits
            db.checkpoint()
            db.insert("trades", warm[0].set_column(0, "ts", pc.add(warm[0].column(0), i * 3_000_000)))
        db.finish()
        db.drop_database()
        print(f"  warm-up database (coordinator + Spark JVM start, {args.warm_epochs} epoch(s)): "
              f"{time.perf_counter() - t:.1f} s, not measured")
        idle = idle_baseline(args.idle_s)
        print(f"  idle, no database ({args.idle_s:.0f} s): CPU s per second "
              + ", ".join(f"{k} {v:.3f}" for k, v in idle.items() if v))
        for w in workloads:
            print(f"\n{w}")
            for n in actors:
                try:
                    getattr(bench, w.replace("-", "_"))(n)
                except Exception as e:  # noqa: BLE001 - recorded, and the next run goes on
                    err = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
                    bench.results.append({"workload": w, "actors": n, "error": err})
                    print(f"    {w} {n} actor(s): FAILED — {err}", flush=True)
    finally:
        if nodes is not None:
            nodes.shutdown()
        if bench is not None and bench.broker is not None:
            bench.broker.stop()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    left = [p for p in proc_cpu.sample().values() if p.pid != os.getpid()]
    print(f"\n  after the bench: {len(left)} process(es) left under this one"
          + (f": {[(p.pid, p.name) for p in left]}" if left else ""))
    print(f"\nCPU seconds per million rows, by kind of process ({info['cores']} cores, load at end {load()}):\n")
    print(markdown(bench.results))
    if args.nodes > 1:
        print("\nCPU seconds per million rows, by node and kind:\n")
        print(markdown_by_node(bench.results))
    print("\nIdle, no database: CPU s per second " + ", ".join(f"{k} {v:.3f}" for k, v in idle.items() if v))
    for r in bench.idle_pipelines:
        print(f"Idle pipeline, {r['workload']}, {r['actors']} actor(s): CPU s per second "
              + ", ".join(f"{k} {v:.3f}" for k, v in r["cpu_s_per_s"].items() if v))
    report = {"machine": info, "args": {k: v for k, v in vars(args).items()}, "idle_cpu_s_per_s": idle,
              "results": bench.results, "idle_pipelines": bench.idle_pipelines,
              "processes_left": len(left)}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    print("BENCH_JSON " + json.dumps(report, default=str))
    return 1 if any("error" in r for r in bench.results) else 0


if __name__ == "__main__":
    sys.exit(main())
