"""Metrics: one registry (``Connection.metrics()``), a Prometheus endpoint, ``laminardb top``.

See :mod:`laminardb.metrics.registry` for the shape and ``docs/operations.md`` ("Metrics")
for every metric's meaning and unit.
"""

from laminardb.metrics.exceptions import MetricsConfigError, MetricsExposedError
from laminardb.metrics.registry import collect, process_metrics, state_size

__all__ = ["MetricsConfigError", "MetricsExposedError", "collect", "process_metrics", "state_size"]
