"""A web dashboard served by the database: the pipeline graph with live rates, per-source
watermarks and lag, and the cluster's actors, vnodes and checkpoints.

Turn it on with ``config["dashboard_port"]`` (``laminardb.open(config={"dashboard_port": 0})``;
``conn.dashboard_url`` says where) or run ``laminardb dashboard``. Entry points:
:class:`DashboardServer` (what ``Connection`` starts), :func:`run_dashboard` (the command).
"""

from laminardb.dashboard.exceptions import (
    DashboardConfigError,
    InsecureDashboardError,
    WeakDashboardTokenError,
)
from laminardb.dashboard.graph import pipeline_graph, read_counters
from laminardb.dashboard.run import run_dashboard
from laminardb.dashboard.server import DashboardServer, DashboardSettings

__all__ = [
    "DashboardConfigError",
    "DashboardServer",
    "DashboardSettings",
    "InsecureDashboardError",
    "WeakDashboardTokenError",
    "pipeline_graph",
    "read_counters",
    "run_dashboard",
]
