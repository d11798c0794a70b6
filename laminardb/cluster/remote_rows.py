"""Rows the head hands on by reference, without holding them.

``RemoteRows``: a batch that stays on the actors that read it (Kafka partitions).

The client's reactor handles it like a RecordBatch (row count, max event time) but never
holds the rows: each reading actor put its rows in Ray's object store once (``wholes``),
and for every keyed query on several actors it also split them by the owner of each
row's vnode (``routed[query][owner]``). ``DistributedOperator`` hands those object
references to the owners, so rows go actor → actor, never through the client.
``materialize()`` fetches the rows (for subscribers of the source itself, and for a query
created after the rows were read).

``RemoteBatch``: a plan tree's root rows for subscribers (``DistributedPlanOperator``). The
head queues and counts it like a RecordBatch and hands its reference to the clients, who
fetch and decode the rows themselves (``fetch_remote``, ``decode_batches``), so the head never decodes or
encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from laminardb.cluster.wire import from_ipc


@dataclass
class RemoteRows:
    schema: pa.Schema
    num_rows: int
    max_event_time: int | None  # over every reader's rows (None: no event-time column)
    wholes: list[tuple[int, Any]] = field(default_factory=list)  # (reading actor, ObjectRef)
    routed: dict[str, list[list[Any]]] = field(default_factory=dict)  # query → owner → refs
    nbytes: int = 0  # the decoded rows' Arrow bytes, as the readers reported them (``bytes_in``)

    def refs_read_by(self, actor: int) -> list[Any]:
        return [ref for reader, ref in self.wholes if reader == actor]

    def materialize(self) -> pa.RecordBatch:
        import ray

        batches = [from_ipc(data) for data in ray.get([ref for _, ref in self.wholes])]
        if not batches:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        if len(batches) == 1:
            return batches[0]
        return pa.Table.from_batches(batches, schema=self.schema).combine_chunks().to_batches()[0]

    @staticmethod
    def merge(schema: pa.Schema, polls: list[tuple[int, dict]], n_actors: int) -> RemoteRows | None:
        """One RemoteRows from each reading actor's ``poll_kafka`` answer (None if no rows)."""
        polls = [(a, p) for a, p in polls if p["rows"]]
        if not polls:
            return None
        tops = [p["max_event_time"] for _, p in polls if p["max_event_time"] is not None]
        routed: dict[str, list[list[Any]]] = {}
        for _, p in polls:
            for query, parts in p["routed"].items():
                per_owner = routed.setdefault(query, [[] for _ in range(n_actors)])
                for owner, ref in enumerate(parts):
                    if ref is not None:
                        per_owner[owner].append(ref)
        return RemoteRows(schema, sum(p["rows"] for _, p in polls), max(tops) if tops else None,
                          [(a, p["whole"]) for a, p in polls], routed, sum(int(p.get("bytes", 0)) for _, p in polls))


@dataclass(frozen=True)
class RemoteBatch:
    """``num_rows`` rows from ``offset`` of the Arrow IPC in Ray object ``ref``. The object is
    an actor call's return value, so the head owns it: it outlives the actor that made it."""

    ref: Any
    num_rows: int
    offset: int = 0

    def slice(self, offset: int = 0, length: int | None = None) -> RemoteBatch:
        """As ``RecordBatch.slice``: the subscription skips and trims rows without them."""
        offset = min(offset, self.num_rows)
        rest = self.num_rows - offset
        return RemoteBatch(self.ref, rest if length is None else min(length, rest), self.offset + offset)


def fetch_remote(items: list, timeout_s: float) -> dict:
    """The Arrow IPC of every ``RemoteBatch`` among ``items``, by reference, fetched with one
    ``ray.get``. Raises what ``ray.get`` raises: ``ObjectLostError`` when the owner (the head)
    or the node holding them died, ``GetTimeoutError`` after ``timeout_s``."""
    refs = list({item.ref: None for item in items if isinstance(item, RemoteBatch)})
    if not refs:
        return {}
    import ray

    return dict(zip(refs, ray.get(refs, timeout=timeout_s), strict=True))


def decode_batches(items: list, fetched: dict) -> list[pa.RecordBatch]:
    """A read's items — IPC bytes, or ``RemoteBatch``es whose IPC ``fetch_remote`` got — as
    batches, in order. Each reference is decoded once per read (``fetched`` keeps the batch):
    subscribers of one stream on one connection get the same references."""
    out = []
    for item in items:
        if isinstance(item, RemoteBatch):
            got = fetched[item.ref]
            if not isinstance(got, pa.RecordBatch):
                got = fetched[item.ref] = from_ipc(got)
            out.append(got.slice(item.offset, item.num_rows))
        else:
            out.append(from_ipc(item))
    return out
