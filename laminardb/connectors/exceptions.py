"""Errors of the connectors (LDB-4xxx): file sources and sinks.

Every message says what went wrong and what to do about it. Rows that merely fail to convert
are *not* errors: readers keep the valid rows and report the rest (see ``files.ReadReport``).
"""

from __future__ import annotations

from laminardb.errors import (  # the lookup tables' errors: defined there, for the SQL layer
    ConnectorError,
    LookupOnlyTableError,
    LookupTableConfigError,
    LookupTableUnavailableError,
)

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
    "LookupTableConfigError",
    "LookupTableUnavailableError",
    "LookupOnlyTableError",
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

