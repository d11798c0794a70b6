"""A round whose rows the actors kept (``process``/``process_many``/``merge_closed`` with
``rows_back``) is handed to the subscribers as ``RemoteBatch``es that slice each actor's one
IPC stream: every batch's output, then its closed windows, actor by actor, as the rows
decoded in the head would come; late rows alone are decoded. Unit tests of that bookkeeping:
the actors' answers are built with the actors' own helpers, and the object store is a dict
(the end-to-end path runs against real Ray in tests/delta/test_rows_by_reference.py)."""

from __future__ import annotations

import pyarrow as pa

from laminardb.cluster import reactor_actor
from laminardb.cluster.distributed_operator import DistributedOperator, _Round
from laminardb.cluster.owner_merge import by_reference, in_window_order
from laminardb.cluster.remote_rows import RemoteBatch, decode_batches


def _rows(*values: int) -> pa.RecordBatch:
    return pa.record_batch({"v": pa.array(values, pa.int64())})


def _operator() -> tuple[DistributedOperator, list]:
    """Just what ``_by_reference`` uses of an operator; what it hands to the subscribers."""
    op = DistributedOperator.__new__(DistributedOperator)
    op.rows_by_ref, op.late_dropped = 0, 0
    handed: list = []
    op.emit_to_subscribers = handed.extend
    return op, handed


def _values(items: list, store: dict) -> list[list[int]]:
    return [b["v"].to_pylist() for b in decode_batches(items, store)]


def test_a_coalesced_rounds_batches_slice_each_actors_stream_in_order():
    # per actor, per batch: (output, late, closed) — as process_many runs them one by one
    batches = {
        "a0": [([_rows(1, 2)], None, [_rows(10)]), ([], _rows(-1), []), ([_rows(3)], None, [_rows(11, 12)])],
        "a1": [([_rows(4)], None, []), ([_rows(5, 6)], None, [_rows(13)]), ([], None, [])],
    }
    store, results = {}, []
    for ref, per_batch in batches.items():
        results.append([reactor_actor._rows_meta(*b) for b in per_batch])
        store[ref] = reactor_actor._rows_ipc([x for outs, _, closed in per_batch for x in outs + closed])
    op, handed = _operator()
    rnd = _Round("process", [0, 1], [], None, wm_nexts=[None, 5, None], rows_refs=list(batches))
    answers = op._by_reference(rnd, results)
    # each batch: outputs of actor 0 then 1, then closed windows of actor 0 then 1
    assert _values(handed, store) == [[1, 2], [4], [10], [5, 6], [13], [3], [11, 12]]
    assert [late.num_rows if late is not None else 0 for _, late, _ in answers] == [0, 1, 0]
    assert all(outs == [] and closed == [] for outs, _, closed in answers)
    assert op.rows_by_ref == 10 and op.late_dropped == 1


def test_a_single_batch_round_and_an_empty_answer():
    store = {"a0": reactor_actor._rows_ipc([_rows(7, 8), _rows(9)]), "a1": reactor_actor._rows_ipc([])}
    results = [reactor_actor._rows_meta([_rows(7, 8)], None, [_rows(9)]), reactor_actor._rows_meta([], None, [])]
    op, handed = _operator()
    op._by_reference(_Round("process", [0, 1], [], 3, rows_refs=["a0", "a1"]), results)
    assert store["a1"] is None  # no row: no object to fetch, and no reference handed out
    assert _values(handed, store) == [[7, 8], [9]]


def test_owners_windows_interleave_by_window_start():
    """``merge_closed`` with ``rows_back``: (window start, rows) per window, the rows one after
    the other in the owner's stream; one close's windows in window order, owners in order."""
    store = {"o0": reactor_actor._rows_ipc([_rows(1), _rows(2, 3)]), "o1": reactor_actor._rows_ipc([_rows(4)])}
    answers = [by_reference([(100, 1), (200, 2)], "o0"), by_reference([(100, 1)], "o1")]
    ordered = in_window_order(answers)
    assert all(isinstance(b, RemoteBatch) for b in ordered)
    assert _values(ordered, store) == [[1], [4], [2, 3]]


class _Owners:
    """Two key owners as ``start_calls`` and ``ActorPool.gather`` see them: each
    ``merge_closed`` call is logged and answers one window of one row; the first gather of
    the second batch's merge times out (a slow owner)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, tuple]] = []
        self.timeouts = 1
        self.actors = [self._actor(a) for a in (0, 1)]

    def _actor(self, a: int):
        owners = self

        class _Method:
            def options(self, **_):
                return self

            def remote(self, *args, rows_back=False):
                owners.calls.append((a, args))
                n = len(owners.calls)
                return (("meta", a, n), ("rows", a, n)) if rows_back else ("answer", a, n)

        return type("Actor", (), {"merge_closed": _Method()})()

    def gather(self, targets, futures, method):
        from laminardb.cluster.exceptions import ActorTimeoutError

        if method != "merge_closed":  # the round's own calls: each actor's partials, per batch
            return [[(None, None, [(0, b"p"), (1, b"p")]) for _ in range(2)] for _ in targets]
        if len(self.calls) > 2 and self.timeouts:
            self.timeouts -= 1
            raise ActorTimeoutError("an owner did not answer merge_closed() in time")
        return [(1, [(100 * f[2], 1)], 0) for f in futures]


def test_a_merge_that_timed_out_is_waited_for_again_and_hands_on_nothing_twice():
    """A coalesced round's second close times out on an owner: collected again, the round
    neither sends the first batch's merges again nor hands its rows on again, and waits for
    the second batch's same calls instead of sending new ones (an owner that answered has
    staged its rows)."""
    import pytest

    from laminardb.cluster.exceptions import ActorTimeoutError

    op, handed = _operator()
    op.name, op.mode, op.owner_merge, op.cluster, op.schema = "q", "local_global", True, _Owners(), None
    op.plan = type("Plan", (), {"emit": "close"})()
    op.merger = type("Merger", (), {"route": None, "stage_route": None, "rows_merged_on_actors": 0,
                                    "rows_staged_on_actors": 0})()
    op.subscribers_alone = lambda: True
    rnd = _Round("process_partial", [0, 1], [], None, wm_nexts=[10, 20])
    with pytest.raises(ActorTimeoutError):
        op._collect(rnd)
    assert len(op.cluster.calls) == 4 and len(handed) == 2  # both batches' merges sent, the first handed on
    per_batch = op._collect(rnd)
    assert len(op.cluster.calls) == 4, "no merge is sent twice"
    assert [(b.ref, b.num_rows) for b in handed] == [(("rows", 0, 1), 1), (("rows", 1, 2), 1),
                                                     (("rows", 0, 3), 1), (("rows", 1, 4), 1)]
    assert len(per_batch) == 2 and op.merger.rows_merged_on_actors == 4
