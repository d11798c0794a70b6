"""Connectors: where rows come from and where stream output goes.

Files (CSV / JSONL / Parquet): :func:`read_file` reads a file as schema-conformed Arrow
batches (bad rows are reported and dead-lettered, never fatal); :class:`FileSink` writes a
stream's batches to a file. Errors are ``LDB-4xxx`` (:mod:`laminardb.connectors.exceptions`).
"""

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
from laminardb.connectors.files import (
    FileFormat,
    FileReader,
    FileSink,
    ReadReport,
    infer_format,
    read_file,
)
from laminardb.connectors.kafka import KafkaSink, KafkaSource

__all__ = [
    "FileFormat",
    "FileFormatError",
    "FileReadError",
    "FileReader",
    "KafkaConfigError",
    "KafkaSink",
    "KafkaSource",
    "KafkaUnavailableError",
    "FileSink",
    "ReadReport",
    "SinkClosedError",
    "SinkSchemaError",
    "SinkWriteError",
    "SourceFileNotFoundError",
    "infer_format",
    "read_file",
]
