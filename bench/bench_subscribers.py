"""What many callback subscriptions cost a cluster database's other calls (issue 20, item 2).

Run from the repository root:

    RAY_TMPDIR=/tmp/rb .venv/bin/python bench/bench_subscribers.py             # 0 and 40 subscriptions
    RAY_TMPDIR=/tmp/rb .venv/bin/python bench/bench_subscribers.py --subs 64 --calls 200

A database of one reactor actor on a local Ray started here, one stream nobody inserts into
(so every subscription read is a long-poll that waits its full 200 ms in the head). Then,
side by side in one run, the round trip of ``--calls`` cheap head calls
(``list_streams()``) and of one-row ``insert()``s, p50 / p99 / max in ms, with:

- no subscription;
- ``--subs`` callback subscriptions on the client's one connection: its one reader thread
  reads them all with one long-poll (``cluster/subscription_pump.py``);
- ``--subs`` connections with one callback subscription each: a long-poll each, as before the
  pump on one connection (and as separate client processes still do).

Why: the head is a threaded Ray actor (``max_concurrency=32``). Each long-poll holds one of
its threads; once they are all held, every other call waits for one to come back. Prints
one line per case, then ``BENCH_JSON {…}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _timed(fn, calls: int) -> dict:
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000.0)
    out.sort()
    return {"p50_ms": statistics.median(out), "p99_ms": out[min(len(out) - 1, int(0.99 * len(out)))],
            "max_ms": out[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subs", type=int, default=40)
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args()

    import ray

    import laminardb
    from laminardb.cluster.head import drop_database

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    name = f"bench-subs-{int(time.time())}"
    db = laminardb.connect("ray://auto", database=name, actors=1, config={"checkpoint_interval": "off"})
    results = []
    try:
        db.execute("CREATE SOURCE t (k BIGINT, v BIGINT); CREATE STREAM quiet AS SELECT k, v FROM t WHERE v < 0")
        row = [{"k": 1, "v": 1}]
        for _ in range(20):  # warm: kernels loaded, Ray's workers up
            db.insert("t", row)
            db.list_streams()
        for case in ("none", "one connection", "own connections"):
            conns, callbacks = [], []
            if case == "one connection":
                callbacks = [db.subscribe_callback("quiet", lambda b: None) for _ in range(args.subs)]
            elif case == "own connections":
                conns = [laminardb.connect("ray://auto", database=name) for _ in range(args.subs)]
                callbacks = [c.subscribe_callback("quiet", lambda b: None) for c in conns]
            time.sleep(1.0)  # every reader is in its long-poll
            r = {"case": case, "subscriptions": len(callbacks),
                 "list_streams": _timed(db.list_streams, args.calls),
                 "insert_1_row": _timed(lambda: db.insert("t", row), args.calls)}
            results.append(r)
            print(f"{case:16s} {len(callbacks):3d} subscriptions: list_streams p50 {r['list_streams']['p50_ms']:.2f} "
                  f"p99 {r['list_streams']['p99_ms']:.2f} max {r['list_streams']['max_ms']:.2f} ms; "
                  f"insert p50 {r['insert_1_row']['p50_ms']:.2f} p99 {r['insert_1_row']['p99_ms']:.2f} "
                  f"max {r['insert_1_row']['max_ms']:.2f} ms", flush=True)
            for cb in callbacks:
                cb.cancel()
            for c in conns:
                c.close()
    finally:
        db.close()
        drop_database(name)
        ray.shutdown()
    print("BENCH_JSON " + json.dumps({"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
