"""Incremental checkpoints of a join's stored rows: what changed since the last snapshot.

Why: a regular join keeps every row it may still match (q20 holds millions). Copying and
writing all of them at every checkpoint makes the checkpoint cost follow the state size,
so 1 s checkpoints halve throughput. A join's state only changes in three ways — rows are
appended, rows die (watermark eviction), and an outer join's match counts change — so the
changes since the last snapshot are small and cheap to find, as Flink's changelog state
backend (FLIP-158) logs them.

Each stored row has a position (its index in its side's arrays). Positions only grow until
the side is compacted (``JoinOperator._reset``), which renumbers them; the operator then
forgets its marks and the next checkpoint is a full snapshot. A delta names rows by
position:

- ``left``/``right``: rows appended since the mark and still alive (the full snapshot's
  columns, with ``__pos``);
- ``left_dead``/``right_dead``: ``__pos`` of rows alive at the mark and dead now;
- ``left_match``/``right_match``: ``__pos`` and new ``__match`` of rows alive at the mark
  whose match count changed (outer joins only).

``replay(full, deltas)`` applies them in order and returns the live rows in the full
snapshot's layout, which ``JoinOperator.restore`` loads as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from laminardb.operators.snapshot import Snapshot

SIDES = ("left", "right")


@dataclass(frozen=True)
class SideMark:
    """One side as the last snapshot saw it: its row count, which rows were alive, and
    (outer joins) their match counts."""

    n: int
    alive: np.ndarray
    match: np.ndarray | None


def mark(sides, track_match: bool) -> tuple[SideMark, ...]:
    """The marks a delta is later taken against (copies: 1 byte per row, 9 with matches)."""
    return tuple(SideMark(s.n, s.alive[: s.n].copy(), s.match[: s.n].copy() if track_match else None)
                 for s in sides)


def changes(side, since: SideMark) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(positions of rows appended since ``since`` and alive, positions of rows that died
    since, positions whose match count changed, their new match counts)."""
    p = since.n
    new = p + np.flatnonzero(side.alive[p: side.n])
    now_alive = side.alive[:p]
    dead = np.flatnonzero(since.alive & ~now_alive)
    if since.match is None:
        changed = np.zeros(0, np.int64)
    else:
        changed = np.flatnonzero((side.match[:p] != since.match) & now_alive)
    return new, dead, changed, side.match[changed].copy()


def position_table(pos: np.ndarray, match: np.ndarray | None = None) -> pa.Table:
    cols = {"__pos": pa.array(pos, pa.int64())}
    if match is not None:
        cols["__match"] = pa.array(match, pa.int64())
    return pa.table(cols)


def replay(full: Snapshot, deltas: list[Snapshot]) -> Snapshot:
    """The live rows after ``full`` and then each delta, as one full join snapshot."""
    tables = dict(full.tables)
    for name in SIDES:
        if name not in full.tables:
            continue
        pieces = [full.tables[name]]
        pos = [pieces[0].column("__pos").to_numpy()]
        for d in deltas:
            pieces.append(d.tables[name])
            pos.append(d.tables[name].column("__pos").to_numpy())
        table = pa.concat_tables(pieces, promote_options="none")
        positions = np.concatenate(pos) if len(pos) > 1 else pos[0]
        alive = np.ones(len(positions), np.bool_)
        match = table.column("__match").to_numpy().copy()
        for i, d in enumerate(deltas):
            seen = sum(len(p) for p in pos[: i + 1])  # rows an update may refer to: those stored before it
            _apply(positions[:seen], alive, match, d.tables[f"{name}_dead"], d.tables[f"{name}_match"])
        table = table.set_column(table.schema.get_field_index("__match"), "__match", pa.array(match, pa.int64()))
        tables[name] = table.filter(pa.array(alive))
    counters = deltas[-1].counters if deltas else full.counters
    return Snapshot(kind=full.kind, meta=full.meta, counters=counters, n_vnodes=full.n_vnodes,
                    subset=None, tables=tables)


def _apply(positions: np.ndarray, alive: np.ndarray, match: np.ndarray, dead: pa.Table,
           changed: pa.Table) -> None:
    """Mark ``dead`` rows and write ``changed`` match counts (positions are ascending: every
    piece holds rows appended after the pieces before it)."""
    for table, is_dead in ((dead, True), (changed, False)):
        if table.num_rows == 0:
            continue
        want = table.column("__pos").to_numpy()
        at = np.searchsorted(positions, want)
        ok = at < len(positions)
        ok[ok] = positions[at[ok]] == want[ok]  # rows already dead in an earlier piece are absent
        if is_dead:
            alive[at[ok]] = False
        else:
            match[at[ok]] = table.column("__match").to_numpy()[ok]
