"""The floor under the coordinator's CPU per sink row: pyarrow alone reading a staged Parquet
file and writing it out again, in one plain process, one thread, the schema and row groups of
``bench_coordinator.py`` (what every executor task does, without Spark).

    .venv/bin/python bench/bench_parquet_floor.py [--rows 1000000] [--repeat 5]

Prints CPU µs per row of each repeat (read + write), then the best.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.rows
    ids = np.arange(n, dtype=np.int64)
    keys = pa.array([f"key-{i:04d}" for i in range(1000)])
    table = pa.table({"id": ids, "k": keys.take(pa.array(ids % 1000)), "v": ids * 0.25,
                      "ts": pa.array(1_700_000_000_000 + ids, pa.timestamp("ms"))})
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    with tempfile.TemporaryDirectory() as d:
        staged, out = os.path.join(d, "staged.parquet"), os.path.join(d, "out.parquet")
        pq.write_table(table, staged, row_group_size=100_000)
        runs = []
        for _ in range(args.repeat):
            cpu = time.process_time()
            pq.write_table(pq.read_table(staged, use_threads=False), out)
            runs.append((time.process_time() - cpu) / n * 1e6)
    print("read + write, CPU µs per row:", " ".join(f"{r:.3f}" for r in runs), f"(best {min(runs):.3f})")


if __name__ == "__main__":
    main()
