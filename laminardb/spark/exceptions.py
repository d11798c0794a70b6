"""Errors of the Spark cluster service (LDB-6030..6039)."""

from __future__ import annotations

from laminardb.errors import LaminarError


class SparkDaemonError(LaminarError):
    """A Spark master or worker did not start: the message carries the end of its log."""

    code = "LDB-6030"
