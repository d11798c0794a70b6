"""Client inserts that go straight to a reactor actor: the head sees no row (issue 20).

Why: a database head that decodes, converts, logs and ships every inserted row does as much
work per row as all the actors together, so adding actors adds no throughput. Here the rows
take the path Kafka rows take (``kafka_ingest.py``): one actor converts them, logs them and
keeps them (``RemoteRows``), and the head only learns their count and largest event time.

The path of one ``insert()`` (``DirectInserts.insert``):

1. The client asks the head once for the source's *route* (``DatabaseHead.insert_route``):
   the actors that may take inserts, the keyed queries whose rows the actor splits by owner,
   and a token naming the actors and the vnode routing it was made for.
2. It sends the rows to one of those actors, round robin (``stage``, on the actor). The actor
   converts them exactly as the embedded ``insert()`` does (``insert_batch.prepare``), appends
   them to **its own WAL** in the database's directory (``<dir>/actor-wal/<member>``, the
   same ``Wal`` format and ``wal_sync`` mode as the head's), keeps them in Ray's object store
   (whole, and split by owner for each keyed query) and answers with their description.
3. The client hands that description to the head (``DatabaseHead.insert_staged``), which
   checks the token, appends one small record pointing at the actor's WAL record
   (``insert_ref``: member, lsn, rows) to its own WAL and runs the batch through the engine
   as ``RemoteRows``. The insert is durable when ``insert()`` returns: the rows are in the
   actor's WAL, the reference in the head's, and recovery replays the reference by reading
   the actor's WAL (``checkpoint/actor_wals.py``), whether or not that actor still lives.

A stale token (an actor was replaced, or the database rescaled, since the client got its
route) makes the head refuse the batch; the client takes the new route and sends the rows
again — the unreferenced copy in the old actor's WAL is never replayed and goes with the
next checkpoint. Anything unusual goes the old way, through the head, which then answers
exactly as before: rows a source refuses (``on_error``), sources whose rules depend on the
running maximum (``max_future``), changelog and lookup sources, an empty insert, an actor
that cannot be reached, and actors on another machine when the database keeps its files in
the Ray session's directory of the head's node (they could not write there). Text inserts
(``insert_json``/``insert_csv``) are parsed on the actor, as the embedded engine parses them.

Why a WAL per actor rather than the client's own log: a client is often a notebook or a
short script, which may exit as soon as ``insert()`` returns; the rows must outlive it.

Small inserts go through the head as well (``config={"direct_insert_min_bytes": …}``, 16 KiB
by default: about a thousand rows): for them the head's work per row costs less than the one
more call this path makes, and a one-row insert keeps its latency. Turned off with
``config={"direct_inserts": False}``.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

log = logging.getLogger(__name__)

_ACTOR_SEGMENT_BYTES = 16 << 20  # smaller than the head's: a checkpoint frees an actor's WAL sooner
_STAGE_TIMEOUT_S = 120.0
_STALE_RETRIES = 3


# ---------------------------------------------------------------------- on the actor
class ActorInsertLog:
    """An actor's own WAL of the rows clients inserted through it."""

    def __init__(self, directory: str, sync: str) -> None:
        from laminardb.checkpoint.wal import Wal

        self.wal = Wal(directory, sync=sync, segment_bytes=_ACTOR_SEGMENT_BYTES)  # type: ignore[arg-type]

    def append(self, source: str, ipc: Any) -> int:
        lsn = self.wal.append("insert", {"s": source}, ipc)
        if self.wal.sync_mode == "always":
            self.wal.sync(lsn)
        return lsn

    def close(self) -> None:
        self.wal.close()


def stage(actor, source: str, payload: dict, routed_queries: list[str]) -> dict:
    """``ReactorActorImpl.stage_insert``: convert, log and keep one insert's rows here.
    Returns their description (``remote_rows.RemoteRows``, plus ``lsn``), or ``{"fallback":
    why, "permanent": bool}`` when this insert must go through the head instead."""
    import numpy as np

    from laminardb.cluster.wire import decode_rows, from_ipc, to_ipc_array
    from laminardb.engine.insert_batch import prepare

    try:
        node = actor.conn.engine.reactor._node(source)
    except Exception as exc:  # noqa: BLE001 - the head raises the error the user must see
        return {"fallback": f"{type(exc).__name__}", "permanent": False}
    why = _not_direct(node)
    if why is not None:
        return {"fallback": why, "permanent": True}
    with actor._busy():
        strict = "text" not in payload
        if not strict:  # insert_json / insert_csv: parsed here, not in the head
            parsed = _parse_text(payload, node)
            if parsed.rejected.num_rows:
                return {"fallback": "text that does not parse", "permanent": False}
            data = parsed.data
        else:  # Arrow rows as one RecordBatch: prepare's fast path takes it as is when its types fit
            data = from_ipc(payload["ipc"]) if "ipc" in payload else decode_rows(payload)
        p = prepare(data, node.schema, node.not_null, source=node.name, rules=node.rules, strict_text=strict)
        if p.rejected or not p.batch.num_rows:
            return {"fallback": "rows refused" if p.rejected else "no rows", "permanent": False}
        # logged and kept as the same bytes: the client's own when nothing was converted
        ipc = np.asarray(payload["ipc"]) if p.batch is data else to_ipc_array(p.batch)
        lsn = actor.insert_log.append(node.name, ipc) if actor.insert_log is not None else None
    desc = actor._keep_rows(node.name, p.batch, routed_queries, {}, whole=ipc, read=False)
    return {**desc, "lsn": lsn, "actor": actor.index}


def _parse_text(payload: dict, node):
    from laminardb.engine.text_rows import parse_csv_text, parse_json_text

    if payload["text"] == "json":
        return parse_json_text(payload["data"], source=node.name)
    return parse_csv_text(payload["data"], node.schema, source=node.name)


def _not_direct(node) -> str | None:
    if node.kind != "source" or node.changelog or node.lookup is not None:
        return f"{node.name} is not a plain source"
    if node.rules is not None and node.rules.max_future_ms is not None:
        return f"{node.name} refuses rows by the running maximum (max_future)"
    return None


# ---------------------------------------------------------------------- on the client
def _size(payload: dict) -> int:
    """Bytes of an insert's payload (Arrow IPC, msgpack rows or text)."""
    data = payload.get("ipc", payload.get("msgpack", payload.get("data")))
    if isinstance(data, list | tuple):
        return sum(len(x) for x in data)
    return len(data) if data is not None else 0


class DirectInserts:
    """A ``RemoteConnection``'s inserts through the actors (see the module docstring)."""

    #: the default of config ``direct_insert_min_bytes``: smaller inserts go through the head
    MIN_BYTES = 16 << 10

    def __init__(self, conn) -> None:
        self.conn = conn
        self.routes: dict[str, dict] = {}  # source → the head's last route for it
        self.head_only: set[str] = set()  # sources whose inserts always go through the head
        self._turn = itertools.count()
        self.staged = 0  # inserts that went through an actor (tests, metrics)

    def insert(self, source: str, payload: dict, tag: list) -> dict | None:
        """The head's answer to an insert sent through an actor, or None: send it to the head."""
        import numpy as np
        import ray
        from ray.exceptions import RayError

        if source in self.head_only:
            return None
        route = self._route(source)
        if _size(payload) < route["min_bytes"]:
            return None  # a few rows: one call to the head costs less than a call to an actor and one to the head
        if "ipc" in payload:  # out of band: Ray hands the actor the bytes without a copy
            payload = {"ipc": np.frombuffer(payload["ipc"], dtype=np.uint8)}
        for _ in range(_STALE_RETRIES):
            if not route["actors"]:
                self.head_only.add(source)  # no actor may take inserts (files only the head reaches)
                return None
            index, actor = route["actors"][next(self._turn) % len(route["actors"])]
            try:
                desc = ray.get(actor.stage_insert.remote(source, payload, route["routed"]),
                               timeout=_STAGE_TIMEOUT_S)
            except (RayError, TimeoutError) as exc:  # lost or stuck: the head's path recovers it
                log.info("database %s: direct insert to actor %d failed (%s); through the head",
                         self.conn.database, index, type(exc).__name__)
                self.routes.pop(source, None)
                return None
            if "fallback" in desc:
                if desc.get("permanent"):
                    self.head_only.add(source)
                return None
            answer = self.conn._call("insert_staged", source, route["token"], desc, tag)
            if not answer.get("stale"):
                self.staged += 1
                if answer.get("routed") is not None:
                    route["routed"] = answer["routed"]
                return answer
            self.routes.pop(source, None)  # actors replaced or rescaled: a new route, the rows again
            route = self._route(source)
        return None

    def _route(self, source: str) -> dict:
        route = self.routes.get(source)
        if route is None:
            route = self.routes[source] = self.conn._call("insert_route", source)
        return route
