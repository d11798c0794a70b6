"""One metrics registry for both modes: what ``Connection.metrics()`` returns.

Entry point: :func:`collect` (``collect(reactor, runners=…, durable=…)`` → a dict of plain
Python values). It is a *pull*: nothing here runs on the data path. The reactor keeps a few
per-batch counters on its nodes (rows and bytes in, busy time, rows refused); this module reads
them, and the live objects behind them (source runners, Kafka connectors, sinks, operators'
state, the checkpoint coordinator, the process) only when someone asks. The Prometheus
endpoint (:mod:`laminardb.metrics.prometheus`), ``laminardb top`` (through that endpoint)
and the dashboard all read this one structure.

Shape (every key always present; ``None`` where a value does not apply or is not known yet)::

    events_ingested, events_emitted, late_events_dropped, late_events_routed   (ints)
    watermarks        {source: watermark in event-time ticks | None}
    streams           {name: {rows_emitted, kind, late_dropped}}   (sinks: rows written)
    checkpoints       LocalCoordinator.metrics() | None (in memory)
    sources           {name: SOURCE}
    queries           {name: QUERY}      (streams, views, sink queries)
    sinks             {name: SINK}
    process           {rss_bytes, cpu_s, threads, uptime_s}

    SOURCE = {connector ("kafka" | None: insert()), rows_in, bytes_in, parse_errors,
              dead_letters, watermark, watermark_lag_ms, kafka_lag {partition: messages | None}
              | None, kafka_lag_total, status ("ok" | "starting" | "connected" | "error" |
              "stopped"), errors, last_error, since_last_poll_s, failing_for_s}
    QUERY  = {kind, input, rows_in, rows_out, late_dropped, state_rows, state_bytes, busy_s}
             (+ lookup {cache_hits, cache_misses, rows_fetched, queries, errors, cached_keys,
             pending_rows} for a query with a lookup join against PostgreSQL)
    SINK   = {connector (class name), input, rows_written, rows_committed, commits, errors,
              last_error}

``docs/operations.md`` ("Metrics") gives every field's meaning and unit.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from laminardb.operators.group_aggregate import END_OF_TIME

__all__ = ["collect", "process_metrics", "state_size"]

_STARTED = time.monotonic()
# How deep state_size() follows attributes of an aggregate to find its numpy arrays
# (aggregate → accumulator / interner → arrays is 2; one more covers lists of accumulators).
_STATE_DEPTH = 3


def collect(reactor: Any, *, runners: dict[str, Any] | None = None,
            durable: Any = None) -> dict[str, Any]:
    """Everything ``metrics()`` reports; see the module docstring. Takes the reactor's lock
    for a short read (no I/O under it; Kafka lag comes from the last fetch responses)."""
    runners = runners or {}
    now_ms = time.time() * 1000.0
    with reactor.lock:
        nodes = list(reactor.nodes.values())
        out: dict[str, Any] = {
            "events_ingested": reactor.events_ingested,
            "events_emitted": reactor.events_emitted,
            "late_events_dropped": reactor.late_dropped(),
            "late_events_routed": reactor.late_routed,
            "watermarks": reactor.watermarks(),
        }
        sinks = {n.name: _sink(n, reactor) for n in nodes if n.kind == "sink"}
        out["streams"] = {
            n.name: {"rows_emitted": sinks[n.name]["rows_written"] if n.kind == "sink" else n.rows_out,
                     "kind": n.kind, "late_dropped": 0 if n.op is None else n.op.late_dropped}
            for n in nodes if n.kind != "source"}
        watermarks = out["watermarks"]
        sources = {n.name: _source_counters(n, reactor, watermarks.get(n.name), now_ms)
                   for n in nodes if n.kind == "source"}
        queries = {n.name: _query(n) for n in nodes if n.op is not None}
        connectors = {n.name: n.connector for n in nodes if n.kind == "source" and n.connector is not None}
    # outside the engine lock: connectors and runners have their own locks
    for name, conn in connectors.items():
        _connector(sources[name], conn, runners.get(name))
    out["checkpoints"] = None if durable is None else durable.metrics()
    out["sources"] = sources
    out["queries"] = queries
    out["sinks"] = sinks
    out["process"] = process_metrics()
    return out


# ---------------------------------------------------------------------------------- sources
def _source_counters(node: Any, reactor: Any, wm: int | None, now_ms: float) -> dict[str, Any]:
    dead = reactor.nodes.get(node.name + "__rejected")
    lag_ms = None
    if wm is not None and node.time_col is not None and node.wm != END_OF_TIME:
        from laminardb.sql.types import ticks_per_ms

        try:
            lag_ms = max(0.0, now_ms - wm / ticks_per_ms(node.schema.field(node.time_col).type))
        except Exception:  # noqa: BLE001 - not an event-time type: no wall-clock lag
            lag_ms = None
    return {
        "connector": node.source_connector,
        "rows_in": node.rows_in,
        "bytes_in": node.bytes_in,
        "parse_errors": node.rejected,
        "dead_letters": 0 if dead is None else dead.rows_out,
        "watermark": wm,
        "watermark_lag_ms": lag_ms,
        "kafka_lag": None,
        "kafka_lag_total": None,
        "changelog": None,  # CDC sources: slot, position, confirmed LSN, WAL lag in bytes
        "status": "ok",
        "errors": 0,
        "last_error": None,
        "since_last_poll_s": None,
        "failing_for_s": None,
    }


def _connector(out: dict[str, Any], conn: Any, runner: Any) -> None:
    """Add a polled source's connector state to ``out``: Kafka lag, messages that did not
    decode (dead-lettered to ``<topic>.dlq``), the runner's health."""
    lag = getattr(conn, "partition_lag", None)
    if lag is not None:
        try:
            per = lag()
        except Exception:  # noqa: BLE001 - a closed or broken consumer: lag unknown
            per = {}
        out["kafka_lag"] = per
        known = [v for v in per.values() if v is not None]
        out["kafka_lag_total"] = sum(known) if known else None
    changelog = getattr(conn, "changelog_metrics", None)  # CDC sources (connectors/postgres_cdc.py)
    if changelog is not None:
        try:
            out["changelog"] = changelog()
        except Exception:  # noqa: BLE001 - the server is unreachable: the runner's health says so
            out["changelog"] = None
    bad = int(getattr(conn, "dead_lettered", 0))
    out["parse_errors"] += bad
    out["dead_letters"] += bad - int(getattr(conn, "dead_letter_failures", 0))
    if runner is None:
        out["status"] = "stopped"  # not started (Connection.start()) or stopped
        return
    out.update(runner.health())


# ---------------------------------------------------------------------------------- queries
def _query(node: Any) -> dict[str, Any]:
    op = node.op
    agg = getattr(op, "agg", None)
    rows = nbytes = None
    if agg is not None:
        rows = _live_groups(agg)
        nbytes = state_size(agg)
    elif hasattr(op, "plan") and getattr(op.plan, "aggregate", None) is None:
        rows = nbytes = 0  # a stateless query (filter / projection)
    out = {"kind": node.kind, "input": node.input, "rows_in": node.rows_in, "rows_out": node.rows_out,
           "late_dropped": op.late_dropped, "state_rows": rows, "state_bytes": nbytes,
           "busy_s": round(node.busy_s, 6)}
    lookup = getattr(op, "lookup_metrics", None)
    stats = lookup() if lookup is not None else None
    if stats is not None:  # a lookup join against PostgreSQL: cache hits/misses, queries, errors
        out["lookup"] = stats
    return out


def _live_groups(agg: Any) -> int | None:
    groups = getattr(agg, "state_groups", None)
    if groups is not None:
        return int(groups)
    live, counters = getattr(agg, "live", None), getattr(agg, "counters", None)
    if live is not None and counters is not None:  # sessions: slots below the high-water mark
        return int(np.count_nonzero(live[: int(counters[0])]))
    return None


def state_size(obj: Any, depth: int = _STATE_DEPTH, seen: set[int] | None = None) -> int:
    """Approximate bytes of an operator's state: the ``nbytes`` of every numpy array (and
    Arrow array) reachable through its attributes, lists and dicts, each counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and not hasattr(obj, "__dict__"):  # pyarrow arrays
        return nbytes
    if depth <= 0:
        return 0
    if isinstance(obj, (list, tuple)):
        return sum(state_size(v, depth - 1, seen) for v in obj)
    if isinstance(obj, dict):
        return sum(state_size(v, depth - 1, seen) for v in obj.values())
    attrs = getattr(obj, "__dict__", None)
    if attrs is None:
        return 0
    return sum(state_size(v, depth - 1, seen) for v in attrs.values())


# ---------------------------------------------------------------------------------- sinks
def _sink(node: Any, reactor: Any) -> dict[str, Any]:
    sink = node.sinks[0] if node.sinks else None
    errors, last = reactor.sink_errors.get(id(sink), (0, None))
    failures = getattr(sink, "commit_failures", 0)
    return {
        # a sink staged for another writer (the Delta coordinator) names the sink it stands for
        "connector": getattr(sink, "connector_name", None) or type(sink).__name__,
        "input": node.input,
        "rows_written": int(getattr(sink, "rows_written", 0)),
        # exactly-once sinks: rows of committed epochs; at-least-once: rows handed to the sink
        "rows_committed": int(getattr(sink, "rows_committed", getattr(sink, "rows_written", 0))),
        "commits": int(getattr(sink, "epochs_committed", 0)),
        "errors": errors + failures,
        "last_error": last,
    }


# ---------------------------------------------------------------------------------- process
def process_metrics() -> dict[str, Any]:
    """This process: resident memory (bytes), CPU time (user + system, seconds, every
    thread), thread count, seconds since laminardb was imported."""
    rss = None
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break
    except OSError:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak, on macOS bytes
    t = os.times()
    return {"rss_bytes": rss, "cpu_s": round(t.user + t.system, 3), "threads": threading.active_count(),
            "uptime_s": round(time.monotonic() - _STARTED, 3)}

