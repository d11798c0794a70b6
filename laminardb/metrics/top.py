"""``laminardb top``: a live terminal view of a laminardb Prometheus endpoint.

Entry point: :func:`run_top` (``laminardb top --url http://127.0.0.1:PORT/metrics [--once]
[--interval S]``). Each refresh scrapes the endpoint, parses the exposition format with
``prometheus_client.parser`` and redraws one plain-text frame (ANSI clear): sources (status,
rows and rows/s, watermark lag, Kafka lag, errors), queries (rows in/out per second, state
rows and bytes, late rows, busy time), sinks (rows/s, committed, commits, errors),
checkpoints and the process. Rates need two scrapes: the first frame (and ``--once``) shows
``-``. :func:`render` builds a frame from two scrapes, for tests and other front ends.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "scrape", "render", "run_top"]

_CLEAR = "\x1b[H\x1b[2J"
# A scrape that takes longer than this counts as a failed refresh (the endpoint is local).
_SCRAPE_TIMEOUT_S = 5.0


@dataclass
class Scrape:
    """One scrape: ``values[sample name][label tuple] = value`` and when it was taken."""

    at: float
    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` whose labels include ``labels`` (first match), or None."""
        want = set(labels.items())
        for key, v in self.values.get(name, {}).items():
            if want <= set(key):
                return v
        return None

    def by(self, name: str, label: str) -> dict[str, float]:
        """``{value of label: sample value}`` for every sample of ``name``."""
        return {dict(k).get(label, ""): v for k, v in self.values.get(name, {}).items()}


def scrape(url: str, *, timeout_s: float = _SCRAPE_TIMEOUT_S) -> Scrape:
    """Fetch and parse ``url`` (Prometheus text format)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - an http(s) URL the user gave
        text = resp.read().decode("utf-8")
    out = Scrape(time.monotonic())
    values: dict[str, dict] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[s.name][tuple(sorted(s.labels.items()))] = float(s.value)
    out.values = dict(values)
    return out


def _rate(now: Scrape, prev: Scrape | None, name: str, **labels: str) -> str:
    v = now.get(name, **labels)
    if prev is None or v is None:
        return "-"
    p = prev.get(name, **labels)
    dt = now.at - prev.at
    if p is None or dt <= 0:
        return "-"
    return _num(max(0.0, (v - p) / dt))


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"


def _bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s" if v < 3600 else f"{v / 3600:.1f} h"


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    cells = [[title] + header[1:]] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in cells]
    if not rows:
        lines.append("  (none)")
    return lines


def render(now: Scrape, prev: Scrape | None = None, *, url: str = "") -> str:
    """One frame of ``laminardb top`` from a scrape (and the one before it, for rates)."""
    stamp = datetime.now().strftime("%H:%M:%S")
    head = (f"laminardb top  {url}  {stamp}   rss {_bytes(now.get('laminardb_process_resident_memory_bytes'))}"
            f"  cpu {_secs(now.get('laminardb_process_cpu_seconds_total'))}"
            f"  threads {_num(now.get('laminardb_process_threads'))}")
    out = [head, ""]

    status = {}
    for key, v in now.values.get("laminardb_source_status", {}).items():
        if v:
            d = dict(key)
            status[d["source"]] = d["status"]
    klag: dict[str, float] = defaultdict(float)
    for key, v in now.values.get("laminardb_kafka_lag", {}).items():
        klag[dict(key)["source"]] += v
    rows = []
    for src in sorted(now.by("laminardb_source_rows_total", "source")):
        wm = now.get("laminardb_watermark_lag_seconds", source=src)
        rows.append([src, status.get(src, "?"), _num(now.get("laminardb_source_rows_total", source=src)),
                     _rate(now, prev, "laminardb_source_rows_total", source=src), _secs(wm),
                     _num(klag[src]) if src in klag else "-",
                     _num(now.get("laminardb_source_errors_total", source=src)),
                     _num(now.get("laminardb_source_parse_errors_total", source=src))])
    out += _table("SOURCES", ["", "status", "rows", "rows/s", "wm lag", "kafka lag", "errors", "parse err"], rows)
    out.append("")

    rows = []
    for q, kind in sorted({(dict(k)["query"], dict(k).get("kind", ""))
                           for k in now.values.get("laminardb_query_rows_in_total", {})}):
        rows.append([q, kind, _num(now.get("laminardb_query_rows_in_total", query=q)),
                     _rate(now, prev, "laminardb_query_rows_in_total", query=q),
                     _num(now.get("laminardb_query_rows_out_total", query=q)),
                     _rate(now, prev, "laminardb_query_rows_out_total", query=q),
                     _num(now.get("laminardb_query_state_rows", query=q)),
                     _bytes(now.get("laminardb_query_state_bytes", query=q)),
                     _num(now.get("laminardb_query_late_dropped_total", query=q)),
                     _secs(now.get("laminardb_query_busy_seconds_total", query=q))])
    out += _table("QUERIES", ["", "kind", "rows in", "in/s", "rows out", "out/s", "state rows", "state",
                              "late", "busy"], rows)
    out.append("")

    rows = []
    for sink, conn in sorted({(dict(k)["sink"], dict(k).get("connector", ""))
                              for k in now.values.get("laminardb_sink_rows_total", {})}):
        rows.append([sink, conn, _num(now.get("laminardb_sink_rows_total", sink=sink)),
                     _rate(now, prev, "laminardb_sink_rows_total", sink=sink),
                     _num(now.get("laminardb_sink_rows_committed_total", sink=sink)),
                     _num(now.get("laminardb_sink_commits_total", sink=sink)),
                     _num(now.get("laminardb_sink_errors_total", sink=sink))])
    out += _table("SINKS", ["", "connector", "rows", "rows/s", "committed", "commits", "errors"], rows)
    out.append("")

    if "laminardb_checkpoints_total" in now.values:
        dur = now.get("laminardb_checkpoint_duration_seconds")
        stall = now.get("laminardb_checkpoint_stall_seconds")
        out.append(f"CHECKPOINTS  epoch {_num(now.get('laminardb_checkpoint_epoch'))}"
                   f"  completed {_num(now.get('laminardb_checkpoints_total'))}"
                   f"  failed {_num(now.get('laminardb_checkpoint_failures_total'))}"
                   f"  last {'-' if dur is None else f'{dur * 1000:.1f} ms'}"
                   f"  stall {'-' if stall is None else f'{stall * 1000:.1f} ms'}"
                   f"  size {_bytes(now.get('laminardb_checkpoint_bytes'))}"
                   f"  wal {_bytes(now.get('laminardb_wal_bytes'))}")
    else:
        out.append("CHECKPOINTS  none (in-memory database)")
    return "\n".join(out) + "\n"


def run_top(url: str, *, interval_s: float = 1.0, once: bool = False, out: TextIO | None = None,
            frames: int | None = None) -> int:
    """Poll ``url`` and redraw until Ctrl-C (or ``frames`` frames); ``once``: print one frame
    without clearing the screen and return. Returns the exit status (1: the endpoint could
    not be read in ``once`` mode)."""
    out = out or sys.stdout
    prev: Scrape | None = None
    shown = 0
    while True:
        try:
            now = scrape(url)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            msg = f"laminardb top: cannot read {url}: {exc}"
            if once:
                print(msg, file=sys.stderr)
                return 1
            out.write(_CLEAR + msg + " (retrying)\n")
            out.flush()
        else:
            frame = render(now, prev, url=url)
            out.write(frame if once else _CLEAR + frame)
            out.flush()
            prev = now
            if once:
                return 0
        shown += 1
        if frames is not None and shown >= frames:
            return 0
        time.sleep(interval_s)
