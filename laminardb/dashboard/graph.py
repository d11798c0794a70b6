"""What the dashboard draws: the pipeline graph and per-node counters, read from the reactor.

Entry points: :func:`pipeline_graph` (nodes with a layered layout, edges) and
:func:`read_counters` (one sample of every node's row counter and every source's watermark),
which :class:`laminardb.dashboard.server.Sampler` takes once a second to compute rates and
keep the last minute of history. Both only read, under the reactor's lock, and stay short.
"""

from __future__ import annotations

import time
from typing import Any

from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK
from laminardb.sql.types import ticks_per_ms

__all__ = ["pipeline_graph", "read_counters", "node_counter_names"]

# Column of each kind in the layout: sources first, sinks last, queries in between by depth.
_SOURCE_COLUMN = 0


def _visible(node: Any) -> bool:
    """Dead-letter streams appear only once something reads them (otherwise every source
    would carry an empty ``<source>__rejected`` box)."""
    return node.kind != "rejected" or bool(node.downstream or node.subscribers)


def _edges(nodes: dict[str, Any]) -> list[dict[str, str]]:
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, str]] = []

    def add(a: str, b: str) -> None:
        if a in nodes and b in nodes and (a, b) not in seen and _visible(nodes[a]) and _visible(nodes[b]):
            seen.add((a, b))
            out.append({"from": a, "to": b})

    for n in nodes.values():
        for d in n.downstream:
            add(n.name, d)
        if n.kind in ("sink", "late", "rejected") and n.input:
            add(n.input, n.name)  # these hang off their input without being in its downstream
    return out


def _layout(nodes: dict[str, Any], edges: list[dict[str, str]]) -> dict[str, tuple[int, int]]:
    """Layered layout: sources in column 0, every query one column right of its deepest
    input, every sink in the last column; rows in catalog order within a column."""
    inputs: dict[str, list[str]] = {}
    for e in edges:
        inputs.setdefault(e["to"], []).append(e["from"])
    depth: dict[str, int] = {}

    def depth_of(name: str, trail: frozenset[str] = frozenset()) -> int:
        if name in depth:
            return depth[name]
        ups = [u for u in inputs.get(name, []) if u not in trail]  # the DAG has no cycles; be safe
        d = _SOURCE_COLUMN if not ups else 1 + max(depth_of(u, trail | {name}) for u in ups)
        depth[name] = d
        return d

    queries = [n for n in nodes if nodes[n].kind != "sink"]
    for name in queries:
        depth_of(name)
    last = max([depth[n] for n in queries], default=0) + 1
    rows: dict[int, int] = {}
    out: dict[str, tuple[int, int]] = {}
    for name, node in nodes.items():
        col = last if node.kind == "sink" else depth[name]
        out[name] = (col, rows.get(col, 0))
        rows[col] = rows.get(col, 0) + 1
    return out


def pipeline_graph(conn: Any) -> dict[str, Any]:
    """``{"nodes": [{name, kind, sql, column, row}], "edges": [{from, to}], "columns": n}``."""
    r = conn.engine.reactor
    with r.lock:
        nodes = {name: n for name, n in r.nodes.items() if _visible(n)}
        edges = _edges(nodes)
        places = _layout(nodes, edges)
        out_nodes = [{"name": n.name, "kind": n.kind, "sql": n.sql,
                      "input": n.input, "time_col": n.time_col,
                      "column": places[n.name][0], "row": places[n.name][1]}
                     for n in nodes.values()]
    columns = 1 + max((n["column"] for n in out_nodes), default=-1)
    return {"nodes": out_nodes, "edges": edges, "columns": columns}


def node_counter_names() -> dict[str, str]:
    """What each kind's counter counts (shown as the unit under a node's number)."""
    return {"source": "rows in", "sink": "rows written", "stream": "rows out", "view": "rows out",
            "late": "late rows", "rejected": "rows refused"}


def _watermark_ms(node: Any) -> float | None:
    wm = node.wm
    if wm == END_OF_TIME:  # after finish(): the last watermark the data gave
        wm = node.max_ts - node.delay_ticks if node.max_ts != NO_WATERMARK else NO_WATERMARK
    if wm == NO_WATERMARK or node.time_col is None:
        return None
    try:
        return wm / ticks_per_ms(node.schema.field(node.time_col).type)
    except Exception:  # noqa: BLE001 - an odd time column: show no watermark rather than fail
        return None


def read_counters(conn: Any, *, kafka_lag: bool = True) -> dict[str, Any]:
    """One sample: ``{"ts", "counters": {node: rows}, "sources": {name: {watermark_ms, lag_ms,
    kafka_lag}}}``. A source counts the rows it accepted, a query the rows it emitted, a sink
    the rows its input emitted (everything a stream emits goes to each of its sinks).
    ``kafka_lag=False`` skips asking brokers for end offsets (``kafka_lag`` stays None)."""
    r = conn.engine.reactor
    connectors = {}
    with r.lock:
        now = time.time()
        counters: dict[str, int] = {}
        sources: dict[str, dict[str, Any]] = {}
        for n in r.nodes.values():
            if n.kind == "source":
                counters[n.name] = int(n.accepted)
                wm = _watermark_ms(n)
                sources[n.name] = {"watermark_ms": wm,
                                   "lag_ms": None if wm is None else round(now * 1000.0 - wm, 1),
                                   "kafka_lag": None}
                if kafka_lag and n.connector is not None and hasattr(n.connector, "partition_lag"):
                    connectors[n.name] = n.connector
            elif n.kind == "sink":
                up = r.nodes.get(n.input) if n.input else None
                counters[n.name] = int(up.rows_out) if up is not None else 0
            else:
                counters[n.name] = int(n.rows_out)
    for name, connector in connectors.items():
        try:  # from the last fetch responses: never asks a broker, so a dead one cannot stall the page
            parts = connector.partition_lag() if hasattr(connector, "partition_lag") else {}
            known = [v for v in parts.values() if v is not None]
            sources[name]["kafka_lag"] = sum(known) if known and len(known) == len(parts) else None
        except Exception:  # noqa: BLE001 - a broker hiccup shows as "unknown", never breaks the page
            sources[name]["kafka_lag"] = None
    return {"ts": now, "counters": counters, "sources": sources}
