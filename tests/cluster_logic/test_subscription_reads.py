"""``RemoteConnection._read_subscriptions``: a read whose rows by reference are gone before the
client fetched them is repeated from the same positions, and an answer that does not decode
ends only its own subscription. Unit tests of the client's own logic: the head's answers and
the object store are stand-ins (the end-to-end path runs against real Ray in
tests/delta/test_actor_stages.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from ray.exceptions import OwnerDiedError

from laminardb.cluster import client
from laminardb.cluster.client import RemoteConnection
from laminardb.cluster.exceptions import HeadUnavailableError
from laminardb.cluster.remote_rows import RemoteBatch
from laminardb.cluster.wire import to_ipc


def _ipc(lo: int, hi: int) -> bytearray:
    return to_ipc(pa.record_batch({"i": list(range(lo, hi))}))


class _Conn:
    """Just what ``_read_subscriptions`` uses of a connection: ``database`` and ``_call``."""

    _read_subscriptions = RemoteConnection._read_subscriptions

    def __init__(self, answers: list) -> None:
        self.database = "db"
        self.answers = answers
        self.calls: list[tuple] = []

    def _call(self, method: str, *args):
        self.calls.append((method, *args))
        return self.answers.pop(0)


def _fetch_failing(times: int):
    """``fetch_remote`` that raises OwnerDiedError ``times`` times, then fetches (stand-in store)."""
    store = {"r1": _ipc(0, 5)}
    state = {"left": times}

    def fetch(items, _timeout):
        if state["left"]:
            state["left"] -= 1
            raise OwnerDiedError("ab" * 14, None, "")
        return {b.ref: store[b.ref] for b in items if isinstance(b, RemoteBatch)}

    return fetch


def _answer():
    return {"a": {"batches": [RemoteBatch("r1", 3, offset=1)], "ended": False, "lost": 0, "position": 7},
            "b": {"batches": [_ipc(10, 12)], "ended": False, "lost": 0, "position": 3}}


def test_a_read_whose_rows_are_gone_is_repeated_from_the_same_positions(monkeypatch):
    monkeypatch.setattr(client, "fetch_remote", _fetch_failing(1))
    conn = _Conn([_answer(), _answer()])
    got = conn._read_subscriptions("sub_read_many", [("a", 7), ("b", 3)], 200)
    assert conn.calls == [("sub_read_many", [("a", 7), ("b", 3)], 200)] * 2  # the same positions again
    assert got["a"]["batches"][0].column("i").to_pylist() == [1, 2, 3]  # offset 1, 3 rows
    assert got["b"]["batches"][0].column("i").to_pylist() == [10, 11]


def test_reads_that_keep_losing_their_rows_raise_a_typed_error(monkeypatch):
    monkeypatch.setattr(client, "fetch_remote", _fetch_failing(client._READ_ATTEMPTS))
    conn = _Conn([_answer() for _ in range(client._READ_ATTEMPTS)])
    with pytest.raises(HeadUnavailableError, match="lost their rows"):
        conn._read_subscriptions("sub_read_many", [("a", 7), ("b", 3)], 200)


def test_an_answer_that_does_not_decode_fails_alone(monkeypatch):
    monkeypatch.setattr(client, "fetch_remote", _fetch_failing(0))
    answer = _answer()
    answer["b"]["batches"] = [b"not arrow"]
    got = _Conn([answer])._read_subscriptions("sub_read_many", [("a", 7), ("b", 3)], 200)
    assert got["a"]["batches"][0].num_rows == 3
    assert "did not decode" in got["b"]["error"] and "batches" not in got["b"]
