"""Which stateful nodes of a plan tree get a watermark round from the head
(``DistributedPlanOperator.on_watermark``), without Ray: none for a node no watermark can
change (``exchange.watermark_inert``: a join with no interval and no TTL), so Kafka → q20 or
q3 makes no call per poll for its watermark. Oracle: the embedded tree, which over the same
rows emits nothing and keeps every state row at every watermark such a node sees."""

from __future__ import annotations

import pytest

from laminardb.cluster.distributed_plan import DistributedPlanOperator
from laminardb.cluster.exchange import watermark_inert
from laminardb.nexmark import QUERIES, SOURCES_DDL, generate
from laminardb.sql.watermarks import END_OF_TIME


class _Recorder:
    """An ``ActorPool`` stand-in that records each call and answers it with no rows."""

    def __init__(self, n: int) -> None:
        self.n_actors = n
        self.calls: list[tuple[int, str]] = []
        self.actors = [self._actor(a) for a in range(n)]

    def _actor(self, a: int):
        from types import SimpleNamespace

        recorder = self

        class _Actor:
            def __getattr__(self, method: str):
                def remote(*args, **kwargs):
                    recorder.calls.append((a, method))
                    return [], None, 0, 0
                return SimpleNamespace(remote=remote)

        return _Actor()

    def gather(self, targets, futures, method):
        return futures

    def single_owner(self) -> int:
        return 0


def _tree(query: str):
    import laminardb

    with laminardb.open() as db:
        db.execute(SOURCES_DDL)
        db.execute(QUERIES[query].statement())
        return db.engine.reactor.nodes[query].plan


@pytest.mark.parametrize(("query", "inert"), [("q20", True), ("q3", True), ("q5", False), ("q7", False)])
def test_only_nodes_a_watermark_can_change_get_a_round(query, inert):
    plan = _tree(query)
    for n in (1, 2):
        cluster = _Recorder(n)
        op = DistributedPlanOperator(query, plan, cluster)
        assert all(watermark_inert(op.tree.nodes[i]) for i, _ in op.stateful) is inert
        op.on_watermark(1_000)
        op.on_watermark(5_000)
        assert op.wm == 5_000
        assert (cluster.calls == []) is inert, cluster.calls


@pytest.mark.parametrize("query", ["q20", "q3"])
def test_an_inert_tree_emits_nothing_and_keeps_its_state_at_any_watermark(query):
    """The embedded tree over Nexmark rows: the watermarks the head no longer sends would
    have emitted nothing and dropped no state, up to the end of time."""
    from laminardb.operators.plan_operator import PlanOperator

    tree = PlanOperator(_tree(query))
    events = list(generate(20_000, seed=3, batch_events=2_000))
    for stream, batch in events:
        if stream in tree.plan.inputs:
            tree.process_input(stream, batch, -(2**62))
    before = tree.agg.state_groups
    assert before > 0
    for wm in (0, 10**12, 10**13, END_OF_TIME):
        assert tree.on_watermark(wm) == []
    assert tree.agg.state_groups == before
