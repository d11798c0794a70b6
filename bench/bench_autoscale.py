"""Kafka-driven autoscaling measured on real Tansu and Ray: catch-up, the pause a rescale costs,
and actor-seconds over a bursty load. (The policy alone, at 1–64 actors: bench_autoscale_sim.py.)

Run from the repository root (starts its own Tansu broker and a 2-CPU Ray):

    .venv/bin/python bench/bench_autoscale.py                       # all three parts (~20 min)
    .venv/bin/python bench/bench_autoscale.py --part catchup --events 2000000
    .venv/bin/python bench/bench_autoscale.py --part pause --groups 100000 1000000
    .venv/bin/python bench/bench_autoscale.py --part catchup bursty --seconds 600

1. **catchup** — a backlog of ``--events`` JSON rows (40 keys, 2 partitions) is in Kafka before
   the pipeline starts: a sliding window (60 s, every 100 ms, per key: each row lands in 600
   windows, so one actor is the bottleneck, not the producer of this machine). Time from
   ``start()`` until every window is out, for fixed clusters of 1 and 2 actors and for the
   autoscaler starting from one actor (``max_actors`` 2: this machine has 2 cores). The knobs are scaled
   to a backlog of tens of seconds (evaluation 2 s, metrics window 6 s, stabilization 4 s,
   catch_up_time 10 s): the defaults (10 s / 30 s / 1 min / 5 min) are sized for backlogs of
   minutes and would not act before this one drained. Both outputs equal the embedded engine's.
2. **pause** — ``--groups`` live keyed groups (``GROUP BY k`` over inserts), then ``db.scale(2)``
   and ``db.scale(1)``: the pause (checkpoint through restore, the client's calls wait) and
   its restore part, with the local coordinator and with the Spark coordinator.
3. **bursty** — ``--seconds`` (600) of Kafka load shaped like bench_autoscale_sim's
   ``burst10m`` trace (25 % of the peak, bursts to 100 %, 80 %, 100 %), the peak at 90 % of two
   actors' rate as part 1 measured it (a heavier 5-minute sliding window, so the producer
   needs a fraction of a core), through the autoscaler (knobs: evaluation 5 s, window 15 s,
   stabilization 20 s, cooldown 60 s, catch_up_time 60 s). Actor-seconds against the fixed
   cluster sized for the peak (2 actors × the duration); the lag seen each second; the
   observed per-second arrivals are saved (``--trace``) and replayed through the policy
   simulator at 1–64 actors.

Last stdout line: ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._services.kafka import start_kafka_broker  # noqa: E402

PARTITIONS = 2
KEYS = 40

SOURCE = """CREATE SOURCE trades (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL,
    WATERMARK FOR ts AS ts - INTERVAL '0' SECOND) {kafka};
CREATE STREAM sliding AS SELECT k, window_start, count(*) AS c, sum(v) AS s
    FROM trades GROUP BY k, hop(ts, INTERVAL '100' MILLISECOND, INTERVAL '{size}' SECOND) EMIT ON WINDOW CLOSE;"""
# polls of at most 8,192 records per partition: a round of the 60 s sliding window then takes
# ~0.1 s on an actor, so a checkpoint barrier (and a rescale) waits for little (the default
# 65,536 made a barrier wait for up to 4 queued rounds of ~1 s each: a 6 s rescale pause)
KAFKA = ("FROM KAFKA (brokers = '{brokers}', topic = '{topic}', format = 'json', idle_timeout_ms = '600000', "
         "max_poll_records = '8192')")
SENTINEL_TS = 10**12


def _rows(lo: int, hi: int) -> list[bytes]:
    """Rows lo..hi of the deterministic workload, as JSON messages (ts: 2 rows per ms)."""
    return [json.dumps({"k": i % KEYS, "seq": i // KEYS, "v": (i * 7919) % 100, "ts": i // 2}).encode()
            for i in range(lo, hi)]


def _producer(bootstrap: str):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)


def _send(producer, topic: str, lo: int, hi: int) -> None:
    for i, msg in zip(range(lo, hi), _rows(lo, hi), strict=True):
        producer.send(topic, msg, partition=(i % KEYS) % PARTITIONS)


def _sentinels(producer, topic: str) -> None:
    for p in range(PARTITIONS):
        producer.send(topic, json.dumps({"k": p, "seq": -1, "v": 0, "ts": SENTINEL_TS}).encode(), partition=p)
    producer.flush(timeout=60)


def _topic(bootstrap: str, name: str) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        admin.close()
    return name


def _expected_windows(events: int, size: int) -> int:
    """Windows the embedded engine emits for events 0..n (every (key, start) that holds a row)."""
    import laminardb

    with laminardb.open() as ref:
        ref.execute(SOURCE.format(kafka="", size=size))
        sub = ref.subscribe_stream("sliding")
        step = 50_000
        for lo in range(0, events, step):
            ref.insert_json("trades", b"\n".join(_rows(lo, min(events, lo + step))).decode())
        ref.finish()
        return sub.to_arrow().num_rows


def _connect(name: str, tmp: str, actors: int = 1, **config):
    import laminardb

    config = {"checkpoint_dir": tmp, "coordinator": "local", "checkpoint_interval": "2s", **config}
    return laminardb.connect("ray://auto", database=name, actors=actors, config=config)


# ----------------------------------------------------------------------------------- 1. catch-up
def catchup(bootstrap: str, tmp: str, events: int) -> dict:
    from laminardb.cluster.head import drop_database

    topic = _topic(bootstrap, f"catchup-{os.getpid()}")
    producer = _producer(bootstrap)
    t0 = time.perf_counter()
    for lo in range(0, events, 100_000):
        _send(producer, topic, lo, min(events, lo + 100_000))
    _sentinels(producer, topic)
    producer.close()
    produced_s = time.perf_counter() - t0
    want = _expected_windows(events, 60)
    out: dict = {"events": events, "produce_s": round(produced_s, 1), "windows": want}
    runs = {"fixed_1": {"autoscale": False}, "fixed_2": {"autoscale": False, "actors": 2},
            "autoscaled_from_1": {"autoscale": True, "max_actors": 2, "evaluation_interval": "2s",
                                  "metrics_window": "6s", "stabilization_window": "4s", "catch_up_time": "10s",
                                  "restart_time": "2s", "scale_in_cooldown": "10m"}}
    for name, knobs in runs.items():
        db = _connect(f"catchup-{name}", tmp, **knobs)
        try:
            db.execute(SOURCE.format(kafka=KAFKA.format(brokers=bootstrap, topic=topic), size=60))
            sub = db.subscribe_stream("sliding")
            got = 0
            t0 = time.perf_counter()
            db.start()
            while got < want and time.perf_counter() - t0 < 1800:
                batch = sub.next_timeout(500)
                got += 0 if batch is None else batch.num_rows
            took = time.perf_counter() - t0
            auto = db.metrics()["autoscale"]
            out[name] = {"seconds": round(took, 2), "windows": got, "exact_count": got == want,
                         "rows_per_s": round(events / took),
                         "rescales": [{k: r[k] for k in ("previous", "actors", "pause_s", "reason")}
                                      for r in auto["rescales_done"]]}
            print(f"catch-up {name}: {took:.1f} s ({events / took / 1e3:.0f}k rows/s), windows {got}/{want}, "
                  f"rescales {[(r['previous'], r['actors'], r['pause_s']) for r in auto['rescales_done']]}",
                  flush=True)
        finally:
            db.close()
            drop_database(f"catchup-{name}")
    return out


# ----------------------------------------------------------------------------------- 2. pause
def pauses(tmp: str, groups_list: list[int]) -> dict:
    import numpy as np
    import pyarrow as pa

    from laminardb.cluster.head import drop_database

    out: dict = {}
    for coordinator in ("local", "spark"):
        for groups in groups_list:
            name = f"pause-{coordinator}-{groups}"
            db = _connect(name, tmp, coordinator=coordinator, checkpoint_interval="1h")
            try:
                db.execute("CREATE SOURCE t (k BIGINT NOT NULL, v BIGINT); "
                           "CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS c, sum(v) AS s FROM t GROUP BY k")
                for lo in range(0, groups, 250_000):
                    k = np.arange(lo, min(groups, lo + 250_000), dtype=np.int64)
                    db.insert("t", pa.table({"k": k, "v": k % 100}))
                t0 = time.perf_counter()
                db.checkpoint()  # the first checkpoint (and, with Spark, the JVM's first job) apart
                first = time.perf_counter() - t0
                up = db.scale(2)
                down = db.scale(1)
                n = db.query("SELECT count(*) AS n FROM per_key").to_arrow()["n"][0].as_py()
                out[name] = {"groups": groups, "coordinator": coordinator, "first_checkpoint_s": round(first, 2),
                             "out_pause_s": up["pause_s"], "out_restore_s": up.get("restore_s"),
                             "in_pause_s": down["pause_s"], "in_restore_s": down.get("restore_s"),
                             "groups_after": n}
                print(f"pause {coordinator} {groups:,} groups: 1→2 {up['pause_s']:.2f} s "
                      f"(restore {up.get('restore_s')}), 2→1 {down['pause_s']:.2f} s "
                      f"(restore {down.get('restore_s')}); {n:,} groups after", flush=True)
                assert n == groups, f"{n} groups after the rescales, expected {groups}"
            finally:
                db.close()
                drop_database(name)
    return out


# ----------------------------------------------------------------------------------- 3. bursty
def burst_shape(seconds: int) -> list[float]:
    """bench_autoscale_sim's burst10m shape stretched to ``seconds`` (1.0 = the peak), no noise."""
    shape = []
    for t in range(seconds):
        x = t * 600.0 / seconds
        level = 0.25
        for a, b, lv in ((60, 120, 1.0), (240, 270, 0.8), (390, 480, 1.0)):
            if a <= x < b:
                level = lv
        shape.append(level)
    return shape


def bursty(bootstrap: str, tmp: str, seconds: int, actor_rate: float, size: int, trace_path: str) -> dict:
    from laminardb.cluster.head import drop_database

    topic = _topic(bootstrap, f"bursty-{os.getpid()}")
    peak = 0.9 * 2 * actor_rate
    shape = burst_shape(seconds)
    db = _connect("bursty", tmp, autoscale=True, max_actors=2, evaluation_interval="5s", metrics_window="15s",
                  stabilization_window="20s", scale_in_cooldown="60s", catch_up_time="60s", restart_time="5s")
    samples: list[dict] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(1.0):
            m = db.metrics()
            inputs = m["autoscale"].get("inputs") or {}
            samples.append({"t": time.perf_counter(), "actors": len(m["cluster"]["members"]),
                            "lag": inputs.get("lag"), "ingested": m["events_ingested"]})

    try:
        db.execute(SOURCE.format(kafka=KAFKA.format(brokers=bootstrap, topic=topic), size=size))
        db.start()
        producer = _producer(bootstrap)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sent, arrivals = 0, []
        t0 = time.perf_counter()
        for t, level in enumerate(shape):  # one second at a time, at the shape's rate
            n = int(level * peak)
            _send(producer, topic, sent, sent + n)
            producer.flush(timeout=30)
            sent += n
            arrivals.append(n)
            late = t0 + t + 1 - time.perf_counter()
            if late > 0:
                time.sleep(late)
        wall = time.perf_counter() - t0
        _sentinels(producer, topic)
        producer.close()
        deadline = time.perf_counter() + 600
        while db.metrics()["events_ingested"] < sent and time.perf_counter() < deadline:
            time.sleep(1.0)
        drained_after = time.perf_counter() - t0 - wall
        stop.set()
        watcher.join(timeout=10)
        auto = db.metrics()["autoscale"]
    finally:
        stop.set()
        db.close()
        drop_database("bursty")
    during = [s for s in samples if s["t"] - t0 <= wall]
    # time-weighted: each sample's count holds until the next sample (metrics() takes a while)
    edges = [t0] + [s["t"] for s in during[1:]] + [t0 + wall]
    actor_s = round(sum(s["actors"] * (b - a) for s, a, b in zip(during, edges, edges[1:], strict=False)))
    fixed_s = round(2 * wall)
    lags = [s["lag"] or 0 for s in during]
    Path(trace_path).write_text(json.dumps({"arrivals": arrivals, "actor_rate": actor_rate}))
    out = {"seconds": seconds, "wall_s": round(wall, 1), "peak_rows_per_s": round(peak), "events": sent,
           "actor_seconds": actor_s, "fixed_peak_actor_seconds": fixed_s,
           "saving": round(1 - actor_s / fixed_s, 3) if fixed_s else None,
           "max_lag_rows": max(lags) if lags else None,
           "max_lag_s_of_peak": round(max(lags) / peak, 1) if lags else None,
           "drained_after_end_s": round(drained_after, 1),
           "rescales": [{k: r[k] for k in ("previous", "actors", "pause_s", "reason")} for r in auto["rescales_done"]],
           "trace": trace_path}
    print(f"bursty {seconds} s, peak {peak / 1e3:.0f}k rows/s: {actor_s} actor-s autoscaled vs {fixed_s} fixed at "
          f"the peak ({out['saving']:.0%} saved); max lag {out['max_lag_rows']} rows "
          f"({out['max_lag_s_of_peak']} s of peak input); {len(out['rescales'])} rescales "
          f"{[(r['previous'], r['actors'], r['pause_s']) for r in out['rescales']]}", flush=True)
    return out


def replay(trace_path: str) -> dict:
    """The recorded arrivals through the policy simulator at 1–64 actors (scaled so the peak
    is 90 % of M actors), with the knobs of the real run and its measured rate."""
    import numpy as np

    from laminardb.autoscale import AutoscaleConfig
    from laminardb.autoscale._sim import simulate

    doc = json.loads(Path(trace_path).read_text())
    arrivals = np.array(doc["arrivals"], dtype=float)
    rate = float(doc["actor_rate"])
    cfg = AutoscaleConfig.from_config({"autoscale": True, "evaluation_interval": "5s", "metrics_window": "15s",
                                       "stabilization_window": "20s", "scale_in_cooldown": "60s",
                                       "catch_up_time": "60s", "restart_time": "5s"})
    out = {}
    for m in (1, 2, 4, 8, 16, 32, 64):
        trace = arrivals / arrivals.max() * 0.9 * m * rate
        cfg_m = AutoscaleConfig(**{**cfg.to_dict(), "max_actors": m})
        auto = simulate(cfg_m, trace, per_actor_rate=rate, partitions=64, pause=2.0)
        fixed = simulate(cfg_m, trace, per_actor_rate=rate, initial_actors=math.ceil(trace.max() / rate), fixed=True)
        out[m] = {"auto_actor_s": round(auto.actor_seconds), "fixed_actor_s": round(fixed.actor_seconds),
                  "saving": round(1 - auto.actor_seconds / fixed.actor_seconds, 3),
                  "max_lag_s_of_peak": round(float(auto.max_lag / trace.max()), 1), "rescales": len(auto.rescales)}
        print(f"replay max_actors={m}: {out[m]}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", nargs="+", choices=("all", "catchup", "pause", "bursty"), default=["all"])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--groups", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--actor-rate", type=float, default=None,
                    help="one actor's rows/s on the bursty pipeline (default: measured by catchup, ÷ 5)")
    ap.add_argument("--trace", default="/tmp/laminardb-autoscale-trace.json")
    args = ap.parse_args()

    import ray

    broker = start_kafka_broker()
    report: dict = {"machine": f"{os.cpu_count()} CPUs"}
    tmp = f"/tmp/laminardb-bench-autoscale-{os.getpid()}"
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        if {"all", "catchup"} & set(args.part):
            report["catchup"] = catchup(broker.bootstrap, tmp, args.events)
        if {"all", "pause"} & set(args.part):
            report["pause"] = pauses(tmp, args.groups)
        if {"all", "bursty"} & set(args.part):
            rate = args.actor_rate
            if rate is None:
                # the 5-minute window costs 5× the 1-minute one per row (3000 windows, not 600)
                rate = report["catchup"]["fixed_1"]["rows_per_s"] / 5 if "catchup" in report else 12_000.0
            report["bursty"] = bursty(broker.bootstrap, tmp, args.seconds, rate, 300, args.trace)
            report["replay"] = replay(args.trace)
    finally:
        ray.shutdown()
        broker.stop()
    print("BENCH_JSON " + json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
