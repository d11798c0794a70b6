"""The warning for connector sources that were declared but never started.

Why: ``execute()`` of a Flink script (``CREATE TABLE … WITH ('connector' = 'filesystem')`` and
``INSERT INTO …``) only declares its pipelines; its polled sources read nothing until
``start()``. A script run with ``execute()`` and ``close()`` (or ``finish()``) alone used to
write a header-only file without a word. We do not start them behind the user's back at
close — a source may be unbounded (Kafka), and a durable database opened only to look at its
catalog must not start reading — so ``close()``/``finish()`` say what was left unread and what
to call instead.

Entry point: ``unstarted_sources_message(reactor, when)`` → the text, or None.
"""

from __future__ import annotations

from typing import Any

__all__ = ["unstarted_sources_message"]


def unstarted_sources_message(reactor: Any, when: str) -> str | None:
    """What ``when`` (``"close()"``/``"finish()"``) leaves unread: connector sources that feed
    a query or sink and were never started on this connection; None when there are none."""
    idle = []
    with reactor.lock:
        for node in reactor.nodes.values():
            if node.kind != "source" or node.connector is None or not node.downstream:
                continue
            fed = sorted({d.removesuffix("__query") for d in node.downstream})
            kind = node.source_connector or type(node.connector).__name__
            idle.append(f"{node.name!r} ({kind}, feeding {', '.join(fed)})")
    if not idle:
        return None
    return (f"{when} without start(): the connector sources {'; '.join(idle)} were never started, so "
            "nothing was read from them and what they feed got no rows. Call db.start() after "
            "execute(), then db.flush() to wait for bounded sources (files, datagen with "
            "'number-of-rows'), then close() (in `laminardb sql`: .start)")
