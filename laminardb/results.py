"""What ``query()`` and ``execute()`` return: ``QueryResult`` and ``ExecuteResult``.

Kept apart from the connection so both connections (embedded and remote) share them, and so a
missing pandas/polars is reported the same way everywhere (``MissingExtraError``, LDB-9070,
with the ``pip install`` that fixes it; see ``laminardb/_extras.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

__all__ = ["ExecuteResult", "QueryResult"]


def _to_pandas(table: pa.Table):
    from laminardb._extras import require

    require("pandas", extra="pandas", for_what="to_pandas()")  # pyarrow's own error names no fix
    return table.to_pandas()


@dataclass
class QueryResult:
    """Rows of a query: ``to_arrow()``, ``to_pandas()``, ``to_polars()``."""

    table: pa.Table

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return _to_pandas(self.table)

    def to_polars(self):
        from laminardb._extras import require

        return require("polars", extra="polars", for_what="to_polars()").from_arrow(self.table)

    def to_pylist(self) -> list[dict]:
        return self.table.to_pylist()

    def __len__(self) -> int:
        return self.table.num_rows


@dataclass
class ExecuteResult:
    """What ``execute()`` did: the kind of the last statement, the object it named, rows if any."""

    kind: str
    name: str | None = None
    table: pa.Table = field(default_factory=lambda: pa.table({}))
    statements: list[ExecuteResult] = field(default_factory=list)

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return _to_pandas(self.table)

    def __repr__(self) -> str:
        return f"ExecuteResult(kind={self.kind!r}, name={self.name!r}, rows={self.table.num_rows})"
