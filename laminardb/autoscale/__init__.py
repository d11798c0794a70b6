"""Autoscaling of a Delta database's reactor actors: the decision policy (Flink's method).

``AutoscaleConfig.from_config(db_config)`` reads the knobs; ``Autoscaler(config).evaluate(obs)``
turns one ``Observation`` into a ``Decision``. The database head collects the observations and
carries out the rescales; this package only decides.
"""

from __future__ import annotations

from laminardb.autoscale.config import AutoscaleConfig, parse_duration
from laminardb.autoscale.exceptions import AutoscaleConfigError
from laminardb.autoscale.policy import Action, Autoscaler, Decision, Observation

__all__ = ["Action", "AutoscaleConfig", "AutoscaleConfigError", "Autoscaler", "Decision",
           "Observation", "parse_duration"]
