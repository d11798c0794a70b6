"""Optional dependencies ("extras"): import one, or say which extra to install.

Why: ``pip install laminardb`` brings the embedded engine only (pyarrow, numba, sqlglot). Kafka,
Delta Lake, the cluster and DataFrames need more; without it, the first use used to fail deep
inside with a bare ``ModuleNotFoundError`` that named a module, not the command that fixes it.

Entry point: ``require(module, extra=…, for_what=…)`` → the module, or ``MissingExtraError``
(LDB-9070) saying ``pip install 'laminardb[<extra>]'``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from laminardb.errors import MissingExtraError

__all__ = ["require", "install_hint"]


def install_hint(extra: str | None, module: str) -> str:
    """The command that installs ``module``: the extra when laminardb has one, else the package."""
    return f"pip install 'laminardb[{extra}]'" if extra else f"pip install {module}"


def require(module: str, *, extra: str | None, for_what: str) -> ModuleType:
    """Import ``module`` (e.g. ``"kafka"``) for ``for_what`` (e.g. ``"a Kafka source"``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{for_what} needs the Python package {module!r}, which is not installed: "
            f"{install_hint(extra, module)}, then run this again") from exc
