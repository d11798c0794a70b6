"""The engine run of one SELECT over given rows (for checks against DuckDB), and Nexmark's
``count_char`` UDF as a Python function."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def run_select(db, ddl: str, select: str, rows: pa.Table, source: str = "t", batch_rows: int = 97) -> pa.Table:
    """``CREATE SOURCE`` (``ddl``), ``CREATE STREAM out AS SELECT …``, insert ``rows`` in
    batches of ``batch_rows`` (several batches per test: kernels see varied batch shapes);
    returns what the stream emitted."""
    db.execute(ddl)
    db.execute(f"CREATE STREAM out AS {select}")
    sub = db.subscribe_stream("out")
    for start in range(0, rows.num_rows, batch_rows):
        db.insert(source, rows.slice(start, batch_rows))
    return sub.to_arrow()


def count_char(s: pa.Array, c: pa.Array) -> pa.Array:
    """Nexmark's CountChar (q14), vectorized: occurrences of the character ``c`` in ``s``."""
    return pc.count_substring(s, pattern=c[0].as_py()).cast(pa.int64())
