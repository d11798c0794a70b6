"""Connectors: where rows come from and where stream output goes.

Files (CSV / JSONL / Parquet): :func:`read_file` reads a file as schema-conformed Arrow
batches (bad rows are reported and dead-lettered, never fatal); :class:`FileSink` writes a
stream's batches to a file. Errors are ``LDB-4xxx`` (:mod:`laminardb.connectors.exceptions`).
The readers, sinks and Kafka classes load on first use (``_lazy.py``), so importing one
connector module (the engine imports ``polled``) does not load them all.
"""

from __future__ import annotations

from laminardb._lazy import lazy_exports
from laminardb.connectors.exceptions import (
    FileFormatError,
    FileReadError,
    KafkaConfigError,
    KafkaUnavailableError,
    SinkClosedError,
    SinkSchemaError,
    SinkWriteError,
    SourceFileNotFoundError,
)

__all__ = [
    "FileFormat",
    "FileFormatError",
    "FileReadError",
    "FileReader",
    "KafkaConfigError",
    "KafkaSink",
    "KafkaSource",
    "KafkaUnavailableError",
    "PostgresCdcSource",
    "FileSink",
    "ReadReport",
    "SinkClosedError",
    "SinkSchemaError",
    "SinkWriteError",
    "SourceFileNotFoundError",
    "infer_format",
    "read_file",
]

_LAZY = {
    "FileFormat": "files",
    "FileReader": "files",
    "FileSink": "files",
    "ReadReport": "files",
    "infer_format": "files",
    "read_file": "files",
    "KafkaSink": "kafka",
    "KafkaSource": "kafka",
    "PostgresCdcSource": "postgres_cdc",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
