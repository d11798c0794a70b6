"""Which watermarks a partial or local-global aggregate sends to the actors to close windows
(``DistributedOperator._no_window_ends``), without Ray: only those past a window end, so a
batch that closes nothing calls only the actors holding its rows. Oracle: the embedded
engine — the watermarks sent are exactly those after which it emits closed windows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from laminardb.cluster.distributed_operator import DistributedOperator

SOURCE = "CREATE SOURCE t (k BIGINT, v BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts)"
QUERIES = {
    "tumble": "SELECT k, window_start, count(*) AS c FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE",
    "tumble_offset": "SELECT k, window_start, count(*) AS c FROM t "
                     "GROUP BY k, tumble(ts, INTERVAL '1' SECOND, INTERVAL '300' MILLISECOND) EMIT ON WINDOW CLOSE",
    "hop": "SELECT k, window_start, count(*) AS c FROM t "
           "GROUP BY k, hop(ts, INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE",
    "unkeyed": "SELECT window_start, sum(v) AS s FROM t GROUP BY tumble(ts, INTERVAL '1' SECOND) EMIT ON WINDOW CLOSE",
}
WATERMARKS = [-1, 0, 10, 999, 1000, 1001, 1299, 1300, 1650, 2400, 2999, 3000, 7000, 7001]


def _embedded_closes(query: str):
    """The watermarks (of ``WATERMARKS``) after which the embedded engine's operator emits a
    window, over rows at every millisecond from -3 s to 8 s (so every window has rows and
    the engine emits at each watermark past a window end); and the query's plan."""
    import pyarrow as pa

    import laminardb
    from laminardb.operators.group_aggregate import NO_WATERMARK
    from laminardb.operators.query_operator import QueryOperator

    with laminardb.open() as db:
        db.execute(f"{SOURCE}; CREATE STREAM q AS {query}")
        plan = db.engine.reactor.nodes["q"].plan
    op = QueryOperator(plan)
    ts = list(range(-3000, 8000))
    op.process(pa.record_batch({"k": [1] * len(ts), "v": [1] * len(ts), "ts": ts}), NO_WATERMARK)
    closes = [wm for wm in WATERMARKS if any(b.num_rows for b in op.on_watermark(wm))]
    return closes, plan


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_only_watermarks_past_a_window_end_reach_the_actors(name) -> None:
    want, plan = _embedded_closes(QUERIES[name])
    op = DistributedOperator("q", plan, SimpleNamespace(n_actors=2))
    assert op.merger is not None
    sent = [wm for wm in WATERMARKS if op._closes(wm) is not None]
    assert sent == want and 0 < len(want) < len(WATERMARKS)  # some go, some need no call
