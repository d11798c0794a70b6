"""The ``laminardb`` command: a thin argparse layer over importable functions.

Commands:

* ``laminardb --version``
* ``laminardb demo [--seconds N] [--symbols K] [--rate R]`` — :func:`laminardb.cli.demo.run_demo`
* ``laminardb run FILE.sql --input SOURCE=PATH … --output STREAM=PATH … [--var NAME=VALUE …]``
  — :func:`run_pipeline`: execute the SQL, feed every input file into its source, write every
  output stream to a file (format from the extension), finish, close.
* ``laminardb dashboard (--sql FILE.sql | --demo) [--port N]`` —
  :func:`laminardb.dashboard.run_dashboard`: serve the web dashboard until Ctrl-C.
* ``laminardb sql [DIR]`` — :func:`laminardb.cli.shell.run_shell`: an interactive SQL shell over an
  embedded database (in memory, or durable in ``DIR``).
* ``laminardb top --url http://127.0.0.1:PORT/metrics [--once]`` —
  :func:`laminardb.metrics.top.run_top`: a live view of a database's Prometheus endpoint
  (``config["metrics_port"]``).
* ``laminardb nexmark --query qN [--events 10M] [--seed N]`` —
  :func:`laminardb.nexmark.run_query`: one Nexmark query over generated events; events/s, rows
  out, peak state and RSS (a query that does not run yet names what it needs).
* ``laminardb raft-node`` / ``laminardb cluster …`` when the control plane is installed
  (:mod:`laminardb.raft.cli`).

Errors print ``error: [LDB-NNNN] message`` on stderr and exit with status 2. ``run`` exits with
status 3 when every row of an input was rejected (the reasons are in ``<input>.rejected``): a
run that ingested nothing of a file must not look like a success to a script or CI job.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from laminardb.errors import ConfigError, LaminarError

__all__ = ["main", "build_parser", "run_pipeline", "PipelineResult", "parse_assignments", "EXIT_ALL_REJECTED"]

EXIT_ALL_REJECTED = 3  # ``laminardb run``: every row of an input was rejected (2: an error)

# Progress appears (on a terminal, or with --progress) only for inputs that take longer than
# this: short runs stay quiet.
_PROGRESS_AFTER_S = 2.0
# The engine takes each input in chunks of this many rows (--watermark-every): rows of a chunk
# are judged late against the watermark before it, and the watermark advances after it. So the
# output depends on this number and never on --batch-rows (rows read and converted at a time).
# Large: one insert per chunk amortizes the engine's per-batch cost.
_CHUNK_ROWS = 65536
# Seconds between progress updates on a terminal / in a log (non-TTY stderr).
_PROGRESS_TTY_EVERY_S = 0.25
_PROGRESS_LOG_EVERY_S = 5.0


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("laminardb")
    except Exception:  # not installed (running from a checkout)
        from laminardb import __version__

        return __version__


def parse_assignments(values: Sequence[str] | None, what: str) -> dict[str, str]:
    """``["a=x", "b=y"]`` → ``{"a": "x", "b": "y"}``; ``what`` names the flag in errors."""
    out: dict[str, str] = {}
    for item in values or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value:
            msg = f"{what} {item!r} is not NAME=VALUE: write it like {what} trades=./trades.csv"
            raise ConfigError(msg, code="LDB-9001")
        if name.strip() in out:
            raise ConfigError(f"{what} {name.strip()!r} is given twice: give each name once",
                              code="LDB-9001")
        out[name.strip()] = value
    return out


# -- run ---------------------------------------------------------------------------------------


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` did: rows read per source and written per output."""

    rows_in: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    rows_out: dict[str, int] = field(default_factory=dict)
    late_dropped: dict[str, int] = field(default_factory=dict)  # per stream: rows dropped as late
    # what the script's own connectors did (Flink filesystem/datagen tables, Kafka, CREATE SINK)
    connector_rows_in: dict[str, int] = field(default_factory=dict)  # source → rows read
    sink_rows_out: dict[str, int] = field(default_factory=dict)  # sink → rows written
    seconds: float = 0.0

    def all_rejected(self) -> list[str]:
        """Inputs that had rows and none of them fit their source (a wrong file or schema)."""
        return [n for n, bad in self.rejected.items() if bad and not self.rows_in.get(n)]


def _source_schema(conn: Any, source: str) -> pa.Schema:
    """A source's schema from DESCRIBE, with NOT NULL columns non-nullable."""
    from laminardb.sql.types import parse_type

    desc = conn.execute(f"DESCRIBE {source}").to_arrow().to_pylist()
    return pa.schema([pa.field(r["column"], parse_type(r["type"]), nullable=bool(r["nullable"]),
                               metadata={"event_time": "1"} if r["event_time"] else None)
                      for r in desc])


def _format_watermark(wm: int | None, schema: pa.Schema) -> str:
    """A watermark as UTC time for TIMESTAMP event time, else as the number it is."""
    if wm is None:
        return "-"
    time_type = next((f.type for f in schema if f.metadata and f.metadata.get(b"event_time")), None)
    if time_type is not None and pa.types.is_timestamp(time_type):
        ms = wm // (1000 if time_type.unit == "us" else 1)
        try:
            return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        except (OverflowError, ValueError, OSError):
            pass
    return str(wm)


class _Progress:
    """One status line on stderr: rows, rows/s, % of input bytes, watermark, late rows."""

    def __init__(self, stream: TextIO, readers: dict[str, Any], conn: Any,
                 schemas: dict[str, pa.Schema], *, force: bool = False) -> None:
        self.stream, self.readers, self.conn, self.schemas = stream, readers, conn, schemas
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.force = force
        self.start = self.last = time.monotonic()
        self.shown = False

    def rows(self) -> int:
        return sum(r.report.rows + r.report.rejected for r in self.readers.values())

    def update(self, *, final: bool = False) -> None:
        now = time.monotonic()
        every = _PROGRESS_TTY_EVERY_S if self.tty else _PROGRESS_LOG_EVERY_S
        if not final and (now - self.start < (0.0 if self.force else _PROGRESS_AFTER_S)
                          or (self.shown and now - self.last < every)):
            return
        if final and not self.shown:
            return
        self.last, self.shown = now, True
        total = sum(r.total_bytes for r in self.readers.values()) or 1
        done = sum(r.progress * r.total_bytes for r in self.readers.values())
        rate = self.rows() / max(now - self.start, 1e-9)
        m = self.conn.metrics()
        wms = [f"{name} {_format_watermark(m['watermarks'].get(name), self.schemas[name])}"
               for name in self.readers]
        text = (f"{self.rows():,} rows  {rate:,.0f} rows/s  {100 * done / total:5.1f}% of "
                f"{total / 1e6:,.1f} MB  watermark {', '.join(wms)}  late {m['late_events_dropped']:,}  "
                f"{now - self.start:,.1f}s")
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}" + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _chunks(reader: Any, rows: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The reader's rows in chunks of exactly ``rows`` (the last may be shorter), each with the
    file index of every row — whatever the size of the batches the reader yields."""
    pending: list[tuple[pa.RecordBatch, np.ndarray]] = []
    held = 0
    source = reader.with_index()
    done = False
    while True:
        while held < rows and not done:
            item = next(source, None)
            if item is None:
                done = True
            elif item[0].num_rows:
                pending.append(item)
                held += item[0].num_rows
        if not pending:
            return
        take, n = [], 0
        while pending and n < rows:
            batch, index = pending[0]
            k = min(batch.num_rows, rows - n)
            if k == batch.num_rows:
                take.append(pending.pop(0))
            else:
                take.append((batch.slice(0, k), index[:k]))
                pending[0] = (batch.slice(k), index[k:])
            n += k
        held -= n
        yield pa.Table.from_batches([b for b, _ in take]), np.concatenate([i for _, i in take])


def run_pipeline(sql: str, *, inputs: dict[str, str], outputs: dict[str, str],
                 variables: dict[str, str] | None = None, batch_rows: int = 65536,
                 watermark_every: int = _CHUNK_ROWS, progress: TextIO | None = None,
                 show_progress: bool | None = None) -> PipelineResult:
    """Run a SQL pipeline over files: the engine of ``laminardb run``.

    Args:
        sql: the script (CREATE SOURCE / STREAM / VIEW / SINK …), ``;``-separated.
        inputs: source name → input file (CSV / JSONL / Parquet, by extension).
        outputs: stream or view name → output file (format by extension).
        variables: ``${NAME}`` substitutions for the SQL.
        batch_rows: the most rows read and converted at a time (memory; no effect on results).
        watermark_every: rows per chunk the engine ingests (see below).
        progress: where warnings, the late-row report and progress go (None: nowhere).
        show_progress: show a progress line on ``progress`` (None: when it is a terminal).

    The rule that makes results independent of ``batch_rows``: each input is ingested in
    chunks of exactly ``watermark_every`` rows, in file order. Rows of a chunk are judged
    late against the watermark as it stood before the chunk; after the chunk the watermark
    advances to its max event time − delay. Inputs take turns chunk by chunk, so the
    watermarks of several sources advance together. Rows that do not fit the source —
    unparsable, wrong type, or an implausible event time — go to ``<input>.rejected``
    (``{"index", "raw", "error"}``, ``index`` = the record's position in the file).
    """
    import laminardb
    from laminardb.connectors import FileSink, read_file

    result = PipelineResult()
    start = time.monotonic()
    with laminardb.open(config={"vars": dict(variables or {})}) as conn:
        conn.execute(sql)
        sinks: dict[str, Any] = {}
        subs: dict[str, Any] = {}
        readers: dict[str, Any] = {}
        schemas: dict[str, pa.Schema] = {}
        try:
            for name, path in outputs.items():
                subs[name] = conn.subscribe_stream(name, history_rows=0)
                sinks[name] = FileSink(path, schema=subs[name].schema)
            for name, path in inputs.items():
                schemas[name] = _source_schema(conn, name)
                readers[name] = read_file(path, schema=schemas[name], batch_rows=batch_rows)
            meter = None
            if progress is not None:
                tty = hasattr(progress, "isatty") and progress.isatty()
                if show_progress or (show_progress is None and tty):
                    meter = _Progress(progress, readers, conn, schemas, force=bool(show_progress))
            conn.start()

            def drain() -> None:
                for name, sub in subs.items():
                    while (batch := sub.try_next()) is not None:
                        sinks[name].write(batch)

            active = {name: _chunks(reader, watermark_every) for name, reader in readers.items()}
            while active:
                for name, chunks in list(active.items()):
                    chunk = next(chunks, None)
                    if chunk is None:
                        del active[name]
                        continue
                    table, index = chunk
                    res = conn.insert(name, table, on_error="skip")
                    if res.rejected:  # refused by the source's event-time rules: file indexes
                        bad = res.rejected_rows
                        bad = bad.set_column(0, "index", pa.array(index[bad.column("index").to_numpy()]))
                        readers[name].reject(bad)
                    drain()
                    if meter is not None:
                        meter.update()
            _read_connector_sources(conn)  # finish() ends input: the script's own sources first
            conn.finish()
            for name, sub in subs.items():
                for batch in sub:  # ends once finish() has delivered everything
                    sinks[name].write(batch)
            if meter is not None:
                meter.update(final=True)
            m = conn.metrics()
            result.late_dropped = {n: s["late_dropped"] for n, s in m["streams"].items() if s.get("late_dropped")}
            result.connector_rows_in = {n: s["rows_in"] for n, s in m["sources"].items() if s.get("connector")}
            result.sink_rows_out = {n: s["rows_written"] for n, s in m["sinks"].items()}
        finally:
            for sink in sinks.values():
                sink.close()
            for reader in readers.values():
                reader.close()
        for name, reader in readers.items():
            result.rows_in[name] = reader.report.rows
            result.rejected[name] = reader.report.rejected
            if reader.report.rejected and progress is not None:
                progress.write(f"warning: {reader.report.summary()}\n")
        if result.late_dropped and progress is not None:
            per = ", ".join(f"{n}: {c:,}" for n, c in result.late_dropped.items())
            progress.write(f"warning: rows dropped as late ({per}): they came after the watermark "
                           "had closed their windows; a longer WATERMARK delay keeps them\n")
        result.rows_out = {name: sink.rows_written for name, sink in sinks.items()}
    result.seconds = time.monotonic() - start
    return result


def _read_connector_sources(conn: Any) -> None:
    """Wait until the script's connector sources (a Flink filesystem table, a bounded datagen,
    Kafka up to its end) have delivered what they have: ``finish()`` stops them, and a file
    source stopped early would lose the rest of its file. Waits as long as rows keep coming."""
    from laminardb.errors import EngineError

    def read() -> int:
        return sum(s["rows_in"] for s in conn.metrics()["sources"].values() if s.get("connector"))

    before = -1
    while True:
        try:
            conn.flush(timeout_s=10.0)
            return
        except EngineError:  # not caught up yet: go on while it makes progress
            now = read()
            if now == before:
                raise
            before = now


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        with open(args.sql_file, encoding="utf-8") as fh:
            sql = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read SQL file {args.sql_file!r}: {exc.strerror}; check the path",
                          code="LDB-9002") from exc
    inputs = parse_assignments(args.input, "--input")
    outputs = parse_assignments(args.output, "--output")
    result = run_pipeline(sql, inputs=inputs, outputs=outputs,
                          variables=parse_assignments(args.var, "--var"),
                          batch_rows=args.batch_rows, watermark_every=args.watermark_every,
                          progress=sys.stderr, show_progress=args.progress)
    if not outputs and not result.sink_rows_out:
        print("warning: no --output given and the script has no sink; results were computed and discarded",
              file=sys.stderr)
    if not args.quiet:
        ins = [f"{n}: {c:,} rows" for n, c in result.rows_in.items()]
        ins += [f"{n}: {c:,} rows (its connector)" for n, c in result.connector_rows_in.items()]
        outs = [f"{n}: {c:,} rows → {outputs[n]}" for n, c in result.rows_out.items()]
        outs += [f"{n}: {c:,} rows (sink)" for n, c in result.sink_rows_out.items()]
        print(f"read {', '.join(ins) or 'no input'}; wrote {', '.join(outs) or 'nothing'} in "
              f"{result.seconds:.2f}s", file=sys.stderr)
    bad = result.all_rejected()
    if bad:  # a run that ingested nothing of an input is a failure, not a success with warnings
        for name in bad:
            print(f"error: every row of input {name!r} was rejected ({result.rejected[name]:,} rows; "
                  f"the reasons are in {inputs[name]}.rejected): check the file against DESCRIBE {name}",
                  file=sys.stderr)
        return EXIT_ALL_REJECTED
    return 0


def _cmd_sql(args: argparse.Namespace) -> int:
    from laminardb.cli.shell import run_shell

    return run_shell(args.directory, variables=parse_assignments(args.var, "--var"))


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from laminardb.dashboard import run_dashboard

    sql = None
    if args.sql is not None:
        try:
            with open(args.sql, encoding="utf-8") as f:
                sql = f.read()
        except OSError as exc:
            raise ConfigError(f"--sql {args.sql!r}: {exc.strerror}; give a readable SQL file",
                              code="LDB-9002") from None
    return run_dashboard(sql=sql, directory=args.directory, demo=args.demo, port=args.port,
                         host=args.host, seconds=args.seconds)


def _cmd_top(args: argparse.Namespace) -> int:
    from laminardb.metrics.top import run_top

    return run_top(args.url, interval_s=args.interval, once=args.once)


def _cmd_demo(args: argparse.Namespace) -> int:
    from laminardb.cli.demo import run_demo

    return run_demo(seconds=args.seconds, symbols=args.symbols, rate=args.rate, seed=args.seed)


def _count_arg(text: str) -> int:
    """``1000``, ``500k``, ``10M``, ``1.5m``, ``1G`` → an event count."""
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}.get(text[-1:].lower(), 1)
    try:
        value = int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (write 1000, 500k or 10M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _cmd_nexmark(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from laminardb.nexmark import FLINK_V2_EPS_PER_CORE, query, run_query

    out = out or sys.stdout
    try:
        q = query(args.query)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0]), code="LDB-9001") from None
    if not q.runnable:
        print(f"{q.name} ({q.description}) does not run in laminardb yet: it needs {q.needs}.",
              file=out)
        return 2
    if q.status != "runs":
        print(f"note: {q.name} runs as a {q.status}: {q.needs}", file=out)
    r = run_query(q.name, events=args.events, seed=args.seed, batch_events=args.batch_events)
    flink = FLINK_V2_EPS_PER_CORE.get(q.name)
    versus = ""
    if flink:  # Flink's figure is for the published query: a partial run or a variant is not it
        versus = (f" ({r.events_per_second / flink:.1f}x Flink's {flink / 1e3:.0f}K/core)" if q.status == "runs"
                  else f" (a {q.status}: not comparable with Flink's {flink / 1e3:.0f}K/core)")
    print(f"{q.name}: {r.events:,} events in {r.seconds:.2f} s = {r.events_per_second:,.0f} events/s"
          f"{versus}; {r.rows_out:,} rows out; peak state {r.peak_state_rows:,} rows "
          f"({r.peak_state_bytes / 2**20:.1f} MiB); peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB", file=out)
    return 0


# -- parser ------------------------------------------------------------------------------------


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="laminardb", description="laminardb: streaming SQL over live data")
    parser.add_argument("--version", action="version", version=f"laminardb {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="live market-data demo in the terminal")
    demo.add_argument("--seconds", type=_positive(float), default=30.0,
                      help="stop after this many seconds (default 30; Ctrl-C stops earlier)")
    demo.add_argument("--symbols", type=_positive(int), default=6, help="number of symbols (≤ 12)")
    demo.add_argument("--rate", type=_positive(float), default=2000.0, help="trades per second")
    demo.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable run")
    demo.set_defaults(func=_cmd_demo)

    dash = sub.add_parser("dashboard", help="serve the web dashboard of a pipeline (or of the demo)")
    dash.add_argument("--sql", metavar="FILE.sql", help="the pipeline to run (its Kafka sources poll)")
    dash.add_argument("--demo", action="store_true", help="run the market-data demo pipeline, fed live")
    dash.add_argument("--port", type=int, default=8470, help="port (default 8470; 0: any free port)")
    dash.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1; others need "
                                                          "allow_remote and a token: docs/operations.md)")
    dash.add_argument("--directory", metavar="DIR", default=None,
                      help="durable database directory (default: in memory)")
    dash.add_argument("--seconds", type=_positive(float), default=None,
                      help="stop after this many seconds (default: until Ctrl-C)")
    dash.set_defaults(func=_cmd_dashboard)

    run = sub.add_parser("run", help="run a SQL file over input files, write streams to files")
    run.add_argument("sql_file", metavar="FILE.sql")
    run.add_argument("--input", action="append", metavar="SOURCE=PATH",
                     help="feed a CSV/JSONL/Parquet file into a source (repeatable)")
    run.add_argument("--output", action="append", metavar="STREAM=PATH",
                     help="write a stream or view to a .jsonl/.csv/.parquet file (repeatable)")
    run.add_argument("--var", action="append", metavar="NAME=VALUE",
                     help="value of ${NAME} in the SQL (repeatable)")
    run.add_argument("--batch-rows", type=_positive(int), default=65536,
                     help="most rows read and converted at a time (memory only: results do not "
                          "depend on it)")
    run.add_argument("--watermark-every", type=_positive(int), default=_CHUNK_ROWS, metavar="ROWS",
                     help="ingest each input in chunks of ROWS rows; the watermark advances after "
                          f"each chunk, rows of a chunk are judged late against the one before it "
                          f"(default {_CHUNK_ROWS})")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="show a progress line on stderr (default: when stderr is a terminal and "
                          "the run takes over a few seconds)")
    run.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    run.set_defaults(func=_cmd_run)

    shell = sub.add_parser("sql", help="interactive SQL shell over an embedded database")
    shell.add_argument("directory", nargs="?", default=None, metavar="DIR",
                       help="durable database directory (default: in memory)")
    shell.add_argument("--var", action="append", metavar="NAME=VALUE",
                       help="value of ${NAME} in the SQL (repeatable)")
    shell.set_defaults(func=_cmd_sql)

    top = sub.add_parser("top", help="live view of a database's metrics (its Prometheus endpoint)")
    top.add_argument("--url", required=True, metavar="URL",
                     help="the endpoint, e.g. http://127.0.0.1:9464/metrics (Connection.metrics_url)")
    top.add_argument("--interval", type=_positive(float), default=1.0, metavar="S",
                     help="seconds between refreshes (default 1)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.set_defaults(func=_cmd_top)

    nex = sub.add_parser("nexmark", help="run a Nexmark query over generated events, print events/s")
    nex.add_argument("--query", required=True, metavar="qN", help="the query, q0 … q23")
    nex.add_argument("--events", type=_count_arg, default=1_000_000, metavar="N",
                     help="events to generate (persons, auctions and bids; 1M, 10M …; default 1M)")
    nex.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    nex.add_argument("--batch-events", type=_positive(int), default=65_536, metavar="N",
                     help="events per insert (default 65,536)")
    nex.set_defaults(func=_cmd_nexmark)

    try:
        import pysyncobj  # noqa: F401 - the control plane's Raft library (the cluster extra)

        from laminardb.raft.cli import register
    except ImportError:  # control plane not installed: its commands say what to install
        for name in ("raft-node", "cluster"):
            stub = sub.add_parser(name, help="(needs: pip install 'laminardb[cluster]')", add_help=False)
            stub.add_argument("rest", nargs=argparse.REMAINDER)
            stub.set_defaults(func=_missing_control_plane)
    else:
        register(sub)
    if importlib.util.find_spec("pyspark") is not None:  # the daemons run the wheel's Spark
        from laminardb.spark.cli import register as register_spark

        register_spark(sub)
    return parser


def _missing_control_plane(args: argparse.Namespace) -> int:
    """``laminardb cluster …`` / ``raft-node`` without the cluster extra: say what to install."""
    from laminardb._extras import require

    require("pysyncobj", extra="cluster", for_what="the Raft control plane (laminardb raft-node / cluster)")
    require("laminardb.raft.cli", extra="cluster", for_what="the Raft control plane")
    return 2  # not reached: one of them was missing, or the real commands would be registered


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``laminardb`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except LaminarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `laminardb … | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
