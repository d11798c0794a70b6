"""Errors of the metrics endpoint (LDB-905x): its configuration."""

from __future__ import annotations

from laminardb.errors import ConfigError

__all__ = ["MetricsConfigError", "MetricsExposedError"]


class MetricsConfigError(ConfigError):
    """``metrics_port`` / ``metrics_host`` are not valid, or the port cannot be bound."""

    code = "LDB-9050"


class MetricsExposedError(MetricsConfigError):
    """``metrics_host`` is not a loopback address and ``allow_remote`` is not set."""

    code = "LDB-9051"
