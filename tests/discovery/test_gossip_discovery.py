"""Gossip (SWIM) with real member processes on loopback UDP."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._services.gossip import GossipGroup, start_gossip_members, start_member
from tests._services.procs import wait_until

pytestmark = pytest.mark.integration

_N = 10
_SUSPICION_S = 3.0


@pytest.fixture
def group(tmp_path: Path) -> Iterator[GossipGroup]:
    g = start_gossip_members(tmp_path, _N, suspicion_timeout=_SUSPICION_S)
    try:
        yield g
    finally:
        g.stop()


def test_join_death_and_pause(group: GossipGroup) -> None:
    everyone = sorted(m.node_id for m in group.members)
    wait_until(lambda: all(group.view(i) == everyone for i in range(_N)), timeout=30,
               interval=0.2, what="all 10 members to see all 10")

    # A member paused for less than the suspicion timeout is not declared dead.
    paused = 3
    group.signal(paused, signal.SIGSTOP)
    time.sleep(_SUSPICION_S / 3)
    group.signal(paused, signal.SIGCONT)

    # kill -9 another: everyone else declares it dead.
    dead = 5
    t_kill = time.monotonic()
    group.signal(dead, signal.SIGKILL)
    survivors = [i for i in range(_N) if i != dead]
    wait_until(lambda: all(group.events(i, "leave", f"g{dead}") for i in survivors),
               timeout=_SUSPICION_S + 10, interval=0.2, what="g5 declared dead by everyone")
    detect = max(group.events(i, "leave", f"g{dead}")[0]["t"] for i in survivors) - t_kill
    assert detect < _SUSPICION_S + 5, detect

    rest = sorted(f"g{i}" for i in survivors)
    wait_until(lambda: all(group.view(i) == rest for i in survivors), timeout=10, interval=0.2,
               what="views without g5")
    time.sleep(1.0)
    for i in survivors:
        assert group.events(i, "leave", f"g{paused}") == [], f"g{i} declared the paused g3 dead"
        assert f"g{paused}" in group.view(i)


def test_wrong_key_cannot_join(tmp_path: Path) -> None:
    good = start_gossip_members(tmp_path, 2, key="right")
    try:
        wait_until(lambda: good.view(0) == ["g0", "g1"] and good.view(1) == ["g0", "g1"],
                   timeout=20, what="two members")
        # An outsider seeded with the real members but holding the wrong key.
        intruder = start_member(tmp_path, "intruder", key="wrong",
                                seeds=",".join(m.bind for m in good.members))
        outsiders = GossipGroup([intruder], "wrong")
        try:
            wait_until(lambda: outsiders.view(0) == ["intruder"], timeout=20,
                       what="the intruder to start")
            time.sleep(3.0)  # > 10 protocol periods and one full-sync interval
            assert good.view(0) == ["g0", "g1"] and good.view(1) == ["g0", "g1"]
            assert outsiders.view(0) == ["intruder"]  # it could not read their replies either
        finally:
            outsiders.stop()
    finally:
        good.stop()
