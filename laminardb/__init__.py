"""laminardb: streaming SQL over live data, embedded like SQLite, scaling out on Ray.

The public surface: ``open`` (embedded), ``connect`` (a Delta cluster), ``Connection``,
``Subscription``, ``QueryResult``, ``ExecuteResult`` and the error hierarchy.
"""

from __future__ import annotations

from laminardb.connection import Connection, ExecuteResult, QueryResult, open
from laminardb.errors import (
    CheckpointError,
    ClusterError,
    ConfigError,
    ConnectorError,
    ControlPlaneError,
    DataError,
    DiscoveryError,
    EngineError,
    LaminarError,
    SqlError,
)
from laminardb.subscription import Subscription

__version__ = "0.1.0"

__all__ = [
    "open",
    "connect",
    "Connection",
    "ExecuteResult",
    "QueryResult",
    "Subscription",
    "LaminarError",
    "SqlError",
    "DataError",
    "EngineError",
    "ConnectorError",
    "CheckpointError",
    "ControlPlaneError",
    "DiscoveryError",
    "ClusterError",
    "ConfigError",
    "__version__",
]


def connect(address: str, **kwargs) -> Connection:
    """Connect to a Delta cluster (``ray://host:port`` or ``ray://auto``).

    The cluster client arrives with the Delta data-plane work; until then this raises.
    """
    raise ClusterError(
        f"connect({address!r}): the Delta cluster client is not available in this build yet; "
        "use laminardb.open() for the embedded engine",
        code="LDB-8001",
    )
