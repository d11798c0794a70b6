"""Autoscaling of a Delta database's reactor actors: the decision policy (Flink's method).

``AutoscaleConfig.from_config(db_config)`` reads the knobs; ``Autoscaler(config).evaluate(obs)``
turns one ``Observation`` into a ``Decision``; ``LoadObserver`` (``observe.py``) measures the
observations and ``AutoscaleDriver`` (``driver.py``) runs the loop inside a database head,
which carries out the rescales (``cluster/head.py``).
"""

from __future__ import annotations

from laminardb.autoscale.config import AutoscaleConfig, parse_duration
from laminardb.autoscale.exceptions import AutoscaleConfigError, ScaleCapacityError
from laminardb.autoscale.policy import Action, Autoscaler, Decision, Observation

__all__ = ["Action", "AutoscaleConfig", "AutoscaleConfigError", "Autoscaler", "Decision",
           "Observation", "ScaleCapacityError", "parse_duration"]
