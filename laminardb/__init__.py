"""laminardb: streaming SQL over live data, embedded like SQLite, scaling out on Ray.

The public surface: ``open`` (embedded), ``connect`` (a Delta cluster), ``Connection``,
``Subscription``, ``QueryResult``, ``ExecuteResult`` and the error hierarchy. The engine
(numba, pyarrow) loads on first use, so processes that only need the control plane or the
CLI start fast.
"""

from __future__ import annotations

from laminardb._lazy import lazy_exports
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

_LAZY = {
    "open": "laminardb.connection",
    "Connection": "laminardb.connection",
    "ExecuteResult": "laminardb.connection",
    "QueryResult": "laminardb.connection",
    "Subscription": "laminardb.subscription",
    "connect": "laminardb.actors.client",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
