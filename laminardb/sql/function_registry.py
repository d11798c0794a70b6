"""The one registry of SQL scalar functions: the built-ins and the Python UDFs of the connection
planning now.

Entry points: ``register_builtins(source, names)`` (each module that compiles built-in functions
— ``expressions``, ``_string_functions``, ``_datetime_functions``, ``functions`` — registers the
names it compiles when it is imported), ``builtin_names()``; ``lookup(name)`` (the UDF ``name``
of the active ``UdfRegistry``, ``sql/udf.py``), ``current()`` and ``activate(registry)`` (the
context variable a connection sets around parsing and planning, so two connections in one
process never see each other's functions), and ``processing_clock()`` (the clock ``PROCTIME()``,
``NOW()`` and ``CURRENT_TIMESTAMP`` read: the active registry's, the wall clock outside one).

It imports no compiler: the compilers import it (``expressions → function_registry ←
functions``), so function lookup has no import cycle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from laminardb.sql.clock import ProcessingClock

__all__ = ["activate", "builtin_names", "current", "lookup", "processing_clock", "register_builtins"]

_ACTIVE: ContextVar[Any] = ContextVar("laminardb_udfs", default=None)
_BUILTINS: dict[str, tuple[str, ...]] = {}


def register_builtins(source: str, names: tuple[str, ...]) -> None:
    """Record the built-in functions (upper-case names) that ``source`` compiles."""
    _BUILTINS[source] = tuple(names)


def builtin_names(*sources: str) -> tuple[str, ...]:
    """The registered built-in names: of ``sources`` (the names they registered under), or all."""
    picked = sources or tuple(_BUILTINS)
    return tuple(n for s in picked for n in _BUILTINS.get(s, ()))


def current() -> Any:
    """The ``UdfRegistry`` of the connection parsing or planning now (None outside one)."""
    return _ACTIVE.get()


def lookup(name: str) -> Any:
    """The UDF ``name`` (a ``udf.ScalarUdf``) of the active registry, if there is one."""
    reg = _ACTIVE.get()
    return None if reg is None else reg.get(name)


@contextmanager
def activate(registry: Any) -> Iterator[Any]:
    """Make ``registry`` the one that parsing and planning see (on this thread/context)."""
    token = _ACTIVE.set(registry)
    try:
        yield registry
    finally:
        _ACTIVE.reset(token)


def processing_clock() -> ProcessingClock:
    """The processing-time clock of the connection planning now (``sql/clock.py``); the wall
    clock outside one."""
    reg = _ACTIVE.get()
    if reg is not None and getattr(reg, "clock", None) is not None:
        return reg.clock
    return ProcessingClock()
