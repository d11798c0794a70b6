"""Kafka sources in the Delta mode: each Kafka partition is read by the actor owning it.

Entry point: ``ClusterKafkaSource`` — a polled connector with the ``KafkaSource`` surface
(``poll``, ``lag``, ``close``) that the client's ``SourceRunner`` drives. Partition p
is assigned to one actor by the balanced rendezvous planner (manual ``assign()``, never
consumer-group rebalancing); that actor consumes and decodes it, and the rows stay there
(``RemoteRows``): keyed queries get them split by owner actor → actor, stateless queries
and partial aggregates run where the rows were read. The client only sees row counts and
combines the per-partition watermarks with the single-process rule —
MIN over partitions that are not idle, MAX when all are idle, never decreasing — so the
cluster closes windows exactly when one consumer of all partitions would.
"""

from __future__ import annotations

import json

from laminardb.cluster.remote_rows import RemoteRows

_METADATA_TIMEOUT_S = 15.0


def topic_partitions(options: dict[str, str]) -> list[int]:
    """The topic's partitions (creating the topic with ``partitions`` if it does not exist)."""
    import time

    from kafka import KafkaConsumer

    from laminardb.connectors.exceptions import KafkaUnavailableError
    from laminardb.connectors.kafka import _ensure_topic

    brokers = [b.strip() for b in options["brokers"].split(",") if b.strip()]
    consumer = KafkaConsumer(bootstrap_servers=brokers, group_id=None, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        created = False
        while True:
            found = consumer.partitions_for_topic(options["topic"])
            if found:
                return sorted(found)
            if not created:
                _ensure_topic(brokers, options["topic"], max(1, int(options.get("partitions", 1))))
                created = True
            elif time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    f"topic {options['topic']!r} has no partitions after {_METADATA_TIMEOUT_S:.0f} s: "
                    "create it or check the brokers option"
                )
            time.sleep(0.1)
    finally:
        consumer.close()


def partition_owners(n_partitions: int, n_actors: int) -> list[int]:
    """Kafka partition → actor, by the same balanced rendezvous planner as vnodes."""
    from laminardb.raft.plan import plan_assignment

    plan = plan_assignment(n_partitions, members=[f"actor-{i}" for i in range(n_actors)])
    return [int(plan.assignment[p].split("-")[1]) for p in range(n_partitions)]


def _merged_position(state: dict) -> dict:
    """One ``KafkaSource`` position covering every partition of a ``checkpoint_state``
    (each actor takes its own partitions' offsets from it, whatever the assignment now)."""
    offsets: dict[str, int] = {}
    maxes: dict[str, int | None] = {}
    topic = None
    for pos in (state.get("actors") or {}).values():
        topic = pos.get("topic", topic)
        offsets.update(pos.get("offsets") or {})
        maxes.update((pos.get("watermarks") or {}).get("max") or {})
    return {"v": 1, "topic": topic, "offsets": offsets, "watermarks": {"max": maxes, "emitted": None}}


def combine(states: dict[int, tuple[int | None, bool]]) -> int | None:
    """Source watermark candidate from per-partition (wm_p, idle) states."""
    active = [wm for wm, idle in states.values() if not idle]
    if active:
        return None if any(w is None for w in active) else min(active)
    known = [wm for wm, _ in states.values() if wm is not None]
    return max(known) if known else None


class ClusterKafkaSource:
    """``routed_queries()`` names the keyed queries on this source that need the rows split
    by owner (asked at every poll, so queries created later are served)."""

    def __init__(self, cluster, node, options: dict[str, str], routed_queries=lambda: [],
                 restore_state: dict | None = None) -> None:
        self.cluster = cluster
        self.name = node.name
        self.schema = node.schema
        self.routed_queries = routed_queries
        self.options = options
        parts = topic_partitions(options)
        self.assignment: dict[int, list[int]] = {}
        for p, a in zip(parts, partition_owners(len(parts), cluster.n_actors), strict=True):
            self.assignment.setdefault(a, []).append(p)
        self._actors = sorted(self.assignment)
        self._emitted: int | None = None
        self._failing: tuple[float, str] | None = None  # the readers' fetch failures, last poll
        self._warnings: list[str] = []  # the readers' offset resets, not taken yet
        #: actor → its partitions' position after its last poll (``checkpoint_state``)
        self._positions: dict[int, dict] = {}
        #: actor → what its last poll said of its consumer (lag per partition, dead letters):
        #: ``metrics()`` reads these, never an actor (a paused one would hold it up)
        self._health: dict[int, dict] = {}
        resume = None
        if restore_state is not None:
            resume = json.dumps(_merged_position(restore_state))
            self._emitted = restore_state.get("emitted")
        self.start(resume)

    def start(self, resume: str | None = None) -> None:
        """(Re)start reading on the actors; ``resume``: a merged position (JSON) to go on from."""
        self.cluster.call_each(self._actors, "start_kafka_all", self.name, json.dumps(self.options),
                               json.dumps({str(a): ps for a, ps in self.assignment.items()}), resume)

    def checkpoint_state(self) -> dict:
        """Every partition's next offset and watermark state as of the last poll (the
        runner stores it with the batch that poll ingested, as for ``KafkaSource``)."""
        return {"v": 1, "kind": "cluster-kafka", "emitted": self._emitted,
                "actors": {str(a): p for a, p in self._positions.items()}}

    def poll(self, timeout_ms: int = 100) -> tuple[RemoteRows | None, int | None]:
        """The rows read by every actor — left on the actors (``RemoteRows``) — and the
        source watermark candidate."""
        results = self.cluster.call_each(self._actors, "poll_kafka", self.name, timeout_ms,
                                         list(self.routed_queries()))
        states = {}
        for a, (desc, part_states, position) in zip(self._actors, results, strict=True):
            states.update({int(p): (wm, idle) for p, (wm, idle) in part_states.items()})
            self._positions[a] = position
            self._health[a] = desc
        wm = combine(states)
        if wm is not None and (self._emitted is None or wm > self._emitted):
            self._emitted = wm
        polls = [(a, r[0]) for a, r in zip(self._actors, results, strict=True)]
        failing = [(f[0], f"actor {a}: {f[1]}") for a, p in polls if (f := p.get("failing")) is not None]
        self._failing = max(failing) if failing else None
        self._warnings += [f"actor {a}: {w}" for a, p in polls for w in p.get("warnings") or ()]
        return RemoteRows.merge(self.schema, polls, self.cluster.n_actors), self._emitted

    def lag(self) -> int:
        return sum(self.cluster.call_each(self._actors, "kafka_lag", self.name))

    def partition_lag(self) -> dict[int, int | None]:
        """Messages behind the end of each partition, as the owning actors' last polls reported
        them (``KafkaSource.partition_lag``: from their fetch responses); None until known."""
        out: dict[int, int | None] = {p: None for ps in self.assignment.values() for p in ps}
        for health in list(self._health.values()):
            out.update({int(p): n for p, n in (health.get("lag") or {}).items()})
        return out

    @property
    def dead_lettered(self) -> int:
        """Messages that did not decode, over every reading actor (sent to ``<topic>.dlq``)."""
        return sum(int(h.get("dead_lettered", 0)) for h in list(self._health.values()))

    @property
    def dead_letter_failures(self) -> int:
        return sum(int(h.get("dead_letter_failures", 0)) for h in list(self._health.values()))

    def fetch_failure(self) -> tuple[float, str] | None:
        """``(seconds failing, reason)`` of the reading actor failing longest as of the last
        poll (each actor's ``KafkaSource.fetch_failure``: the broker unreachable, fetches
        retried quietly), else None — the runner then shows ``error``, as embedded."""
        return self._failing

    def take_warnings(self) -> list[Exception]:
        """The reading actors' ``KafkaSource.take_warnings`` (offset resets), once each."""
        from laminardb.connectors.exceptions import KafkaOffsetResetError

        out, self._warnings = self._warnings, []
        return [KafkaOffsetResetError(w) for w in out]

    def metrics(self) -> dict:
        return {"assignment": {str(a): ps for a, ps in self.assignment.items()}}

    def close(self) -> None:
        try:
            self.cluster.call_each(self._actors, "stop_kafka", self.name)
        except Exception:  # noqa: BLE001 - closing after an actor died must not raise
            pass
