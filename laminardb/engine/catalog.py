"""The catalog of live objects, and scripts that apply all of their statements or none.

Entry points: ``record(catalog, stmt, text, existed)`` keeps ``Reactor.catalog`` — each live
object's creating DDL (after ``${VAR}`` substitution), in creation order — in step with a
statement that succeeded; durable databases checkpoint it and recover from it.
``Engine.execute`` rehearses a multi-statement script first on a scratch engine rebuilt from
that DDL (``Engine._rehearse``: no connectors, no sink files), so a script that would fail
half-way fails before it changes anything. ``undo(engine, created)`` drops what a script had
created when a statement fails for a reason the rehearsal could not see (a broker down).
"""

from __future__ import annotations

from laminardb.sql import ddl

CATALOG_KINDS = (ddl.CreateSource, ddl.CreateStream, ddl.CreateSink, ddl.Drop)


def record(catalog: dict[str, str], stmt, text: str, existed: bool) -> bool:
    """Update ``catalog`` for a statement that succeeded; True when it changed the catalog."""
    if not isinstance(stmt, CATALOG_KINDS):
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


def undo(engine, created: list[tuple[str, str]]) -> None:
    """Drop, newest first, the objects (name, kind) a failed script created."""
    r = engine.reactor
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
