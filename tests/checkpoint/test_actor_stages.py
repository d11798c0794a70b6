"""The head's ``StagedSink`` with rows the actors staged themselves (``actor_stages.py``),
without Ray: two ``ActorStages`` (as two actors hold them) write real files; the sink's
``seal_actors`` seals them at each barrier. An epoch is described with the head's file and
every actor file sealed for it; an aborted epoch's actor files ride with the next epoch;
a release deletes committed files; a recovery drops open files and files after the
checkpoint it restores."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from laminardb.checkpoint.actor_stages import ActorStages, actor_stage_dir
from laminardb.checkpoint.staged_sink import StagedSink

SCHEMA = pa.schema([("k", pa.int64()), ("n", pa.int64())])


def _rows(lo: int, hi: int) -> pa.RecordBatch:
    return pa.record_batch({"k": pa.array(range(lo, hi), pa.int64()), "n": pa.array([1] * (hi - lo), pa.int64())})


def _setup(tmp_path):
    stage_dir = tmp_path / "staged" / "out"
    sink = StagedSink("out", "CREATE SINK out FROM q INTO FILE (path = 'x')", SCHEMA, stage_dir)
    actors = {m: ActorStages() for m in ("reactor-a-0", "reactor-a-1")}
    dirs = {m: actor_stage_dir(stage_dir, m) for m in actors}

    def seal(epoch: int) -> list[tuple[str, int]]:
        return [r for m, st in actors.items() if (r := st.seal(dirs[m], epoch)) is not None]

    sink.seal_actors = seal
    return sink, actors, dirs, stage_dir


def _stage(sink: StagedSink, actor: ActorStages, directory: str, rows: pa.RecordBatch) -> None:
    """An owner stages rows; the head learns their count (as ``_merge_closed`` tells it)."""
    sink.written_by_actors(actor.append(directory, SCHEMA, [rows]))


def _read(paths: list[str]) -> list[int]:
    return sorted(k for p in paths for k in pq.read_table(p)["k"].to_pylist())


def test_an_epoch_is_the_heads_file_and_each_actors(tmp_path) -> None:
    sink, actors, dirs, _ = _setup(tmp_path)
    sink.write(_rows(0, 3))
    a0, a1 = actors.values()
    _stage(sink, a0, dirs["reactor-a-0"], _rows(10, 15))
    _stage(sink, a1, dirs["reactor-a-1"], _rows(20, 22))
    assert sink.pre_commit(1) == {"rows": 3 + 5 + 2}
    desc = sink.describe(1)
    assert desc["rows"] == 10 and len(desc["stages"]) == 3 and desc["stage"] == desc["stages"][0]
    assert _read(desc["stages"]) == [0, 1, 2, *range(10, 15), 20, 21]
    assert sink.rows_written == 10

    sink.write(pa.record_batch({"k": pa.array([], pa.int64()), "n": pa.array([], pa.int64())}))
    _stage(sink, a0, dirs["reactor-a-0"], _rows(30, 31))
    sink.pre_commit(2)  # only an actor had rows: the head's (empty) file is not described
    assert sink.describe(2)["stages"] == [f"{dirs['reactor-a-0']}/epoch-000000000002.parquet"]
    assert sink.describe(2)["stage"] is None

    sink.release(2)
    assert sink.rows_committed == 11 and sink.epochs_committed == 2
    assert not list((tmp_path / "staged" / "out" / "actors").glob("*/epoch-*"))


def test_an_aborted_epochs_actor_files_ride_with_the_next(tmp_path) -> None:
    sink, actors, dirs, _ = _setup(tmp_path)
    a0, a1 = actors.values()
    _stage(sink, a0, dirs["reactor-a-0"], _rows(0, 4))
    sink.pre_commit(1)
    sink.abort(1)
    _stage(sink, a1, dirs["reactor-a-1"], _rows(4, 6))
    assert sink.pre_commit(2) == {"rows": 6}
    desc = sink.describe(2)
    assert _read(desc["stages"]) == list(range(6)) and desc["rows"] == 6
    sink.release(2)  # the carried file (named for epoch 1) goes with epoch 2
    assert not list((tmp_path / "staged" / "out" / "actors").glob("*/epoch-*"))


def test_a_recovery_drops_open_files_and_epochs_after_its_checkpoint(tmp_path) -> None:
    sink, actors, dirs, stage_dir = _setup(tmp_path)
    a0, a1 = actors.values()
    _stage(sink, a0, dirs["reactor-a-0"], _rows(0, 2))
    sink.pre_commit(1)
    _stage(sink, a0, dirs["reactor-a-0"], _rows(2, 4))
    sink.pre_commit(2)  # sealed, never recorded
    _stage(sink, a1, dirs["reactor-a-1"], _rows(4, 6))  # open: an actor that then died
    fresh = StagedSink("out", "CREATE SINK out FROM q INTO FILE (path = 'x')", SCHEMA, stage_dir)
    fresh.recover(1, None)
    left = sorted(p.name for p in (stage_dir / "actors").glob("*/*"))
    assert left == ["epoch-000000000001.parquet"]
    assert fresh.describe(2)["stages"] == []
