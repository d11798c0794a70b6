"""Both connections are a ``ConnectionAPI`` (and a ``WriterConnection``, what the one ``Writer``
class calls): mypy fails here when one drifts (a method missing, another signature or return
type). Nothing runs this module; mypy reads it (``[tool.mypy] files`` in pyproject.toml)."""

from __future__ import annotations

from laminardb.api import ConnectionAPI
from laminardb.cluster.client import RemoteConnection
from laminardb.connection import Connection
from laminardb.engine.writer import WriterConnection


def _embedded(c: Connection) -> ConnectionAPI:
    return c


def _remote(c: RemoteConnection) -> ConnectionAPI:
    return c


def _embedded_writes(c: Connection) -> WriterConnection:
    return c


def _remote_writes(c: RemoteConnection) -> WriterConnection:
    return c
