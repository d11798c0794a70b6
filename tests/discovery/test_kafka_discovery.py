"""Kafka discovery against the real Tansu broker: join, graceful leave, kill -9 timeout."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest

from laminardb.discovery import EventKind, KafkaDiscovery, MemberEvent, make_discovery
from tests._services.kafka import KafkaBroker
from tests._services.procs import kill_proc, repo_env, wait_until

pytestmark = pytest.mark.integration

_TIMEOUT_S = 2.0
_HEARTBEAT_S = 0.3

_MEMBER_SCRIPT = """
import sys, threading
from laminardb.discovery import KafkaDiscovery
d = KafkaDiscovery(bootstrap=sys.argv[1], node_id=sys.argv[2], topic=sys.argv[3],
                   heartbeat_interval=float(sys.argv[4]), member_timeout=float(sys.argv[5]),
                   key="k")
d.start()
print("started", flush=True)
threading.Event().wait()
"""


def _disc(broker: KafkaBroker, node_id: str, topic: str) -> KafkaDiscovery:
    d = make_discovery("kafka", bootstrap=broker.bootstrap, node_id=node_id, topic=topic,
                       address=f"{node_id}:7000", heartbeat_interval=_HEARTBEAT_S,
                       member_timeout=_TIMEOUT_S, key="k")
    assert isinstance(d, KafkaDiscovery)
    return d


def test_join_leave_and_timeout(kafka_broker: KafkaBroker) -> None:
    topic = f"members-{uuid.uuid4().hex[:8]}"
    a, b = _disc(kafka_broker, "a", topic), _disc(kafka_broker, "b", topic)
    events: list[MemberEvent] = []
    a.subscribe(events.append)
    a.start()
    proc = None
    try:
        b.start()
        wait_until(lambda: [m.id for m in a.members()] == ["a", "b"], timeout=10,
                   what="a to see a and b")
        assert [m.id for m in b.members()] == ["a", "b"]
        assert a.members()[1].address == "b:7000"

        # A member in another process, killed with SIGKILL: gone after the timeout.
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEMBER_SCRIPT, kafka_broker.bootstrap, "c", topic,
             str(_HEARTBEAT_S), str(_TIMEOUT_S)],
            env=repo_env(), stdout=subprocess.PIPE, text=True,
        )
        wait_until(lambda: "c" in [m.id for m in a.members()], timeout=30, what="c to join")
        t_kill = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=5)
        wait_until(lambda: "c" not in [m.id for m in a.members()], timeout=_TIMEOUT_S + 5,
                   what="c to time out")
        gone_after = time.monotonic() - t_kill
        assert _TIMEOUT_S - _HEARTBEAT_S <= gone_after < _TIMEOUT_S + 3, gone_after
        kinds_c = [e.kind for e in events if e.member.id == "c"]
        assert kinds_c == [EventKind.JOIN, EventKind.SUSPECT, EventKind.LEAVE]

        # Graceful leave is seen at once, not after the timeout.
        t_stop = time.monotonic()
        b.stop()
        wait_until(lambda: [m.id for m in a.members()] == ["a"], timeout=_TIMEOUT_S,
                   what="b's graceful leave")
        assert time.monotonic() - t_stop < _TIMEOUT_S
    finally:
        if proc is not None:
            kill_proc(proc)
        a.stop()


def test_unauthenticated_heartbeats_are_ignored(kafka_broker: KafkaBroker) -> None:
    import msgpack
    from kafka import KafkaProducer

    topic = f"members-{uuid.uuid4().hex[:8]}"
    keyed = _disc(kafka_broker, "a", topic)
    # Control: a reader without a key accepts the forged heartbeat, so the keyed reader's
    # refusal below is the HMAC at work, not a malformed record.
    keyless = KafkaDiscovery(bootstrap=kafka_broker.bootstrap, node_id="open", topic=topic,
                             heartbeat_interval=_HEARTBEAT_S, member_timeout=_TIMEOUT_S)
    keyed.start()
    keyless.start()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        body = msgpack.packb({"id": "forged", "addr": "", "meta": {}, "ts": time.time(),
                              "state": "alive"})
        for _ in range(5):
            producer.send(topic, key=b"forged", value=body, partition=0)
            producer.flush()
            time.sleep(_HEARTBEAT_S)
        assert "forged" in [m.id for m in keyless.members()]
        assert "forged" not in [m.id for m in keyed.members()]
    finally:
        producer.close()
        keyed.stop()
        keyless.stop()
