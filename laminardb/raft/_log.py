"""Structured log events of the control plane: one logger, ``laminardb.raft``, text or JSON.

Entry points: :func:`event` (emit one named event with fields), :class:`RateLimiter` (for
events an attacker or a broken peer can trigger at will), :func:`configure` (what a voter
process calls once: text by default, one JSON object per line when ``fmt="json"`` or
``$LAMINARDB_LOG_FORMAT=json``).

Every record carries ``event`` (a stable dotted name, listed in ``docs/operations.md``, "Log
events") and ``fields`` (a flat dict of JSON-able values); the message is the sentence an
operator reads. Text lines end with the fields as ``key=value``, so a grep for
``raft.leader`` or ``peer=10.0.0.7`` works in both formats.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import IO, Any

from laminardb.logs import LOG_FORMAT_ENV, JsonFormatter, LogFormat, TextFormatter, resolve_format

__all__ = ["LOGGER", "LOG_FORMAT_ENV", "LogFormat", "RateLimiter", "configure", "event"]

LOGGER = logging.getLogger("laminardb.raft")

# One line per kind of refused frame every 10 s is enough to see an attack or a misconfigured
# peer; the counters (``cluster status``) keep the exact totals.
_DEFAULT_RATE_INTERVAL_S = 10.0


def event(level: int, name: str, message: str, **fields: Any) -> None:
    """Log event ``name`` at ``level`` with ``message`` (the sentence) and ``fields``."""
    if LOGGER.isEnabledFor(level):
        LOGGER.log(level, message, extra={"event": name, "fields": fields})


class RateLimiter:
    """At most one event per key every ``interval`` s; reports how many were suppressed.

    ``check(key)`` returns ``None`` while the key is muted (and counts the call), else the
    number of calls suppressed since the last one let through (``0`` the first time).
    Thread-safe: the Raft thread and the RPC threads share one.
    """

    def __init__(self, interval: float = _DEFAULT_RATE_INTERVAL_S) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def check(self, key: str) -> int | None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._suppressed.pop(key, 0)


def configure(fmt: str | None = None, *, level: int = logging.INFO,
              stream: IO[str] | None = None) -> LogFormat:
    """Send every log record of this process to ``stream`` (stderr) in one format.

    Called once by the ``raft-node`` command; the root logger gets WARNING (libraries stay
    quiet) and ``laminardb.raft`` gets ``level``. Returns the format chosen.
    """
    chosen = resolve_format(fmt)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    LOGGER.setLevel(level)
    return chosen
