"""Errors of the dashboard: configuration only (the server itself never raises to callers)."""

from __future__ import annotations

from laminardb.errors import ConfigError

__all__ = ["DashboardConfigError", "InsecureDashboardError", "WeakDashboardTokenError"]


class DashboardConfigError(ConfigError):
    """A ``dashboard_*`` config key has a wrong value (LDB-9040)."""

    code = "LDB-9040"


class InsecureDashboardError(DashboardConfigError):
    """The dashboard would listen beyond loopback without ``allow_remote`` (LDB-9041)."""

    code = "LDB-9041"


class WeakDashboardTokenError(DashboardConfigError):
    """``allow_remote`` without a ``dashboard_token`` of at least 16 bytes (LDB-9042)."""

    code = "LDB-9042"
