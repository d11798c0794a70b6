"""PySpark Structured Streaming on ``bench_e2e_latency.py``'s rows: file source, a Python
data source, and Real-Time Mode. Entry points: ``Spark.start()``, ``run(spark, name, …)``.

- File source: the generator's rows become JSON-lines files, one per ``--file-ms``, written
  under a dot-name and renamed into the input directory (Spark skips dot-files, so it never
  lists a half-written one). The listing each trigger does is part of the latency.
- Python data source (``e2e_pyds``): rows served by this process over HTTP on loopback.
- Sinks: Spark's Parquet file sink, ``checkpointLocation`` per query; a batch is committed when
  its ``_spark_metadata/<batch>`` log is written, and only files listed there are read.
- RTM: see ``rtm``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import e2e_common as ec
import pyarrow as pa
from e2e_pyds import SPARK_SCHEMA, E2ESource

_COLS = ("id", "key", "ts", "created_ns", "v")


class Spark:
    """One local[2] SparkSession for every Spark system of a run (the JVM starts once, not timed)."""

    def __init__(self, session) -> None:
        self.session = session

    @classmethod
    def start(cls) -> Spark:
        # Spark's Python workers: this interpreter (the venv's), and e2e_pyds importable
        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        s = (SparkSession.builder.master("local[2]").appName("laminardb-e2e-latency")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")  # 16 keys: 200 tasks per batch would be the latency
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g").getOrCreate())
        s.sparkContext.setLogLevel("ERROR")
        s.dataSource.register(E2ESource)
        return cls(s)

    def stop(self) -> None:
        for q in self.session.streams.active:
            q.stop()
        self.session.stop()


def queries(src) -> dict:
    """The two queries, as DataFrames over ``src`` (columns ``_COLS``)."""
    from pyspark.sql import functions as F  # noqa: N812

    stateless = src.where("v % 5 <> 0").select("id", "key", "created_ns", (F.col("v") * 2).alias("v2"))
    windowed = (src.withColumn("et", F.timestamp_millis("ts")).withWatermark("et", f"{ec.WATERMARK_MS} milliseconds")
                .groupBy(F.window("et", "1 second"), "key")
                .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("sv"), F.max("created_ns").alias("last_ns"))
                .select("key", F.unix_millis(F.col("window.start")).alias("ws"), "n", "sv", "last_ns"))
    return {"stateless": stateless, "windowed": windowed}


def run(spark: Spark, name: str, work: Path, args, measure: Callable) -> dict:
    """One Spark system: start its two queries, generate, measure, stop them."""
    if name.startswith("spark-rtm"):
        import e2e_rtm

        only = ("stateless",) if name.endswith("-stateless") else ("stateless", "windowed")
        return e2e_rtm.run(spark, work, args, measure, only)
    work.mkdir(parents=True)
    feed = Feed(work / "in", args.file_ms) if name.startswith("spark-file") else Feed(None, 0)
    reader = spark.session.readStream.schema(SPARK_SCHEMA)
    src = reader.json(str(work / "in")) if feed.directory else reader.format("e2e").option("url", feed.url).load()
    trigger = {"processingTime": "1 second"} if name.endswith("-1s") else {}
    col = ec.Collector()
    started, watchers = [], []
    try:
        for q, df in queries(src).items():
            out = work / q
            w = df.writeStream.format("parquet").option("path", str(out)).outputMode("append") \
                .option("checkpointLocation", str(work / f"ckpt-{q}")).queryName(f"{name}-{q}".replace("-", "_"))
            started.append((w.trigger(**trigger) if trigger else w).start())
            on_file = col.stateless if q == "stateless" else col.windowed
            watchers.append(ec.Watcher(ec.spark_files(out), lambda p, t, f=on_file: f(ec.read_parquet(p), t)))
        res = measure(col, watchers, feed.emit, args)
        res["batches"] = {q.name: batch_durations(q.recentProgress) for q in started}
        return res
    finally:
        for q in started:
            q.stop()
        feed.close()


def batch_durations(progress: list[dict]) -> dict:
    """Median ms of each phase of the query's micro-batches (Spark's ``durationMs``), and how many."""
    import statistics

    phases = {k for p in progress for k in p.get("durationMs", {})}
    out = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in sorted(phases)}
    return {"batches": len(progress), **out}


class Feed:
    """Where the generator's rows go for Spark: JSON-lines files in ``directory``, or (None)
    kept here and served over HTTP to the ``e2e`` data source."""

    def __init__(self, directory: Path | None, file_ms: int) -> None:
        self.directory, self.file_ms = directory, file_ms
        self.rows: list[tuple] = []
        self.buffer: list[str] = []
        self.first_ns = 0
        self.files = 0
        self.server = None
        if directory is not None:
            directory.mkdir(parents=True)
        else:
            self.server = _serve(self.rows)
            self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def emit(self, batch: pa.RecordBatch) -> None:
        rows = list(zip(*(batch.column(c).to_pylist() for c in _COLS), strict=True))
        if self.directory is None:
            self.rows.extend(rows)  # list.extend is atomic: the server threads read a prefix
            return
        if not self.buffer:
            self.first_ns = time.time_ns()
        self.buffer.extend(json.dumps(dict(zip(_COLS, r, strict=True))) for r in rows)
        if time.time_ns() - self.first_ns >= self.file_ms * 1_000_000 or rows[-1][0] < 0:  # warm-up, end marker: now
            tmp = self.directory / f".part-{self.files:06d}.jsonl"
            tmp.write_text("\n".join(self.buffer) + "\n")
            tmp.rename(self.directory / f"part-{self.files:06d}.jsonl")
            self.files += 1
            self.buffer.clear()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _serve(rows: list[tuple]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            u = urlparse(self.path)
            if u.path == "/latest":
                body = str(len(rows)).encode()
            else:
                q = parse_qs(u.query)
                body = json.dumps(rows[int(q["start"][0]):int(q["end"][0])]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
