"""Operator state snapshots: a versioned byte format split by vnode (msgpack + Arrow IPC, never pickle).

Why: a durable database checkpoints its stateful operators and restores them on open, and the
Delta mode moves vnodes between processes with their state. Both need bytes that any process
and any later release can read, and a snapshot that does not stall ingest. So it has two steps:

1. ``snapshot()`` of an operator, under the engine lock, returns a ``StateImage``: numpy
   copies/gathers of the live state plus references to immutable Arrow arrays — nothing it
   holds is ever mutated afterwards (the invariant ``encode`` on another thread relies on).
2. ``StateImage.encode(vnodes=None)``, on any thread with the lock released, gathers key and
   string values, hashes keys to vnodes and writes the bytes; ``vnodes`` keeps only those.

``decode(blob)`` reads the envelope back (``SnapshotFormatError`` for anything else); the
operators' ``restore(blob, *, vnodes=None)`` load it into a fresh operator built from the same
plan, and several blobs holding disjoint vnode subsets add up to the whole state.

Format, version 1: one msgpack map
``{"format": "laminardb.state", "version": 1, "kind": str, "vnodes": V, "subset": [v…] | None,
"meta": {…}, "counters": {…} | None, "tables": {name: Arrow IPC stream}}``. Keyed state has
``keys`` (every interned key in id order: ``__vnode`` = hash_rows(key) % V, ``__k0``…),
``groups`` (one row per live group: ``__vnode``, ``__key`` = row of ``keys``, window bounds,
``__rows``, ``__a{j}.{field}`` accumulator state) and child tables whose ``__group`` column
is a row of ``groups`` (``distinct{j}``: COUNT(DISTINCT) pairs). Operator-wide counters ride
only in a blob whose subset holds vnode 0, so restoring a partition of the vnodes counts once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

import msgpack
import numpy as np
import pyarrow as pa

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.operators._buffers import hash_rows

__all__ = ["DEFAULT_VNODES", "FORMAT", "SNAPSHOT_VERSION", "Snapshot", "StateImage", "checked_snapshot", "decode",
           "mismatch"]

SNAPSHOT_VERSION = 1
FORMAT = "laminardb.state"
#: vnodes per source (``laminardb.cluster.routing.DEFAULT_VNODES``; kept equal, not imported,
#: so that operators do not depend on the actors package)
DEFAULT_VNODES = 256
# Arrow IPC body compression: lz4 frames cost a few ms per 100 MB and shrink the usual
# state (small ints, repeated window starts) 2-4x; None would make encode() a plain copy.
_IPC_COMPRESSION = "lz4"

#: a column of an image: a numpy copy, an immutable Arrow array, or a deferred gather
#: (``Callable[[], pa.Array]``) that ``encode`` runs off the engine lock
Column: TypeAlias = np.ndarray | pa.Array | Callable[[], pa.Array]
#: a table of an image: columns by name, or a whole (deferred) Arrow table
Part: TypeAlias = dict[str, Column] | pa.Table | Callable[[], pa.Table]


class StateImage:
    """A consistent copy of one operator's state; ``encode`` turns it into bytes.

    ``tables`` maps table name → ``Part`` (columns by name, or a table); ``keys``/``groups`` get
    their vnode columns when first encoded (once: later encodes reuse the built tables).
    ``split=False`` marks state that is not partitioned (a view's rows): ``vnodes`` refused.
    """

    def __init__(self, kind: str, *, meta: dict[str, Any] | None = None,
                 counters: dict[str, int] | None = None,
                 tables: dict[str, Part] | None = None,
                 split: bool = True, n_vnodes: int = DEFAULT_VNODES) -> None:
        self.kind = kind
        self.meta = meta or {}
        self.counters = counters
        self.split = split
        self.n_vnodes = n_vnodes
        self._parts = tables or {}
        self._built: dict[str, pa.Table] | None = None
        self._lock = threading.Lock()

    def tables(self) -> dict[str, pa.Table]:
        """The whole state as Arrow tables (built on first use, then cached)."""
        with self._lock:
            if self._built is None:
                self._built = _build(self._parts, self.n_vnodes)
                self._parts = {}  # the copies now live in the tables
            return self._built

    def encode(self, vnodes: Collection[int] | None = None) -> bytes:
        """The snapshot bytes; ``vnodes``: only the state of those vnodes (and counters only
        when vnode 0 is among them)."""
        tables = self.tables()
        counters = self.counters
        subset = None
        if vnodes is not None:
            if not self.split:
                raise ValueError(f"a {self.kind} snapshot is not split by vnode; encode it whole")
            subset = sorted({int(v) for v in vnodes})
            tables = _select(tables, _want(subset, self.n_vnodes))
            if 0 not in subset:
                counters = None
        doc = {"format": FORMAT, "version": SNAPSHOT_VERSION, "kind": self.kind,
               "vnodes": self.n_vnodes, "subset": subset, "meta": self.meta, "counters": counters,
               "tables": {name: _ipc(t) for name, t in tables.items()}}
        return msgpack.packb(doc, use_bin_type=True)


@dataclass(frozen=True)
class Snapshot:
    """A decoded blob: its kind, metadata, counters (None when another blob carries them)
    and tables."""

    kind: str
    meta: dict[str, Any]
    counters: dict[str, int] | None
    n_vnodes: int
    subset: list[int] | None
    tables: dict[str, pa.Table]

    def select(self, vnodes: Collection[int] | None) -> Snapshot:
        """Only the state of ``vnodes`` (None: all of it)."""
        if vnodes is None:
            return self
        want = _want(vnodes, self.n_vnodes)
        subset = sorted(int(v) for v in (vnodes if self.subset is None else set(vnodes) & set(self.subset)))
        return replace(self, tables=_select(self.tables, want), subset=subset,
                       counters=self.counters if 0 in subset else None)


def decode(blob: bytes, *, kind: str | None = None) -> Snapshot:
    """Read a blob written by ``StateImage.encode``; refuses other formats and versions."""
    try:
        doc = msgpack.unpackb(blob, raw=False)
    except Exception as exc:  # noqa: BLE001 - any unpack failure means "not our format"
        raise SnapshotFormatError(_not_ours(f"it is not msgpack ({type(exc).__name__})")) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise SnapshotFormatError(_not_ours(f"format marker {found!r}, expected {FORMAT!r}"))
    version = doc.get("version")
    if version != SNAPSHOT_VERSION:
        msg = (f"state snapshot version {version!r} found; this build of laminardb reads version "
               f"{SNAPSHOT_VERSION}: restore it with the laminardb release that wrote it, or "
               f"{_ASIDE}")
        raise SnapshotFormatError(msg)
    if kind is not None and doc.get("kind") != kind:
        msg = (f"a {doc.get('kind')!r} state snapshot cannot be restored into a {kind!r}: the "
               "checkpoint does not belong to this object")
        raise SnapshotFormatError(msg)
    try:
        tables = {name: pa.ipc.open_stream(pa.py_buffer(data)).read_all()
                  for name, data in doc["tables"].items()}
        return Snapshot(kind=doc["kind"], meta=doc["meta"], counters=doc["counters"],
                        n_vnodes=int(doc["vnodes"]), subset=doc["subset"], tables=tables)
    except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise SnapshotFormatError(_not_ours(f"its tables are unreadable ({exc})")) from exc


# what to do with a checkpoint that cannot be restored: recovery keeps the WAL from the oldest
# retained checkpoint on, so the one before plus that WAL rebuild every acknowledged row
_ASIDE = ("rename that checkpoint's directory (checkpoints/ckpt-<epoch>) to start with '_', "
          "without deleting it: recovery then uses the checkpoint before and replays the WAL kept "
          "since it, so no acknowledged row is lost")


def _not_ours(why: str) -> str:
    return (f"not a laminardb state snapshot: {why}; the file is corrupt or from another "
            f"program — {_ASIDE}")


def checked_snapshot(blob: bytes | Snapshot, kind: str, fingerprint: Any, vnodes=None) -> Snapshot:
    """``blob`` decoded as a ``kind`` snapshot of the plan ``fingerprint`` describes, cut to
    ``vnodes``; a blob of another plan is refused (``mismatch``)."""
    snap = blob if isinstance(blob, Snapshot) else decode(blob, kind=kind)
    found = snap.meta.get("plan")
    if found != fingerprint:
        raise mismatch(kind, found, fingerprint)
    return snap.select(vnodes)


def mismatch(kind: str, found: Any, expected: Any) -> SnapshotFormatError:
    """The error for a blob taken from an operator of a different plan."""
    return SnapshotFormatError(
        f"this {kind} snapshot was taken from a different query ({found}; this one is {expected}): "
        "restore a snapshot into an operator built from the same SQL")


# ---------------------------------------------------------------------- building
def _arrow(col: Column) -> pa.Array:
    if isinstance(col, np.ndarray):
        return pa.array(col)
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        return col
    return col()


def _build(parts: dict[str, Part], n_vnodes: int) -> dict[str, pa.Table]:
    out = {}
    key_vnode = None
    keys = parts.get("keys")
    if isinstance(keys, dict):  # the key dictionary: its hash decides each group's vnode
        cols = {name: _arrow(c) for name, c in keys.items()}
        n = len(next(iter(cols.values())))
        key_vnode = (hash_rows(list(cols.values())) % np.uint64(n_vnodes)).astype(np.int32) if n else (
            np.zeros(0, np.int32))
        out["keys"] = pa.table({"__vnode": key_vnode, **cols})
    for name, spec in parts.items():
        if name == "keys":
            continue
        if not isinstance(spec, dict):
            out[name] = spec if isinstance(spec, pa.Table) else spec()
            continue
        cols = {c: _arrow(v) for c, v in spec.items()}
        if name == "groups":
            key = np.asarray(cols["__key"])
            vnode = key_vnode[key] if key_vnode is not None else np.zeros(len(key), np.int32)
            cols = {"__vnode": vnode, **cols}
        out[name] = pa.table(cols)
    return out


def _want(vnodes: Collection[int], n_vnodes: int) -> np.ndarray:
    want = np.zeros(n_vnodes, dtype=np.bool_)
    v = np.fromiter((int(x) for x in vnodes), dtype=np.int64)
    if len(v) and (v.min() < 0 or v.max() >= n_vnodes):
        raise ValueError(f"vnodes must lie in [0, {n_vnodes}); got {sorted(set(v.tolist()))[:8]}")
    want[v] = True
    return want


def _remap(table: pa.Table, col: str, new_index: np.ndarray, keep: np.ndarray) -> pa.Table:
    """Rows of ``table`` whose ``col`` points at a kept row, ``col`` renumbered."""
    ref = table.column(col).to_numpy()
    mask = keep[ref]
    table = table.filter(pa.array(mask))
    i = table.schema.get_field_index(col)
    return table.set_column(i, col, pa.array(new_index[ref[mask]]))


def _select(tables: dict[str, pa.Table], want: np.ndarray) -> dict[str, pa.Table]:
    """The rows of ``keys``/``groups`` in wanted vnodes, child tables following their group."""
    out = dict(tables)
    keys = tables.get("keys")
    if keys is not None:
        kkeep = want[keys.column("__vnode").to_numpy()]
        out["keys"] = keys.filter(pa.array(kkeep))
    for name, t in tables.items():  # other vnode-split tables (a join's rows) filter by their own column
        if name not in ("keys", "groups") and "__vnode" in t.column_names:
            out[name] = t.filter(pa.array(want[t.column("__vnode").to_numpy()]))
    groups = tables.get("groups")
    if groups is None:
        return out
    gkeep = want[groups.column("__vnode").to_numpy()]
    g = groups.filter(pa.array(gkeep))
    if keys is not None:
        knew = np.cumsum(kkeep) - 1
        ref = g.column("__key").to_numpy()
        g = g.set_column(g.schema.get_field_index("__key"), "__key", pa.array(knew[ref]))
    out["groups"] = g
    gnew = np.cumsum(gkeep) - 1
    for name, t in tables.items():
        if name not in ("keys", "groups") and "__group" in t.column_names:
            out[name] = _remap(t, "__group", gnew, gkeep)
    return out


def _ipc(table: pa.Table) -> memoryview:
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=_IPC_COMPRESSION)
    with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return memoryview(sink.getvalue())
