"""Sources one actor reads in the Delta mode: change data capture (PostgreSQL, MySQL).

Entry point: ``ClusterActorSource`` — a polled connector with the embedded surface (``poll``,
``checkpoint_state``, ``checkpoint_committed``, ``lag``, ``fetch_failure``, ``close``) that the
head's ``SourceRunner`` drives. A CDC stream is one ordered log (one replication slot, one
binlog reader), so it has one reader: the actor that owns partition 0 by the same rendezvous
planner as Kafka partitions (``kafka_ingest.partition_owners``). That actor builds the very
connector the embedded engine builds and polls it; the rows stay on it (``RemoteRows``) and go
from there to their keys' owners, actor → actor, as Kafka rows do. The head sees row counts and
positions only. The position kept in a checkpoint is the connector's own, so a database moves
between the embedded and the Delta mode, or to another number of actors, without losing its
place; the replication position is confirmed to the server (``checkpoint_committed``) only
after the checkpoint holding it committed.
"""

from __future__ import annotations

import json

from laminardb.cluster.kafka_ingest import partition_owners
from laminardb.cluster.remote_rows import RemoteRows
from laminardb.connectors.polled import FROM_DATA


class ClusterActorSource:
    """``routed_queries()`` names the keyed queries on this source whose rows are split by
    owner on the reading actor (asked at every poll, as for ``ClusterKafkaSource``)."""

    def __init__(self, cluster, node, kind: str, options: dict[str, str], routed_queries=lambda: [],
                 restore_state: dict | None = None) -> None:
        self.cluster = cluster
        self.name = node.name
        self.schema = node.schema
        self.kind = kind
        self.routed_queries = routed_queries
        self.reader = partition_owners(1, cluster.n_actors)[0]
        self._position = restore_state
        self._lag = 0
        self._failing: tuple[float, str] | None = None
        self._warnings: list[tuple[str | None, str]] = []  # (code, message) of the reader's warnings
        self._changelog: dict | None = None  # the reader's last changelog_metrics()
        self._committed: dict | None = None  # the last position forwarded to the reader
        self.cluster.call_each([self.reader], "start_source", self.name, kind, json.dumps(options),
                               None if restore_state is None else json.dumps(restore_state))

    def poll(self, timeout_ms: int = 100):
        """The rows the reading actor read, left on it, and the connector's watermark."""
        (desc, position), = self.cluster.call_each([self.reader], "poll_source", self.name, timeout_ms,
                                                   list(self.routed_queries()))
        self._position = position
        self._lag = int(desc.get("lag") or 0)
        failing = desc.get("failing")
        self._failing = None if failing is None else (float(failing[0]), str(failing[1]))
        self._warnings += list(desc.get("warnings") or ())
        self._changelog = desc.get("changelog")
        mark = desc.get("watermark")
        wm = FROM_DATA if mark == "data" else mark
        return RemoteRows.merge(self.schema, [(self.reader, desc)], self.cluster.n_actors), wm

    def checkpoint_state(self) -> dict | None:
        return self._position

    def checkpoint_committed(self, state: dict) -> None:
        """Forward to the reader, once per position: in memory the runner calls this after every
        poll, idle ones included, and the reader has nothing to confirm for a position it has."""
        if state == self._committed:
            return
        self.cluster.call_each([self.reader], "source_committed", self.name, json.dumps(state))
        self._committed = state

    def lag(self) -> int:
        return self._lag

    def fetch_failure(self) -> tuple[float, str] | None:
        return self._failing

    def take_warnings(self) -> list[Exception]:
        from laminardb.errors import LaminarError

        out, self._warnings = self._warnings, []
        return [LaminarError(message, code=code) for code, message in out]

    def changelog_metrics(self) -> dict:
        """What ``metrics()`` shows under the source's ``changelog``: the connector's own figures
        as the reading actor's last poll had them (never a call to a possibly paused actor),
        and which actor reads."""
        return {**(self._changelog or {}), "reader": self.reader}

    def close(self) -> None:
        try:
            self.cluster.call_each([self.reader], "stop_kafka", self.name)
        except Exception:  # noqa: BLE001 - closing after an actor died must not raise
            pass
