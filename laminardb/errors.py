"""The error hierarchy: one root, one base per subsystem, leaves in each subsystem.

Every error carries a stable ``code`` ("LDB-NNNN"); the thousands digit names the subsystem:

=========  ==========================================================
LDB-1xxx   SQL: parsing, planning, unknown names, unsupported constructs
LDB-2xxx   data: rows that do not fit a source (2004: an implausible event time, 2005: too far ahead)
LDB-3xxx   engine: connection/subscription/writer state (3004: insert after finish), internal faults
LDB-4xxx   connectors: files, Kafka, decoding
LDB-5xxx   checkpoints and recovery
LDB-6xxx   control plane: Raft, ownership, fencing, RPC
LDB-7xxx   discovery: membership backends
LDB-8xxx   cluster: Ray actors, cluster client
LDB-9xxx   configuration and CLI
=========  ==========================================================

User-input errors (SQL, data) are kept apart from engine faults so that callers can
tell "fix your query" from "something broke". ``docs/errors.md`` lists every code with what
to do. The package root re-exports ``LaminarError`` and the subsystem bases; the leaves are
imported from here or from a subsystem's ``exceptions`` module.
"""

from __future__ import annotations

__all__ = [
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
    "SchemaMismatchError",
    "NullViolationError",
    "ConversionError",
    "ConnectionClosedError",
    "SubscriptionClosedError",
    "NotQueryableError",
    "MissingExtraError",
    "LookupTableConfigError",
    "LookupTableUnavailableError",
    "LookupOnlyTableError",
]


class LaminarError(Exception):
    """Root of every laminardb error. ``code`` is stable and documented; ``str()`` says what to do."""

    code: str = "LDB-0000"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"[{self.code}] {message}")


class SqlError(LaminarError):
    """The SQL text is wrong or uses something laminardb does not support (LDB-1xxx)."""

    code = "LDB-1000"


class DataError(LaminarError, ValueError):
    """A value does not fit the schema it is inserted into (LDB-2xxx)."""

    code = "LDB-2000"


class EngineError(LaminarError, RuntimeError):
    """The engine cannot do what was asked in its current state (LDB-3xxx)."""

    code = "LDB-3000"


class ConnectorError(LaminarError):
    """A source or sink failed to read, write or decode (LDB-4xxx)."""

    code = "LDB-4000"


class CheckpointError(LaminarError):
    """Snapshot, manifest or recovery failure (LDB-5xxx)."""

    code = "LDB-5000"


class ControlPlaneError(LaminarError):
    """Raft, ownership, fencing or control RPC failure (LDB-6xxx)."""

    code = "LDB-6000"


class DiscoveryError(LaminarError):
    """A membership backend failed (LDB-7xxx)."""

    code = "LDB-7000"


class ClusterError(LaminarError):
    """Ray actors or the cluster client failed (LDB-8xxx)."""

    code = "LDB-8000"


class ConfigError(LaminarError, ValueError):
    """Configuration or command-line arguments are wrong (LDB-9xxx)."""

    code = "LDB-9000"


# --- leaves of the engine core (the package root); subsystems keep theirs in exceptions.py


class SchemaMismatchError(DataError):
    """Inserted data has missing, extra or wrongly typed columns."""

    code = "LDB-2001"


class NullViolationError(DataError):
    """NULL in a NOT NULL column (or in the event-time column)."""

    code = "LDB-2002"


class ConversionError(DataError):
    """A value cannot be converted to the column's or the CAST's type (LDB-2003), or an event
    time is implausible for its unit — epoch µs given as ms, say (LDB-2004)."""

    code = "LDB-2003"


class ConnectionClosedError(EngineError):
    """The connection was closed; open a new one."""

    code = "LDB-3001"


class SubscriptionClosedError(EngineError):
    """The subscription was cancelled or its stream dropped."""

    code = "LDB-3002"


class NotQueryableError(EngineError):
    """query() over something that keeps no state (a source or a plain stream)."""

    code = "LDB-3003"


class MissingExtraError(ConfigError):
    """An optional dependency is not installed (Kafka, the cluster, pandas …): the message says
    which ``pip install 'laminardb[extra]'`` brings it (``laminardb/_extras.py``)."""

    code = "LDB-9070"


# the lookup tables' errors live here (not in connectors/exceptions.py, which re-exports them):
# the SQL layer raises two of them and may not import the connectors (.importlinter)
class LookupTableConfigError(ConnectorError, ValueError):
    """A JDBC / PostgreSQL lookup table's WITH option is missing, unknown or invalid (url,
    'table-name', 'lookup.cache.*'): raised at CREATE TABLE."""

    code = "LDB-4080"


class LookupTableUnavailableError(ConnectorError, ConnectionError):
    """A lookup join could not read its PostgreSQL table (server down, refused, permission,
    table gone). The input rows of that batch are kept and joined once the server answers."""

    code = "LDB-4081"


class LookupOnlyTableError(ConnectorError, ValueError):
    """A JDBC / PostgreSQL lookup table was read as a stream (``SELECT … FROM t``, a plain
    join): it is read on demand, only as the right side of ``FOR SYSTEM_TIME AS OF``."""

    code = "LDB-4082"
