"""``laminardb dashboard``: an embedded database with its dashboard, until Ctrl-C.

Entry point: :func:`run_dashboard` (``laminardb.cli.commands`` only parses arguments into it). It opens
a database (in memory, or durable in a directory) with ``dashboard_port`` set, runs a SQL
file (whose Kafka sources then poll) or the built-in market-data demo (fed here, as
``laminardb demo`` does), prints the URL and serves until interrupted or ``seconds`` pass.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from laminardb.dashboard.exceptions import DashboardConfigError

__all__ = ["run_dashboard", "DEFAULT_PORT"]

DEFAULT_PORT = 8470
# The demo inserts a batch every 50 ms, like `laminardb demo`.
_DEMO_TICK_S = 0.05


def run_dashboard(*, sql: str | None = None, directory: str | None = None, demo: bool = False,
                  port: int = DEFAULT_PORT, host: str = "127.0.0.1", rate: float = 2000.0,
                  seconds: float | None = None, config: dict[str, Any] | None = None,
                  out: TextIO | None = None) -> int:
    """Serve the dashboard of a pipeline until Ctrl-C (or ``seconds``); returns the exit status.

    ``sql``: statements to run first (a pipeline); ``demo``: the market-data demo pipeline,
    fed with ``rate`` trades/s; ``config``: more connection config (``dashboard_token``,
    ``allow_remote``, checkpoint keys …).
    """
    import laminardb

    if not demo and not sql:
        raise DashboardConfigError("laminardb dashboard needs --sql FILE (a pipeline) or --demo",
                                   code="LDB-9044")
    out = out or sys.stdout
    cfg = dict(config or {}, dashboard_port=port, dashboard_host=host)
    conn = laminardb.open(directory or ":memory:", config=cfg)
    try:
        gen = None
        if demo:
            from laminardb.cli.demo import DEMO_SQL, MarketGenerator

            conn.execute(DEMO_SQL)
            gen = MarketGenerator(6, rate)
        if sql:
            conn.execute(sql)
        conn.start()  # connector (Kafka) sources start polling
        out.write(f"laminardb dashboard: {conn.dashboard_url}"
                  f"{'  (append ?token=<dashboard_token>)' if cfg.get('dashboard_token') else ''}\n"
                  "Ctrl-C to stop.\n")
        out.flush()
        start = time.monotonic()
        last_ms = int(time.time() * 1000)
        try:
            while seconds is None or time.monotonic() - start < seconds:
                if gen is not None:
                    now_ms = int(time.time() * 1000)
                    batch = gen.batch(last_ms, now_ms)
                    last_ms = now_ms
                    if batch is not None:
                        conn.insert("trades", batch)
                time.sleep(_DEMO_TICK_S if gen is not None else 0.5)
        except KeyboardInterrupt:
            out.write("stopped\n")
    finally:
        conn.close()
    return 0
