"""Pruning old checkpoints is safe against a kill at any moment (``CheckpointStore.prune``).

Found by the PostgreSQL CDC crash test in a full run: a child SIGKILLed while it deleted an
old checkpoint left that checkpoint's MANIFEST beside a snapshot file already gone. The
checkpoint still counted as complete; a reader of the oldest one (retention, the CDC slot's
floor) met a missing file. A checkpoint is now deleted manifest first.
"""

from __future__ import annotations

import pytest

from laminardb.checkpoint import store as store_module
from laminardb.checkpoint.store import CheckpointStore, Manifest


def _checkpoint(store: CheckpointStore, epoch: int) -> None:
    store.begin(epoch)
    files = {"op-1.snap": store.write_file(epoch, "op-1.snap", b"state %d" % epoch)}
    store.commit(Manifest(epoch=epoch, wal_lsn=epoch, catalog=[], files=files))


def test_a_prune_killed_before_the_files_go_leaves_no_complete_checkpoint_behind(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    for epoch in (1, 2, 3):
        _checkpoint(store, epoch)
    # the process dies as it starts deleting the old checkpoints' files
    monkeypatch.setattr(store_module.shutil, "rmtree", lambda *a, **k: None)
    assert store.prune(keep=1, newest=3) == 3
    assert store.complete() == [3], "a dropped checkpoint must not keep a manifest over missing files"
    assert store.load(3).epoch == 3


def test_the_next_prune_removes_what_a_killed_one_left(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    for epoch in (1, 2):
        _checkpoint(store, epoch)
    with monkeypatch.context() as m:
        m.setattr(store_module.shutil, "rmtree", lambda *a, **k: None)
        store.prune(keep=1, newest=2)
    _checkpoint(store, 3)
    store.prune(keep=1, newest=3)
    assert store.epochs_on_disk() == [3]
    with pytest.raises(ValueError, match="no MANIFEST"):
        store.load(1)
