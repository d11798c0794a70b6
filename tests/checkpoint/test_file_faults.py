"""Damaged files under a durable database never get it stuck and never lose an acknowledged row.

A child process (``_fault_child.py``) runs a durable pipeline into FILE sinks and is SIGKILLed;
then one of its files is damaged — a flipped byte, a truncated file or a missing file, in a
checkpoint's snapshot, a manifest or a WAL segment — and the database is opened again, rows
are added, it is killed again, and a last run finishes. Every run must end with the unbroken
answer (per-key sequences gap- and duplicate-free, windows equal to DuckDB over the same
rows), and every open must resume at or after the last row a previous run saw acknowledged.
Or an open refuses with a typed error (an ``LDB-`` code) whose advice — put the undamaged file
back — leads to a database that opens and holds every acknowledged row. A damaged checkpoint
file must never be refused: the retained checkpoints and the WAL behind them cover it.

Two regression tests pin the reported cases: a corrupt newest snapshot (recovery fell back,
then every checkpoint failed on the skipped epoch's FILE output) and a flipped byte in an old
WAL segment (refused, and the advice to move segments aside lost acknowledged rows).

Seeds: ``make test`` runs a handful; ``LAMINARDB_FAULT_SEEDS=20`` runs seeds 0..19.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tests.checkpoint import _fault_child  # noqa: E402
from tests.checkpoint._crash_child import KEYS, row  # noqa: E402

# Children are forked by a forkserver: a fresh single-threaded process that imported and ran
# what a child uses once (_fault_warm; forking the test process itself could copy locks held
# by threads of earlier tests). A child then starts in well under a second instead of the
# seconds of imports on a loaded 2-core machine. Each is a real process, SIGKILLed.
_FORK = multiprocessing.get_context("forkserver")
_FORK.set_forkserver_preload(["tests.checkpoint._fault_child", "tests.checkpoint._fault_warm"])

_TIMEOUT_S = 90
_SEEDS = int(os.environ.get("LAMINARDB_FAULT_SEEDS", "6"))
_HEAD = 24  # a WAL record's fixed header: magic, header length, body length, lsn, crc


@pytest.fixture(scope="module", autouse=True)
def _stop_forkserver():
    """The forkserver would otherwise live until pytest exits: stop it with this module."""
    yield
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # CPython's own test suite uses it
    if stop is not None:
        stop()


class Run:
    """One database directory and its child processes."""

    def __init__(self, tmp: Path, *, batch: int = 100, ckpt_every: int = 2) -> None:
        self.tmp, self.db, self.out = tmp, tmp / "db", tmp / "out"
        self.cfg = {"db": str(self.db), "out": str(self.out), "sql": str(HERE / "fault_pipeline.sql"),
                    "batch": batch, "ckpt_every": ckpt_every}
        self.log = tmp / "child.log"
        self.acked = 0  # the most rows any run saw acknowledged

    def start(self, rows: int, *, finish: bool,
              kill_after: int | None = None) -> tuple[str, multiprocessing.process.BaseProcess]:
        """Run the child up to ``rows``; SIGKILL it once idle there, or as soon as it has
        acknowledged ``kill_after`` rows (wherever it then is: inserting, checkpointing)."""
        cfg_path = self.tmp / "cfg.json"
        cfg_path.write_text(json.dumps(dict(self.cfg, rows=rows, finish=finish)))
        self.log.write_text("")
        p = _FORK.Process(target=_fault_child.run, args=(str(cfg_path), str(self.log)), daemon=True)
        p.start()
        try:
            want = ("done", "REFUSED") if finish else ("idle", "REFUSED")
            deadline = time.monotonic() + _TIMEOUT_S
            while time.monotonic() < deadline:
                text = self.log.read_text(errors="replace")
                if any(w in text for w in want) or not p.is_alive():
                    break
                if kill_after is not None and f"acked {kill_after}\n" in text:
                    text += "idle"  # a kill at a moment of the child's own choosing
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"child timed out: {self.log.read_text()[-3000:]}")
            if not finish and "idle" in text:
                os.kill(p.pid, signal.SIGKILL)
            p.join(30)
        finally:
            if p.is_alive():
                p.kill()
                p.join(30)
        text = self.log.read_text(errors="replace")
        if "REFUSED" in text:
            assert p.exitcode == 3, text[-3000:]
            return "refused", p
        assert "resume at" in text, text[-3000:]
        resumed = int(text.split("resume at ")[1].split()[0])
        assert resumed >= self.acked, f"acknowledged rows lost: resumed at {resumed}, {self.acked} were acked"
        acks = [int(line.split()[1]) for line in text.splitlines() if line.startswith("acked ")]
        self.acked = max([self.acked, resumed] + acks)
        if finish:
            assert p.exitcode == 0 and "done" in text, f"final run failed: {text[-3000:]}"
        else:
            assert p.exitcode == -signal.SIGKILL, text[-3000:]
        return "ok", p

    def recovery(self) -> dict:
        """What the last run's open reported (metrics()["checkpoints"]["recovery"])."""
        text = self.log.read_text(errors="replace")
        return json.loads(text.split("RECOVERY-REPORT ", 1)[1].splitlines()[0])

    def refusal(self) -> str:
        return self.log.read_text(errors="replace").split("REFUSED ", 1)[1]

    def checkpoints(self) -> list[Path]:
        return sorted(p for p in (self.db / "checkpoints").iterdir() if p.name.startswith("ckpt-")
                      and (p / "MANIFEST").exists())

    def segments(self) -> list[Path]:
        return sorted((self.db / "wal").glob("*.wal"))

    def check_output(self, n: int) -> None:
        """The committed FILE output equals the unbroken answer for rows 0..n-1."""
        seqs: dict[str, list[int]] = {}
        for f in sorted((self.out / "ev_seq").glob("*.jsonl")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                seqs.setdefault(r["k"], []).append(r["seq"])
        for k in range(KEYS):
            want = list(range(len(range(k, n, KEYS))))
            assert sorted(seqs.get(f"k{k}", [])) == want, f"key k{k}: duplicates or gaps in the FILE sink"
        t = pa.Table.from_pylist([row(i) for i in range(n)])  # noqa: F841 - read by DuckDB
        want = duckdb.sql("SELECT k, (ts // 1000) * 1000 AS window_start, count(*) AS n, sum(v) AS s "
                          "FROM t GROUP BY ALL ORDER BY ALL").fetchall()
        files = sorted(str(f) for f in (self.out / "ev_win").glob("*.parquet"))
        got = duckdb.sql(f"SELECT k, window_start, n, s FROM read_parquet({files!r}) ORDER BY ALL").fetchall()
        assert got == want, "the Parquet window sink differs from DuckDB over the same rows"


def _records(seg: Path) -> list[tuple[int, int]]:
    """(start, end) of each record of a WAL segment."""
    data = seg.read_bytes()
    out, pos = [], 0
    while pos + _HEAD <= len(data):
        hl, bl = int.from_bytes(data[pos + 4:pos + 8], "little"), int.from_bytes(data[pos + 8:pos + 12], "little")
        out.append((pos, pos + _HEAD + hl + bl))
        pos += _HEAD + hl + bl
    return out


def damage(path: Path, kind: str, rng: random.Random, *, last_segment: bool = False) -> None:
    """Flip one byte of, truncate or delete ``path``. The last WAL segment's final record is
    never flipped or cut: that is indistinguishable from a write torn by a crash (see
    docs/durability.md)."""
    if kind == "missing":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    limit = len(data)
    if last_segment:
        recs = _records(path)
        limit = recs[-1][0] if recs else 0
    if limit == 0:
        path.unlink()  # nothing to damage before the tail: the file goes instead
        return
    at = rng.randrange(limit)
    if kind == "flip":
        data[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(bytes(data[:at]))


def _pick(run: Run, target: str, rng: random.Random) -> tuple[Path, bool]:
    if target == "wal":
        segs = run.segments()
        seg = rng.choice(segs)
        return seg, seg == segs[-1]
    ckpts = run.checkpoints()
    ckpt = ckpts[-1] if rng.random() < 0.6 else rng.choice(ckpts)
    if target == "manifest":
        return ckpt / "MANIFEST", ckpt == ckpts[-1]
    return rng.choice(sorted(p for p in ckpt.iterdir() if p.name != "MANIFEST")), ckpt == ckpts[-1]


def _open_or_follow_advice(run: Run, rows: int, *, finish: bool, backup: Path, original: Path,
                           refusable: bool) -> str:
    """Start a run; on a refusal do what the message says (put the undamaged file back)."""
    outcome, _ = run.start(rows, finish=finish)
    if outcome == "ok":
        return "ok"
    msg = run.refusal()
    assert refusable, f"a damaged checkpoint file was refused (older checkpoints cover it): {msg}"
    assert msg.startswith("LDB-5") and "Put an undamaged copy" in msg, msg
    for bad in ("delete", "move the WAL segments", "from a backup to recover up to"):
        assert bad not in msg.split("do not delete")[0], f"advice that loses rows: {msg}"
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(backup, original)
    outcome, _ = run.start(rows, finish=finish)
    assert outcome == "ok", f"after doing what the refusal said, the database still refuses: {run.refusal()}"
    return "refused, then ok"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(_SEEDS))
def test_a_damaged_file_never_loses_an_acknowledged_row(tmp_path, seed):
    rng = random.Random(seed)
    target = ("snapshot", "manifest", "wal")[seed % 3]
    kind = ("flip", "truncate", "missing")[(seed // 3) % 3]
    run = Run(tmp_path, batch=50, ckpt_every=rng.choice((2, 3, 4)))
    first = rng.randrange(700, 1300)
    # killed at a random acknowledged count (mid-insert or mid-checkpoint), or once idle
    run.start(first, finish=False, kill_after=rng.choice((None, 50 * rng.randrange(10, first // 50))))
    path, newest = _pick(run, target, rng)  # newest: the last WAL segment / the newest checkpoint
    last_segment = newest and target == "wal"
    if last_segment and kind == "truncate":
        kind = "flip"  # a truncated active segment is a torn tail (see damage())
    backup = tmp_path / "backup"
    shutil.copy2(path, backup)
    damage(path, kind, rng, last_segment=last_segment)
    how = _open_or_follow_advice(run, first + rng.randrange(200, 700), finish=False, backup=backup,
                                 original=path, refusable=target == "wal")
    if target != "wal" and newest and how == "ok":  # the damage was seen, not restored from
        epoch = int(path.parent.name.split("-")[1])
        assert run.recovery()["epoch"] < epoch, f"checkpoint {epoch} was used although damaged"
        how += f", fell back from checkpoint {epoch} to {run.recovery()['epoch']}"
    elif target == "wal" and how == "ok" and run.recovery()["wal_segments_set_aside"]:
        how += ", segment set aside"
    total = run.acked + rng.randrange(100, 400)
    run.start(total, finish=True)
    run.check_output(total)
    print(f"seed {seed}: {kind} {target} {path.name}: {how}")


def test_a_corrupt_newest_snapshot_does_not_block_later_checkpoints(tmp_path):
    """Issue item 3: the fallback used to reuse the skipped epoch, whose FILE output was
    committed already: every later checkpoint and finish() failed with LDB-4004."""
    run = Run(tmp_path, batch=100, ckpt_every=2)
    run.start(1000, finish=False)
    newest = run.checkpoints()[-1]
    snap = sorted(newest.glob("op-*.snap"))[0]
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 0x10
    snap.write_bytes(bytes(data))
    run.start(1500, finish=False)  # falls back; checkpoints every two batches must succeed
    run.start(1800, finish=True)
    run.check_output(1800)
    epoch = int(newest.name.split("-")[1])
    abandoned = list((run.out / "ev_win" / "_abandoned").glob(f"part-{epoch:012d}-*"))
    assert abandoned, "the skipped epoch's committed file should be set aside, not left visible"
    assert (run.db / "checkpoints" / f"_skipped-{newest.name}").is_dir()


def test_damage_in_an_old_wal_segment_does_not_block_open_or_lose_rows(tmp_path):
    """Issue item 4: a flipped byte in a WAL segment the newest checkpoint does not need was
    refused, and its advice (move the segments aside) lost acknowledged rows: the WAL then
    numbered new records from 0, below the checkpoint's replay position, so they were never
    replayed and offset() went backwards after a kill."""
    run = Run(tmp_path, batch=100, ckpt_every=2)
    run.start(1600, finish=False)
    segs = run.segments()
    manifest = json.loads((run.checkpoints()[-1] / "MANIFEST").read_bytes())
    assert len(segs) >= 2 and int(segs[1].stem) <= manifest["wal_lsn"], "the oldest segment must be unneeded"
    data = bytearray(segs[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    segs[0].write_bytes(bytes(data))

    # what the old advice had users do: move the segments from the damaged one on aside
    aside = tmp_path / "aside"
    aside.mkdir()
    for s in segs:
        s.rename(aside / s.name)
    outcome, _ = run.start(2600, finish=False)
    assert outcome == "refused", "an open without the segments that hold acknowledged rows must refuse"
    msg = run.refusal()
    assert msg.startswith("LDB-5003") and "Put an undamaged copy" in msg, msg
    for s in segs:  # do what it says: put them back
        (aside / s.name).rename(s)

    outcome, _ = run.start(2600, finish=False)  # opens despite the damage; 1000 rows more, killed
    assert outcome == "ok" and run.acked == 2600
    assert (run.db / "wal" / (segs[0].name + ".damaged")).exists()
    assert run.recovery()["set_aside_count"] == 1  # metrics()["checkpoints"], and Prometheus
    run.start(2600, finish=True)  # resumes at 2600 (asserted by start), nothing to insert
    run.check_output(2600)
