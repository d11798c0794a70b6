"""Checkpoint parts the Delta mode's actors write themselves, without Ray: how a restore hands
them over (``distributed_operator.actor_parts``) and how an incremental chain carries them
into later manifests (``state_chains``), so retention never deletes a part a checkpoint
still needs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.checkpoint.state_chains import StateChains
from laminardb.cluster.distributed_operator import actor_parts


def _op(root, reachable: bool):
    return SimpleNamespace(name="q", checkpoint_root=None if root is None else str(root),
                           parts_writable=lambda: reachable)


def test_a_restore_hands_paths_when_the_actors_reach_the_files_else_their_bytes(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "f.snap.part-0").write_bytes(b"zero")
    doc = {"actors": None, "actor_files": ["state/f.snap.part-0", None]}
    assert actor_parts(_op(tmp_path, True), doc) == [str(tmp_path / "state" / "f.snap.part-0"), None]
    assert actor_parts(_op(tmp_path, False), doc) == [b"zero", None]  # the head reads them
    assert actor_parts(_op(tmp_path, True), {"actors": [b"a", b"b"]}) == [b"a", b"b"]  # the head wrote them
    with pytest.raises(SnapshotFormatError, match="no directory"):
        actor_parts(_op(None, True), doc)


class _Incremental:
    """An operator that gives deltas (``snapshot_delta``) after its first snapshot."""

    def snapshot(self):
        return b"whole"

    def snapshot_delta(self):
        return b"delta"


def _meta(n: int) -> dict[str, int]:
    return {"bytes": n, "crc": n}


def test_a_chain_carries_its_files_parts_into_later_manifests():
    chains, op = StateChains(), _Incremental()
    whole, _, planned = chains.take(1, "q", 3, op)
    assert not planned.delta
    files = {whole: _meta(40), f"{whole}.part-0": _meta(5000), f"{whole}.part-1": _meta(6000), "other": _meta(1)}
    chains.written(1, files)
    delta, _, planned = chains.take(2, "q", 3, op)
    assert planned.delta and planned.earlier == [whole]
    assert chains.earlier_files(2) == {whole: _meta(40), f"{whole}.part-0": _meta(5000),
                                       f"{whole}.part-1": _meta(6000)}
    chains.written(2, {delta: _meta(40), f"{delta}.part-0": _meta(3000)})
    chain = chains._chains["q"]
    assert chain.base_bytes == 11040 and chain.delta_bytes == 3040  # the chain's growth rule counts the parts
