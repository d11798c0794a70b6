"""A one-second-step model of a database under a load trace, driven by the policy: ``simulate``.

Used by ``bench/bench_autoscale_sim.py`` and the policy tests. The model: each second
``arrival[t]`` rows reach Kafka; N actors each process up to ``per_actor_rate`` rows per second
of the lag; a rescale pauses processing for ``pause`` seconds (the checkpoint, the vnode moves
and the restore), during which the old and the new actors are both allocated. Every
``evaluation_interval`` the head's observation is built the way the head builds it: rates and
busy time averaged over ``metrics_window``, lag at that instant. Deterministic: no clock and no
randomness (the trace carries any noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from laminardb.autoscale.config import AutoscaleConfig
from laminardb.autoscale.policy import Autoscaler, Decision, Observation

__all__ = ["SimResult", "simulate"]


@dataclass
class SimResult:
    """Per-second series and the decisions that changed the count."""

    actors: np.ndarray  # allocated actors each second (both sets during a rescale's pause)
    lag: np.ndarray  # rows behind at the end of each second
    processed: np.ndarray  # rows processed each second
    rescales: list[Decision] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def actor_seconds(self) -> float:
        return float(self.actors.sum())

    @property
    def max_lag(self) -> float:
        return float(self.lag.max()) if len(self.lag) else 0.0


def simulate(config: AutoscaleConfig, arrival: np.ndarray, *, per_actor_rate: float,
             initial_actors: int = 1, partitions: int | None = None, cpus: int | None = None,
             pause: float = 1.0, fixed: bool = False, keep_decisions: bool = False) -> SimResult:
    """Run ``arrival`` (rows/s, one value per second) through the policy (or, ``fixed``, through
    ``initial_actors`` actors that never change). ``cpus``: CPUs the cluster has for actors."""
    steps = len(arrival)
    window = max(1, round(config.metrics_window))
    every = max(1, round(config.evaluation_interval))
    scaler = Autoscaler(config)
    n = initial_actors
    target = n
    pause_until = 0.0
    lag = 0.0
    out_actors = np.zeros(steps)
    out_lag = np.zeros(steps)
    out_proc = np.zeros(steps)
    busy_s = np.zeros(steps)  # busy seconds of all actors together, per second
    result = SimResult(out_actors, out_lag, out_proc)
    for t in range(steps):
        if target != n and t >= pause_until:
            n = target  # the rescale finished: the new actors run
        avail = min(1.0, max(0.0, t + 1 - pause_until))  # part of this second not paused
        lag += float(arrival[t])
        done = min(lag, n * per_actor_rate * avail)
        lag -= done
        out_proc[t] = done
        busy_s[t] = done / per_actor_rate
        out_lag[t] = lag
        out_actors[t] = max(n, target)
        if fixed or (t + 1) % every:
            continue
        lo = max(0, t + 1 - window)
        span = t + 1 - lo
        total_busy = float(busy_s[lo:t + 1].sum())
        total_rows = float(out_proc[lo:t + 1].sum())
        obs = Observation(
            time=float(t + 1), actors=n, lag=int(lag),
            arrival_rate=float(arrival[lo:t + 1].sum()) / span,
            busy=[total_busy / (n * span)] * n, processed=[int(total_rows / n)] * n,
            window=float(span), partitions=partitions,
            free_cpus=None if cpus is None else max(0, cpus - n))
        d = scaler.evaluate(obs)
        if keep_decisions:
            result.decisions.append(d)
        if d.changed:
            result.rescales.append(d)
            target = d.actors
            pause_until = t + 1 + pause
    return result
