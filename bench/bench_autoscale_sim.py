"""Autoscaling policy over load traces: what it saves against a fixed cluster, what it costs in lag.

Run from the repository root (pure Python + numpy, no services, a few seconds):

    .venv/bin/python bench/bench_autoscale_sim.py
    .venv/bin/python bench/bench_autoscale_sim.py --per-actor-rate 1e6 --pause 2 --config '{"stabilization_window": "20s"}'

Two synthesized traces, one value per second, deterministic (``--seed``):

- ``burst10m``: 10 minutes at 25 % of the peak with three bursts (60 s to the peak, 30 s to
  80 %, 90 s to the peak);
- ``day``: a day compressed into ``--day-seconds`` (default 2 h): night trough at 10 %, a
  daytime plateau and an evening hump, plus six bursts to the peak (90–300 s each);
  ±5 % noise on both.

For each ``max_actors`` M in 1, 2, 4, …, 64 the trace is scaled so that its peak is
``--peak-load`` (0.9) × M actors' worth of rows at ``--per-actor-rate`` (3.5M rows/s: one actor
on the keyed 1 s-window workload). The fixed cluster sized for the peak therefore has
ceil(peak / rate) = M actors. Both run through the same one-second model
(``laminardb.autoscale._sim``): lag grows by the arrivals and shrinks by actors × rate; each
rescale pauses all processing for ``--pause`` seconds (the measured checkpoint + restore time),
with old and new actors both allocated. Printed per M: actor-seconds of both, the saving, the
autoscaled run's max lag (rows and seconds of peak input), the time each burst took to drain
after it ended (lag back under one second of input), rescales. Last line ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminardb.autoscale import AutoscaleConfig  # noqa: E402
from laminardb.autoscale._sim import SimResult, simulate  # noqa: E402

_NOISE = 0.05  # ±5 % per-second noise on every trace: enough to tempt a policy into flapping


def burst10m(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Shape in [0, 1] (1 = the peak) and the bursts as (start, end) seconds."""
    shape = np.full(600, 0.25)
    bursts = [(60, 120, 1.0), (240, 270, 0.8), (390, 480, 1.0)]
    for a, b, level in bursts:
        shape[a:b] = level
    return shape * rng.uniform(1 - _NOISE, 1 + _NOISE, shape.size), [(a, b) for a, b, _ in bursts]


def day(rng: np.random.Generator, seconds: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    hour = np.arange(seconds) * 24.0 / seconds
    night = 0.10
    plateau = 0.55 * np.clip((hour - 6) / 3, 0, 1) * np.clip((19 - hour) / 2, 0, 1)
    evening = 0.25 * np.exp(-((hour - 20.5) / 1.2) ** 2)
    shape = night + plateau + evening
    bursts = []
    for start_h, length in ((2.5, 120), (9.5, 300), (12.0, 90), (14.5, 180), (17.0, 240), (21.0, 150)):
        a = int(start_h / 24 * seconds)
        b = min(seconds, a + length)
        shape[a:b] = 1.0
        bursts.append((a, b))
    return np.minimum(shape, 1.0) * rng.uniform(1 - _NOISE, 1 + _NOISE, seconds), bursts


def drain_times(r: SimResult, arrival: np.ndarray, bursts: list[tuple[int, int]]) -> list[float | None]:
    """Seconds after each burst's end until the lag is under one second of input (None: never)."""
    out: list[float | None] = []
    for _a, b in bursts:
        behind = np.nonzero(r.lag[b - 1:] <= arrival[b - 1:])[0]
        out.append(float(behind[0]) if len(behind) else None)
    return out


def run_trace(name: str, shape: np.ndarray, bursts, cfg_base: dict, args) -> list[dict]:
    rows = []
    for m in args.max_actors:
        peak = args.peak_load * m * args.per_actor_rate
        arrival = shape * peak
        cfg = AutoscaleConfig.from_config({"autoscale": True, "max_actors": m, **cfg_base})
        fixed_n = max(1, math.ceil(float(arrival.max()) / args.per_actor_rate - 1e-9))
        fixed_n = min(fixed_n, m)
        fixed = simulate(cfg, arrival, per_actor_rate=args.per_actor_rate, initial_actors=fixed_n,
                         fixed=True)
        start = max(1, min(m, math.ceil(float(arrival[0]) / (cfg.target_utilization * args.per_actor_rate))))
        auto = simulate(cfg, arrival, per_actor_rate=args.per_actor_rate, initial_actors=start,
                        partitions=args.partitions, cpus=m, pause=args.pause)
        drains = drain_times(auto, arrival, bursts)
        rows.append({
            "trace": name, "max_actors": m, "fixed_actors": fixed_n,
            "fixed_actor_s": fixed.actor_seconds, "fixed_max_lag": fixed.max_lag,
            "auto_actor_s": auto.actor_seconds,
            "saving": 1.0 - auto.actor_seconds / fixed.actor_seconds,
            "max_lag": auto.max_lag, "max_lag_s": auto.max_lag / peak,
            "drain_s": drains, "rescales": len(auto.rescales),
            "paused_s": len(auto.rescales) * args.pause,
            "scale_outs": sum(d.action == "scale_out" for d in auto.rescales),
            "scale_ins": sum(d.action == "scale_in" for d in auto.rescales),
            "actors_range": [int(auto.actors.min()), int(auto.actors.max())],
        })
    return rows


def print_table(rows: list[dict], per_burst: bool) -> None:
    print(f"{'M':>3} {'fixed':>5} {'fixed act·s':>11} {'auto act·s':>10} {'saving':>7} "
          f"{'actors':>7} {'max lag':>10} {'(s@peak)':>8} {'rescales':>9}  drain after burst (s)")
    for r in rows:
        d = [("never" if x is None else f"{x:.0f}") for x in r["drain_s"]]
        if not per_burst:
            known = [x for x in r["drain_s"] if x is not None]
            d = [f"max {max(known):.0f}, median {float(np.median(known)):.0f}" if known else "never"]
        print(f"{r['max_actors']:>3} {r['fixed_actors']:>5} {r['fixed_actor_s']:>11.0f} "
              f"{r['auto_actor_s']:>10.0f} {r['saving']:>7.1%} "
              f"{r['actors_range'][0]:>3}–{r['actors_range'][1]:<3} {r['max_lag'] / 1e6:>8.1f}M "
              f"{r['max_lag_s']:>8.1f} {r['rescales']:>3} ({r['scale_outs']}↑{r['scale_ins']}↓)  "
              f"{', '.join(d)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-actor-rate", type=float, default=3.5e6,
                    help="rows/s one busy actor processes (default: keyed 1 s-window workload)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds each rescale stops processing")
    ap.add_argument("--max-actors", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--partitions", type=int, default=64, help="Kafka partitions of the source")
    ap.add_argument("--peak-load", type=float, default=0.9, help="trace peak, in max_actors' capacity")
    ap.add_argument("--day-seconds", type=int, default=7200, help="the compressed day's length")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--config", default="{}", help="JSON of autoscale knobs to override")
    args = ap.parse_args()
    cfg_base = json.loads(args.config)
    cfg = AutoscaleConfig.from_config({"autoscale": True, **cfg_base})
    print(f"per-actor rate {args.per_actor_rate / 1e6:.2f}M rows/s, pause {args.pause:.1f} s per rescale, "
          f"{args.partitions} partitions, peak = {args.peak_load:.0%} of max_actors' capacity")
    print("policy: " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items()
                                  if k not in ("enabled", "max_actors")))
    rng = np.random.default_rng(args.seed)
    results = {}
    for name, (shape, bursts), per_burst in (
            ("burst10m", burst10m(rng), True),
            (f"day{args.day_seconds}s", day(rng, args.day_seconds), False)):
        print(f"\n== {name}: {len(shape)} s, {len(bursts)} bursts, mean load {shape.mean():.0%} of peak")
        rows = run_trace(name, shape, bursts, cfg_base, args)
        print_table(rows, per_burst)
        results[name] = rows
    summary = {"bench": "autoscale_sim", "per_actor_rate": args.per_actor_rate, "pause_s": args.pause,
               "partitions": args.partitions, "peak_load": args.peak_load, "config": cfg.to_dict(),
               "traces": results}
    print("BENCH_JSON " + json.dumps(summary))


if __name__ == "__main__":
    main()
