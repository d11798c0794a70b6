"""laminardb: streaming SQL over live data, embedded like SQLite, scaling out on Ray.

    import laminardb

    with laminardb.open() as db:                      # or open("./data"): durable
        db.execute("CREATE SOURCE trades (…, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND); "
                   "CREATE STREAM bars AS SELECT … GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
        bars = db.subscribe_stream("bars")
        db.insert("trades", rows)                      # dicts, Arrow, pandas; insert_json, insert_csv
        db.finish()
        for batch in bars: ...

The public surface: ``open`` (embedded), ``connect`` (a Delta cluster), ``Connection``,
``Subscription``, ``CallbackSubscription``, ``Writer``, ``QueryResult``, ``ExecuteResult``
(and ``InsertResult``, what ``insert()`` returns). Errors are ``LaminarError`` subclasses with a stable ``.code`` (``LDB-NNNN``);
the subsystem bases (``SqlError``, ``DataError``, ``EngineError``, ``ConnectorError``, …) are
importable from here, every class from ``laminardb.errors`` and the subsystems'
``exceptions`` modules; ``docs/errors.md`` lists every code with what to do. The engine (numba,
pyarrow) loads on first use, so processes that only need the control plane or the CLI start
fast.
"""

from __future__ import annotations

from laminardb._lazy import lazy_exports
from laminardb.errors import (  # noqa: F401 - importable from the root, kept out of help()
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

# What `help(laminardb)`, `dir(laminardb)` and `from laminardb import *` show: the API. The
# error classes stay importable (above) without filling help() with exception boilerplate.
__all__ = [
    "open",
    "connect",
    "Connection",
    "Subscription",
    "CallbackSubscription",
    "Writer",
    "QueryResult",
    "ExecuteResult",
    "LaminarError",
    "__version__",
]

_LAZY = {
    "open": "laminardb.connection",
    "Connection": "laminardb.connection",
    "ExecuteResult": "laminardb.results",
    "QueryResult": "laminardb.results",
    "Subscription": "laminardb.engine.subscriptions",
    "CallbackSubscription": "laminardb.engine.subscriptions",
    "Writer": "laminardb.engine.writer",
    "InsertResult": "laminardb.engine.insert_batch",
    "connect": "laminardb.cluster.client",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
