"""How big this node's Spark worker is: from the node's size, not a fixed 512 MB.

Why these fractions: the worker shares its node with the Ray actors (state in memory) and
Ray's object store (30 % of RAM by default). A quarter of RAM, capped at 64 GB, leaves both
their room; one core, unless told otherwise, because every core Spark takes is one actor
fewer (``ray start --num-cpus`` is lowered by the same count).
"""

from __future__ import annotations

import os

_MEMORY_FRACTION = 0.25
_MIN_MB, _MAX_MB = 1024, 64 * 1024


def node_memory_mb() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))


def worker_memory_mb(total_mb: int | None = None) -> int:
    total = node_memory_mb() if total_mb is None else total_mb
    return int(min(_MAX_MB, max(_MIN_MB, total * _MEMORY_FRACTION)))


def worker_cores(total: int | None = None) -> int:
    """One core per worker by default (LAMINARDB_SPARK_CORES overrides), never all of them."""
    total = (os.cpu_count() or 1) if total is None else total
    wanted = int(os.environ.get("LAMINARDB_SPARK_CORES", "1"))
    return max(1, min(wanted, total))


def driver_memory_mb(total_mb: int | None = None) -> int:
    """The coordinator's driver heap: an eighth of RAM within [512 MB, 8 GB] (it shares the
    head node with the database heads; the epochs' rows never reach it)."""
    try:
        total = node_memory_mb() if total_mb is None else total_mb
    except (ValueError, OSError, AttributeError):  # not a POSIX node: Spark's floor
        return 512
    return int(min(8192, max(512, total // 8)))
