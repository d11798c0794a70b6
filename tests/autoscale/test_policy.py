"""The autoscaling policy: Flink's formula, hysteresis, stabilization, cooldown and caps.

Pure Python, no services: observations are written by hand where the numbers matter, and
longer runs go through the one-second model of ``laminardb.autoscale._sim`` (lag grows by the
arrivals and shrinks by actors × rate; a rescale pauses processing for ``pause`` seconds).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from laminardb.autoscale import (
    AutoscaleConfig,
    AutoscaleConfigError,
    Autoscaler,
    Observation,
    parse_duration,
)
from laminardb.autoscale._sim import simulate
from laminardb.errors import ClusterError

R = 3.5e6  # rows/s one actor processes when busy all the time (the bench's default)


def config(**kw) -> AutoscaleConfig:
    return AutoscaleConfig.from_config({"autoscale": True, **kw})


def obs(t: float, actors: int, *, rate: float, lag: int = 0, tpr: float = R, window: float = 30.0,
        **kw) -> Observation:
    """An observation in which every actor worked at ``tpr`` rows per busy second and the actors
    together processed ``rate`` rows/s (what they can keep up with) over ``window``."""
    per_actor = min(rate, actors * tpr) / actors
    busy = per_actor / tpr
    return Observation(time=t, actors=actors, lag=lag, arrival_rate=rate, busy=[busy] * actors,
                       processed=[int(per_actor * window)] * actors, window=window, **kw)


def square(steps: int, half: int, hi: float, lo: float) -> np.ndarray:
    return np.where((np.arange(steps) // half) % 2 == 0, hi, lo)


def assert_no_flapping(rescales, cfg: AutoscaleConfig) -> None:
    """The guarantee: rescales are a stabilization window apart, scale-ins a cooldown after any."""
    for prev, cur in zip(rescales, rescales[1:], strict=False):
        assert cur.time - prev.time >= cfg.stabilization_window, (prev.reason, cur.reason)
        if cur.action == "scale_in":
            assert cur.time - prev.time >= cfg.scale_in_cooldown, (prev.reason, cur.reason)


# ---- Flink's formula, by hand


def test_flink_formula_numbers_by_hand():
    cfg = config(stabilization_window=0)  # target 0.7, catch_up 300 s, restart 10 s
    # 2 actors, each busy half of a 10 s window and 5M rows processed: TPR = 10M / 10 s = 1M/s
    o = Observation(time=100.0, actors=2, lag=240_000_000, arrival_rate=1_400_000.0,
                    busy=[0.5, 0.5], processed=[5_000_000, 5_000_000], window=10.0)
    d = Autoscaler(cfg).evaluate(o)
    i = d.inputs
    assert i["tpr"] == pytest.approx(1_000_000)
    assert i["capacity"] == pytest.approx(2_000_000)
    assert i["utilization"] == pytest.approx(0.7)  # inside [0.5, 0.9]: not the trigger
    # spare 0.6M/s drains 240M rows in 400 s > catch_up_time 300 s: overdue lag
    assert i["drain_s"] == pytest.approx(400.0)
    assert i["overdue"] is True
    # 1.4M/0.7 + 240M/300 + 1.4M·10/300 = 2.0M + 0.8M + 46,667 = 2,846,667 rows/s → ceil(2.85) = 3
    assert i["required_capacity"] == pytest.approx(2_846_666.67, rel=1e-6)
    assert i["wanted"] == 3
    assert (d.previous, d.actors, d.action) == (2, 3, "scale_out")
    assert "lag 240.0M rows would take 400 s to drain > catch_up_time 300 s" in d.reason
    # the same load with a third of the lag drains in time: inside the band nothing happens
    d = Autoscaler(cfg).evaluate(Observation(
        time=100.0, actors=2, lag=90_000_000, arrival_rate=1_400_000.0, busy=[0.5, 0.5],
        processed=[5_000_000, 5_000_000], window=10.0))
    assert (d.actors, d.action, d.inputs["wanted"]) == (2, "hold", 3)
    assert "within [0.50, 0.90]" in d.reason and "drains in 150 s" in d.reason


def test_scale_factors_clamp_each_step():
    cfg = config(stabilization_window=0, scale_up_max_factor=1.0, scale_in_cooldown=0)
    d = Autoscaler(cfg).evaluate(obs(100, 2, rate=20 * R))  # wants 30: at most double
    assert (d.actors, d.capped_by) == (4, "scale_up_max_factor")
    d = Autoscaler(cfg).evaluate(obs(100, 20, rate=0.1 * R))  # wants 1: at most −60 %
    assert (d.action, d.actors, d.capped_by) == ("scale_in", 8, "scale_down_max_factor")


def test_scale_in_must_free_enough_actors():
    cfg = config(target_utilization=0.4, utilization_band=0.05, stabilization_window=0,
                 scale_in_cooldown=0)
    # 3.3 actors' worth at target 0.4: 3.3/0.4 + 3.3·10/300 = 8.36 → 9 of 10: not worth a pause
    d = Autoscaler(cfg).evaluate(obs(10, 10, rate=3.3 * R))
    assert (d.action, d.actors, d.inputs["recommended"]) == ("hold", 10, 9)
    assert "would free too few actors" in d.reason
    d = Autoscaler(cfg).evaluate(obs(10, 10, rate=2.9 * R))  # 7.35 → 8: 20 % fewer
    assert (d.action, d.actors) == ("scale_in", 8)


# ---- behaviour over time


def test_scale_out_when_lag_builds_faster_than_capacity():
    cfg = config(max_actors=16)
    arrival = np.full(1200, 2.5 * R)  # 2.5 actors' worth on 1 actor: lag grows 5.25M rows/s
    r = simulate(cfg, arrival, per_actor_rate=R, initial_actors=1, keep_decisions=True)
    first = r.rescales[0]
    assert first.action == "scale_out" and first.previous == 1
    # not before the condition held a stabilization window, then straight to enough actors
    assert cfg.stabilization_window <= first.time <= cfg.stabilization_window + cfg.evaluation_interval
    assert first.actors >= math.ceil(2.5 / cfg.target_utilization)
    assert "utilization 2.50 above 0.90" in first.reason
    waits = [d for d in r.decisions if d.time < first.time]
    assert waits and all("waits for the stabilization window" in d.reason for d in waits)
    assert r.lag[-1] == 0  # the backlog of the first minute was caught up
    assert_no_flapping(r.rescales, cfg)


def test_lag_drains_then_scale_in_only_after_cooldown():
    cfg = config(max_actors=16)
    arrival = np.full(2400, 1.0 * R)
    arrival[120:420] = 8 * R  # a 5-minute burst
    r = simulate(cfg, arrival, per_actor_rate=R, initial_actors=2, keep_decisions=True)
    outs = [d for d in r.rescales if d.action == "scale_out"]
    ins = [d for d in r.rescales if d.action == "scale_in"]
    assert outs and ins
    assert max(d.actors for d in outs) >= 12
    assert r.actors[-1] <= 2  # back to what 1 actor's worth of load needs
    for d in ins:
        before = [x for x in r.rescales if x.time < d.time][-1]
        assert d.time - before.time >= cfg.scale_in_cooldown
        assert r.lag[int(d.time) - 1] == 0  # never while there is a backlog
        assert "below 0.50" in d.reason
    # while the cooldown ran, the decisions said so
    assert any("waits for the cooldown" in d.reason or "highest recommendation" in d.reason
               for d in r.decisions if d.action == "hold")
    assert_no_flapping(r.rescales, cfg)


@pytest.mark.parametrize("half", [30, 60, 90, 150])
@pytest.mark.parametrize(("hi", "lo"), [(0.95, 0.55), (1.2, 0.3), (1.6, 0.2)])
def test_oscillating_load_does_not_flap(half, hi, lo):
    """A square wave across the thresholds (in actors' worth of load on 4 actors), two hours:
    at most the one scale-out to the level the peaks need, never back down while the peaks
    keep coming within the scale-in horizon."""
    cfg = config(max_actors=16)
    r = simulate(cfg, square(7200, half, hi * 4 * R, lo * 4 * R), per_actor_rate=R,
                 initial_actors=4, partitions=64)
    assert len(r.rescales) <= 1, [d.reason for d in r.rescales]
    assert all(d.action == "scale_out" for d in r.rescales)


def test_oscillation_inside_the_band_changes_nothing():
    cfg = config(max_actors=16)
    for half in (10, 45, 300, 900):
        r = simulate(cfg, square(7200, half, 0.85 * 4 * R, 0.55 * 4 * R), per_actor_rate=R,
                     initial_actors=4)
        assert r.rescales == []


def test_slow_waves_are_followed_without_flapping():
    """A 20-minute cycle is real change: followed, but rescales stay spaced by the guards."""
    cfg = config(max_actors=16)
    rng = np.random.default_rng(3)
    base = square(14_400, 600, 1.6 * 4 * R, 0.2 * 4 * R)
    r = simulate(cfg, base * rng.uniform(0.9, 1.1, base.size), per_actor_rate=R, initial_actors=4)
    assert len(r.rescales) >= 4
    assert_no_flapping(r.rescales, cfg)


# ---- caps: clear statuses, not errors


def test_max_actors_is_respected_with_a_clear_reason():
    cfg = config(max_actors=8, stabilization_window=0)
    scaler = Autoscaler(cfg)
    d = scaler.evaluate(obs(10, 4, rate=30 * R, lag=10**9))
    assert (d.action, d.actors, d.capped_by) == ("scale_out", 8, "max_actors")
    assert "capped at 8: max_actors=8" in d.reason
    for t in range(20, 400, 10):  # the load stays: hold at 8, the same status each time
        d = scaler.evaluate(obs(t, 8, rate=30 * R, lag=10**9))
        assert (d.action, d.actors, d.capped_by) == ("hold", 8, "max_actors")
        assert "capped at 8: max_actors=8" in d.reason
    assert len(scaler.rescales) == 1
    r = simulate(config(max_actors=8), np.full(1800, 30 * R), per_actor_rate=R, initial_actors=1)
    assert r.actors.max() == 8


def test_no_free_cpus_is_a_status_not_an_error_loop():
    cfg = config(stabilization_window=0)
    scaler = Autoscaler(cfg)
    for t in range(10, 200, 10):
        d = scaler.evaluate(obs(t, 4, rate=10 * R, lag=10**8, free_cpus=0))
        assert (d.action, d.actors, d.capped_by) == ("hold", 4, "free_cpus")
        assert d.reason.startswith("hold at 4: wanted ")
        assert "capped at 4: no free CPUs (0 free)" in d.reason
        assert d.inputs["without_cpu_cap"] > 4  # what Ray's autoscaler is asked for
    assert not scaler.rescales
    # what Ray is asked for respects the other limits: never a node the database cannot use
    capped = Autoscaler(config(stabilization_window=0, max_actors=6)).evaluate(
        obs(10, 4, rate=10 * R, lag=10**8, free_cpus=0))
    assert capped.inputs["wanted"] > 6 and capped.inputs["without_cpu_cap"] == 6
    d = scaler.evaluate(obs(200, 4, rate=10 * R, lag=10**8, free_cpus=2))  # two CPUs came back
    assert (d.action, d.actors, d.capped_by) == ("scale_out", 6, "free_cpus")
    assert "capped at 6: no free CPUs (2 free)" in d.reason
    # the cluster's size in the model: never more actors than CPUs
    r = simulate(config(), np.full(1200, 12 * R), per_actor_rate=R, initial_actors=1, cpus=6)
    assert r.actors.max() == 6


def test_min_actors_floor_and_correction():
    cfg = config(min_actors=3, scale_in_cooldown=60)
    r = simulate(cfg, np.zeros(1200), per_actor_rate=R, initial_actors=8)
    assert r.actors[-1] == 3 and r.actors.min() == 3
    d = Autoscaler(cfg).evaluate(obs(10, 1, rate=0.1 * R))  # below the floor: corrected at once
    assert (d.action, d.actors) == ("scale_out", 3)
    assert "below min_actors=3" in d.reason


def test_partition_cap_and_alignment():
    cfg = config(stabilization_window=0)
    d = Autoscaler(cfg).evaluate(obs(10, 2, rate=20 * R, partitions=4))
    assert (d.actors, d.capped_by) == (4, "partitions")
    assert "capped at 4: 4 Kafka partitions (partition_cap)" in d.reason
    # keyed work after the shuffle can use actors that read nothing: partition_cap=False
    d = Autoscaler(config(stabilization_window=0, partition_cap=False, max_actors=12)).evaluate(
        obs(10, 2, rate=20 * R, partitions=4))
    assert (d.actors, d.capped_by) == (12, "max_actors")
    # 12 partitions, need 5.25 actors' worth (6 wanted): 6 actors read 2 each → 6 ≥ 5.25: 6.
    # need 7.5 (8 wanted): 8..11 actors leave one reading 2 partitions (works like 6): 12.
    d = Autoscaler(cfg).evaluate(obs(10, 2, rate=3.5 * R, partitions=12, free_cpus=None))
    assert d.inputs["wanted"] == 6 and d.actors == 6
    d = Autoscaler(cfg).evaluate(obs(10, 2, rate=5.1 * R, partitions=12))
    assert d.inputs["wanted"] == 8 and d.actors == 12
    # many partitions per actor: no rounding needed (64 on 6 is like 5.8 actors)
    d = Autoscaler(cfg).evaluate(obs(10, 2, rate=3.5 * R, partitions=64))
    assert d.actors == 6


def test_deterministic():
    cfg = config(max_actors=32)
    rng = np.random.default_rng(11)
    arrival = rng.gamma(2.0, 2.0, 3600) * R
    runs = [simulate(cfg, arrival, per_actor_rate=R, initial_actors=2, partitions=32,
                     keep_decisions=True) for _ in range(2)]
    assert [d.to_dict() for d in runs[0].decisions] == [d.to_dict() for d in runs[1].decisions]
    assert np.array_equal(runs[0].lag, runs[1].lag)
    assert_no_flapping(runs[0].rescales, cfg)


# ---- the handshake with the head, status, passive mode


def test_waits_for_a_rescale_in_progress_and_gives_up_after_a_timeout():
    scaler = Autoscaler(config(stabilization_window=0))
    assert scaler.evaluate(obs(10, 2, rate=8 * R)).actors == 12
    d = scaler.evaluate(obs(20, 2, rate=8 * R))
    assert (d.action, d.actors) == ("hold", 2) and "rescale to 12 in progress" in d.reason
    d = scaler.evaluate(obs(80, 2, rate=8 * R))  # 60 s later still 2: continue from 2
    assert "rescale to 12 not seen within 60 s, continuing from 2" in d.reason
    assert d.actors == 12  # and it asks again


def test_lost_actor_restarts_the_windows():
    scaler = Autoscaler(config())
    for t in range(10, 200, 10):
        scaler.evaluate(obs(t, 4, rate=2.8 * R))
    d = scaler.evaluate(obs(200, 3, rate=2.8 * R))
    assert "actor count changed outside the autoscaler (4 → 3)" in d.reason
    assert d.action == "hold" and "waits for the stabilization window" in d.reason


def test_no_rate_sample_and_idle():
    scaler = Autoscaler(config())
    d = scaler.evaluate(Observation(time=1, actors=2, lag=1000, arrival_rate=10.0, busy=[0, 0],
                                    processed=[0, 0], window=30))
    assert d.action == "hold" and "no processing-rate sample yet" in d.reason


def test_disabled_is_passive_but_shows_the_recommendation():
    scaler = Autoscaler(AutoscaleConfig.from_config({"max_actors": 8}))
    d = scaler.evaluate(obs(10, 2, rate=20 * R))
    assert (d.action, d.actors) == ("hold", 2)
    assert d.reason == "hold at 2: autoscale off (would run 8; wanted 30, capped at 8: max_actors=8)"


def test_metrics_are_bounded_and_json():
    scaler = Autoscaler(config(stabilization_window=0))
    for t in range(1, 500):
        scaler.evaluate(obs(t, scaler.history[-1].actors if scaler.history else 1, rate=3 * R,
                            partition_lag={"t-0": 5, "t-1": 9}, checkpoint_lag=40))
    m = json.loads(json.dumps(scaler.metrics()))
    assert len(scaler.history) == 64 and len(m["decisions"]) == 10
    assert m["last"]["inputs"]["max_partition_lag"] == {"partition": "t-1", "lag": 9}
    assert {"lag", "arrival_rate", "tpr", "utilization", "required_capacity", "wanted",
            "recommended", "checkpoint_lag"} <= set(m["last"]["inputs"])
    assert m["rescales"][0]["action"] == "scale_out"
    with pytest.raises(ValueError, match="went back"):
        scaler.evaluate(obs(10, 5, rate=R))


# ---- config


def test_config_defaults_and_durations():
    c = AutoscaleConfig.from_config({})
    assert (c.enabled, c.min_actors, c.max_actors, c.target_utilization, c.utilization_band) == (
        False, 1, None, 0.7, 0.2)
    assert (c.catch_up_time, c.stabilization_window, c.scale_in_cooldown, c.restart_time) == (
        300, 60, 300, 10)
    c = AutoscaleConfig.from_config({"catch_up_time": "90s", "restart_time": "500ms",
                                     "stabilization_window": 30, "scale_in_cooldown": "1h"})
    assert (c.catch_up_time, c.restart_time, c.stabilization_window, c.scale_in_cooldown) == (
        90, 0.5, 30, 3600)
    assert parse_duration("2.5m", key="x") == 150


@pytest.mark.parametrize(("cfg", "text"), [
    ({"autoscale": "yes"}, "autoscale='yes' must be True or False"),
    ({"min_actors": 0}, "min_actors=0 must be a whole number"),
    ({"max_actors": 2.5}, "max_actors=2.5 must be a whole number"),
    ({"min_actors": 4, "max_actors": 2}, "min_actors=4 is above max_actors=2"),
    ({"target_utilization": 1.5}, "target_utilization=1.5 must be a number in (0, 1]"),
    ({"target_utilization": "high"}, "target_utilization='high'"),
    ({"utilization_band": 0.7}, "utilization_band=0.7 must be below target_utilization=0.7"),
    ({"catch_up_time": "soon"}, "catch_up_time='soon' is not a duration"),
    ({"catch_up_time": 0}, "catch_up_time must be above 0"),
    ({"stabilization_window": "-1m"}, "stabilization_window='-1m' is not a duration"),
    ({"scale_in_cooldown": True}, "scale_in_cooldown=True is not a duration"),
    ({"scale_down_max_factor": 0}, "scale_down_max_factor=0 must be a number in (0, 1]"),
    ({"scale_up_max_factor": -1}, "scale_up_max_factor=-1 must be a number above 0"),
    ({"partition_cap": 1}, "partition_cap=1 must be True or False"),
    ({"metrics_window": 0}, "must be above 0"),
])
def test_config_errors_are_typed(cfg, text):
    with pytest.raises(AutoscaleConfigError, match=None) as e:
        AutoscaleConfig.from_config(cfg)
    assert e.value.code == "LDB-8010"
    assert isinstance(e.value, ClusterError) and isinstance(e.value, ValueError)
    assert text in str(e.value)
