"""Lazy re-exports for package ``__init__`` modules (PEP 562 ``__getattr__``/``__dir__``).

Why: ``import laminardb`` must not load numba/pyarrow, and ``laminardb.raft`` or
``laminardb.discovery`` must not load pysyncobj, Ray or kafka-python, until a name that
needs them is used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str],
                 names: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``where`` maps a name to the module that
    defines it (relative to ``package`` unless it starts with ``laminardb.``); a resolved
    name is cached in the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if module.startswith("laminardb.") else f"{package}.{module}"
        value = getattr(importlib.import_module(full), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
