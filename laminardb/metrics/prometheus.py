"""The Prometheus endpoint: the metrics registry as Prometheus metric families, over HTTP.

Entry points: :class:`RegistryCollector` (a ``prometheus_client`` custom collector that turns
one ``metrics()`` dict into metric families at every scrape) and :func:`start_server`
(``prometheus_client``'s own WSGI server on a daemon thread, bound to one host; the
connection starts it when ``config['metrics_port']`` is set and stops it on ``close()``).

Every family is listed with its unit in ``docs/operations.md`` ("Metrics"). The collector
lives in a registry of its own (not ``prometheus_client.REGISTRY``): several connections in
one process each serve their own numbers, and nothing else leaks into the endpoint.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from laminardb.metrics.exceptions import MetricsConfigError, MetricsExposedError

__all__ = ["RegistryCollector", "MetricsServer", "check_host", "families", "start_server"]

# How long close() waits for the server thread to leave serve_forever().
_STOP_JOIN_S = 5.0


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _add(family: Metric, labels: list[str], value: Any) -> None:
    if value is not None:
        family.add_metric(labels, float(value))  # type: ignore[attr-defined]


def families(m: dict[str, Any]) -> list[Metric]:
    """The metric families of one ``metrics()`` dict (see the module docstring)."""
    out: list[Metric] = []
    totals = [("events_ingested", "laminardb_events_ingested", "Rows ingested into all sources."),
              ("events_emitted", "laminardb_events_emitted", "Rows emitted by all streams, views and sinks."),
              ("late_events_dropped", "laminardb_late_events_dropped", "Late rows dropped by all queries."),
              ("late_events_routed", "laminardb_late_events_routed", "Late rows routed by LATE DATA TO.")]
    for key, name, doc in totals:
        f = _counter(name, doc, [])
        _add(f, [], m.get(key))
        out.append(f)
    out += _sources(m.get("sources") or {})
    out += _queries(m.get("queries") or {})
    out += _sinks(m.get("sinks") or {})
    out += _checkpoints(m.get("checkpoints"))
    out += _process(m.get("process") or {})
    if isinstance(m.get("cluster"), dict):
        out += _cluster(m["cluster"])
    return out


def _sources(sources: dict[str, dict[str, Any]]) -> list[Metric]:
    L = ["source"]
    rows = _counter("laminardb_source_rows", "Rows ingested into the source.", L)
    nbytes = _counter("laminardb_source_bytes", "Arrow bytes ingested into the source.", L)
    parse = _counter("laminardb_source_parse_errors", "Rows or messages refused (did not convert or decode).", L)
    dead = _counter("laminardb_source_dead_letters", "Refused rows sent to a dead-letter output.", L)
    errors = _counter("laminardb_source_errors", "Failing polls of the source's connector.", L)
    up = _gauge("laminardb_source_up", "1 while the source is healthy (connected or insert-fed), else 0.", L)
    status = _gauge("laminardb_source_status", "1 for the source's current status.", L + ["status"])
    wm_lag = _gauge("laminardb_watermark_lag_seconds", "Wall-clock time minus the source's watermark.", L)
    since = _gauge("laminardb_source_seconds_since_last_poll", "Seconds since the last good poll.", L)
    failing = _gauge("laminardb_source_failing_seconds", "Seconds the source has been failing.", L)
    klag = _gauge("laminardb_kafka_lag", "Messages behind the partition's end offset.", L + ["partition"])
    for name, s in sorted(sources.items()):
        lbl = [name]
        _add(rows, lbl, s.get("rows_in"))
        _add(nbytes, lbl, s.get("bytes_in"))
        _add(parse, lbl, s.get("parse_errors"))
        _add(dead, lbl, s.get("dead_letters"))
        _add(errors, lbl, s.get("errors"))
        st = s.get("status") or "ok"
        _add(up, lbl, 1 if st in ("ok", "connected") else 0)
        _add(status, [name, st], 1)
        lag_ms = s.get("watermark_lag_ms")
        _add(wm_lag, lbl, None if lag_ms is None else lag_ms / 1000.0)
        _add(since, lbl, s.get("since_last_poll_s"))
        _add(failing, lbl, s.get("failing_for_s"))
        for p, v in sorted((s.get("kafka_lag") or {}).items()):
            _add(klag, [name, str(p)], v)
    return [rows, nbytes, parse, dead, errors, up, status, wm_lag, since, failing, klag]


def _queries(queries: dict[str, dict[str, Any]]) -> list[Metric]:
    L = ["query", "kind"]
    rin = _counter("laminardb_query_rows_in", "Rows the query's operator received.", L)
    rout = _counter("laminardb_query_rows_out", "Rows the query emitted.", L)
    late = _counter("laminardb_query_late_dropped", "Late rows the query dropped.", L)
    srows = _gauge("laminardb_query_state_rows", "Live groups / windows / sessions in the query's state.", L)
    sbytes = _gauge("laminardb_query_state_bytes", "Approximate bytes of the query's state arrays.", L)
    busy = _counter("laminardb_query_busy_seconds", "Seconds spent in the operator (process, on_watermark).", L)
    for name, q in sorted(queries.items()):
        lbl = [name, str(q.get("kind"))]
        _add(rin, lbl, q.get("rows_in"))
        _add(rout, lbl, q.get("rows_out"))
        _add(late, lbl, q.get("late_dropped"))
        _add(srows, lbl, q.get("state_rows"))
        _add(sbytes, lbl, q.get("state_bytes"))
        _add(busy, lbl, q.get("busy_s"))
    return [rin, rout, late, srows, sbytes, busy]


def _sinks(sinks: dict[str, dict[str, Any]]) -> list[Metric]:
    L = ["sink", "connector"]
    rows = _counter("laminardb_sink_rows", "Rows written to the sink.", L)
    committed = _counter("laminardb_sink_rows_committed", "Rows of committed epochs (exactly-once sinks).", L)
    commits = _counter("laminardb_sink_commits", "Epochs the sink committed.", L)
    errors = _counter("laminardb_sink_errors", "Failed writes and commits of the sink.", L)
    for name, s in sorted(sinks.items()):
        lbl = [name, str(s.get("connector"))]
        _add(rows, lbl, s.get("rows_written"))
        _add(committed, lbl, s.get("rows_committed"))
        _add(commits, lbl, s.get("commits"))
        _add(errors, lbl, s.get("errors"))
    return [rows, committed, commits, errors]


def _checkpoints(c: dict[str, Any] | None) -> list[Metric]:
    if not c:
        return []
    specs = [("checkpoints", _counter, "laminardb_checkpoints", "Checkpoints completed."),
             ("failures", _counter, "laminardb_checkpoint_failures", "Checkpoints that failed."),
             ("sink_commit_failures", _counter, "laminardb_checkpoint_sink_commit_failures",
              "Sink commits that failed (retried at the next checkpoint)."),
             ("last_epoch", _gauge, "laminardb_checkpoint_epoch", "Epoch of the last completed checkpoint."),
             ("last_duration_s", _gauge, "laminardb_checkpoint_duration_seconds",
              "Duration of the last checkpoint."),
             ("last_stall_s", _gauge, "laminardb_checkpoint_stall_seconds",
              "Time the last checkpoint held the engine (barrier)."),
             ("max_stall_s", _gauge, "laminardb_checkpoint_max_stall_seconds", "Longest barrier so far."),
             ("last_bytes", _gauge, "laminardb_checkpoint_bytes", "Bytes written by the last checkpoint."),
             ("bytes_written", _counter, "laminardb_checkpoint_bytes_written",
              "Bytes every checkpoint so far wrote (incremental ones: only the changes)."),
             ("checkpoint_bytes_on_disk", _gauge, "laminardb_checkpoint_disk_bytes",
              "Bytes of the retained checkpoints on disk."),
             ("wal_bytes", _gauge, "laminardb_wal_bytes", "Bytes of the write-ahead log on disk."),
             ("recovery_skipped_checkpoints", _gauge, "laminardb_recovery_skipped_checkpoints",
              "Checkpoints the last open skipped (partial or damaged) for an older one."),
             ("recovery_wal_segments_set_aside", _gauge, "laminardb_recovery_wal_segments_set_aside",
              "Damaged WAL segments the last open set aside (no checkpoint it restored needed them).")]
    out: list[Metric] = []
    for key, make, name, doc in specs:
        f = make(name, doc, [])
        _add(f, [], c.get(key))
        out.append(f)
    return out


def _process(p: dict[str, Any]) -> list[Metric]:
    rss = _gauge("laminardb_process_resident_memory_bytes", "Resident memory of this process.", [])
    cpu = _counter("laminardb_process_cpu_seconds", "CPU time (user + system) of this process.", [])
    threads = _gauge("laminardb_process_threads", "Threads of this process.", [])
    _add(rss, [], p.get("rss_bytes"))
    _add(cpu, [], p.get("cpu_s"))
    _add(threads, [], p.get("threads"))
    return [rss, cpu, threads]


def _cluster(c: dict[str, Any]) -> list[Metric]:
    L = ["actor"]
    rows = _counter("laminardb_actor_rows", "Rows processed by the reactor actor.", L)
    busy = _counter("laminardb_actor_busy_seconds", "Seconds the actor spent processing.", L)
    cpu = _counter("laminardb_actor_cpu_seconds", "CPU seconds of the actor's process.", L)
    poll = _counter("laminardb_actor_poll_cpu_seconds", "CPU seconds the actor spent reading its sources.", L)
    rss = _gauge("laminardb_actor_resident_memory_bytes", "Resident memory of the actor's process.", L)
    vnodes = _gauge("laminardb_actor_vnodes", "Virtual partitions the actor owns.", L)
    epoch = _gauge("laminardb_actor_max_epoch", "Highest ownership epoch among the actor's vnodes.", L)
    for fam, key in ((rows, "rows_per_actor"), (busy, "busy_s_per_actor"), (cpu, "cpu_s_per_actor"),
                     (poll, "poll_cpu_s_per_actor"), (rss, "rss_bytes_per_actor")):
        for i, v in enumerate(c.get(key) or []):
            _add(fam, [str(i)], v)
    for member in c.get("members") or []:
        if isinstance(member, dict) and "index" in member:
            _add(vnodes, [str(member["index"])], member.get("vnodes"))
            _add(epoch, [str(member["index"])], member.get("max_epoch"))
    return [rows, busy, cpu, poll, rss, vnodes, epoch]


class RegistryCollector(Collector):
    """A custom collector: ``metrics()`` is called at each scrape and turned into families."""

    def __init__(self, metrics: Callable[[], dict[str, Any]]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from families(self._metrics())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, *, allow_remote: bool) -> None:
    """Refuse a non-loopback ``host`` unless ``allow_remote`` (:class:`MetricsExposedError`)."""
    if not _is_loopback(host) and not allow_remote:
        msg = (f"metrics_host {host!r} is not a loopback address: the metrics endpoint has no "
               "authentication, so serving it beyond this machine needs config['allow_remote'] = "
               "True (then admit only your Prometheus to the port); or use 127.0.0.1")
        raise MetricsExposedError(msg)


class MetricsServer:
    """A running endpoint: ``url`` (``http://host:port/metrics``), ``close()``."""

    def __init__(self, httpd: Any, thread: threading.Thread, host: str) -> None:
        self._httpd, self._thread = httpd, thread
        self.host = host
        self.port = int(httpd.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port; idempotent."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(_STOP_JOIN_S)
        self._httpd = None


def start_server(metrics: Callable[[], dict[str, Any]], *, port: int = 0, host: str = "127.0.0.1",
                 allow_remote: bool = False) -> MetricsServer:
    """Serve ``metrics()`` in the Prometheus text format on ``host:port`` (0: a free port).

    Raises:
        MetricsExposedError: ``host`` is not loopback and ``allow_remote`` is False (the
            endpoint has no authentication).
        MetricsConfigError: a bad port, or the address cannot be bound.
    """
    from prometheus_client import start_wsgi_server

    try:
        port = int(port)
    except (TypeError, ValueError):
        port = -1
    if not 0 <= port <= 65535:
        raise MetricsConfigError(f"metrics_port must be 0 (a free port) … 65535, not {port!r}")
    host = str(host)
    check_host(host, allow_remote=allow_remote)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RegistryCollector(metrics))
    try:
        httpd, thread = start_wsgi_server(port, addr=host, registry=registry)
    except OSError as exc:
        msg = f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose another metrics_port"
        raise MetricsConfigError(msg) from exc
    thread.name = "laminardb-metrics"
    return MetricsServer(httpd, thread, host)
