"""Python scalar UDFs: the registry a connection keeps and how a call runs over a batch.

Entry points: ``Connection.register_udf(name, fn, return_type)`` adds to the connection's
``UdfRegistry`` (``conn.engine.udfs``); ``function_registry.lookup(name)`` is what the expression
compiler (``sql/functions.py``) asks while it plans, and it sees the registry of the connection
that is planning — the connection wraps parsing and planning in ``registry.active()`` (a context
variable of ``sql/function_registry.py``, so two connections in one process never see each
other's functions).

A UDF is vectorized: ``fn(*arrays) -> pyarrow.Array``, called once per batch with one
pyarrow Array per argument (literals repeated to the batch's length) and never on an empty
batch. What it returns is checked — a pyarrow Array (or ChunkedArray) of ``return_type`` with
one value per row — and anything else is a ``UdfResultError`` (LDB-1011); an exception
inside it becomes a ``UdfError`` (LDB-1010) naming the UDF, with the original as ``__cause__``.

A query binds the function when it is planned: a stream keeps the function it was created
with even if the name is registered again. A durable database re-plans its streams when it is
opened again, before ``register_udf`` can be called: pass its UDFs in
``laminardb.open(path, config={"udfs": {"name": (fn, "VARCHAR")}})``.

Cluster note (for the Delta mode): reactor actors plan the same DDL text, so they need the
same registry. It is deliberately plain — name → (function, return type) — and
``describe()`` gives each function as an importable ``"module:qualname"`` reference (None
for lambdas and closures), which ``UdfRegistry.from_description`` imports again on the other
side: ship the references by name (msgpack/JSON), never the function objects (no pickle or
cloudpickle crosses a process), and wrap the actor's parsing/planning in ``active()``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from laminardb.errors import LaminarError
from laminardb.sql import function_registry
from laminardb.sql._dialect import parse_select
from laminardb.sql.exceptions import UdfDefinitionError, UdfError, UdfResultError
from laminardb.sql.expressions import FUNCTIONS
from laminardb.sql.functions import FUNCTIONS as MORE
from laminardb.sql.types import parse_type, type_name

__all__ = ["ScalarUdf", "UdfRegistry"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# names the planner reads as windows or window bounds (sql/planner.py): a UDF may not shadow them
_WINDOW_NAMES = frozenset({
    "TUMBLE", "HOP", "SLIDE", "HOPPING", "SESSION", "CUMULATE", "WINDOW_START", "WINDOW_END",
    "WINDOW_TIME", "TUMBLE_START", "TUMBLE_END", "TUMBLE_ROWTIME", "HOP_START", "HOP_END",
    "HOP_ROWTIME", "SESSION_START", "SESSION_END", "SESSION_ROWTIME", "TABLE", "DESCRIPTOR",
})


@dataclass(frozen=True)
class ScalarUdf:
    """One registered function: ``fn(*arrays) -> pyarrow.Array`` of ``return_type``."""

    name: str
    fn: Callable[..., Any]
    return_type: pa.DataType

    def reference(self) -> str | None:
        """``"module:qualname"`` when the function can be imported by name, else None."""
        module, qualname = getattr(self.fn, "__module__", None), getattr(self.fn, "__qualname__", "")
        if not module or not qualname or "<" in qualname or module == "__main__":
            return None
        return f"{module}:{qualname}"

    def call(self, args: list[pa.Array], rows: int, sql: str) -> pa.Array:
        """Run the function over one batch of ``rows`` rows and check what it returned."""
        if rows == 0:
            return pa.array([], type=self.return_type)
        try:
            out = self.fn(*args)
        except Exception as exc:  # noqa: BLE001 - the user's code: any error becomes a typed one
            msg = f"UDF {self.name!r} raised {type(exc).__name__}: {exc} (in {sql}); fix the function or the rows it got"
            raise UdfError(msg, udf=self.name) from exc
        return self._check(out, rows, sql)

    def _check(self, out: Any, rows: int, sql: str) -> pa.Array:
        want = _type_text(self.return_type)
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            msg = (f"UDF {self.name!r} returned a {type(out).__name__} (in {sql}); a UDF returns a pyarrow "
                   f"Array with one value per input row, e.g. pa.array(values, type=pa.{self.return_type})")
            raise UdfResultError(msg, udf=self.name)
        if len(out) != rows:
            msg = (f"UDF {self.name!r} returned {len(out)} values for {rows} rows (in {sql}); it must "
                   "return one value per input row, in the same order")
            raise UdfResultError(msg, udf=self.name)
        if out.type != self.return_type:
            if pa.types.is_null(out.type):  # all NULL: any type holds that
                return pa.nulls(rows, self.return_type)
            msg = (f"UDF {self.name!r} returned {_type_text(out.type)} values but was registered as "
                   f"returning {want} (in {sql}); return pa.array(…, type=pa.{self.return_type}) or "
                   f"register it with return_type='{_type_text(out.type)}'")
            raise UdfResultError(msg, udf=self.name)
        return out


def _type_text(t: pa.DataType) -> str:
    return type_name(t)


def _return_type(name: str, return_type: str | pa.DataType) -> pa.DataType:
    if isinstance(return_type, pa.DataType):
        return return_type
    if not isinstance(return_type, str):
        raise UdfDefinitionError(f"UDF {name!r}: return_type must be a SQL type name such as 'VARCHAR' "
                                 f"or a pyarrow DataType, not {type(return_type).__name__}")
    try:
        return parse_type(return_type)
    except LaminarError as exc:
        raise UdfDefinitionError(f"UDF {name!r}: {exc.message}") from None


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UdfDefinitionError(f"UDF name {name!r} is not a plain SQL identifier (letters, digits, _): "
                                 "SQL calls a UDF by that name, e.g. my_func(col)")
    upper = name.upper()
    taken = upper in FUNCTIONS or upper in MORE or upper in _WINDOW_NAMES
    if not taken:
        try:
            call = parse_select(f"SELECT {name}(x) FROM t").expressions[0]
            taken = not isinstance(call, exp.Anonymous)
        except Exception:  # noqa: BLE001 - a keyword (SELECT, FROM …) cannot be called either
            taken = True
    if taken:
        raise UdfDefinitionError(f"UDF name {name!r} is a built-in SQL function or keyword, which SQL "
                                 f"would call instead; pick another name (e.g. my_{name.lower()})")
    return name.lower()


class UdfRegistry:
    """The UDFs of one connection (``conn.engine.udfs``), by lower-case name.

    It also holds the connection's processing-time clock (``clock``, for ``PROCTIME()``) and its
    Flink table declarations (``CREATE TABLE … WITH
    ('connector' = …)``, read by ``sql/flink_ddl.py`` when a later ``INSERT INTO`` names the
    table), so that the connection carries one context object for both.
    """

    def __init__(self) -> None:
        self._functions: dict[str, ScalarUdf] = {}
        self.flink_tables: dict[str, Any] = {}
        # the connection's processing-time clock (laminardb/sql/clock.py): PROCTIME() binds it when planned
        self.clock: Any = None

    def register(self, name: str, fn: Callable[..., Any], return_type: str | pa.DataType) -> ScalarUdf:
        """Add (or replace) ``name``; streams planned before keep the function they bound."""
        key = _check_name(name)
        if not callable(fn):
            raise UdfDefinitionError(f"UDF {name!r}: {fn!r} is not callable; pass a function "
                                     "fn(*pyarrow_arrays) -> pyarrow.Array")
        udf = ScalarUdf(key, fn, _return_type(name, return_type))
        self._functions[key] = udf
        return udf

    def get(self, name: str) -> ScalarUdf | None:
        return self._functions.get(name.lower())

    def names(self) -> list[str]:
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._functions

    def __len__(self) -> int:
        return len(self._functions)

    @contextmanager
    def active(self) -> Iterator[UdfRegistry]:
        """Make this the registry that parsing and planning see (on this thread/context)."""
        with function_registry.activate(self):
            yield self

    def describe(self) -> list[dict[str, str | None]]:
        """Each UDF as plain data: name, ``"module:qualname"`` reference (None: not importable)
        and return type — what a cluster ships to its actors instead of function objects."""
        return [{"name": u.name, "function": u.reference(), "return_type": _type_text(u.return_type)}
                for u in self._functions.values()]

    @classmethod
    def from_description(cls, items: list[dict[str, str | None]]) -> UdfRegistry:
        """The registry ``describe()`` gave, importing each function by its reference."""
        reg = cls()
        for item in items:
            ref = item.get("function")
            if not ref:
                raise UdfDefinitionError(f"UDF {item.get('name')!r} cannot be imported by name (a lambda or a "
                                         "function of __main__): define it at module level in an importable module")
            module, _, qualname = ref.partition(":")
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            reg.register(str(item["name"]), obj, str(item["return_type"]))
        return reg

    @classmethod
    def from_config(cls, udfs: Any) -> UdfRegistry:
        """``config["udfs"]`` of ``laminardb.open``: ``{name: (fn, return_type)}`` (or None)."""
        reg = cls()
        if udfs is None:
            return reg
        if not isinstance(udfs, dict):
            raise UdfDefinitionError("config['udfs'] is {name: (fn, return_type)}, e.g. "
                                     "{'count_char': (count_char, 'BIGINT')}")
        for name, spec in udfs.items():
            if not isinstance(spec, tuple | list) or len(spec) != 2:
                raise UdfDefinitionError(f"config['udfs'][{name!r}] must be (fn, return_type)")
            reg.register(name, spec[0], spec[1])
        return reg

