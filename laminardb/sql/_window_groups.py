"""GROUP BY the window bounds of a windowed input: a window aggregate that closes with them.

Entry point: ``window_attribute_grouping(items, rel, scope)``. Nexmark q5 takes the largest
count per window of a windowed count — ``SELECT max(num), starttime, endtime FROM (… GROUP BY
auction, window_start, window_end) GROUP BY starttime, endtime`` — and Flink plans that GROUP
BY as a window aggregate because it groups by both bounds of the window below ("window
aggregation over window attributes"). A group is complete once no row of its window can come
any more: when the watermark of the input's ``window_end`` column (``WindowEdge("end")``) has
passed the group's end. So the planner adds a hidden one-tick tumbling window over that
column: a group (window end ``e``) closes when that watermark is ≥ ``e + 1``, emits once, and
its state goes; the output is append-only and carries the bounds on as event time, so a window
join above it (``ON a.window_end = b.window_end``) bounds its state too.

Taken only with both bounds of one window among the keys (a session: its end), no EMIT clause
and no allowed lateness; otherwise the GROUP BY stays a plain (changelog) aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
from sqlglot import exp

from laminardb.sql.watermarks import WatermarkMap, WindowEdge


@dataclass(frozen=True)
class WindowGroups:
    """The hidden window: over ``time_index`` (the window-end column), one tick wide, with
    that column's watermark ``input_watermark``; ``carried``: bound columns → their maps."""

    time_index: int
    time_type: pa.DataType
    input_watermark: WatermarkMap
    carried: dict[str, WatermarkMap]


def window_attribute_grouping(items: list[exp.Expression], rel, scope) -> WindowGroups | None:
    """The hidden window when ``items`` (GROUP BY) hold both bounds of one window of ``rel``."""
    times = rel.event_time()
    lineages: dict[tuple, dict[str, tuple[int, str, WatermarkMap]]] = {}
    for it in items:
        if not isinstance(it, exp.Column):
            continue
        try:
            idx = scope.resolve(it.name, it.this.args.get("quoted", False))
        except LookupError:
            continue
        name = rel.schema.field(idx).name
        m = times.get(name)
        if m is None or not m.steps or not isinstance(m.steps[-1], WindowEdge):
            continue
        edge = m.steps[-1]
        lineage = (m.steps[:-1], replace(edge, edge="end"))
        lineages.setdefault(lineage, {})[edge.edge] = (idx, name, m)
    for (_, end_edge), edges in lineages.items():
        if "end" not in edges or ("start" not in edges and not end_edge.session):
            continue
        idx, _, m = edges["end"]
        carried = {name: mm for _, name, mm in edges.values()}
        return WindowGroups(idx, rel.schema.field(idx).type, m, carried)
    return None
