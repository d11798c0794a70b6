"""The autoscaler's knobs, read from a database's config dict: ``AutoscaleConfig.from_config``.

The keys are laminardb's own names for the knobs of the Flink Kubernetes operator autoscaler
(``job.autoscaler.*``), with defaults chosen for laminardb's fast restarts (a rescale pauses a
database for about a second, not minutes):

==========================  ============  ================================================
key                         default       Flink's knob / meaning
==========================  ============  ================================================
``autoscale``               False         ``enabled``; False keeps the actor count as set
``min_actors``              1             ``vertex.min-parallelism``
``max_actors``              None          ``vertex.max-parallelism``; None: only free CPUs
                                          and partitions cap it
``target_utilization``      0.7           ``target.utilization``
``utilization_band``        0.2           ``target.utilization.boundary``: act only outside
                                          [target − band, target + band] (or on overdue lag)
``catch_up_time``           "5m"          ``catch-up.duration``
``restart_time``            "10s"         ``restart.time``
``stabilization_window``    "1m"          ``stabilization.interval`` (+ the HPA's window)
``scale_in_cooldown``       "5m"          ``scale-down.interval``
``scale_up_max_factor``     100000.0      ``scale-up.max-factor`` (Flink's: unbounded)
``scale_down_max_factor``   0.6           ``scale-down.max-factor``: shrink to ≥ 40 % per step
``partition_cap``           True          never more actors than Kafka partitions
``align_to_partitions``     True          round up so that the actor reading the most
                                          partitions still meets the target
``evaluation_interval``     "10s"         how often the head evaluates (the head's timer)
``metrics_window``          "30s"         ``metrics.window``: the head averages rates over it
==========================  ============  ================================================

Durations are a number of seconds or text with a unit: ``"500ms"``, ``"10s"``, ``"5m"``,
``"1h"``. Every wrong value raises ``AutoscaleConfigError`` (LDB-8010) naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from laminardb.autoscale.exceptions import AutoscaleConfigError

__all__ = ["AutoscaleConfig", "parse_duration"]

_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def parse_duration(value: Any, *, key: str) -> float:
    """Seconds from ``10``, ``2.5``, ``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"``; ≥ 0 and finite."""
    seconds: float | None = None
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        for suffix, scale in _UNITS:
            if text.endswith(suffix):
                try:
                    seconds = float(text[: -len(suffix)]) * scale
                except ValueError:
                    seconds = None
                break
        else:
            try:
                seconds = float(text)
            except ValueError:
                seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        msg = (f"autoscale: {key}={value!r} is not a duration: write a number of seconds or e.g. "
               f"'500ms', '10s', '5m', '1h' (not negative)")
        raise AutoscaleConfigError(msg)
    return seconds


def _number(cfg: Mapping[str, Any], key: str, default: float, *, lo: float, hi: float,
            lo_open: bool, what: str) -> float:
    value = cfg.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        msg = f"autoscale: {key}={value!r} must be a number {what}"
        raise AutoscaleConfigError(msg)
    return float(value)


def _count(cfg: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = cfg.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"autoscale: {key}={value!r} must be a whole number of actors ≥ 1"
        raise AutoscaleConfigError(msg)
    return value


def _flag(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        msg = f"autoscale: {key}={value!r} must be True or False"
        raise AutoscaleConfigError(msg)
    return value


@dataclass(frozen=True)
class AutoscaleConfig:
    """The autoscaling knobs of one database (seconds for every duration); see the module table."""

    enabled: bool = False
    min_actors: int = 1
    max_actors: int | None = None
    target_utilization: float = 0.7
    utilization_band: float = 0.2
    catch_up_time: float = 300.0
    restart_time: float = 10.0
    stabilization_window: float = 60.0
    scale_in_cooldown: float = 300.0
    scale_up_max_factor: float = 100_000.0
    scale_down_max_factor: float = 0.6
    partition_cap: bool = True
    align_to_partitions: bool = True
    evaluation_interval: float = 10.0
    metrics_window: float = 30.0

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> AutoscaleConfig:
        """Read the autoscaling keys of a database config dict (other keys are ignored)."""
        cfg: Mapping[str, Any] = config or {}
        d = cls()
        min_actors = _count(cfg, "min_actors", d.min_actors)
        max_actors = _count(cfg, "max_actors", None)
        assert min_actors is not None
        if max_actors is not None and max_actors < min_actors:
            msg = (f"autoscale: min_actors={min_actors} is above max_actors={max_actors}: "
                   f"raise max_actors or lower min_actors")
            raise AutoscaleConfigError(msg)
        target = _number(cfg, "target_utilization", d.target_utilization, lo=0.0, hi=1.0,
                         lo_open=True, what="in (0, 1], e.g. 0.7")
        band = _number(cfg, "utilization_band", d.utilization_band, lo=0.0, hi=1.0,
                       lo_open=False, what="in [0, 1), e.g. 0.2")
        if band >= target:
            msg = (f"autoscale: utilization_band={band} must be below target_utilization={target} "
                   f"(the scale-in threshold target − band must stay above 0)")
            raise AutoscaleConfigError(msg)
        catch_up = parse_duration(cfg.get("catch_up_time", d.catch_up_time), key="catch_up_time")
        if catch_up <= 0:
            msg = "autoscale: catch_up_time must be above 0 (lag is drained within it): e.g. '5m'"
            raise AutoscaleConfigError(msg)
        evaluation = parse_duration(cfg.get("evaluation_interval", d.evaluation_interval),
                                    key="evaluation_interval")
        window = parse_duration(cfg.get("metrics_window", d.metrics_window), key="metrics_window")
        if evaluation <= 0 or window <= 0:
            msg = "autoscale: evaluation_interval and metrics_window must be above 0: e.g. '10s', '30s'"
            raise AutoscaleConfigError(msg)
        return cls(
            enabled=_flag(cfg, "autoscale", d.enabled),
            min_actors=min_actors,
            max_actors=max_actors,
            target_utilization=target,
            utilization_band=band,
            catch_up_time=catch_up,
            restart_time=parse_duration(cfg.get("restart_time", d.restart_time), key="restart_time"),
            stabilization_window=parse_duration(cfg.get("stabilization_window", d.stabilization_window),
                                                key="stabilization_window"),
            scale_in_cooldown=parse_duration(cfg.get("scale_in_cooldown", d.scale_in_cooldown),
                                             key="scale_in_cooldown"),
            scale_up_max_factor=_number(cfg, "scale_up_max_factor", d.scale_up_max_factor, lo=0.0,
                                        hi=math.inf, lo_open=True, what="above 0 (e.g. 1.0: at most double)"),
            scale_down_max_factor=_number(cfg, "scale_down_max_factor", d.scale_down_max_factor,
                                          lo=0.0, hi=1.0, lo_open=True,
                                          what="in (0, 1] (0.6: keep at least 40 % per step)"),
            partition_cap=_flag(cfg, "partition_cap", d.partition_cap),
            align_to_partitions=_flag(cfg, "align_to_partitions", d.align_to_partitions),
            evaluation_interval=evaluation,
            metrics_window=window,
        )

    def to_dict(self) -> dict[str, Any]:
        """The knobs as plain values (seconds for durations), for ``metrics()`` and status."""
        return asdict(self)
