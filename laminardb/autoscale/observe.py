"""What the database head measures for the autoscaler: ``LoadObserver.observe(conn) -> Observation``.

Each evaluation takes one sample:

- per partition of every Kafka source, the **end offset** (a head-side consumer with no group,
  ``end_offsets``) and the **consumed offset** (the position the actor that owns the partition
  reported after its last poll, ``ClusterKafkaSource._positions``): lag = end − consumed;
- per actor, cumulative **busy seconds** (running batches, plus CPU seconds fetching and
  decoding Kafka records) and **rows** (Kafka records read; rows run, for a database fed by
  ``insert``), from the actor's cheap ``load_sample`` call;
- the **checkpointed offsets** of the last checkpoint (what a restore would replay).

The Observation compares the newest sample with the oldest one inside ``metrics_window``:
arrival rate = growth of Σ end offsets / elapsed time, busy fraction and rows per actor as
differences. An actor replaced since (a recovery, a rescale) starts its counters from zero, so
its difference is its count. With Tansu (the test broker) an end offset is the base offset of
the partition's last record batch + 1, so lag and arrival read low by up to one producer batch
per partition (``connectors/kafka.py``); real Kafka is exact.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from laminardb.autoscale.policy import Observation

__all__ = ["LoadObserver", "free_cpus"]

log = logging.getLogger(__name__)

_SAMPLE_TIMEOUT_S = 2.0  # an actor busy longer than this is sampled next time


@dataclass(frozen=True)
class _Sample:
    time: float
    ends: dict[tuple[str, int], int]  # (source, partition) → end offset
    members: tuple[str, ...]  # who held each actor index (a new member: counters from zero)
    busy: tuple[float | None, ...]
    rows: tuple[int | None, ...]


class LoadObserver:
    """Samples one database's load; ``observe`` gives the policy its ``Observation``."""

    def __init__(self, metrics_window: float) -> None:
        self.window = metrics_window
        self.samples: deque[_Sample] = deque()
        self._consumers: dict[str, Any] = {}  # brokers → KafkaConsumer (end offsets only)
        self.last: dict[str, Any] | None = None  # the last observation's inputs (metrics)

    def observe(self, conn, *, vnodes: int, now: float | None = None) -> Observation | None:
        """Sample ``conn`` (the head's connection); None until two samples exist."""
        now = time.monotonic() if now is None else now
        cluster = conn.engine.backend.cluster
        kafka = self._kafka(conn)
        # a busy or lost actor answers None here and is left out of the rate; the watchdog,
        # not a sample, decides whether it is lost
        answers = cluster.probe("load_sample", timeout=_SAMPLE_TIMEOUT_S, record=False)
        fed_by_kafka = bool(kafka["sources"])
        sample = _Sample(now, kafka["end_offsets"], tuple(cluster.members),
                         tuple(None if a is None else float(a["busy_s"]) for a in answers),
                         tuple(None if a is None else int(a["polled_rows" if fed_by_kafka else "rows_in"])
                               for a in answers))
        self.samples.append(sample)
        while len(self.samples) > 2 and self.samples[1].time <= now - self.window:
            self.samples.popleft()  # keep the newest sample at least ``window`` old
        first = self.samples[0]
        elapsed = now - first.time
        if len(self.samples) < 2 or elapsed <= 0 or len(first.members) != len(sample.members):
            if len(first.members) != len(sample.members):  # rescaled: start a new window
                self.samples.clear()
                self.samples.append(sample)
            return None
        busy, rows = [], []
        for i, member in enumerate(sample.members):
            then_b, then_r = (first.busy[i], first.rows[i]) if first.members[i] == member else (0.0, 0)
            now_b, now_r = sample.busy[i], sample.rows[i]
            if now_b is None or then_b is None:  # not sampled: left out of the TPR estimate
                busy.append(0.0)
                rows.append(0)
                continue
            busy.append(min(1.0, max(0.0, (now_b - then_b) / elapsed)))
            rows.append(max(0, now_r - then_r))
        # growth of the end offsets of the partitions both samples saw (a source created since
        # the first sample does not count its backlog as arrivals)
        grown = sum(end - first.ends[p] for p, end in sample.ends.items() if p in first.ends)
        arrival = max(0.0, grown / elapsed)
        free = free_cpus()
        obs = Observation(time=now, actors=cluster.n_actors, lag=kafka["lag"], arrival_rate=arrival,
                          busy=busy, processed=rows, window=elapsed,
                          partitions=kafka["partitions"] or None, free_cpus=free,
                          partition_lag=kafka["partition_lag"] or None,
                          checkpoint_lag=self._checkpoint_lag(conn, kafka), vnodes=vnodes)
        self.last = {"time": now, "actors": obs.actors, "lag": obs.lag, "checkpoint_lag": obs.checkpoint_lag,
                     "arrival_rate": round(arrival, 1), "busy": [round(b, 3) for b in busy], "processed": rows,
                     "window_s": round(elapsed, 2), "partitions": obs.partitions, "free_cpus": free,
                     "partition_lag": obs.partition_lag}
        return obs

    def reset(self) -> None:
        """Forget the samples (after a rescale the rates start over)."""
        self.samples.clear()

    def close(self) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
        self._consumers.clear()

    # ------------------------------------------------------------------ Kafka
    def _kafka(self, conn) -> dict[str, Any]:
        """End and consumed offsets of every Kafka source partition, summed and per partition."""
        from laminardb.cluster.kafka_ingest import ClusterKafkaSource

        out: dict[str, Any] = {"sources": [], "lag": 0, "partitions": 0, "partition_lag": {},
                               "end_offsets": {}}
        for node in list(conn.engine.reactor.nodes.values()):
            src = getattr(node, "connector", None)
            if not isinstance(src, ClusterKafkaSource):
                continue
            topic = src.options["topic"]
            parts = sorted(p for ps in src.assignment.values() for p in ps)
            ends = self._end_offsets(src.options["brokers"], topic, parts)
            if ends is None:
                continue
            consumed: dict[int, int] = {}
            for pos in list(dict(src._positions).values()):
                consumed.update({int(p): int(o) for p, o in (pos.get("offsets") or {}).items()})
            out["sources"].append(node.name)
            out["partitions"] = max(out["partitions"], len(parts))
            # rows read but not yet run: the actors poll beside their batches, so up to
            # max_in_flight polls of rows may wait in the queries' rounds, not in the broker
            out["lag"] += max((op.queued_rows() for op in conn.engine.backend.operators()
                               if op.plan.input == node.name), default=0)
            for p in parts:
                end = ends.get(p, 0)
                behind = max(0, end - consumed[p]) if p in consumed else 0  # not polled yet: unknown
                out["lag"] += behind
                out["partition_lag"][f"{topic}/{p}"] = behind
                out["end_offsets"][(node.name, p)] = end
        return out

    def _end_offsets(self, brokers: str, topic: str, parts: list[int]) -> dict[int, int] | None:
        from kafka import KafkaConsumer, TopicPartition

        try:
            consumer = self._consumers.get(brokers)
            if consumer is None:
                consumer = self._consumers[brokers] = KafkaConsumer(
                    bootstrap_servers=[b.strip() for b in brokers.split(",") if b.strip()],
                    group_id=None, enable_auto_commit=False, request_timeout_ms=5000)
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
            return {tp.partition: int(o or 0) for tp, o in ends.items()}
        except Exception as exc:  # noqa: BLE001 - a broker down: no lag this time, said in the log
            log.warning("autoscale: end offsets of %s unavailable: %s", topic, exc)
            self._consumers.pop(brokers, None)
            return None

    @staticmethod
    def _checkpoint_lag(conn, kafka: dict[str, Any]) -> int | None:
        """Σ end − checkpointed offset: the rows a restore from the last checkpoint replays."""
        durable = conn.engine.durable
        states = getattr(durable, "source_states", None) if durable is not None else None
        if not kafka["sources"] or not callable(states):
            return None
        total = 0
        for name, state in (states() or {}).items():
            for pos in ((state or {}).get("actors") or {}).values():
                for p, o in (pos.get("offsets") or {}).items():
                    end = kafka["end_offsets"].get((name, int(p)))
                    if end is not None:
                        total += max(0, end - int(o))
        return total


def free_cpus() -> int | None:
    """CPUs the Ray cluster has free now (one per new actor); None outside Ray."""
    try:
        import ray

        return int(ray.available_resources().get("CPU", 0.0))
    except Exception:  # noqa: BLE001 - not connected: no CPU cap
        return None
