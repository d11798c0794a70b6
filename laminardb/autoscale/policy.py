"""The autoscaling policy: how many reactor actors a database should run. Entry point:
``Autoscaler(config).evaluate(observation) -> Decision``.

Pure and deterministic: no clock, no randomness, no I/O. The database head collects an
``Observation`` every ``evaluation_interval`` (Kafka end offsets against the consumed offsets,
the arrival rate, each actor's busy time and rows over ``metrics_window``), calls ``evaluate``
and, when ``Decision.changed``, rescales to ``Decision.actors``. The same observations give the
same decisions, so a recorded trace replays exactly (``bench/bench_autoscale_sim.py``).

The method is the Flink Kubernetes operator autoscaler's (after DS2, Kalavri et al. OSDI '18):

- true processing rate per actor ``TPR = rows processed / busy seconds`` (what one actor could
  do if it were busy all the time);
- ``target capacity = arrival / target_utilization + lag / catch_up_time
  + arrival · restart_time / catch_up_time`` (the last term pays back the rows that arrive
  while a rescale pauses the database);
- ``wanted = ceil(target capacity / TPR)``, clamped to ``[ceil(P·(1 − scale_down_max_factor)),
  ceil(P·(1 + scale_up_max_factor))]`` for P actors now, to ``[min_actors, max_actors]``, to the
  Kafka partition count (``partition_cap``; with ``align_to_partitions`` rounded up until the
  actor that reads the most partitions still meets the target: Flink rounds to a divisor of
  the partition count), to the vnode count, and to the actors the free CPUs can host.

It never flaps, by three guards:

1. hysteresis: act only when utilization (arrival / (P · TPR)) leaves
   [target − band, target + band], or when the lag cannot drain within ``catch_up_time`` at the
   present spare capacity ("overdue lag": scale out even inside the band);
2. stabilization: a decision needs its condition to hold for ``stabilization_window``; a
   scale-in goes only to the *highest* recommendation of the last
   ``max(stabilization_window, scale_in_cooldown)`` (the Kubernetes HPA's scale-down window),
   so a load that comes back within that time never lets the count drop, and only when it
   frees more than 10 % of the actors (the HPA's tolerance);
3. cooldown: no scale-in within ``scale_in_cooldown`` of the end of any rescale (when the head
   reports the new count), and no decision at all
   until the head reports the count last decided (a rescale in progress).

Partitions: an actor beyond the Kafka partition count reads nothing; after the vnode shuffle
it still processes keyed rows. ``partition_cap`` (default True) follows Flink and KEDA
(sources are capped by partitions) because decoding Kafka records costs more per row than the
keyed operators do; set it False for a keyed-heavy pipeline so that actors may exceed the
partition count (up to the vnode count).

Running out of CPUs is a status, not an error: the decision says "wanted N, capped at M: no
free CPUs" and holds (or scales to M), and the head asks again at the next evaluation.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from laminardb.autoscale.config import AutoscaleConfig

__all__ = ["Action", "Autoscaler", "Decision", "Observation"]

Action = Literal["hold", "scale_out", "scale_in"]

# Decisions kept for metrics(): one per evaluation, ~10 minutes at the default 10 s interval.
_HISTORY = 64
# Rescales kept for metrics() and cluster status: a day of hourly changes.
_RESCALES = 32
# Below this many busy seconds (all actors together) in a window, rows / busy time is timer
# noise: keep the last measured TPR instead.
_MIN_BUSY_S = 1e-3
# A rescale the head has not reported within this time (or 3 × restart_time if longer) is taken
# as failed: the policy continues from the count the head reports.
_PENDING_TIMEOUT_S = 60.0
# A scale-in that would free no more than this share of the actors is not worth a pause (the
# Kubernetes HPA's default tolerance): 14 → 13 is skipped, 14 → 12 or 2 → 1 is done.
_SCALE_IN_TOLERANCE = 0.1
# ceil() of a float ratio that is a whole number up to rounding (3.0000000004) must stay 3.
_CEIL_EPS = 1e-9


@dataclass(frozen=True)
class Observation:
    """What the head measured for one evaluation (see docs/cluster.md, "Autoscaling policy").

    ``busy[i]`` is actor i's busy fraction of the last ``window`` seconds and ``processed[i]``
    the rows it processed in them; ``lag`` is Σ over partitions of (end offset − consumed
    offset), plus the rows read and still queued for the actors; ``arrival_rate`` is the
    growth of the end offsets over the window, in rows/s.
    ``partitions``: the source's Kafka partition count (None: no Kafka source); ``free_cpus``:
    CPUs the cluster could still give actors, one each (None: unknown, no cap); ``vnodes``: the
    vnode count (no actor beyond it owns anything). ``partition_lag`` (per partition) and
    ``checkpoint_lag`` (Σ end − checkpointed offset: what a restore replays) are shown, not used.
    """

    time: float
    actors: int
    lag: int
    arrival_rate: float
    busy: Sequence[float]
    processed: Sequence[int]
    window: float
    partitions: int | None = None
    free_cpus: int | None = None
    partition_lag: Mapping[str, int] | None = None
    checkpoint_lag: int | None = None
    vnodes: int | None = None

    def __post_init__(self) -> None:
        # head-side faults, not user input: plain ValueError with what is wrong
        if self.actors < 1:
            raise ValueError(f"Observation.actors must be ≥ 1, got {self.actors}")
        if len(self.busy) != len(self.processed):
            raise ValueError(f"Observation: {len(self.busy)} busy fractions but "
                             f"{len(self.processed)} processed counts (one of each per actor)")
        if self.window <= 0 or self.lag < 0 or self.arrival_rate < 0:
            raise ValueError("Observation: window must be > 0, lag and arrival_rate ≥ 0")
        if self.free_cpus is not None and self.free_cpus < 0:
            raise ValueError(f"Observation.free_cpus must be ≥ 0 or None, got {self.free_cpus}")


@dataclass(frozen=True)
class Decision:
    """The actor count to run and why. ``changed``: the head must rescale to ``actors``."""

    time: float
    previous: int
    actors: int
    action: Action
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)
    capped_by: str | None = None

    @property
    def changed(self) -> bool:
        return self.actors != self.previous

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "previous": self.previous, "actors": self.actors,
                "action": self.action, "reason": self.reason, "capped_by": self.capped_by,
                "inputs": dict(self.inputs)}


def _rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M rows/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k rows/s"
    return f"{x:.0f} rows/s"


def _rows(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.1f}M rows"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k rows"
    return f"{x:.0f} rows"


def _align(n: int, need: float, partitions: int, top: int) -> int:
    """The fewest actors ≥ n (≤ top) whose busiest one still meets the target. Partitions spread
    as evenly as they can, so the busiest actor reads ceil(P/q) of P partitions and q actors
    work like P / ceil(P/q) actors at full rate (12 partitions on 8 actors: like 6). Flink rounds
    to a divisor of P, the case of no imbalance at all; with many partitions per actor the
    imbalance is small and no rounding is needed (64 on 5: like 4.9)."""
    best, best_eff = n, partitions / math.ceil(partitions / n)
    for q in range(n, top + 1):
        eff = partitions / math.ceil(partitions / q)
        if eff >= need - _CEIL_EPS:
            return q
        if eff > best_eff:
            best, best_eff = q, eff
    return best


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


class Autoscaler:
    """The policy's state for one database; feed it observations in time order."""

    def __init__(self, config: AutoscaleConfig) -> None:
        self.config = config
        self._tpr: float | None = None  # last measured true processing rate per actor
        self._tpr_time: float | None = None
        self._last_time: float | None = None
        self._last_rescale: float | None = None  # cooldowns count from here
        self._seen_actors: int | None = None
        self._pending: tuple[int, float] | None = None  # (decided count, decided at)
        self._out_since: float | None = None
        self._in_since: float | None = None
        # (time, recommendation) since the last rescale, within the scale-in horizon
        self._recs: deque[tuple[float, int]] = deque()
        self.history: deque[Decision] = deque(maxlen=_HISTORY)
        self.rescales: deque[Decision] = deque(maxlen=_RESCALES)
        self.last_capped: Decision | None = None  # the last decision a limit held back (status)
        self._uncapped = 1  # the last recommendation before the free-CPU cap (``_clamp``)

    # ---- public surface

    def evaluate(self, obs: Observation) -> Decision:
        """One evaluation: the count to run now, the reason, and the inputs it was taken from."""
        if self._last_time is not None and obs.time < self._last_time:
            raise ValueError(f"Observation.time went back from {self._last_time} to {obs.time}: "
                             f"use a monotonic clock")
        self._last_time = obs.time
        if self._last_rescale is None:
            self._last_rescale = obs.time  # the actors just started: metrics are not settled yet
        note = self._track_count(obs)
        if isinstance(note, Decision):
            return self._record(note)
        decision = self._decide(obs, note)
        if decision.changed:
            self._pending = (decision.actors, obs.time)
            self._last_rescale = obs.time
            self._reset_windows()
            self.rescales.append(decision)
        return self._record(decision)

    def metrics(self) -> dict[str, Any]:
        """Decision inputs, the last decisions and rescales: for ``metrics()`` and cluster status."""
        last = self.history[-1] if self.history else None
        return {
            "enabled": self.config.enabled,
            "config": self.config.to_dict(),
            "actors": last.actors if last else None,
            "last": last.to_dict() if last else None,
            "pending_rescale": ({"actors": self._pending[0], "since": self._pending[1]}
                                if self._pending else None),
            "tpr": self._tpr,
            "decisions": [d.to_dict() for d in list(self.history)[-10:]],
            "last_capped": self.last_capped.to_dict() if self.last_capped else None,
            "rescales": [d.to_dict() for d in self.rescales],
        }

    # ---- steps

    def _record(self, d: Decision) -> Decision:
        self.history.append(d)
        if d.capped_by is not None:
            self.last_capped = d
        return d

    def _reset_windows(self) -> None:
        self._out_since = None
        self._in_since = None
        self._recs.clear()

    def _track_count(self, obs: Observation) -> Decision | str:
        """Follow the count the head reports: wait for a decided rescale to show, notice a
        change made by someone else (a lost actor, an operator). A Decision means: hold now."""
        note = ""
        if self._pending is not None:
            target, since = self._pending
            timeout = max(_PENDING_TIMEOUT_S, 3 * self.config.restart_time)
            if obs.actors == target:  # done: the cooldown counts from the rescale's end
                self._pending = None
                self._last_rescale = obs.time
                self._reset_windows()
            elif obs.time - since < timeout:
                self._seen_actors = obs.actors
                return Decision(obs.time, obs.actors, obs.actors, "hold",
                                f"hold at {obs.actors}: rescale to {target} in progress",
                                {"time": obs.time, "actors": obs.actors, "pending": target})
            else:
                self._pending = None
                note = (f"rescale to {target} not seen within {timeout:.0f} s, "
                        f"continuing from {obs.actors}; ")
                self._last_rescale = obs.time
                self._reset_windows()
        elif self._seen_actors is not None and obs.actors != self._seen_actors:
            note = f"actor count changed outside the autoscaler ({self._seen_actors} → {obs.actors}); "
            self._last_rescale = obs.time
            self._reset_windows()
        self._seen_actors = obs.actors
        return note

    def _measure_tpr(self, obs: Observation) -> tuple[float | None, bool]:
        busy_s = sum(min(max(b, 0.0), 1.0) for b in obs.busy) * obs.window
        rows = sum(obs.processed)
        if busy_s >= _MIN_BUSY_S and rows > 0:
            self._tpr = rows / busy_s
            self._tpr_time = obs.time
            return self._tpr, True
        return self._tpr, False

    def _upper(self, obs: Observation) -> tuple[int, str | None]:
        """The largest count the topology and config allow (CPUs aside), and what sets it."""
        cfg = self.config
        hi, by = math.inf, None
        for limit, name in ((cfg.max_actors, "max_actors"),
                            (obs.partitions if cfg.partition_cap else None, "partitions"),
                            (obs.vnodes, "vnodes")):
            if limit is not None and limit < hi:
                hi, by = limit, name
        if hi < cfg.min_actors:  # min_actors is an explicit wish: it wins over partitions/vnodes
            return cfg.min_actors, "min_actors"
        return (int(hi), by) if math.isfinite(hi) else (1 << 30, None)

    def _clamp(self, wanted: int, need: float, obs: Observation) -> tuple[int, str | None]:
        """Factors, then [min_actors, max_actors], partitions, vnodes; alignment; free CPUs.
        ``need``: the target capacity in actors (a real number; ``wanted`` is its ceiling)."""
        cfg = self.config
        p = obs.actors
        lo_f = math.ceil(p * (1.0 - cfg.scale_down_max_factor) - _CEIL_EPS)
        hi_f = math.ceil(p * (1.0 + cfg.scale_up_max_factor) - _CEIL_EPS)
        n, by = wanted, None
        if n > hi_f:
            n, by = hi_f, "scale_up_max_factor"
        elif n < lo_f:
            n, by = lo_f, "scale_down_max_factor"
        n = max(n, cfg.min_actors, 1)
        hi, hi_by = self._upper(obs)
        if n > hi:
            n, by = hi, hi_by
        cpu_hi = p + obs.free_cpus if obs.free_cpus is not None else None
        if cfg.partition_cap and cfg.align_to_partitions and obs.partitions and n < obs.partitions:
            top = min(hi, obs.partitions, cpu_hi if cpu_hi is not None else hi)
            n = _align(n, need, obs.partitions, top)
        self._uncapped = n  # what the free CPUs hold back: what Ray's autoscaler is asked for
        if cpu_hi is not None and n > cpu_hi:
            n, by = cpu_hi, "free_cpus"
        return n, by

    def _decide(self, obs: Observation, note: str) -> Decision:
        cfg = self.config
        p = obs.actors
        tpr, measured = self._measure_tpr(obs)
        lo_u = cfg.target_utilization - cfg.utilization_band
        hi_u = cfg.target_utilization + cfg.utilization_band
        inputs: dict[str, Any] = {
            "time": obs.time, "actors": p, "lag": obs.lag, "checkpoint_lag": obs.checkpoint_lag,
            "arrival_rate": obs.arrival_rate, "partitions": obs.partitions,
            "free_cpus": obs.free_cpus,
            "busy_mean": (sum(obs.busy) / len(obs.busy)) if obs.busy else None,
            "tpr": tpr, "tpr_measured": measured, "utilization_bounds": [lo_u, hi_u],
        }
        if obs.partition_lag:
            hot = max(obs.partition_lag, key=lambda k: obs.partition_lag[k])  # type: ignore[index]
            inputs["max_partition_lag"] = {"partition": hot, "lag": obs.partition_lag[hot]}

        def hold(reason: str, by: str | None = None) -> Decision:
            return Decision(obs.time, p, p, "hold", note + reason, inputs, by)

        idle = obs.lag == 0 and obs.arrival_rate == 0
        if tpr is None and not idle:
            return hold(f"hold at {p}: no processing-rate sample yet (actors reported no busy time)")

        # Flink's target capacity, and the actors it takes at the measured TPR
        required = (obs.arrival_rate / cfg.target_utilization + obs.lag / cfg.catch_up_time
                    + obs.arrival_rate * cfg.restart_time / cfg.catch_up_time)
        raw = 0 if idle else math.ceil(required / tpr - _CEIL_EPS)  # type: ignore[operator]
        capacity = p * tpr if tpr else math.inf
        utilization = obs.arrival_rate / capacity if capacity > 0 else 0.0
        spare = capacity - obs.arrival_rate
        drain_s = 0.0 if obs.lag == 0 else (obs.lag / spare if spare > 0 else math.inf)
        overdue = obs.lag > 0 and drain_s > cfg.catch_up_time
        n, by = self._clamp(max(raw, 1), 0.0 if idle else required / tpr, obs)  # type: ignore[operator]
        inputs.update({"required_capacity": required, "capacity": _finite(capacity),
                       "utilization": utilization, "drain_s": _finite(drain_s), "overdue": overdue,
                       "wanted": raw, "recommended": n, "capped_by": by,
                       "without_cpu_cap": self._uncapped})
        capped = f"; wanted {raw}, capped at {n}: {self._cap_text(by, obs)}" if n < raw else ""
        if not cfg.enabled:
            return hold(f"hold at {p}: autoscale off (would run {n}{capped})", by)

        # bounds first: a count outside [min_actors, upper] is corrected at once
        hi, hi_by = self._upper(obs)
        if p < cfg.min_actors:
            if n > p:
                return self._act(obs, note, n, "scale_out", f"below min_actors={cfg.min_actors}{capped}",
                                 by, inputs)
            return hold(f"hold at {p}: below min_actors={cfg.min_actors}, but "
                        f"{self._cap_text(by, obs)}", by)
        if p > hi:
            return self._act(obs, note, n, "scale_in", f"above the cap of {hi}: {self._cap_text(hi_by, obs)}",
                             hi_by, inputs)

        self._recs.append((obs.time, n))
        horizon = max(cfg.stabilization_window, cfg.scale_in_cooldown)
        while self._recs and self._recs[0][0] < obs.time - horizon:
            self._recs.popleft()
        why_util = f"utilization {utilization:.2f}"
        load = (f"arrival {_rate(obs.arrival_rate)}, capacity "
                f"{_rate(capacity) if math.isfinite(capacity) else 'not measured yet'}")

        if n > p and (utilization > hi_u or overdue):
            self._in_since = None
            if self._out_since is None:
                self._out_since = obs.time
            why = (f"{why_util} above {hi_u:.2f} ({load})" if utilization > hi_u else
                   f"lag {_rows(obs.lag)} would take {self._secs(drain_s)} to drain "
                   f"> catch_up_time {cfg.catch_up_time:.0f} s")
            held = obs.time - self._out_since
            if held < cfg.stabilization_window:
                return hold(f"hold at {p}: scale-out to {n} waits for the stabilization window "
                            f"(held {held:.0f} s of {cfg.stabilization_window:.0f} s): {why}{capped}", by)
            return self._act(obs, note, n, "scale_out", why + capped, by, inputs)

        if n == p and n < raw:
            self._out_since = self._in_since = None
            return hold(f"hold at {p}: wanted {raw}, capped at {n}: {self._cap_text(by, obs)}", by)

        if n < p and utilization < lo_u and not overdue:
            self._out_since = None
            if self._in_since is None:
                self._in_since = obs.time
            held = obs.time - self._in_since
            cool_left = self._last_rescale + cfg.scale_in_cooldown - obs.time  # type: ignore[operator]
            peak = max(r for _, r in self._recs)
            why = f"{why_util} below {lo_u:.2f} ({load})"
            if held < cfg.stabilization_window:
                return hold(f"hold at {p}: scale-in to {n} waits for the stabilization window "
                            f"(held {held:.0f} s of {cfg.stabilization_window:.0f} s): {why}")
            if cool_left > 0:
                return hold(f"hold at {p}: scale-in to {n} waits for the cooldown "
                            f"({cool_left:.0f} s left of scale_in_cooldown): {why}")
            if peak >= p:
                return hold(f"hold at {p}: scale-in to {n} waits: the highest recommendation of the "
                            f"last {horizon:.0f} s is {peak}: {why}")
            if peak >= p * (1.0 - _SCALE_IN_TOLERANCE) - _CEIL_EPS:
                return hold(f"hold at {p}: scale-in to {peak} (the highest recommendation of the last "
                            f"{horizon:.0f} s) would free too few actors to pay for a rescale: {why}")
            return self._act(obs, note, peak, "scale_in",
                             f"{why} for {held:.0f} s; highest recommendation of the last "
                             f"{horizon:.0f} s is {peak}", by if peak == n else None, inputs)

        self._out_since = self._in_since = None
        lag_txt = "no lag" if obs.lag == 0 else f"lag {_rows(obs.lag)} drains in {self._secs(drain_s)}"
        if lo_u <= utilization <= hi_u:
            return hold(f"hold at {p}: {why_util} within [{lo_u:.2f}, {hi_u:.2f}], {lag_txt}")
        return hold(f"hold at {p}: {why_util}, {lag_txt}; recommendation {n}")

    @staticmethod
    def _act(obs: Observation, note: str, n: int, action: Action, why: str, by: str | None,
             inputs: dict[str, Any]) -> Decision:
        arrow = "out" if action == "scale_out" else "in"
        return Decision(obs.time, obs.actors, n, action,
                        f"{note}scale {arrow} {obs.actors} → {n}: {why}", inputs, by)

    @staticmethod
    def _secs(s: float) -> str:
        return "forever (arrival ≥ capacity)" if not math.isfinite(s) else f"{s:.0f} s"

    def _cap_text(self, by: str | None, obs: Observation) -> str:
        if by == "free_cpus":
            return f"no free CPUs ({obs.free_cpus} free)"
        if by == "max_actors":
            return f"max_actors={self.config.max_actors}"
        if by == "partitions":
            return f"{obs.partitions} Kafka partitions (partition_cap)"
        if by == "vnodes":
            return f"{obs.vnodes} vnodes"
        if by == "scale_up_max_factor":
            return f"scale_up_max_factor={self.config.scale_up_max_factor}"
        if by == "min_actors":
            return f"min_actors={self.config.min_actors}"
        return str(by)
