"""laminardb: streaming SQL over live data, embedded like SQLite, scaling out on Ray.

The public surface: ``open`` (embedded), ``connect`` (a Delta cluster), ``Connection``,
``Subscription``, ``QueryResult``, ``ExecuteResult`` and the error hierarchy. The engine
(numba, pyarrow) loads on first use, so processes that only need the control plane or the
CLI start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'laminardb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
