"""Log records of laminardb: one logger per subsystem under ``laminardb`` (``laminardb.source``,
``laminardb.sink``, ``laminardb.checkpoint.*``, ``laminardb.raft`` …), as text or one JSON object
per line.

Entry point: ``configure(fmt)``. A database opened with ``config={"log_format": "json"}`` (or
``$LAMINARDB_LOG_FORMAT=json``) calls it: laminardb's records go to stderr in that format
through a handler on the ``laminardb`` logger only, so the application's own logging is left
alone. Records may carry ``event`` (a stable dotted name, see docs/operations.md) and
``fields``; both formats show them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

__all__ = ["LOG_FORMAT_ENV", "JsonFormatter", "LogFormat", "TextFormatter", "configure", "resolve_format"]

LOG_FORMAT_ENV = "LAMINARDB_LOG_FORMAT"
LogFormat = Literal["text", "json"]


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        name = getattr(record, "event", None)
        fields = getattr(record, "fields", None) or {}
        if name:
            tail = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
            line += f" [{name}{' ' + tail if tail else ''}]"
        return line


def _text_value(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"))
    return text if text and " " not in text else json.dumps(text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "msg": record.getMessage(),
        }
        for k, v in (getattr(record, "fields", None) or {}).items():
            body.setdefault(k, v)
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, separators=(",", ":"))


def resolve_format(fmt: str | None) -> LogFormat:
    """``fmt`` if given, else ``$LAMINARDB_LOG_FORMAT``, else text; anything else is an error."""
    value = (fmt or os.environ.get(LOG_FORMAT_ENV) or "text").strip().lower()
    if value not in ("text", "json"):
        from laminardb.errors import ConfigError

        msg = f"log format {value!r}: use 'text' or 'json' (--log-format or ${LOG_FORMAT_ENV})"
        raise ConfigError(msg, code="LDB-9031")
    return value  # type: ignore[return-value]


_HANDLER_MARK = "_laminardb_handler"


def configure(fmt: str | None = None, *, level: int = logging.INFO, stream: IO[str] | None = None) -> LogFormat:
    """Send the ``laminardb`` loggers' records to ``stream`` (stderr) in one format; idempotent."""
    chosen = resolve_format(fmt)
    root = logging.getLogger("laminardb")
    for h in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False  # one line per record, not a second one through the app's root handler
    return chosen
