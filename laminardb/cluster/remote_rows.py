"""``RemoteRows``: a batch that stays on the actors that read it (Kafka partitions).

The client's reactor handles it like a RecordBatch (row count, max event time) but never
holds the rows: each reading actor put its rows in Ray's object store once (``wholes``),
and for every keyed query on several actors it also split them by the owner of each
row's vnode (``routed[query][owner]``). ``DistributedOperator`` hands those object
references to the owners, so rows go actor → actor, never through the client.
``materialize()`` fetches the rows (for subscribers of the source itself, and for a query
created after the rows were read).
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
