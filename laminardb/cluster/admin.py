"""Operator views of the databases in a Ray cluster: ``laminardb cluster status --ray``,
``laminardb cluster scale NAME N`` and ``laminardb cluster drop NAME``. Entry points:
``databases_status(address)``, ``format_databases(status)``, ``scale(address, name, n)``,
``drop(address, name)``."""

from __future__ import annotations

from typing import Any

_STATUS_TIMEOUT_S = 10.0


def _ray(address: str):
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False,
                 logging_level="ERROR")
    return ray


def databases_status(address: str = "auto") -> dict[str, Any]:
    """Every database's head: actors (pid, node, state, vnodes, max epoch), checkpoints,
    clients and recoveries; a head that does not answer in time is listed as such."""
    from laminardb.cluster.client import raise_remote
    from laminardb.cluster.head import NAMESPACE, head_name, list_databases

    ray = _ray(address)
    out: dict[str, Any] = {}
    for name in list_databases():
        try:
            head = ray.get_actor(head_name(name), namespace=NAMESPACE)
            out[name] = raise_remote(ray.get(head.status.remote(), timeout=_STATUS_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - one sick head must not hide the others
            out[name] = {"database": name, "error": f"{type(exc).__name__}: {exc}"}
    return {"databases": out, "spark": _spark_status()}


def _spark_status() -> dict[str, Any] | None:
    """The Spark standalone cluster ``ray up`` started on this node (its executors), if any."""
    import os

    from laminardb.spark.standalone import DEFAULT_DATA_DIR, spark_status

    return spark_status(os.environ.get("LAMINARDB_SPARK_DIR", DEFAULT_DATA_DIR))


def format_databases(status: dict[str, Any]) -> str:
    text = _format_databases(status["databases"])
    if status.get("spark") is None:
        return text
    from laminardb.spark.cli import format_spark

    return text + "\n" + format_spark(status["spark"])


def _format_databases(dbs: dict[str, Any]) -> str:
    if not dbs:
        return "databases: none"
    lines = [f"databases: {len(dbs)}"]
    for name, st in sorted(dbs.items()):
        if "error" in st:
            lines.append(f"  {name}: not answering ({st['error']})")
            continue
        ck = st.get("checkpoints") or {}
        lines.append(f"  {name}: head pid {st['head_pid']}, {st['clients']} client(s), "
                     f"{st['recoveries']} recovery(ies), last checkpoint epoch {ck.get('last_epoch')}, "
                     f"{ck.get('checkpoint_bytes_on_disk', 0)} bytes on disk, dir {st['directory']}")
        stale = st.get("stale")
        if stale:
            lines.append(f"    stale figures ({stale.get('age_s')} s old): {stale.get('reason')}")
        for m in (st.get("cluster") or {}).get("members", []):
            lines.append(f"    actor {m['index']} pid {m['pid']} node {m['node_id'][:12]} {m['state']}: "
                         f"{m['vnodes']} vnodes, max epoch {m['max_epoch']}")
        lines += _pipeline_lines(st)
        lines += _autoscale_lines(st.get("autoscale") or {})
    return "\n".join(lines)


def _pipeline_lines(st: dict[str, Any]) -> list[str]:
    """Each source's and sink's state, counters and last error (as ``metrics()`` has them)."""
    lines = []
    for name, src in sorted((st.get("sources") or {}).items()):
        failing = src.get("failing_for_s")
        lines.append(f"    source {name} ({src.get('connector') or 'insert'}) {src.get('status')}: "
                     f"{src.get('rows_in')} rows, {src.get('bytes_in')} bytes in, lag {src.get('kafka_lag_total')}, "
                     f"watermark {src.get('watermark')}, {src.get('parse_errors')} parse errors, "
                     f"{src.get('errors')} errors" + ("" if failing is None else f", failing for {failing} s"))
        if src.get("last_error"):
            lines.append(f"      last error: {src['last_error']}")
    for name, sink in sorted((st.get("sinks") or {}).items()):
        lines.append(f"    sink {name} ({sink.get('connector')}) from {sink.get('input')}: "
                     f"{sink.get('rows_written')} rows written, {sink.get('rows_committed')} committed in "
                     f"{sink.get('commits')} commits, {sink.get('errors')} errors")
        if sink.get("last_error"):
            lines.append(f"      last error: {sink['last_error']}")
    return lines


def _autoscale_lines(auto: dict[str, Any]) -> list[str]:
    """The autoscaler's inputs, its last decision and why, and the last rescales."""
    lines = [f"    autoscale: {'on' if auto.get('enabled') else 'off'}"]
    inputs = auto.get("inputs")
    if inputs:
        busy = ", ".join(f"{b:.0%}" for b in inputs.get("busy") or [])
        lines.append(f"      lag {inputs.get('lag')} rows (checkpointed {inputs.get('checkpoint_lag')}), "
                     f"arrival {inputs.get('arrival_rate')} rows/s, busy [{busy}], "
                     f"{inputs.get('partitions')} partitions, {inputs.get('free_cpus')} free CPUs")
    last = auto.get("last")
    if last:
        util = (last.get("inputs") or {}).get("utilization")
        lines.append(f"      last decision: {last['action']} → {last['actors']} actor(s)"
                     f"{'' if util is None else f', utilization {util:.2f}'}: {last['reason']}")
    for r in auto.get("rescales") or []:
        lines.append(f"      rescaled {r['previous']} → {r['actors']} by {r['by']} in {r['pause_s']} s: {r['reason']}")
    return lines


def scale(address: str, name: str, n: int) -> dict[str, Any]:
    """Move database ``name`` to ``n`` actors (``RemoteConnection.scale``): the rescale's record."""
    from laminardb.cluster.client import raise_remote
    from laminardb.cluster.head import NAMESPACE, head_name
    from laminardb.errors import ConfigError

    ray = _ray(address)
    try:
        head = ray.get_actor(head_name(name), namespace=NAMESPACE)
    except ValueError:
        raise ConfigError(f"no database {name!r} in this Ray cluster; `laminardb cluster status --ray` "
                          "lists them") from None
    return raise_remote(ray.get(head.scale.remote(n), timeout=600))


def drop(address: str, name: str) -> bool:
    from laminardb.cluster.head import drop_database

    _ray(address)
    return drop_database(name)
