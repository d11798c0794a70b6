"""Errors of the connectors (LDB-4xxx): file sources and sinks.

Every message says what went wrong and what to do about it. Rows that merely fail to convert
are *not* errors: readers keep the valid rows and report the rest (see ``files.ReadReport``).
"""

from __future__ import annotations

from laminardb.errors import ConnectorError

__all__ = [
    "FileFormatError",
    "SourceFileNotFoundError",
    "FileReadError",
    "SinkWriteError",
    "SinkSchemaError",
    "SinkClosedError",
    "KafkaConfigError",
    "KafkaUnavailableError",
    "SourceFailingError",
    "KafkaOffsetResetError",
    "DeltaConfigError",
    "CdcConfigError",
    "CdcSchemaError",
    "CdcPositionLostError",
    "ChangelogSourceInsertError",
    "CdcUnsupportedChangeError",
    "CdcUnavailableError",
    "CdcDataError",
    "IcebergConfigError",
    "IcebergCatalogError",
    "IcebergCommitError",
    "IcebergChangelogError",
]


class FileFormatError(ConnectorError, ValueError):
    """The file format is unknown or cannot be inferred from the file name."""

    code = "LDB-4001"


class SourceFileNotFoundError(ConnectorError, FileNotFoundError):
    """An input file does not exist or cannot be opened."""

    code = "LDB-4002"


class FileReadError(ConnectorError, OSError):
    """A whole file (not a row) cannot be read: corrupt Parquet, I/O failure, bad encoding."""

    code = "LDB-4003"


class SinkWriteError(ConnectorError, OSError):
    """A sink cannot create or write its output file."""

    code = "LDB-4004"


class SinkSchemaError(ConnectorError, ValueError):
    """A batch handed to a sink does not match the sink's schema."""

    code = "LDB-4005"


class SinkClosedError(ConnectorError, RuntimeError):
    """write()/flush() after close()."""

    code = "LDB-4006"


class KafkaConfigError(ConnectorError, ValueError):
    """A Kafka source or sink option is missing or invalid (brokers, topic, format, …)."""

    code = "LDB-4010"


class KafkaUnavailableError(ConnectorError, ConnectionError):
    """The Kafka brokers cannot be reached, or a topic's metadata does not arrive in time."""

    code = "LDB-4011"


class SourceFailingError(ConnectorError, ConnectionError):
    """A polled source (Kafka) has failed for longer than ``source_error_timeout``: its broker
    is unreachable or its polls raise; the message names the source and its last error."""

    code = "LDB-4012"


class KafkaOffsetResetError(ConnectorError):
    """A Kafka source's saved position was past its partition's end (the topic was deleted
    and created again, or truncated — e.g. a broker with in-memory storage restarted): the
    source went on from ``offset_reset`` and says so (``metrics()``: ``last_error``,
    ``errors``; a WARNING on ``laminardb.source``) — it does not stop."""

    code = "LDB-4013"


class DeltaConfigError(ConnectorError, ValueError):
    """A Delta Lake sink option is missing, unknown or invalid, or deltalake is missing."""

    code = "LDB-4020"


# ---------------------------------------------------------------- CDC (changelog) sources: LDB-407x


class CdcConfigError(ConnectorError, ValueError):
    """A CDC source cannot start as configured: the server's settings (``wal_level``), the
    table (missing, REPLICA IDENTITY not FULL), a slot or publication in the way, or an option.
    Permanent: the source stops until the configuration is fixed."""

    code = "LDB-4070"
    permanent = True


class CdcSchemaError(ConnectorError, TypeError):
    """A declared column of a CDC source is missing upstream, or its upstream type does not fit
    the declared one (dropped or retyped after the source was created). Permanent: the source
    stops rather than write wrong values; recreate the source with the new columns."""

    code = "LDB-4071"
    permanent = True


class CdcPositionLostError(ConnectorError):
    """The position a checkpoint resumes from is gone upstream (the replication slot was
    dropped, or has already confirmed past it): changes in between cannot be replayed."""

    code = "LDB-4072"
    permanent = True


class ChangelogSourceInsertError(ConnectorError, TypeError):
    """``insert()`` into a CDC source: its rows come from the database's change stream only."""

    code = "LDB-4073"


class CdcUnsupportedChangeError(ConnectorError):
    """A change the source cannot express as row retractions (TRUNCATE of the table)."""

    code = "LDB-4074"
    permanent = True


class CdcUnavailableError(ConnectorError, ConnectionError):
    """The database server cannot be reached (retried with backoff; not permanent)."""

    code = "LDB-4075"


class CdcDataError(ConnectorError, ValueError):
    """An upstream value cannot be represented in its declared column (e.g. a timestamp of
    ``infinity``). Permanent: the source stops rather than write a wrong value."""

    code = "LDB-4076"
    permanent = True
class IcebergConfigError(ConnectorError, ValueError):
    """An Iceberg sink option is missing, unknown or invalid (catalog type, warehouse, table name)."""

    code = "LDB-4060"


class IcebergCatalogError(ConnectorError, ConnectionError):
    """An Iceberg sink's catalog cannot be loaded or reached, or its namespace or table cannot be
    created or loaded (a wrong ``catalog.uri``, a database or REST server down, a missing driver)."""

    code = "LDB-4061"


class IcebergCommitError(SinkWriteError):
    """An epoch could not be appended to the Iceberg table (a concurrent writer won every retry,
    the catalog is down): the staged rows are kept and committed at the next checkpoint."""

    code = "LDB-4062"


class IcebergChangelogError(ConnectorError, ValueError):
    """An Iceberg sink was created from a changelog stream (rows with ``__weight``): pyiceberg
    writes no equality deletes, so retractions cannot be applied; sink an append-only stream."""

    code = "LDB-4063"
