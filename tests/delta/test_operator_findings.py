"""The operator findings of issue 20 (item 5), each tried as an operator would, against real
processes: real Ray, real reactor actors, a real Tansu broker, a real Spark coordinator."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401
from tests._services.procs import wait_until
from tests.delta.workload import DDL, STREAMS, assert_exactly_once, batch

pytestmark = pytest.mark.integration

BATCHES = 30


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# -- 6: a paused actor is replaced within actor_lost_after plus one recovery ----------------


def test_a_paused_actor_is_replaced_within_actor_lost_after(database):
    """SIGSTOP one actor between two inserts, with the default 30 s ``actor_call_timeout``:
    its heartbeat goes silent, and after ``actor_lost_after`` (3 s) it is killed and replaced
    — the next insert does not wait out the call timeout. Output stays exactly once."""
    lost_after = 3.0
    db = database(checkpoint_interval="off", actor_lost_after=lost_after)
    db.execute(DDL)
    subs = {s: db.subscribe_stream(s) for s in STREAMS}
    paused: dict[str, float] = {}
    try:
        for i in range(BATCHES):
            db.insert("t", batch(i))
            if i == 8:
                db.checkpoint()
            if i == 12:
                paused["pid"] = db.metrics()["cluster"]["members"][1]["pid"]
                paused["at"] = time.time()
                os.kill(paused["pid"], signal.SIGSTOP)
        db.finish()
    finally:
        if "pid" in paused:
            try:
                os.kill(paused["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    got = {s: subs[s].to_arrow() for s in STREAMS}
    assert_exactly_once(got, db.query("SELECT * FROM per_key_total").to_arrow(), BATCHES)
    (recovery,) = db.metrics()["database"]["recoveries"]
    # replaced = recovery finished; its "seconds" are the recovery itself (new actor included)
    took = recovery["at"] - paused["at"]
    slack = 3.0  # watchdog ticks (0.5 s), the kill reaching Ray, a loaded 2-core machine
    assert took <= lost_after + recovery["seconds"] + slack, (took, recovery)
    # the insert waiting on the killed actor recovers (ActorLostError), or the watchdog does
    assert recovery["cause"] == "ActorLostError" or recovery["cause"].startswith("unresponsive"), recovery
    wait_until(lambda: not _alive(paused["pid"]), timeout=20, what="the paused actor to be gone")
