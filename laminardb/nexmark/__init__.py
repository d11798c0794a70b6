"""Nexmark for laminardb: a deterministic generator of the person / auction / bid streams, the
published queries q0–q23 with what laminardb runs of each, and a runner that measures one.

Entry points: :func:`generate`, :func:`tables`, :data:`QUERIES`, :func:`query`,
:data:`SOURCES_DDL`, :data:`UDFS` (q14's ``count_char``: open with ``config={"udfs": UDFS}``),
:func:`run_query`; ``laminardb nexmark --query q5 --events 10M`` on the command line; ``bench/bench_nexmark.py`` for the figures beside Flink's.
"""

from laminardb.nexmark.generator import SCHEMAS, NexmarkConfig, generate, stream_counts, tables
from laminardb.nexmark.queries import (
    FELDERA_EPS_PER_CORE,
    FLINK_V2_EPS_PER_CORE,
    QUERIES,
    SOURCES_DDL,
    NexmarkQuery,
    query,
)
from laminardb.nexmark.runner import RunResult, run_query
from laminardb.nexmark.udfs import UDFS

__all__ = [
    "FELDERA_EPS_PER_CORE", "FLINK_V2_EPS_PER_CORE", "NexmarkConfig", "NexmarkQuery", "QUERIES", "RunResult", "SCHEMAS",
    "SOURCES_DDL", "UDFS", "generate", "query", "run_query", "stream_counts", "tables",
]
