"""Errors in SQL text: parsing, names, types, unsupported constructs (LDB-1xxx)."""

from __future__ import annotations

from laminardb.errors import SqlError

__all__ = [
    "SqlParseError",
    "UnsupportedSqlError",
    "UnknownObjectError",
    "DuplicateObjectError",
    "SqlTypeError",
    "MissingVariableError",
    "GroupingError",
    "UnknownColumnError",
    "DependentObjectsError",
    "UnsupportedAggregateError",
    "UnsupportedJoinError",
    "UnknownOptionError",
    "UdfError",
    "UdfResultError",
    "UdfDefinitionError",
    "JavaFunctionError",
]


class SqlParseError(SqlError):
    """The text is not valid SQL; the message names line and column."""

    code = "LDB-1001"

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None) -> None:
        self.line, self.col = line, col
        where = "" if line is None else (f" at line {line}" if col is None else f" at line {line}, column {col}")
        super().__init__(f"syntax error{where}: {message}")


class UnsupportedSqlError(SqlError):
    """Valid SQL that laminardb does not run (yet)."""

    code = "LDB-1002"


class UnsupportedAggregateError(UnsupportedSqlError):
    """An aggregate function laminardb does not compute (STDDEV, PERCENTILE_CONT, …)."""


class UnsupportedJoinError(UnsupportedSqlError):
    """A JOIN of any kind (inner, outer, ASOF, temporal, lookup): queries read one input."""


class UnknownOptionError(UnsupportedSqlError, KeyError):
    """A ``WITH (…)`` key (or value) that the object does not take; the message names the known keys."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


class UnknownObjectError(SqlError, LookupError):
    """A source, stream, view or sink name that does not exist."""

    code = "LDB-1003"


class DuplicateObjectError(SqlError):
    """CREATE of a name that already exists."""

    code = "LDB-1004"


class SqlTypeError(SqlError, TypeError):
    """An expression applied to values of the wrong type."""

    code = "LDB-1005"


class MissingVariableError(SqlError, KeyError):
    """``${VAR}`` with no value in the connection's config variables."""

    code = "LDB-1006"


class GroupingError(SqlError):
    """A selected column is neither grouped nor aggregated."""

    code = "LDB-1007"


class UnknownColumnError(SqlError, LookupError):
    """A column name that the input relation does not have."""

    code = "LDB-1008"


class DependentObjectsError(SqlError):
    """DROP of something other streams, views or sinks still read."""

    code = "LDB-1009"


# --- Python UDFs and Flink DDL (laminardb/sql/udf.py, laminardb/sql/flink_ddl.py)

class UdfError(SqlError):
    """A Python UDF raised while it computed a batch; the message names the UDF and the call,
    and ``__cause__`` is the UDF's own exception."""

    code = "LDB-1010"

    def __init__(self, message: str, *, udf: str | None = None) -> None:
        self.udf = udf
        super().__init__(message)


class UdfResultError(UdfError, TypeError):
    """A Python UDF returned something other than a pyarrow Array of its declared type with
    one value per input row."""

    code = "LDB-1011"


class UdfDefinitionError(SqlError, ValueError):
    """``register_udf`` was given a name that SQL cannot call, a function that is not callable
    or a return type laminardb does not have."""

    code = "LDB-1012"


class JavaFunctionError(UnsupportedSqlError):
    """``CREATE FUNCTION f AS 'com.x.Y'`` names a Java class, which laminardb cannot load:
    register a Python UDF with ``conn.register_udf`` instead."""

    code = "LDB-1013"
