"""The reactor actors of one engine and how to call them (``ActorPool``, formerly ``Cluster``).

Why a class of its own: starting actors (with retries), keeping their Raft-planned ownership,
telling a dead actor (Ray says so) from a slow one (it did not answer in time), and fanning one
call out to all of them are the same for every use of the pool — the backend that places
operators on it, the database head that recovers it, and the autoscaler that resizes it.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from laminardb.cluster.exceptions import ActorLostError, ActorTimeoutError, ClusterStartError
from laminardb.cluster.ownership import RaftConfig, acquire_routing

NAMESPACE = "laminardb"  # the Ray namespace of laminardb's named actors (heads, reactors)
_RAFT_STATUS_TIMEOUT_S = 1.0  # one voter round trip on loopback is ~1 ms; past this, "not available"

_START_ATTEMPTS = 3  # actor starts cancelled by a raylet still cleaning up are retried
_START_TIMEOUT_S = 300.0  # starting actors (numba kernels load, Raft commits): generous, but bounded
# config "actor_call_timeout": how long a data call (a batch, a watermark, a read) waits for a
# live actor before ActorTimeoutError — long enough for a GC pause or a slow Kafka poll on a
# loaded machine, short enough that a paused actor does not hang the client for minutes
_CALL_TIMEOUT_S = 30.0
# how long metrics() waits for each actor's own counters: metrics must answer even while an
# actor is paused (it is then reported "slow", with the counters it last gave)
_METRICS_TIMEOUT_S = 1.0
_PROBE_TIMEOUT_S = 0.6  # metrics(): at most this for the actors' counters (the whole read: < 2 s)


class ActorPool:
    """The actors of one connection and how to call them."""

    def __init__(self, n_actors: int, vnodes: int, raft: RaftConfig | None = None, *,
                 call_timeout: float = _CALL_TIMEOUT_S, ownership_source: str | None = None,
                 survivors: ActorPool | None = None, detached_prefix: str | None = None) -> None:
        """``survivors``: the cluster of an engine given up after an actor loss (or the actors a
        dead head left, ``adopt``) — its live actors are kept (recovery then only starts the
        replacements); it must not be used again. ``detached_prefix``: new actors are named
        ``prefix + member`` and outlive the process that starts them, so a restarted database
        head takes them over (``adopt``) instead of waiting for new processes; whoever set it
        stops them (``shutdown``, ``kill_named``)."""
        import ray

        from laminardb.cluster.reactor_actor import actor_class

        self.n_actors = n_actors
        self.detached_prefix = detached_prefix
        self.call_timeout = call_timeout
        # actor index → why: only what Ray reported (RayActorError on a result, or the GCS
        # says DEAD) — never inferred from a slow answer
        self.dead: dict[int, str] = {}
        self.slow: set[int] = set()  # live actors whose last call outran its timeout
        # probe(): per (method, actor) the call still unanswered (a paused actor is asked once,
        # not once per read), and per actor when it last answered and with what
        self._probing: dict[tuple[str, int], Any] = {}
        self.answered: dict[str, dict[int, tuple[float, Any]]] = {}
        tag = uuid.uuid4().hex[:8]  # several connections may share one control plane
        self.members = [f"reactor-{tag}-{i}" for i in range(n_actors)]
        if survivors is None:
            self.actors, self.info = self._start_actors(actor_class(), n_actors, names=self.ray_names())
        else:
            self._take_survivors(survivors, actor_class())
        addresses = [f"{i['node_id'][:12]}/pid{i['pid']}/core{i['core']}" for i in self.info]
        try:
            extra = {} if ownership_source is None else {"source": ownership_source}
            self.ownership = acquire_routing(self.members, vnodes, raft, addresses, **extra)
            self.routing = self.ownership.routing
            ray.get([a.set_ownership.remote(self.routing.owner.tobytes(), self.ownership.epochs.tobytes(),
                                            n_actors) for a in self.actors], timeout=_START_TIMEOUT_S)
        except BaseException:
            # an actor lost while starting (killed during a rescale): stop the others now, or
            # their CPUs stay taken while the error's traceback keeps their handles alive
            self.shutdown()
            raise

    def ray_names(self) -> list[str] | None:
        """The Ray names of the actors (``detached_prefix`` + member), or None: anonymous."""
        if self.detached_prefix is None:
            return None
        return [self.detached_prefix + m for m in self.members]

    @classmethod
    def adopt(cls, detached_prefix: str, members: list[str]) -> ActorPool:
        """The named actors a dead database head left (its pool's ``detached_prefix`` and
        members), as the ``survivors`` of the restarted head's first pool: those still alive
        are kept, the places of the others get new actors. Nothing else of it is usable."""
        import ray

        pool = cls.__new__(cls)
        pool.n_actors, pool.call_timeout, pool.ownership = len(members), _CALL_TIMEOUT_S, None
        pool.detached_prefix, pool.members = detached_prefix, list(members)
        pool.dead, pool.slow, pool._probing, pool.answered = {}, set(), {}, {}
        pool.actors, pool.info = [], []
        for i, name in enumerate(pool.ray_names() or []):
            try:
                pool.actors.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:
                pool.actors.append(None)
                pool.dead[i] = "gone with the head"
            pool.info.append(None)
        return pool

    @staticmethod
    def _start_actors(cls, n_actors: int, indexes: list[int] | None = None,
                      names: list[str] | None = None):
        """Start the actors (``indexes``: only those places; ``names``: every place's Ray
        name, detached); a start the raylet cancelled (it happens while another Ray session
        on the machine is still shutting down) is retried, a bounded number of times."""
        import ray
        from ray.exceptions import ActorDiedError

        indexes = list(range(n_actors)) if indexes is None else indexes
        for attempt in range(_START_ATTEMPTS):
            if names is None:
                actors = [cls.remote(i, n_actors) for i in indexes]
            else:  # a retry after a cancelled start reuses the names of the killed actors
                actors = [cls.options(name=names[i], namespace=NAMESPACE, lifetime="detached",
                                      get_if_exists=False).remote(i, n_actors) for i in indexes]
            try:
                return actors, ray.get([a.ready.remote() for a in actors], timeout=_START_TIMEOUT_S)
            except ActorDiedError:
                for a in actors:
                    ray.kill(a)
                if names is not None:  # the retry reuses the names: wait (bounded) until they are free
                    _await_names_free([names[i] for i in indexes])
                if attempt == _START_ATTEMPTS - 1:
                    raise ClusterStartError(
                        f"the {n_actors} reactor actors died before starting {_START_ATTEMPTS} times; "
                        "check `ray status` for free CPUs and the raylet logs"
                    ) from None
        raise AssertionError("unreachable")

    def _take_survivors(self, old: ActorPool, cls) -> None:
        """Keep ``old``'s actors that answer now; start new ones in the places of the others
        (a lost actor's member leaves Raft, so its vnodes' epochs rise and it is fenced)."""
        import ray

        keep = [i for i in range(min(self.n_actors, old.n_actors))
                if i not in old.dead and i not in old.slow and not _gcs_says_dead(old.actors[i])]
        answers: dict[int, dict] = {}
        if keep:
            pings = [old.actors[i].ready.remote() for i in keep]
            done, _ = ray.wait(pings, num_returns=len(pings), timeout=_METRICS_TIMEOUT_S * 5)
            done_ids = {f.hex() for f in done}
            for i, f in zip(keep, pings, strict=True):
                if f.hex() in done_ids:
                    try:
                        answers[i] = ray.get(f, timeout=0)
                    except Exception:  # noqa: BLE001 - died after answering ready(): replaced
                        pass
            keep = [i for i in keep if i in answers]
        lost = [i for i in range(self.n_actors) if i not in keep]
        # scale-in: the actors beyond the new count go; lost ones are replaced
        old.release_members([i for i in range(old.n_actors) if i not in keep], kill=True)
        self.actors = [old.actors[i] if i < old.n_actors else None for i in range(self.n_actors)]
        self.info = [answers.get(i) for i in range(self.n_actors)]
        for i in keep:
            self.members[i] = old.members[i]
        if lost:
            fresh, info = self._start_actors(cls, self.n_actors, lost, names=self.ray_names())
            for i, a, inf in zip(lost, fresh, info, strict=True):
                self.actors[i], self.info[i] = a, inf
        if old.ownership is not None and old.ownership.raft is not None:
            old.ownership.raft.close()

    def release_members(self, indexes: list[int], *, kill: bool) -> None:
        """Deregister these actors in Raft (their vnodes' epochs rise) and kill them."""
        import ray

        raft = self.ownership.raft if self.ownership is not None else None
        for i in indexes:
            if raft is not None:
                try:
                    raft.deregister_node(self.members[i])
                except Exception:  # noqa: BLE001 - the voters may be electing; the epochs rise on the next plan
                    pass
            if kill:
                try:
                    ray.kill(self.actors[i])
                except Exception:  # noqa: BLE001 - already gone
                    pass

    def single_owner(self) -> int:
        return int(self.routing.owner[0])

    def call_each(self, targets: list[int], method: str, *args) -> list[Any]:
        return self.gather(targets, self.submit(targets, method, *args), method)

    def submit(self, targets: list[int], method: str, *args) -> list[Any]:
        """Start ``method`` on each target actor; Ray runs one caller's calls to an actor in
        submission order, so later calls see the effects of earlier ones."""
        return [getattr(self.actors[i], method).remote(*args) for i in targets]

    def gather(self, targets: list[int], futures: list[Any], method: str, *,
               timeout: float | None = None) -> list[Any]:
        """The results of ``submit``. An actor Ray reports dead becomes ``ActorLostError``;
        a live actor that does not answer within ``timeout`` (default ``call_timeout``)
        becomes ``ActorTimeoutError`` and is marked slow — a slow call never marks it dead."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            results = ray.get(futures, timeout=self.call_timeout if timeout is None else timeout)
        except GetTimeoutError as e:
            waiting = self._classify(targets, futures)
            self._raise_if_dead(targets, method, e)
            self.slow.update(waiting)
            names = ", ".join(f"actor {i} (pid {self.info[i]['pid']})" for i in waiting) or "an actor"
            msg = (f"{names} did not answer {method}() within {self.call_timeout:g} s but is alive "
                   "(paused or overloaded?); the call may be retried — raise config "
                   "'actor_call_timeout' if the actors are just busy")
            raise ActorTimeoutError(msg) from e
        except Exception as e:
            if not _is_actor_death(e):
                raise
            self._classify(targets, futures)
            self._mark_dead_by_id(e)
            self._raise_if_dead(targets, method, e)
            raise ActorLostError(f"an actor died during {method}(); reconnect to start fresh actors") from e
        self.slow.difference_update(targets)
        return results

    def _classify(self, targets: list[int], futures: list[Any]) -> list[int]:
        """Mark the actors whose finished call failed with an actor death (or that the GCS
        reports dead) as dead; return the live ones still running their call."""
        import ray

        waiting = []
        for i, f in zip(targets, futures, strict=True):
            done, _ = ray.wait([f], timeout=0)
            if done:
                try:
                    ray.get(f, timeout=0)
                except Exception as inner:  # noqa: BLE001 - classify which actor failed
                    if _is_actor_death(inner):
                        self.dead[i] = type(inner).__name__
                continue
            if _gcs_says_dead(self.actors[i]):
                self.dead[i] = "ActorDiedError"
            elif i not in self.dead:
                waiting.append(i)
        return waiting

    def _mark_dead_by_id(self, error: BaseException) -> None:
        actor_id = getattr(error, "actor_id", None)
        for i, a in enumerate(self.actors):
            if actor_id and a._actor_id.hex() == actor_id:
                self.dead.setdefault(i, type(error).__name__)

    def _raise_if_dead(self, targets: list[int], method: str, cause: BaseException | None = None) -> None:
        if not self.dead:
            return
        lost = ", ".join(f"actor {i} (pid {self.info[i]['pid']})" for i in sorted(self.dead))
        msg = (f"{lost} died (during or before {method}()); its partitions' state is lost "
               "until checkpoint recovery is available — reconnect to start fresh actors")
        raise ActorLostError(msg) from cause

    def check_alive(self, method: str) -> None:
        """Raise ``ActorLostError`` if any actor of this connection has died."""
        self._raise_if_dead([], method)

    def probe(self, method: str = "metrics", *args, timeout: float = _METRICS_TIMEOUT_S,
              record: bool = True) -> list[Any]:
        """``method(*args)`` on every live actor, waiting at most ``timeout``: a result per actor,
        None for a dead one or one that did not answer in time (then marked slow). With
        ``record`` False nothing is marked (the autoscaler's samples: a busy actor is not sick).
        An actor already slow is not waited for, nor asked again while its last call of
        ``method`` (argument-less) is unanswered (once a data call clears it, that call is
        waited for again); ``answered[method]`` keeps each actor's last
        answer and its time (what ``metrics()`` shows of an actor that does not answer)."""
        import ray

        alive = [i for i in range(self.n_actors) if i not in self.dead]
        futures, waited = [], []
        for i in alive:
            pending = self._probing.get((method, i)) if not args else None
            if pending is None:  # else the call still out (or its answer, come in since)
                pending = getattr(self.actors[i], method).remote(*args)
                waited.append(pending)
                if not args:
                    self._probing[(method, i)] = pending
            elif i not in self.slow:  # answered a data call since: its old probe is next in line
                waited.append(pending)
            futures.append(pending)
        ray.wait(waited, num_returns=len(waited), timeout=timeout)
        done, _ = ray.wait(futures, num_returns=len(futures), timeout=0)
        done_ids = {f.hex() for f in done}
        out: list[Any] = [None] * self.n_actors
        last = self.answered.setdefault(method, {})
        for i, f in zip(alive, futures, strict=True):
            if f.hex() not in done_ids:
                if not record:
                    continue
                self.slow.add(i)
                if _gcs_says_dead(self.actors[i]):
                    self.dead[i] = "ActorDiedError"
                continue
            self._probing.pop((method, i), None)
            try:
                out[i] = ray.get(f, timeout=0)
                last[i] = (time.monotonic(), out[i])
                if record:
                    self.slow.discard(i)
            except Exception as e:  # noqa: BLE001 - classify
                if not _is_actor_death(e):
                    raise
                if record:
                    self.dead[i] = type(e).__name__
        return out

    @staticmethod
    def ready(futures: list[Any]) -> bool:
        import ray

        done, _ = ray.wait(futures, num_returns=len(futures), timeout=0)
        return len(done) == len(futures)

    def broadcast(self, method: str, *args) -> list[Any]:
        return self.call_each(list(range(self.n_actors)), method, *args)

    def status(self, *, raft: bool = True) -> dict:
        """``raft`` False: leave out the leader and term (asking a voter may take up to
        _RAFT_STATUS_TIMEOUT_S)."""
        return {
            "actors": self.n_actors,
            "dead": dict(self.dead),
            "slow": sorted(self.slow - set(self.dead)),
            "raft": self.ownership.raft is not None,
            **(self._raft_view() if raft else {}),
            "members": [dict(i, member=self.members[i["index"]], state=self._state(i["index"]),
                             vnodes=int((self.routing.owner == i["index"]).sum()),
                             max_epoch=int(self.ownership.epochs[self.routing.owner == i["index"]].max(initial=0)))
                        for i in self.info],
        }

    def _raft_view(self) -> dict:
        """The Raft leader and term as a voter reports them; None when no voter answers within
        _RAFT_STATUS_TIMEOUT_S (metrics must never wait on a sick control plane)."""
        client = self.ownership.raft
        if client is None:
            return {}
        got: dict = {}

        def ask() -> None:
            try:
                got.update(client.status()["raft"])
            except Exception:  # noqa: BLE001 - shown as "not available"
                pass

        t = threading.Thread(target=ask, name="laminardb-raft-status", daemon=True)
        t.start()
        t.join(_RAFT_STATUS_TIMEOUT_S)
        return {"raft_leader": got.get("leader"), "raft_term": got.get("term")}

    def _state(self, i: int) -> str:
        return "dead" if i in self.dead else "slow" if i in self.slow else "ok"

    def shutdown(self) -> None:
        import ray

        ownership = getattr(self, "ownership", None)
        if ownership is not None:
            try:
                ownership.release()
            except Exception:  # noqa: BLE001 - the voters may be gone; the actors still stop
                pass
        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass




def _await_names_free(names: list[str], timeout_s: float = 10.0) -> None:
    """Until no live actor holds any of ``names`` (``ray.kill`` frees a name asynchronously)."""
    import ray

    deadline = time.monotonic() + timeout_s
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.05)


def kill_named(prefix: str, *, keep: frozenset[str] = frozenset()) -> int:
    """Kill every detached reactor actor named ``prefix…`` but those in ``keep``: what a
    dropped database, or a head restarted between starting a pool and recording it, leaves.
    Returns how many were killed."""
    import ray
    from ray.util import list_named_actors

    killed = 0
    for entry in list_named_actors(all_namespaces=True):
        name = entry.get("name", "")
        if entry.get("namespace") != NAMESPACE or not name.startswith(prefix) or name in keep:
            continue
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            killed += 1
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    return killed


def _is_actor_death(error: BaseException) -> bool:
    """Ray's word that an actor is gone (``ActorUnavailableError`` is a restart or a network
    blip, not a death)."""
    from ray.exceptions import ActorUnavailableError, RayActorError

    return isinstance(error, RayActorError) and not isinstance(error, ActorUnavailableError)


def _gcs_says_dead(actor: Any) -> bool:
    """Whether Ray's control store records ``actor`` as DEAD (no call to the actor itself,
    so a paused actor is reported alive). The GCS actor table is read through Ray's private
    state module: the public ``ray.util.state`` needs the dashboard, which clusters may run
    without. Unknown answers count as alive."""
    try:
        from ray._private import state

        info = state.actors(actor_id=actor._actor_id.hex())
    except Exception:  # noqa: BLE001 - an older/newer Ray: no probe, trust the call results
        return False
    return isinstance(info, dict) and info.get("State") == "DEAD"
