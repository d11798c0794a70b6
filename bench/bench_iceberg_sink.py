"""Iceberg sink throughput: rows/s the exactly-once sink commits into an Iceberg table, per
epoch size, beside pyiceberg's own ``Table.append`` of the same Arrow tables alone.

Run from the repository root:

    .venv/bin/python bench/bench_iceberg_sink.py              # ~1 min on 2 vCPUs
    .venv/bin/python bench/bench_iceberg_sink.py --repeat 3

For each epoch size (``--sizes``, rows per checkpoint epoch) and each repeat, in fresh tmp
warehouses with a SQLite SQL catalog:

* sink: ``IcebergSink.write(batch)`` + ``pre_commit(e)`` + ``commit(e)`` for ``--epochs``
  epochs — the rows staged as Arrow IPC (fsynced), read back, cast (timestamps to UTC µs), the
  snapshot ancestry read for the last committed epoch, one ``append`` with the summary
  properties; what the checkpoint coordinator drives.
* pyiceberg: ``Table.append`` of the same rows, already cast, one per epoch — the floor.

Each is timed over all its epochs (the table's creation excluded); the figures are rows/s
and ms per epoch, with the spread over repeats (min-max). The machine may be shared with other
work: read the spread before the difference. The last stdout line is ``BENCH_JSON {...}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("ms")),
                    pa.field("k", pa.string()), pa.field("v", pa.float64())])


def make_batch(epoch: int, n: int) -> pa.RecordBatch:
    ids = np.arange(epoch * n, (epoch + 1) * n, dtype=np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array(ids), pa.array(1_700_000_000_000 + ids * 7, pa.timestamp("ms")),
        pa.array(np.char.add("k", (ids % 1000).astype(str))), pa.array(ids * 0.5)], schema=SCHEMA)


def run_sink(base: Path, size: int, epochs: int) -> float:
    from laminardb.connectors.iceberg_sink import IcebergSink

    sink = IcebergSink(name="bench", schema=SCHEMA, options={"warehouse": str(base / "lake"),
                       "table": "bench.t"}, stage_dir=base / "stage")
    batches = [make_batch(e, size) for e in range(epochs)]
    try:
        t0 = time.perf_counter()
        for e, batch in enumerate(batches, start=1):
            sink.write(batch)
            sink.pre_commit(e)
            sink.commit(e)
        took = time.perf_counter() - t0
        assert sink.rows_committed == size * epochs
    finally:
        sink.close()
    return took


def run_pyiceberg(base: Path, size: int, epochs: int) -> float:
    from pyiceberg.catalog import load_catalog

    from laminardb.connectors.iceberg_sink import iceberg_schema

    lake = base / "lake"
    lake.mkdir(parents=True)
    cat = load_catalog("bench", type="sql", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=lake.as_uri())
    schema = iceberg_schema(SCHEMA)
    try:
        cat.create_namespace("bench")
        table = cat.create_table("bench.t", schema=schema)
        tables = [pa.Table.from_batches([make_batch(e, size)]).cast(schema) for e in range(epochs)]
        t0 = time.perf_counter()
        for t in tables:
            table.append(t)
        took = time.perf_counter() - t0
        assert table.scan().to_arrow().num_rows == size * epochs
    finally:
        cat.engine.dispose()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="rows per epoch, comma-separated")
    ap.add_argument("--epochs", type=int, default=20, help="epochs (snapshots) per run")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each (interleaved)")
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        res = results[str(size)] = {"sink": [], "pyiceberg": []}
        for _ in range(args.repeat):
            for kind, fn in (("sink", run_sink), ("pyiceberg", run_pyiceberg)):
                with tempfile.TemporaryDirectory(prefix="bench-iceberg-") as d:
                    res[kind].append(fn(Path(d), size, args.epochs))
    print(f"{args.epochs} epochs per run, {args.repeat} runs each; rows/s best (min-max), ms/epoch best")
    print(f"{'rows/epoch':>10} {'sink rows/s':>28} {'pyiceberg rows/s':>28} {'sink ms':>8} {'pyice ms':>8}")
    summary = {}
    for size, res in results.items():
        rows = int(size) * args.epochs
        line = [f"{int(size):>10,}"]
        for kind in ("sink", "pyiceberg"):
            rates = [rows / t for t in res[kind]]
            line.append(f"{max(rates):>12,.0f} ({min(rates):,.0f}-{max(rates):,.0f})".rjust(28))
        for kind in ("sink", "pyiceberg"):
            line.append(f"{min(res[kind]) / args.epochs * 1000:>8.1f}")
        print(" ".join(line))
        summary[size] = {k: {"seconds": v, "rows_per_s": [rows / t for t in v]} for k, v in res.items()}
    print("BENCH_JSON " + json.dumps({"epochs": args.epochs, "results": summary}))


if __name__ == "__main__":
    main()
