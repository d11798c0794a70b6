"""The catalog of live objects, and scripts that apply all of their statements or none.

Entry points: ``record(catalog, stmt, text, existed)`` keeps ``Reactor.catalog`` — each live
object's creating DDL (after ``${VAR}`` substitution), in creation order — in step with a
statement that succeeded; durable databases checkpoint it and recover from it.
``rehearse(conn, statements)`` runs a multi-statement script first against a scratch
catalog rebuilt from that DDL (no connectors, no sink files), so a script that would fail
half-way fails before it changes anything. ``undo(conn, created)`` drops what a script had
created when a statement fails for a reason the rehearsal could not see (a broker down).
"""

from __future__ import annotations

from laminardb.sql import ddl

_CATALOG_KINDS = (ddl.CreateSource, ddl.CreateStream, ddl.CreateSink, ddl.Drop)


def record(catalog: dict[str, str], stmt, text: str, existed: bool) -> bool:
    """Update ``catalog`` for a statement that succeeded; True when it changed the catalog."""
    if not isinstance(stmt, _CATALOG_KINDS):
        return False
    if isinstance(stmt, ddl.Drop):
        if not existed:
            return False
        catalog.pop(stmt.name, None)
        return True
    if existed and not getattr(stmt, "or_replace", False):
        return False  # IF NOT EXISTS over an existing object: nothing changed
    catalog.pop(stmt.name, None)
    catalog[stmt.name] = text
    return True


class _NullSink:
    """Stands in for a sink during a rehearsal: no files, no brokers."""

    def write(self, batch) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def rehearse(conn, statements: list[tuple[object, str]]) -> None:
    """Raise what applying ``statements`` would raise, without touching ``conn``."""
    from laminardb.connection import Connection
    from laminardb.engine.reactor import Reactor

    shadow = Connection.__new__(Connection)
    shadow.path, shadow.config, shadow.variables = ":memory:", conn.config, conn.variables
    shadow._reactor = Reactor()
    shadow._reactor.connectors_enabled = False
    shadow._durable = None
    shadow._make_sink = lambda stmt, schema: _NullSink()
    for text in conn._reactor.catalog.values():
        for stmt, t in ddl.parse_script_with_text(text, {}):
            shadow._apply_ddl(stmt, t)
    for stmt, text in statements:
        if isinstance(stmt, _CATALOG_KINDS):
            shadow._apply_ddl(stmt, text)


def undo(conn, created: list[tuple[str, str]]) -> None:
    """Drop, newest first, the objects (name, kind) a failed script created."""
    r = conn._reactor
    kinds = {"source": "SOURCE", "stream": "STREAM", "view": "MATERIALIZED VIEW", "sink": "SINK"}
    for name, _ in reversed(created):
        node = r.nodes.get(name)
        if node is None:
            continue
        r.drop(ddl.Drop(kinds.get(node.kind, "STREAM"), name, if_exists=True))
        r.catalog.pop(name, None)
        hidden = f"{name}__query"
        if hidden in r.nodes and not r.nodes[hidden].downstream:
            r.drop(ddl.Drop("STREAM", hidden, if_exists=True))
