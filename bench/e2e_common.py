"""What every system in ``bench_e2e_latency.py`` shares: the paced generator, the two
queries' expected output, the latency summary and the watchers of committed sink files.

A row is ``(id, key, ts, created_ns, v)``: ``created_ns`` is the wall-clock time (``time.time_ns``)
the row is due at the configured rate and ``ts`` the same instant in epoch ms (its event time). Latency is
always *time the row was seen committed − created_ns*, both from this machine's wall clock.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KEYS = 16  # output groups per window: small, like the published RTM windowed query
WATERMARK_MS = 100  # the "small watermark delay": the floor of every windowed latency
END_ID = -1  # the end marker (5 s after the last row) closes the last windows
# rows with an id < 0 (end marker, warm-up) and keys starting with "~" are never measured or checked
WARM_ROWS = 200
_POLL_S = 0.005  # watchers list the sink every 5 ms: at most 5 ms of every figure is polling
_TICK_S = 0.001  # the generator wakes every ms and emits every row whose time has come

SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("ts", pa.int64()),
                    ("created_ns", pa.int64()), ("v", pa.int64())])


def keep(v: int) -> bool:
    """The stateless query's filter, ``v % 5 <> 0``: 4 rows in 5 pass."""
    return v % 5 != 0


def make_rows(ids: range, created_ns: np.ndarray) -> pa.RecordBatch:
    idx = np.arange(ids.start, ids.stop, dtype=np.int64)
    return pa.record_batch([pa.array(idx), pa.array([f"k{i % KEYS:02d}" for i in idx]),
                            pa.array(created_ns // 1_000_000), pa.array(created_ns), pa.array(idx * 7 % 100)],
                           schema=SCHEMA)


def end_marker(last_ts_ms: int) -> pa.RecordBatch:
    ts = last_ts_ms + 5000
    return pa.record_batch([pa.array([END_ID], pa.int64()), pa.array(["~end"]), pa.array([ts], pa.int64()),
                            pa.array([ts * 1_000_000], pa.int64()), pa.array([1], pa.int64())], schema=SCHEMA)


def warm_rows() -> pa.RecordBatch:
    """Rows 10 s in the past, two windows' worth: the first ones each system processes, so
    that query start-up (Spark's first batches, code generation) is not measured."""
    now = time.time_ns()
    n = WARM_ROWS
    ts = [now // 1_000_000 - 10_000 + i * 2000 // n for i in range(n)]
    return pa.record_batch([pa.array(range(-2, -2 - n, -1), pa.int64()), pa.array(["~warm"] * n), pa.array(ts, pa.int64()),
                            pa.array([now] * n, pa.int64()), pa.array([1] * n, pa.int64())], schema=SCHEMA)


def generate(emit: Callable[[pa.RecordBatch], None], *, rate: int, seconds: float) -> pa.Table:
    """Call ``emit`` with every row when its time comes, then the end marker; returns every row
    emitted (the expected input). Row i is stamped with its due time, start + i/rate, not with
    when it was emitted: if ``emit`` blocks (an ingest stall), the rows due meanwhile count the
    stall in their latency instead of hiding it (no coordinated omission)."""
    total = int(rate * seconds)
    sent: list[pa.RecordBatch] = []
    start, start_ns = time.monotonic(), time.time_ns()
    done = 0
    while done < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        if due > done:
            created = start_ns + np.arange(done, due, dtype=np.int64) * 1_000_000_000 // rate
            b = make_rows(range(done, due), created)
            emit(b)
            sent.append(b)
            done = due
        time.sleep(_TICK_S)
    marker = end_marker(int(sent[-1].column("ts")[-1].as_py()))
    emit(marker)
    return pa.Table.from_batches([*sent, marker])


# ---------------------------------------------------------------------------- checks
def expected_windows(rows: pa.Table) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(key, window start ms) → (count, sum of v, newest created_ns): what the windowed query
    must commit, once per group. The end marker's own window never closes: left out."""
    out: dict[tuple[str, int], list[int]] = {}
    for key, ts, cns, v, i in zip(*(rows.column(c).to_pylist() for c in ("key", "ts", "created_ns", "v", "id")), strict=True):
        if i < 0:
            continue
        g = out.setdefault((key, ts // 1000 * 1000), [0, 0, 0])
        g[0] += 1
        g[1] += v
        g[2] = max(g[2], cns)
    return {k: tuple(g) for k, g in out.items()}


def check_stateless(rows: pa.Table, seen: dict[int, int]) -> int:
    """``seen``: id → times committed. Every row passing the filter exactly once, no other."""
    want = {i for i, v in zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True)
            if i >= 0 and keep(v)}
    got = {i for i in seen if i >= 0}
    dup = [i for i, n in seen.items() if n > 1 and i >= 0]
    assert not dup, f"stateless: {len(dup)} ids committed more than once, e.g. {dup[:5]}"
    assert got == want, f"stateless: {len(want - got)} missing (e.g. {sorted(want - got)[:5]}), " \
                        f"{len(got - want)} unexpected"
    return len(got)


def check_windows(want: dict, got: dict[tuple[str, int], list[tuple[int, int, int]]], *, updates: bool = False) -> int:
    """``got``: (key, window start) → every committed (count, sum, newest created_ns). Append
    mode: one row per group, equal to ``want``. ``updates`` (RTM's update mode): the last one is."""
    bad = [k for k, v in got.items() if len(v) > 1 and not k[0].startswith("~")] if not updates else []
    assert not bad, f"windowed: {len(bad)} groups committed more than once, e.g. {bad[:3]}"
    final = {k: max(v) for k, v in got.items() if not k[0].startswith("~")}
    missing = set(want) - set(final)
    assert not missing, f"windowed: {len(missing)} of {len(want)} groups missing, e.g. {sorted(missing)[:3]}"
    wrong = [k for k in want if tuple(final[k]) != want[k]]
    assert not wrong, f"windowed: {len(wrong)} groups differ, e.g. {wrong[0]}: {final[wrong[0]]} vs {want[wrong[0]]}"
    return sum(v[0] for v in want.values())


def summary(lat_ns: list[int] | np.ndarray) -> dict:
    a = np.asarray(lat_ns, dtype=np.float64) / 1e6
    if not len(a):
        return {"n": 0}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"n": len(a), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": a.max()}


# ---------------------------------------------------------------------------- watchers
class Watcher(threading.Thread):
    """Polls a sink for newly committed files; ``on_file(path, seen_ns)`` reads each one once.
    ``list_committed`` returns the committed data files known now (only those: never staging)."""

    def __init__(self, list_committed: Callable[[], list[Path]], on_file: Callable[[Path, int], None]):
        super().__init__(daemon=True)
        self.list_committed, self.on_file = list_committed, on_file
        self.done: set[Path] = set()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.poll()
                time.sleep(_POLL_S)
            self.poll()
        except BaseException as exc:  # reported by the bench, never lost in a thread
            self.error = exc

    def poll(self) -> None:
        seen_ns = time.time_ns()
        for p in self.list_committed():
            if p not in self.done:
                self.done.add(p)
                self.on_file(p, seen_ns)


def laminar_files(directory: Path) -> Callable[[], list[Path]]:
    """A laminardb durable FILE sink renames ``part-*`` into its path at commit; staging is
    under ``_staging``, so every ``part-*`` file in the path is committed."""
    def listing() -> list[Path]:
        try:
            return [directory / n for n in os.listdir(directory) if n.startswith("part-")]
        except FileNotFoundError:
            return []
    return listing


def spark_files(directory: Path) -> Callable[[], list[Path]]:
    """Spark's file sink commits a batch by writing ``_spark_metadata/<batch>`` (atomically,
    by rename) listing its files; a data file not listed there is not committed."""
    meta = directory / "_spark_metadata"
    read_logs: dict[str, list[Path]] = {}

    def listing() -> list[Path]:
        try:
            names = [n for n in os.listdir(meta) if not n.startswith(".")]
        except FileNotFoundError:
            return []
        for n in names:
            if n not in read_logs:
                lines = (meta / n).read_text().splitlines()[1:]  # line 0 is the version
                read_logs[n] = [Path(urlparse(json.loads(ln)["path"]).path) for ln in lines if ln]
        return [p for ps in read_logs.values() for p in ps]
    return listing


def read_parquet(path: Path) -> pa.Table:
    return pq.read_table(path)


class Collector:
    """Latencies and counts of one run's two sinks. Stateless rows carry ``id, created_ns``;
    windowed rows ``key, ws`` (window start, epoch ms), ``n, sv, last_ns`` (newest event)."""

    def __init__(self, queries: tuple[str, ...] = ("stateless", "windowed")) -> None:
        self.queries = queries  # the queries this run has: only these are waited for and checked
        self.lat = {"stateless": [], "windowed": []}
        self.ids: dict[int, int] = {}
        self.windows: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.n_ids = self.n_windows = 0  # measured ids and groups seen
        self.n_counted = 0  # rows counted by the windows seen (their newest counts)

    def stateless(self, t: pa.Table, seen_ns: int | None = None) -> None:
        """``seen_ns``: when the file was seen; None: each row's own ``seen_ns`` column."""
        for i, c, seen in zip(t.column("id").to_pylist(), t.column("created_ns").to_pylist(),
                              _seen(t, seen_ns), strict=True):
            if i >= 0:
                self.lat["stateless"].append(seen - c)
                self.n_ids += i not in self.ids
            self.ids[i] = self.ids.get(i, 0) + 1

    def windowed(self, t: pa.Table, seen_ns: int | None = None) -> None:
        cols = [t.column(c).to_pylist() for c in ("key", "ws", "n", "sv", "last_ns")]
        for key, ws, n, sv, last, seen in zip(*cols, _seen(t, seen_ns), strict=True):
            if not key.startswith("~"):
                self.lat["windowed"].append(seen - last)
                self.n_windows += (key, ws) not in self.windows
                before = max((g[0] for g in self.windows.get((key, ws), [])), default=0)
                self.n_counted += max(0, n - before)  # update mode: a group's count grows
            self.windows.setdefault((key, ws), []).append((n, sv, last))

    def complete(self, want_ids: int, want_windows: int, want_rows: int) -> bool:
        return self.n_ids >= want_ids and ("windowed" not in self.queries
                                            or (self.n_windows >= want_windows and self.n_counted >= want_rows))

    def warm(self) -> bool:
        """The warm-up rows went through both queries."""
        return ("stateless" not in self.queries or -2 in self.ids) and \
            ("windowed" not in self.queries or any(k[0] == "~warm" for k in list(self.windows)))

    def report(self, rows: pa.Table, *, updates: bool = False) -> dict:
        out = {}
        if "stateless" in self.queries:
            out["stateless"] = {**summary(self.lat["stateless"]), "rows_checked": check_stateless(rows, self.ids)}
        if "windowed" in self.queries:
            want = expected_windows(rows)
            out["windowed"] = {**summary(self.lat["windowed"]), "groups": len(want),
                               "output_rows": len(self.lat["windowed"]),
                               "rows_checked": check_windows(want, self.windows, updates=updates)}
        return out


def _seen(t: pa.Table, seen_ns: int | None) -> list[int]:
    return [seen_ns] * t.num_rows if seen_ns is not None else t.column("seen_ns").to_pylist()


def expected_counts(rate: int, seconds: float) -> int:
    """Rows the stateless query must commit (the filter's survivors among ids 0..n-1)."""
    return sum(1 for i in range(int(rate * seconds)) if keep(i * 7 % 100))


def wait_complete(col: Collector, watchers: list[Watcher], want_ids: int, want_windows: int, want_rows: int,
                  timeout_s: float) -> bool:
    """Until every expected row and window is committed, or ``timeout_s`` (then the check
    names what is missing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for w in watchers:
            if w.error is not None:
                raise w.error
        if col.complete(want_ids, want_windows, want_rows):
            return True
        time.sleep(0.05)
    return False
