"""Incremental checkpoints: what checkpointing a big join every second costs, side by side.

Run from the repository root:

    .venv/bin/python bench/bench_incremental.py                       # 3M warm + 3M timed, twice
    .venv/bin/python bench/bench_incremental.py --warm 1M --events 1M --repeat 1

Nexmark q20 (bids joined with auctions: a regular join whose state only grows, ~2.8M rows
after 3M events) on a durable embedded database. ``--warm`` events build the state first
(untimed, checkpoints as configured), then ``--events`` more are timed. Events are generated
before anything runs, so no mode's background checkpoints overlap generation. In one run:

- ``off``: checkpoints off (the WAL only) — the anchor;
- ``whole 1s``: a checkpoint every second, each writing the join's whole state
  (``checkpoint_incremental=False``, what every checkpoint did before);
- ``incremental 1s``: a checkpoint every second, each writing the changes since the last
  one, a whole snapshot after 10 deltas (the default);
- ``incremental 10s``: the default interval.

Per mode, over the timed part: events/s, process CPU seconds per million events (every thread:
the checkpoint thread too), checkpoints taken and the bytes they wrote, the longest
engine-lock stall, the join rows held when timing starts, and the output rows (the whole
run), which must be equal in every mode. The overhead is throughput against ``off`` in the same
run. Ends with ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.nexmark.generator import generate  # noqa: E402
from laminardb.nexmark.queries import SOURCES_DDL, query  # noqa: E402

MODES = {
    "off": {"checkpoint_interval": "off"},
    "whole 1s": {"checkpoint_interval": "1s", "checkpoint_incremental": False},
    "incremental 1s": {"checkpoint_interval": "1s"},
    "incremental 10s": {"checkpoint_interval": "10s"},
}


def parse_count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def run_mode(name: str, config: dict, batches: list, warm_batches: int, workdir: Path) -> dict:
    """Insert ``batches[:warm_batches]`` (untimed: it builds the state), then the rest timed."""
    import laminardb

    path = workdir / name.replace(" ", "-")
    shutil.rmtree(path, ignore_errors=True)
    q = query("q20")
    db = laminardb.open(path, config=dict(config))
    db.execute(SOURCES_DDL)
    db.execute(q.statement())
    sub = db.subscribe_stream(q.name, history_rows=0)
    rows_out = 0

    def feed(items) -> None:
        nonlocal rows_out
        for stream, batch in items:
            db.insert(stream, batch)
            while (out := sub.try_next()) is not None:
                rows_out += out.num_rows

    feed(batches[:warm_batches])
    state_before = db.metrics()["queries"][q.name].get("state_rows")
    ck0 = dict(db.metrics().get("checkpoints") or {})
    timed = batches[warm_batches:]
    events = sum(b.num_rows for _, b in timed)
    cpu0, t0 = time.process_time(), time.perf_counter()
    feed(timed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    m = db.metrics()
    ck = m.get("checkpoints") or {}
    db.close()
    shutil.rmtree(path, ignore_errors=True)
    n_ckpt = ck.get("checkpoints", 0) - ck0.get("checkpoints", 0)
    return {"mode": name, "events": events, "events_per_s": events / wall, "cpu_s_per_m": cpu / events * 1e6,
            "checkpoints": n_ckpt, "bytes_written": ck.get("bytes_written", 0) - ck0.get("bytes_written", 0),
            "max_stall_ms": 1e3 * (ck.get("max_stall_s") or 0.0), "state_rows_before": state_before,
            "rows_out": rows_out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm", default="3M", help="events inserted before the timed part (the state)")
    ap.add_argument("--events", default="3M", help="events timed after the warm-up")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    args = ap.parse_args()
    warm, events = parse_count(args.warm), parse_count(args.events)
    print(f"generating {warm + events:,} events (off the clock) ...", flush=True)
    batches = list(generate(warm + events, seed=0))
    warm_batches = _batches_before(batches, warm)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="laminardb-bench-incr-"))
    modes = [m.strip() for m in args.modes.split(",")]
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.repeat):
        for m in modes:  # interleaved, so a busy moment hits every mode alike
            res = run_mode(m, MODES[m], batches, warm_batches, workdir)
            runs[m].append(res)
            print(f"run {r + 1} {m:16s} {res['events_per_s'] / 1e3:8.0f} k ev/s  "
                  f"{res['cpu_s_per_m']:.2f} CPU s/M  {res['checkpoints']} ckpts  "
                  f"{res['bytes_written'] / 1e6:.0f} MB  stall {res['max_stall_ms']:.0f} ms  out {res['rows_out']}",
                  flush=True)
    outs = {res["rows_out"] for rs in runs.values() for res in rs}
    assert len(outs) == 1, f"output rows differ between modes: {outs}"
    base = statistics.median(r["events_per_s"] for r in runs.get("off", [])) if "off" in runs else None
    print(f"\nq20: {warm:,} events to build the state, then {events:,} timed; {args.repeat} run(s) per mode; "
          "overhead = 1 - throughput / off\n")
    print("| mode | k events/s (runs) | overhead | CPU s / M events (runs) | checkpoints | MB per checkpoint | "
          "max stall ms | join rows before |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for m, rs in runs.items():
        eps = [r["events_per_s"] for r in rs]
        med = statistics.median(eps)
        over = "—" if base is None or m == "off" else f"{100 * (1 - med / base):.0f} %"
        ck = statistics.median(r["checkpoints"] for r in rs)
        mb = statistics.median((r["bytes_written"] or 0) / max(r["checkpoints"], 1) / 1e6 for r in rs)
        cpus = [r["cpu_s_per_m"] for r in rs]
        print(f"| {m} | {med / 1e3:.0f} ({', '.join(f'{e / 1e3:.0f}' for e in eps)}) | {over} | "
              f"{statistics.median(cpus):.2f} ({', '.join(f'{c:.2f}' for c in cpus)}) | {ck:.0f} | {mb:.1f} | "
              f"{max(r['max_stall_ms'] for r in rs):.0f} | {rs[-1]['state_rows_before']:,} |")
        summary[m] = {"events_per_s": eps, "runs": rs}
    shutil.rmtree(workdir, ignore_errors=True) if args.dir is None else None
    print("BENCH_JSON " + json.dumps({"warm": warm, "events": events, "modes": summary}))


def _batches_before(batches: list, events: int) -> int:
    """How many batches hold the first ``events`` events."""
    n = 0
    for i, (_, b) in enumerate(batches):
        if n >= events:
            return i
        n += b.num_rows
    return len(batches)


if __name__ == "__main__":
    main()
