"""The head's CPU per million Nexmark events spent on a plan tree fed Kafka-style rows (rows
left on the actors that read them, ``RemoteRows``), with no broker, coordinator or Spark in
the way: what ``DistributedPlanOperator`` itself costs the head (issue 20, item 1).

    RAY_TMPDIR=/tmp/ray-x PYTHONPATH=. .venv/bin/python bench/bench_plan_head.py --events 300k

Run it from two checkouts in one sitting to compare them (the numbers are CPU seconds of this
process — the head — per million events: ``process`` all its threads, ``caller`` the thread
that ingests). The rows are put in Ray's object store before the clock starts, as the reading
actors would have.
"""

from __future__ import annotations

import argparse
import time


def _count(text: str) -> int:
    text = text.lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * scale)


def run(query: str, events: int, actors: int, batch_events: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import ray

    from laminardb.cluster.actor_pool import ActorPool
    from laminardb.cluster.backend import cluster_connection
    from laminardb.cluster.remote_rows import RemoteRows
    from laminardb.cluster.wire import to_ipc_array
    from laminardb.nexmark import QUERIES, SOURCES_DDL, generate

    db = cluster_connection(ActorPool(actors, 64), shutdown_on_close=True)
    try:
        db.execute(SOURCES_DDL)
        db.execute(QUERIES[query].statement())
        sub = db.subscribe_stream(query)
        reactor = db.engine.reactor
        prepared = []
        for stream, batch in generate(events, seed=3, batch_events=batch_events):
            node = reactor.nodes[stream]
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=node.schema)  # its names as planned
            top = int(np.asarray(batch.column("dateTime").cast("int64")).max())
            half = batch.num_rows // 2
            parts = [(a, p) for a, p in enumerate([batch.slice(0, half), batch.slice(half)][:actors]) if p.num_rows]
            if actors == 1:
                parts = [(0, batch)]
            rows = RemoteRows(node.schema, batch.num_rows, top, [(a, ray.put(to_ipc_array(p))) for a, p in parts])
            prepared.append((node, rows, top - 4000))
        p0, c0 = time.process_time(), time.thread_time()
        for node, rows, wm in prepared:
            with reactor.lock:
                reactor.ingest(node, rows, watermark=wm)
        db.finish()
        process_s, caller_s = time.process_time() - p0, time.thread_time() - c0
        out_rows = sub.to_arrow().num_rows
    finally:
        db.close()
    return {"query": query, "actors": actors, "events": events, "rows_out": out_rows,
            "process_cpu_s_per_mev": process_s / events * 1e6, "caller_cpu_s_per_mev": caller_s / events * 1e6}


def main() -> None:
    import ray

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=_count, default=300_000)
    ap.add_argument("--queries", default="q20,q3")
    ap.add_argument("--actors", default="1,2")
    ap.add_argument("--batch-events", type=int, default=10_000)
    a = ap.parse_args()
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        for actors in (int(x) for x in a.actors.split(",")):
            for q in a.queries.split(","):
                r = run(q, a.events, actors, a.batch_events)
                print(f"{r['query']:4} {r['actors']} actor(s): head CPU s per M events {r['process_cpu_s_per_mev']:.3f} "
                      f"(ingesting thread {r['caller_cpu_s_per_mev']:.3f}); {r['rows_out']:,} rows out", flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
