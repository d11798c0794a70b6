"""Snapshot and restore of the aggregation operators' state (``GroupAggregate``, ``SessionAggregate``).

Entry points: ``capture(agg, slots, bounds)`` (under the engine lock: the tables of a
``StateImage``) and ``load_keys`` / ``load_accumulators`` (restore). The state is logical, not
the operator's memory layout: the key dictionary in id order, one row per live group with its
window bounds and accumulator fields, COUNT(DISTINCT) pairs by group — so a restored operator
rebuilds its hash tables and slots its own way, and vnode subsets can be cut out of it.

Keys are snapshot in id order, dead ones included, so a restored operator hands out the same
key ids: outputs ordered by key id (closing windows, sessions) stay identical after restore.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.operators._interner import Interner
from laminardb.operators.aggregates import Accumulator, CountAcc
from laminardb.operators.snapshot import Column, Snapshot, StateImage, checked_snapshot


def fingerprint(key_types: list[pa.DataType], specs, window: Any, emit: str) -> dict[str, Any]:
    """What a snapshot must agree on with the operator it is restored into."""
    return {"keys": [str(t) for t in key_types],
            "aggs": [[s.kind, str(s.arg_type)] for s in specs],
            "window": None if window is None else [window.kind, window.size, window.slide,
                                                   window.gap, window.offset],
            "emit": emit}


def capture(keys: Interner | None, key_ids: np.ndarray, bounds: dict[str, np.ndarray],
            rows: CountAcc, accs: list[Accumulator], slots: np.ndarray) -> dict[str, dict[str, Column]]:
    """The tables of the groups in ``slots`` (``key_ids``/``bounds`` already gathered for them)."""
    tables: dict[str, dict[str, Column]] = {}
    if keys is not None:
        frozen = keys.freeze()
        tables["keys"] = {f"__k{i}": partial(frozen.column, i) for i in range(len(keys.types))}
    groups: dict[str, Column] = {"__key": key_ids, **bounds, "__rows": rows.counts[slots]}
    row_of_slot = None
    for j, acc in enumerate(accs):
        for name, col in acc.capture(slots).items():
            groups[f"__a{j}.{name}"] = col
        if acc.has_pairs:
            if row_of_slot is None:
                row_of_slot = np.full(len(rows.counts), -1, dtype=np.int64)
                row_of_slot[slots] = np.arange(len(slots), dtype=np.int64)
            tables[f"distinct{j}"] = acc.capture_pairs(row_of_slot)
    tables["groups"] = groups
    return tables


def load_keys(keys: Interner | None, snap: Snapshot) -> np.ndarray:
    """Intern the snapshot's keys (in their original id order); the key id of each group."""
    groups = snap.tables["groups"]
    ref = groups.column("__key").to_numpy()
    if keys is None:
        return np.zeros(len(ref), dtype=np.int64)
    table = snap.tables["keys"]
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    cols = [table.column(f"__k{i}").combine_chunks() for i in range(len(keys.types))]
    return keys.intern(cols)[ref]


def load_accumulators(snap: Snapshot, slots: np.ndarray, rows: CountAcc, accs: list[Accumulator], *,
                      add: bool = False) -> None:
    """Write each group's hidden row count and accumulator fields into its new slot; with
    ``add``, fold them into what the slot holds (``add_partials``)."""
    groups = snap.tables["groups"]
    if add:
        add_partials(groups, slots, rows, accs)
        return
    rows.counts[slots] = groups.column("__rows").to_numpy()
    for j, acc in enumerate(accs):
        prefix = f"__a{j}."
        acc.load(slots, {c[len(prefix):]: groups.column(c) for c in groups.column_names if c.startswith(prefix)})
        pairs = snap.tables.get(f"distinct{j}")
        if pairs is not None:
            acc.load_pairs(slots[pairs.column("__group").to_numpy()], pairs.column("value"))


def add_partials(groups: pa.Table, slots: np.ndarray, rows: CountAcc, accs: list[Accumulator]) -> None:
    """Fold another actor's partial state into ``slots`` (scale-in of partial aggregates: the
    actors that go hand their parts to those that stay). Only the mergeable accumulators of
    partial aggregation (COUNT, SUM/AVG, numeric MIN/MAX; ``actors.partial``) can be added;
    a fresh slot holds zeros, so adding into it is loading."""
    from laminardb.operators.aggregates import MinMaxAcc, SumAcc, _numpy

    rows.counts[slots] += groups.column("__rows").to_numpy()
    for j, acc in enumerate(accs):
        cols = {c[len(f"__a{j}."):]: groups.column(c) for c in groups.column_names if c.startswith(f"__a{j}.")}
        if type(acc) in (CountAcc, SumAcc):
            for name in acc._arrays:
                arr = getattr(acc, name)
                arr[slots] += _numpy(cols[name], arr.dtype)
        elif type(acc) is MinMaxAcc and acc.domain.interner is None:
            best, has = _numpy(cols["best"], acc.best.dtype), _numpy(cols["has"], np.bool_)
            cur, cur_has = acc.best[slots], acc.has[slots]
            better = has & (~cur_has | ((best > cur) if acc.is_max else (best < cur)))
            acc.best[slots[better]] = best[better]
            acc.has[slots] = cur_has | has
        else:
            raise SnapshotFormatError(f"{acc.spec.kind} state cannot be added up from several actors' parts")


def image(kind: str, agg, meta: dict[str, Any]) -> StateImage:
    """A standalone image of an aggregation (``agg.capture()`` + its fingerprint)."""
    tables, agg_meta = agg.capture()
    return StateImage(kind, meta={**meta, "agg": agg_meta}, tables=tables)


def restore(kind: str, agg, blob: bytes | Snapshot, expected: dict[str, Any] | None, vnodes=None, *,
            add: bool = False) -> Snapshot:
    """Decode ``blob``, check it belongs to this plan and load its ``vnodes`` into ``agg``
    (``add``: fold into the groups it holds already — ``GroupAggregate`` only)."""
    snap = checked_snapshot(blob, kind, expected, vnodes)
    if "groups" in snap.tables:
        if add:
            agg.load(snap, snap.meta["agg"], add=True)
        else:
            agg.load(snap, snap.meta["agg"])
    return snap
