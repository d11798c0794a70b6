"""Fixtures for the dashboard's tests: a running pipeline fed live, and a headless Chromium.

The browser is Debian's ``chromium`` (``.ci/run`` installs it), driven through its own
command line: ``--dump-dom`` (the DOM after the page's script ran; ``--virtual-time-budget``
lets its one-second polling run) and ``--screenshot``. Playwright would download its own
browser, which these machines cannot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

import laminardb

# A page load plus a few polls; Chromium's start on a 2-core machine takes ~1-2 s.
_BROWSER_TIMEOUT_S = 60
# Rows per insert and inserts per second of the feeder: a steady, visible rate.
_FEED_ROWS = 10
_FEED_EVERY_S = 0.02

PIPELINE_SQL = """
CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE,
                      WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM bars AS
    SELECT sym, window_start, count(*) AS n, avg(price) AS avg_price
    FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW totals AS SELECT sym, sum(n) AS n FROM bars GROUP BY sym;
CREATE SINK bars_out FROM bars INTO FILE (path = '{path}', format = 'jsonl');
"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Debian's Chromium, headless, one process per call (each bounded by a timeout)."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def _args(self, budget_ms: int) -> list[str]:
        return [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--mute-audio", "--hide-scrollbars",
                f"--user-data-dir={self.profile}", f"--virtual-time-budget={budget_ms}"]

    def dump_dom(self, url: str, *, budget_ms: int = 5000) -> str:
        out = subprocess.run(self._args(budget_ms) + ["--dump-dom", url], capture_output=True, text=True,
                             timeout=_BROWSER_TIMEOUT_S, check=False)
        assert out.returncode == 0, f"chromium --dump-dom failed ({out.returncode}): {out.stderr[-2000:]}"
        return out.stdout

    def screenshot(self, url: str, path: Path, *, budget_ms: int = 4000, size: str = "1400,1000") -> Path:
        out = subprocess.run(self._args(budget_ms) + [f"--screenshot={path}", f"--window-size={size}", url],
                             capture_output=True, text=True, timeout=_BROWSER_TIMEOUT_S, check=False)
        assert out.returncode == 0, f"chromium --screenshot failed ({out.returncode}): {out.stderr[-2000:]}"
        return path


@pytest.fixture(scope="session")
def browser(tmp_path_factory) -> Browser:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium binary (chromium / chromium-browser / google-chrome) on PATH: "
                    "apt-get install chromium (.ci/run does)")
    return Browser(binary, tmp_path_factory.mktemp("chromium-profile"))


class Elements(HTMLParser):
    """Every element of a dumped DOM as its attribute dict, plus its text; by id and in order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.all: list[dict[str, str]] = []
        self.by_id: dict[str, dict[str, str]] = {}
        self._open: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        el = {k: (v or "") for k, v in attrs}
        el["_tag"], el["_text"] = tag, ""
        self.all.append(el)
        if "id" in el:
            self.by_id[el["id"]] = el
        self._open.append(el)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()["_tag"] == tag:
                break

    def handle_data(self, data):
        if self._open:
            self._open[-1]["_text"] += data

    def with_attr(self, name: str) -> list[dict[str, str]]:
        return [e for e in self.all if name in e]


class Feeder:
    """Inserts ``_FEED_ROWS`` rows with wall-clock event times every ``_FEED_EVERY_S``."""

    def __init__(self, conn, source: str = "trades") -> None:
        self.conn = conn
        self.source = source
        self.rows = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-test-feeder", daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.is_set():
                now = int(time.time() * 1000)
                self.conn.insert(self.source, [{"ts": now, "sym": f"S{(i + k) % 3}", "price": 100.0 + k}
                                               for k in range(_FEED_ROWS)])
                self.rows += _FEED_ROWS
                i += 1
                self._stop.wait(_FEED_EVERY_S)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.error = exc

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def parse_dom():
    """``parse_dom(html)`` → ``Elements`` (by id, with ``data-*`` attributes and text)."""
    return Elements


@pytest.fixture
def open_dashboard():
    """Factory: ``open_dashboard(**config)`` → a connection with its dashboard on a free port."""
    conns = []

    def make(**config):
        conn = laminardb.open(config={"dashboard_port": 0, **config})
        conns.append(conn)
        return conn

    yield make
    for c in conns:
        c.close()


@pytest.fixture
def live_pipeline(open_dashboard, tmp_path) -> Iterator[tuple[laminardb.Connection, Feeder]]:
    """source → tumble stream → view, and a FILE sink, fed by a background thread."""
    conn = open_dashboard()
    conn.execute(PIPELINE_SQL.format(path=os.fspath(tmp_path / "bars")))
    with Feeder(conn) as feeder:
        yield conn, feeder
    assert feeder.error is None, f"the feeder failed: {feeder.error!r}"
