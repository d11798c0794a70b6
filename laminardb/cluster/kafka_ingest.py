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
from typing import Any

from laminardb.cluster.remote_rows import RemoteRows

_METADATA_TIMEOUT_S = 15.0
#: how long an actor's poll waits for records when it has none (it answers as soon as it
#: reads some): the head's Ray calls per second on an idle source, per reading actor
ACTOR_POLL_WAIT_MS = 500


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


def _share(position: dict, partitions: list[int]) -> dict:
    """The part of a merged position (``_merged_position``) for ``partitions``."""
    keep = {str(p) for p in partitions}
    maxes = (position.get("watermarks") or {}).get("max") or {}
    return {"v": 1, "topic": position.get("topic"),
            "offsets": {p: o for p, o in (position.get("offsets") or {}).items() if str(p) in keep},
            "watermarks": {"max": {p: m for p, m in maxes.items() if str(p) in keep}, "emitted": None}}


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
        self._unknown = {a: {p: (None, False) for p in ps} for a, ps in self.assignment.items()}
        self._emitted: int | None = None
        self._failing: tuple[float, str] | None = None  # the readers' fetch failures, last poll
        self._warnings: list[str] = []  # the readers' offset resets, not taken yet
        #: actor → its partitions' position after its last poll (``checkpoint_state``)
        self._positions: dict[int, dict] = {}
        #: actor → what its last poll said of its consumer (lag per partition, dead letters):
        #: ``metrics()`` reads these, never an actor (a paused one would hold it up)
        self._health: dict[int, dict] = {}
        #: actor → its partitions' (watermark, idle) states as of its last poll; unknown (and
        #: so holding the source's watermark back) until that actor's first answer
        self._states: dict[int, dict[int, tuple[int | None, bool]]] = {}
        #: actor → (its poll now in flight, when it was sent): each actor polls on its own, so
        #: one with records never waits for one without (``poll``)
        self._inflight: dict[int, tuple[Any, float]] = {}
        self._had_rows: dict[int, bool] = {}  # actor → whether its last answer had records
        resume = None
        if restore_state is not None:
            resume = json.dumps(_merged_position(restore_state))
            self._emitted = restore_state.get("emitted")
        self.start(resume)

    def start(self, resume: str | None = None) -> None:
        """(Re)start reading on the actors; ``resume``: a merged position (JSON) to go on from."""
        self._inflight.clear()  # answers of the reading before: their rows are read again
        self._states = {a: dict(ps) for a, ps in self._unknown.items()}
        # until an actor answers, a checkpoint keeps its partitions where the reading resumed
        base = json.loads(resume) if resume is not None else None
        self._positions = {a: _share(base, ps) for a, ps in self.assignment.items()} if base is not None else {}
        self.cluster.call_each(self._actors, "start_kafka_all", self.name, json.dumps(self.options),
                               json.dumps({str(a): ps for a, ps in self.assignment.items()}), resume)

    def checkpoint_state(self) -> dict:
        """Every partition's next offset and watermark state as of the last poll (the
        runner stores it with the batch that poll ingested, as for ``KafkaSource``)."""
        return {"v": 1, "kind": "cluster-kafka", "emitted": self._emitted,
                "actors": {str(a): p for a, p in self._positions.items()}}

    def poll(self, timeout_ms: int = 100) -> tuple[RemoteRows | None, int | None]:
        """The rows read by the actors whose polls answered within ``timeout_ms`` — left on
        the actors (``RemoteRows``) — and the source watermark candidate.

        Every reading actor has one poll in flight, which waits up to ``ACTOR_POLL_WAIT_MS``
        on the actor and answers as soon as it reads records; this takes the answers that
        are in and sends those actors their next poll on the next call. So an actor with
        records never waits for one without, and an idle source costs each reading actor
        two calls a second, not ten. The position a checkpoint keeps is each actor's as of
        its last answer taken here: the rows of a poll still in flight are read again after
        a restore."""
        import time

        import ray

        routed = list(self.routed_queries())
        for a in self._actors:
            if a not in self._inflight:
                ref = self.cluster.actors[a].poll_kafka.remote(self.name, ACTOR_POLL_WAIT_MS, routed)
                self._inflight[a] = (ref, time.monotonic())
        refs = [self._inflight[a][0] for a in self._actors]
        # wait for the actors that had records last time, together (one round of the engine's
        # work — tree steps, Ray calls — for all their rows, as one poll round was), never for
        # one that had none; with none expected, for the first answer
        expect = [self._inflight[a][0] for a in self._actors if self._had_rows.get(a, True)]
        if expect:
            ray.wait(expect, num_returns=len(expect), timeout=timeout_ms / 1000.0)
        else:
            ray.wait(refs, num_returns=1, timeout=timeout_ms / 1000.0)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        answered = [a for a in self._actors if self._inflight[a][0] in done]
        self._raise_if_stuck(answered)
        results = self.cluster.gather(answered, [self._inflight.pop(a)[0] for a in answered], "poll_kafka")
        for a, (desc, part_states, position) in zip(answered, results, strict=True):
            self._had_rows[a] = bool(desc["rows"])
            self._states[a] = {int(p): (wm, idle) for p, (wm, idle) in part_states.items()}
            self._positions[a] = position
            self._health[a] = desc
        wm = combine({p: st for states in self._states.values() for p, st in states.items()})
        if wm is not None and (self._emitted is None or wm > self._emitted):
            self._emitted = wm
        failing = [(f[0], f"actor {a}: {f[1]}") for a, h in self._health.items() if (f := h.get("failing")) is not None]
        self._failing = max(failing) if failing else None
        polls = [(a, r[0]) for a, r in zip(answered, results, strict=True)]
        self._warnings += [f"actor {a}: {w}" for a, p in polls for w in p.get("warnings") or ()]
        return RemoteRows.merge(self.schema, polls, self.cluster.n_actors), self._emitted

    def _raise_if_stuck(self, answered: list[int]) -> None:
        """An actor whose poll has not answered within its wait plus ``actor_call_timeout``
        (paused, or overloaded) fails this poll as a slow call does (``ActorTimeoutError``;
        the source shows ``error``); its poll stays in flight and is looked at again."""
        import time

        late = ACTOR_POLL_WAIT_MS / 1000.0 + self.cluster.call_timeout
        stuck = [a for a in self._actors if a not in answered and time.monotonic() - self._inflight[a][1] > late]
        if stuck:
            self.cluster.gather(stuck, [self._inflight[a][0] for a in stuck], "poll_kafka", timeout=0)

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
        self._inflight.clear()
        try:
            self.cluster.call_each(self._actors, "stop_kafka", self.name)
        except Exception:  # noqa: BLE001 - closing after an actor died must not raise
            pass
