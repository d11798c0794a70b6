"""Heartbeats of one pool's reactor actors: tells a paused actor from a busy one.

Why: a data call that outruns ``actor_call_timeout`` only says an actor is *slow* — a long
batch looks the same as a SIGSTOPped or partitioned process. The actor answers
``heartbeat()`` on a thread of its own (a Ray concurrency group, see ``reactor_actor.py``),
so a busy actor answers at once and only a process that runs nothing stays silent. The
head's watchdog ticks this every ``_WATCH_S``; an actor silent for ``actor_lost_after``
seconds is given up (``give_up``: killed, so every call waiting on it fails at once, and
recovered).
"""

from __future__ import annotations

import time
from typing import Any


class Heartbeats:
    """One heartbeat in flight per actor of ``pool``; ``silent()`` names the actors whose
    last answer is older than ``lost_after`` seconds, and ``dead`` the ones whose heartbeat
    Ray failed because the actor died — so the watchdog needs no read of Ray's actor table."""

    def __init__(self, pool: Any, lost_after: float) -> None:
        self.pool = pool
        self.lost_after = lost_after
        now = time.monotonic()
        self.last_answer = dict.fromkeys(range(pool.n_actors), now)
        self._pending: dict[int, Any] = {}
        self.dead: set[int] = set()

    def silent(self) -> dict[int, float]:
        """``{actor index: seconds silent}`` for the live actors silent too long; sends the
        next heartbeat to each actor that answered the last one."""
        import ray

        from laminardb.cluster.actor_pool import _is_actor_death

        pool, now = self.pool, time.monotonic()
        out: dict[int, float] = {}
        for i, actor in enumerate(pool.actors):
            if i in pool.dead or i in self.dead or actor is None:
                continue
            pending = self._pending.get(i)
            if pending is not None:
                done, _ = ray.wait([pending], timeout=0)
                if not done:
                    quiet = now - self.last_answer[i]
                    if quiet > self.lost_after:
                        out[i] = quiet
                    continue
                try:
                    ray.get(pending, timeout=0)
                except Exception as e:  # noqa: BLE001 - only a death matters; anything else: ask again
                    if _is_actor_death(e):
                        self.dead.add(i)
                        continue
                self.last_answer[i] = now
            self._pending[i] = actor.heartbeat.remote()
        return out


def give_up(pool: Any, silent: dict[int, float]) -> str:
    """Kill the silent actors of ``pool`` (a paused process cannot answer, but Ray's kill
    fails every call waiting on it at once — a source's poll, a checkpoint's barrier — so
    the callers recover instead of waiting out their timeouts); returns the cause a
    recovery records."""
    import ray

    names = []
    for i, quiet in sorted(silent.items()):
        info = pool.info[i] or {}
        names.append(f"actor {i} (pid {info.get('pid')}) silent for {quiet:.1f} s")
        pool.dead.setdefault(i, "ActorUnresponsive")  # killed now: Ray reports it dead soon
        try:
            ray.kill(pool.actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone: the recovery replaces it all the same
            pass
    return "unresponsive: " + ", ".join(names)
