"""laminardb vs PySpark Structured Streaming: ingest → 1 s tumbling-window COUNT/SUM/AVG per
symbol → every window delivered, over the same rows.

Run from the repository root:

    .venv/bin/python bench/bench_spark.py                  # 1M rows
    .venv/bin/python bench/bench_spark.py --rows 200000    # quicker
    .venv/bin/python bench/bench_spark.py --no-kafka       # skip the Kafka (Tansu) part

Rows: ``bench_engine.make_batches`` (1,000 VARCHAR symbols, BIGINT epoch-ms ``ts`` at 100
events/ms with 0–50 ms jitter, prices in multiples of 0.25) plus one end-marker row
(symbol ``~END``, 5 s after the last event) so that every real window closes by watermark in
both engines; the end-marker's own window is left out of every comparison.

- **Spark** (its Kafka source cannot be installed here: no extra jars): the rows as JSON
  lines, one file per 65,536 rows, in a directory; ``spark.readStream.schema(…).json(dir)``,
  ``withWatermark(100 ms)``, ``groupBy(window(et, '1 second'), sym).agg(count, sum, avg)``,
  append mode, ``trigger(availableNow=True)``, memory sink; ``local[2]``, UI off,
  ``spark.sql.shuffle.partitions`` = 2. Startup (SparkSession) is timed apart; a warm-up query
  over one file runs first; then ``--spark-runs`` full queries (fresh checkpoint each), timed
  from ``readStream`` to ``awaitTermination()``; the sum of their micro-batches'
  ``triggerExecution`` is reported too.
- **laminardb + Kafka**: the same JSON lines as messages in a Tansu broker (produced before
  timing); then ``CREATE SOURCE … FROM KAFKA (…, format='json', offset_reset='earliest')``,
  the window stream, one subscriber; timed from ``db.start()`` until the subscriber has
  received windows counting every event.
- **laminardb + files** (same input as Spark): ``connectors.files.read_file`` of each JSON-lines
  file + ``insert()`` + ``finish()``, timed.

Every engine's windows are compared with DuckDB's GROUP BY over the generated rows: same
(sym, window) groups, count and sum exact (avg to 1e-9 relative). Ends with ``BENCH_JSON {…}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import AGG_DDL, N_SYMBOLS, SOURCE_DDL, load, machine_info, make_batches  # noqa: E402

END_SYM = "~END"
SCHEMA = pa.schema([pa.field("ts", pa.int64(), False), ("sym", pa.string()), ("price", pa.float64())])



# ---------------------------------------------------------------------------- data
def make_data(rows: int, batch_rows: int) -> list[pa.RecordBatch]:
    batches = make_batches(rows, batch_rows)
    max_ts = max(pc.max(b.column("ts")).as_py() for b in batches)
    end = pa.record_batch({"ts": pa.array([max_ts + 5000], pa.int64()), "sym": pa.array([END_SYM]),
                           "price": pa.array([0.25])})
    last = pa.Table.from_batches([batches[-1], end]).combine_chunks().to_batches()[0]
    return [*batches[:-1], last]


def write_jsonl(batches: list[pa.RecordBatch], directory: Path) -> list[Path]:
    from laminardb.connectors.files import json_lines

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, b in enumerate(batches):
        p = directory / f"part-{i:05d}.jsonl"
        lines = json_lines(b).to_pylist()
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def expected(batches: list[pa.RecordBatch]) -> pa.Table:
    import duckdb

    con = duckdb.connect()
    con.register("t", pa.Table.from_batches(batches))
    return con.sql(f"SELECT sym, (ts // 1000) * 1000 AS ws, count(*) AS n, sum(price) AS s, avg(price) AS a "
                   f"FROM t WHERE sym <> '{END_SYM}' GROUP BY ALL").to_arrow_table()


def verify(got: pa.Table, want: pa.Table, label: str) -> dict:
    """got: columns sym, ws (epoch ms), n, s, a — end-marker rows are dropped here."""
    got = got.filter(pc.not_equal(got["sym"], END_SYM))
    order = [("sym", "ascending"), ("ws", "ascending")]
    g = pa.table({"sym": got["sym"], "ws": got["ws"].cast(pa.int64()), "n": got["n"].cast(pa.int64()),
                  "s": got["s"].cast(pa.float64()), "a": got["a"].cast(pa.float64())}).sort_by(order)
    w = pa.table({"sym": want["sym"], "ws": want["ws"].cast(pa.int64()), "n": want["n"].cast(pa.int64()),
                  "s": want["s"], "a": want["a"]}).sort_by(order)
    assert g.num_rows == w.num_rows, f"{label}: {g.num_rows} windows, expected {w.num_rows}"
    for col in ("sym", "ws", "n", "s"):
        x, y = g[col].combine_chunks(), w[col].combine_chunks()
        if not x.equals(y):
            bad = pc.index(pc.not_equal(x, y), True).as_py()
            raise AssertionError(f"{label}: {col!r} differs at group {bad}: {g.slice(bad, 1).to_pylist()} "
                                 f"vs expected {w.slice(bad, 1).to_pylist()}")
    rel = np.abs(g["a"].to_numpy() - w["a"].to_numpy()) / np.abs(w["a"].to_numpy())
    assert rel.max() <= 1e-9, f"{label}: avg differs by {rel.max():.2e} relative"
    return {"windows": g.num_rows, "events": pc.sum(g["n"]).as_py(),
            "distinct_window_starts": len(pc.unique(g["ws"]))}


def lam_cols(t: pa.Table) -> pa.Table:
    return t.select(["sym", "window_start", "n", "s", "a"]).rename_columns(["sym", "ws", "n", "s", "a"])


# ---------------------------------------------------------------------------- spark
def spark_session(shuffle_partitions: int):
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("laminardb-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.driver.memory", "4g")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.perf_counter() - t


def spark_run(spark, src_dir: Path, ckpt: Path, name: str) -> tuple[float, float, int, pa.Table]:
    from pyspark.sql import functions as F  # noqa: N812

    t0 = time.perf_counter()
    df = (spark.readStream.schema("ts LONG, sym STRING, price DOUBLE").json(str(src_dir))
          .withColumn("et", F.timestamp_millis("ts"))
          .withWatermark("et", "100 milliseconds")
          .groupBy(F.window("et", "1 second"), "sym")
          .agg(F.count(F.lit(1)).alias("n"), F.sum("price").alias("s"), F.avg("price").alias("a"))
          .select("sym", F.unix_millis(F.col("window.start")).alias("ws"), "n", "s", "a"))
    q = (df.writeStream.outputMode("append").format("memory").queryName(name)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    progress = q.recentProgress
    trigger_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000.0
    q.stop()
    result = spark.sql(f"SELECT * FROM {name}").toArrow()
    return elapsed, trigger_s, len(progress), result


# ---------------------------------------------------------------------------- laminardb
def lam_files(paths: list[Path]) -> tuple[float, pa.Table]:
    import laminardb
    from laminardb.connectors.files import read_file

    db = laminardb.open()
    db.execute(SOURCE_DDL)
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg")
    gc.collect()
    t0 = time.perf_counter()
    for p in paths:
        for b in read_file(p, format="jsonl", schema=SCHEMA, dead_letter=False):
            db.insert("trades", b)
    db.finish()
    elapsed = time.perf_counter() - t0
    res = sub.to_arrow()
    db.close()
    return elapsed, res


def lam_kafka(bootstrap: str, topic: str, rows: int, actors: int = 0,
              timeout_s: float = 600) -> tuple[float, pa.Table, dict]:
    """Kafka → agg → subscriber, embedded (``actors=0``) or on a Ray cluster of ``actors``
    reactor actors (each reads its Kafka partitions; rows never pass through the client)."""
    import laminardb

    db = laminardb.open() if actors == 0 else laminardb.connect("ray://auto", actors=actors)
    db.execute(SOURCE_DDL + f" FROM KAFKA (brokers = '{bootstrap}', topic = '{topic}', "
               "format = 'json', offset_reset = 'earliest')")
    db.execute(AGG_DDL)
    sub = db.subscribe_stream("agg")
    gc.collect()
    got: list[pa.RecordBatch] = []
    seen = 0
    t0 = time.perf_counter()
    db.start()
    deadline = time.monotonic() + timeout_s
    while seen < rows and time.monotonic() < deadline:  # every real window delivered = every event counted
        b = sub.next_timeout(1000)
        if b is not None:
            got.append(b)
            syms = b.column("sym")
            seen += pc.sum(pc.if_else(pc.equal(syms, END_SYM), 0, b.column("n"))).as_py() or 0
    elapsed = time.perf_counter() - t0
    assert seen == rows, f"laminardb/Kafka: {seen} of {rows} events in delivered windows after {timeout_s} s"
    db.flush(timeout_s=60)
    db.finish()
    while (b := sub.try_next()) is not None:
        got.append(b)
    m = db.metrics()
    db.close()
    return elapsed, pa.Table.from_batches(got, schema=sub.schema), m


def produce(bootstrap: str, topic: str, batches: list[pa.RecordBatch], partitions: int,
            end_markers: bool = True) -> float:
    """JSON lines of ``batches`` into a new ``topic``, round robin over ``partitions``; with
    ``end_markers`` the last row again on every other partition (``make_data``'s end marker)."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    from laminardb.connectors.files import json_lines

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, acks=1)
    t0 = time.perf_counter()
    i = 0
    for b in batches:
        values = pc.cast(json_lines(b), pa.binary()).to_pylist()
        for v in values:
            producer.send(topic, value=v, partition=i % partitions)
            i += 1
    for p in range(1, partitions if end_markers else 1):  # the end marker on every partition: each one's watermark passes the end
        producer.send(topic, value=values[-1], partition=(i - 1 + p) % partitions)
    producer.flush()
    producer.close()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--partitions", type=int, default=1, help="Kafka topic partitions")
    ap.add_argument("--shuffle-partitions", type=int, default=2)
    ap.add_argument("--spark-runs", type=int, default=2)
    ap.add_argument("--lam-runs", type=int, default=3, help="laminardb file runs (best reported)")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--kafka-actors", type=int, nargs="+", default=[0],
                    help="Kafka runs: 0 = embedded, N = connect() with N Ray actors (e.g. 0 1 2)")
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()

    info = machine_info()
    import pyspark

    print("laminardb vs PySpark Structured Streaming — windowed aggregation")
    print(f"  machine: {info['cpu']}, {info['cores']} cores; python {info['python']}, pyspark {pyspark.__version__}, "
          f"pyarrow {info['pyarrow']}; load {load()}")
    work = Path(tempfile.mkdtemp(prefix="ldb-bench-spark-"))
    res: dict = {"rows": args.rows, "machine": info}
    try:
        t = time.perf_counter()
        batches = make_data(args.rows, args.batch_rows)
        paths = write_jsonl(batches, work / "in")
        warm_dir = work / "warm"
        warm_dir.mkdir()
        shutil.copy(paths[0], warm_dir / paths[0].name)
        want = expected(batches)
        mb = sum(p.stat().st_size for p in paths) / 1e6
        print(f"  data: {args.rows:,} rows + 1 end marker, {len(paths)} JSON-lines files ({mb:.0f} MB) in {work}; "
              f"{want.num_rows:,} expected windows (DuckDB); prepared in {time.perf_counter() - t:.1f} s")

        # laminardb over the same files --------------------------------------------------------
        import laminardb  # noqa: F401  (kernel warm-up below is not timed)

        lam_files(paths[:1])
        runs = []
        for _ in range(args.lam_runs):
            l0 = load()
            el, out = lam_files(paths)
            runs.append((el, l0))
            print(f"    laminardb files run: {el:.3f} s = {args.rows / el:,.0f} ev/s  load {l0}")
        chk = verify(lam_cols(out), want, "laminardb files")
        best = min(runs)
        res["laminardb_files"] = {"s": best[0], "eps": args.rows / best[0], "runs_s": [r[0] for r in runs],
                                  "load": best[1], "verified": chk}

        # laminardb over Kafka -----------------------------------------------------------------
        if not args.no_kafka:
            from tests._services.kafka import start_kafka_broker

            broker = start_kafka_broker()
            try:
                prod_s = produce(broker.bootstrap, "trades", batches, args.partitions)
                print(f"    produced {args.rows + 1:,} JSON messages to Tansu in {prod_s:.1f} s (not timed), "
                      f"{args.partitions} partition(s)")
                if any(args.kafka_actors):
                    import ray

                    ray.init(num_cpus=max(args.kafka_actors) + 1, include_dashboard=False, log_to_driver=False,
                             configure_logging=False)
                lam_kafka_runs = {}
                for actors in args.kafka_actors:
                    l0 = load()
                    el, out, m = lam_kafka(broker.bootstrap, "trades", args.rows, actors=actors)
                    l1 = load()
                    name = "embedded" if actors == 0 else f"{actors} actor(s)"
                    print(f"    laminardb Kafka run, {name}: {el:.3f} s = {args.rows / el:,.0f} ev/s  load {l0} → {l1}")
                    chk = verify(lam_cols(out), want, f"laminardb kafka {name}")
                    lam_kafka_runs[actors] = {"s": el, "eps": args.rows / el, "load": [l0, l1], "verified": chk,
                                              "produce_s": prod_s, "partitions": args.partitions,
                                              "events_ingested": m["events_ingested"]}
                res["laminardb_kafka"] = lam_kafka_runs[args.kafka_actors[0]]
                res["laminardb_kafka_by_actors"] = lam_kafka_runs
                if any(args.kafka_actors):
                    import ray

                    ray.shutdown()
            finally:
                broker.stop()

        # Spark --------------------------------------------------------------------------------
        if not args.no_spark:
            l0 = load()
            spark, startup = spark_session(args.shuffle_partitions)
            print(f"    Spark session startup (JVM + SparkSession): {startup:.2f} s  load {l0}")
            try:
                t = time.perf_counter()
                spark_run(spark, warm_dir, work / "ckpt-warm", "warm")
                warm_s = time.perf_counter() - t
                print(f"    Spark warm-up query over 1 file: {warm_s:.2f} s (not counted)")
                sruns = []
                for i in range(args.spark_runs):
                    l0 = load()
                    el, trig, nbatches, out = spark_run(spark, work / "in", work / f"ckpt-{i}", f"agg{i}")
                    sruns.append({"s": el, "trigger_s": trig, "micro_batches": nbatches, "load": l0})
                    print(f"    Spark run {i}: {el:.3f} s = {args.rows / el:,.0f} ev/s (query start → end); "
                          f"Σ triggerExecution {trig:.3f} s over {nbatches} micro-batches; load {l0}")
                chk = verify(out, want, "spark")
                bs = min(sruns, key=lambda r: r["s"])
                res["spark"] = {"startup_s": startup, "warmup_s": warm_s, "runs": sruns, "s": bs["s"],
                                "eps": args.rows / bs["s"], "verified": chk}
            finally:
                spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"Windowed aggregation — {args.rows:,} events, {N_SYMBOLS} symbols, 1 s tumbling windows, "
          f"COUNT/SUM/AVG, until every window is delivered")
    print(f"  {'pipeline':<44}{'seconds':>9}{'events/s':>14}   load at start")
    for actors, r in res.get("laminardb_kafka_by_actors", {}).items():
        label = f"laminardb, Kafka source, JSON, {'embedded' if actors == 0 else f'{actors} actor(s)'}"
        print(f"  {label:<44}{r['s']:>9.3f}{r['eps']:>14,.0f}   {r['load'][0]}")
    r = res["laminardb_files"]
    print(f"  {'laminardb, JSON-lines files + insert()':<44}{r['s']:>9.3f}{r['eps']:>14,.0f}   {r['load']}")
    if "spark" in res:
        r = res["spark"]
        print(f"  {'Spark local[2], JSON files, availableNow':<44}{r['s']:>9.3f}{r['eps']:>14,.0f}   "
              f"{min(r['runs'], key=lambda x: x['s'])['load']}")
        print(f"  Spark startup (not in the figure above): {r['startup_s']:.2f} s; warm-up query {r['warmup_s']:.2f} s")
        base = res.get("laminardb_kafka", res["laminardb_files"])
        print(f"  laminardb ({'Kafka' if 'laminardb_kafka' in res else 'files'}) / Spark: {base['eps'] / r['eps']:.1f}×; "
              f"laminardb files / Spark: {res['laminardb_files']['eps'] / r['eps']:.1f}×")
    names = [k for k in ("laminardb_kafka", "laminardb_files", "spark") if k in res]
    v = res[names[0]]["verified"]
    print(f"  verified: {', '.join(names)} each produced the same {v['windows']:,} (sym, window) groups as DuckDB "
          f"({v['distinct_window_starts']} windows × symbols), {v['events']:,} events, count/sum exact, avg ≤ 1e-9")
    print("BENCH_JSON " + json.dumps(res, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
