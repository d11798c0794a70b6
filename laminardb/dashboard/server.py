"""The dashboard's HTTP server: a read-only web page and JSON API served by the database.

Entry points: :meth:`DashboardSettings.from_config` (the ``dashboard_*`` config keys, checked
before anything starts) and :class:`DashboardServer` (``start()``, ``url``, ``stop()``), which
``Connection`` drives when ``config["dashboard_port"]`` is set. Stdlib only: a
``ThreadingHTTPServer`` on a daemon thread, plus a :class:`Sampler` thread that reads every
node's row counter once a second and keeps the last minute, so rates and sparklines are there
as soon as the page opens.

Routes (GET/HEAD only; nothing changes the database): ``/`` the page, ``/static/<file>`` its
script and style (read into memory at start: no path reaches the file system), ``/api/graph``,
``/api/metrics``. Security model: ``docs/operations.md``, "Dashboard".
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from laminardb.dashboard.exceptions import (
    DashboardConfigError,
    InsecureDashboardError,
    WeakDashboardTokenError,
)
from laminardb.dashboard.graph import pipeline_graph, read_counters

__all__ = ["DashboardSettings", "DashboardServer", "Sampler"]

log = logging.getLogger(__name__)

# One sample per second, as the page polls; 61 samples make 60 one-second rates (the minute
# of history the sparklines show).
_SAMPLE_S = 1.0
_HISTORY_SAMPLES = 61
# A token shorter than this is guessable; the same floor as the cluster secret (LDB-9030).
_MIN_TOKEN_BYTES = 16
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Every response: no caching of live data, no framing by other sites, no inline script (the
# page has none), no resources but its own.
_SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


@dataclass(frozen=True)
class DashboardSettings:
    """Where the dashboard listens and who may read it; built from a connection's config."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, see DashboardServer.url
    token: str | None = None
    allow_remote: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DashboardSettings | None:
        """The settings, or None when ``dashboard_port`` is absent (no dashboard).

        Raises ``InsecureDashboardError`` for a non-loopback ``dashboard_host`` without
        ``allow_remote=True``, ``WeakDashboardTokenError`` for ``allow_remote`` without a
        ``dashboard_token`` of ≥ 16 bytes, ``DashboardConfigError`` for a bad port.
        """
        port = config.get("dashboard_port")
        if port is None:
            return None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            msg = f"dashboard_port must be an int in 0..65535 (0: any free port), not {port!r}"
            raise DashboardConfigError(msg)
        host = str(config.get("dashboard_host") or "127.0.0.1")
        allow_remote = config.get("allow_remote", False) is True
        token = config.get("dashboard_token")
        if not _is_loopback(host) and not allow_remote:
            msg = (f"dashboard_host {host!r} is not a loopback address: the dashboard would be readable "
                   "from the network. Keep the default 127.0.0.1 (reach it over an ssh tunnel), or set "
                   "allow_remote=True together with a dashboard_token of at least 16 bytes")
            raise InsecureDashboardError(msg)
        if allow_remote:
            if not isinstance(token, str) or len(token.encode()) < _MIN_TOKEN_BYTES:
                msg = ("allow_remote=True needs config['dashboard_token'], a secret of at least "
                       f"{_MIN_TOKEN_BYTES} bytes; make one with "
                       "python -c \"import secrets; print(secrets.token_urlsafe(32))\"")
                raise WeakDashboardTokenError(msg)
        elif token is not None and (not isinstance(token, str) or len(token.encode()) < _MIN_TOKEN_BYTES):
            msg = f"dashboard_token must be a string of at least {_MIN_TOKEN_BYTES} bytes"
            raise WeakDashboardTokenError(msg)
        return cls(host=host, port=port, token=token, allow_remote=allow_remote)


class Sampler:
    """Reads every node's counter once a second; rates and the last minute of history."""

    def __init__(self, conn: Any, *, period_s: float = _SAMPLE_S) -> None:
        self._conn = conn
        self._period_s = period_s
        self._samples: deque[dict[str, Any]] = deque(maxlen=_HISTORY_SAMPLES)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laminardb-dashboard-sampler", daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def sample(self) -> None:
        s = read_counters(self._conn)
        with self._lock:
            self._samples.append(s)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a failed sample is skipped, the next one retries
                log.debug("dashboard sample failed: %s", exc)

    def snapshot(self) -> dict[str, Any]:
        """``{"ts": [...], "counters": {node: n}, "rates": {node: rows/s}, "rate_history": {node:
        [...]}, "sources": {name: {... , "lag_history": [...]}}}`` — histories oldest first.

        Counters, watermarks and lags are read now (a node created since the last sample shows
        at once); rates are per second between the samples taken once a second."""
        last = read_counters(self._conn, kafka_lag=False)  # brokers are asked once a second only
        with self._lock:
            samples = list(self._samples)
        if not samples:
            samples = [last]
        for name, info in last["sources"].items():
            info["kafka_lag"] = samples[-1]["sources"].get(name, {}).get("kafka_lag")
        rate_history: dict[str, list[float | None]] = {n: [] for n in last["counters"]}
        for a, b in zip(samples, samples[1:], strict=False):
            dt = b["ts"] - a["ts"]
            for n in rate_history:
                if dt > 0 and n in a["counters"] and n in b["counters"]:
                    rate_history[n].append(round(max(0, b["counters"][n] - a["counters"][n]) / dt, 2))
                else:
                    rate_history[n].append(None)
        sources = {}
        for name, info in last["sources"].items():
            lag = [s["sources"].get(name, {}).get("lag_ms") for s in samples[:-1]] + [info["lag_ms"]]
            sources[name] = dict(info, lag_history=lag)
        return {
            "ts": [s["ts"] for s in samples],
            "counters": last["counters"],
            "rates": {n: (h[-1] if h else None) for n, h in rate_history.items()},
            "rate_history": rate_history,
            "sources": sources,
        }


def _finite(obj: Any) -> Any:
    """JSON that browsers parse: NaN/±inf become null; anything unknown becomes its str()."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return _finite(obj.item())
    return str(obj)


def _load_static() -> dict[str, tuple[bytes, str]]:
    """Every file of ``static/``, read once: requests are answered from this table only."""
    files: dict[str, tuple[bytes, str]] = {}
    root = resources.files("laminardb.dashboard") / "static"
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _CONTENT_TYPES:
            files[entry.name] = (entry.read_bytes(), _CONTENT_TYPES[suffix])
    return files


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "laminardb-dashboard"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("dashboard %s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def _refuse_method(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b'{"error": "read-only: GET only"}',
                   "application/json", extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method  # noqa: N815

    def _serve(self, *, body: bool) -> None:
        settings = self.server.settings
        url = urlsplit(self.path)
        if not self._host_allowed(settings):
            return self._json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"}, body)
        if settings.token is not None and not self._authorized(settings.token, url.query):
            return self._json(HTTPStatus.UNAUTHORIZED,
                              {"error": "this dashboard needs its token: ?token=… or "
                                        "'Authorization: Bearer …'"}, body,
                              extra={"WWW-Authenticate": 'Bearer realm="laminardb-dashboard"'})
        path = url.path
        try:
            if path in ("/", "/index.html"):
                content, ctype = self.server.static["index.html"]
                return self._send(HTTPStatus.OK, content, ctype, body=body)
            if path.startswith("/static/"):
                item = self.server.static.get(path[len("/static/"):])
                if item is None:
                    return self._json(HTTPStatus.NOT_FOUND, {"error": "no such file"}, body)
                return self._send(HTTPStatus.OK, item[0], item[1], body=body)
            if path == "/api/graph":
                return self._json(HTTPStatus.OK, pipeline_graph(self.server.conn), body)
            if path == "/api/metrics":
                return self._json(HTTPStatus.OK, self.server.metrics_payload(), body)
        except Exception as exc:  # noqa: BLE001 - the page shows it and polls again
            log.debug("dashboard %s failed: %s", path, exc)
            return self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"{type(exc).__name__}: {exc}"}, body)
        return self._json(HTTPStatus.NOT_FOUND, {"error": f"no route {path}"}, body)

    def _host_allowed(self, settings: DashboardSettings) -> bool:
        """On loopback, only loopback Host headers: a web page elsewhere cannot read the
        dashboard through a DNS name rebound to 127.0.0.1."""
        if settings.allow_remote:
            return True
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.strip("[]") in _LOOPBACK_NAMES or name.strip("[]") == settings.host

    def _authorized(self, token: str, query: str) -> bool:
        given = ""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):].strip()
        elif self.headers.get("X-Laminardb-Token"):
            given = self.headers["X-Laminardb-Token"].strip()
        else:
            given = parse_qs(query).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), token.encode())

    def _json(self, status: HTTPStatus, payload: Any, body: bool, *, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(_finite(payload), separators=(",", ":")).encode()
        self._send(status, data, "application/json", body=body, extra=extra)

    def _send(self, status: HTTPStatus, data: bytes, ctype: str, *, body: bool = True,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in {**_SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], conn: Any, settings: DashboardSettings,
                 sampler: Sampler) -> None:
        self.conn = conn
        self.settings = settings
        self.sampler = sampler
        self.static = _load_static()
        super().__init__(address, _Handler)

    def metrics_payload(self) -> dict[str, Any]:
        return {"ts": time.time(), "metrics": self.conn.metrics(), "sampler": self.sampler.snapshot()}


class DashboardServer:
    """The dashboard of one connection: ``start()``, ``url``, ``stop()`` (idempotent)."""

    def __init__(self, conn: Any, settings: DashboardSettings) -> None:
        self._conn = conn
        self.settings = settings
        self._sampler = Sampler(conn)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> DashboardServer:
        host = self.settings.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("_Server6", (_Server,), {"address_family": family}) if family == socket.AF_INET6 else _Server
        try:
            self._server = server_cls((host, self.settings.port), self._conn, self.settings, self._sampler)
        except OSError as exc:
            msg = (f"the dashboard cannot listen on {host}:{self.settings.port} ({exc.strerror or exc}); "
                   "choose another dashboard_port (0: any free port)")
            raise DashboardConfigError(msg, code="LDB-9045") from exc
        self._sampler.start()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="laminardb-dashboard", daemon=True)
        self._thread.start()
        log.info("dashboard at %s", self.url)
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise DashboardConfigError("the dashboard is not running", code="LDB-9043")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def stop(self) -> None:
        self._sampler.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
