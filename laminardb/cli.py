"""The ``laminardb`` command: a thin argparse layer over importable functions.

Commands:

* ``laminardb --version``
* ``laminardb demo [--seconds N] [--symbols K] [--rate R]`` — :func:`laminardb.demo.run_demo`
* ``laminardb run FILE.sql --input SOURCE=PATH … --output STREAM=PATH … [--var NAME=VALUE …]``
  — :func:`run_pipeline`: execute the SQL, feed every input file into its source, write every
  output stream to a file (format from the extension), finish, close.
* ``laminardb raft-node`` / ``laminardb cluster …`` when the control plane is installed
  (:mod:`laminardb.raft.cli`).

Errors print ``error: [LDB-NNNN] message`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import pyarrow as pa

from laminardb.errors import ConfigError, LaminarError

__all__ = ["main", "build_parser", "run_pipeline", "PipelineResult", "parse_assignments"]

# Progress appears only for inputs that take longer than this: short runs stay quiet.
_PROGRESS_AFTER_S = 1.0
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
    seconds: float = 0.0


def _source_schema(conn: Any, source: str) -> pa.Schema:
    """A source's schema from DESCRIBE, with NOT NULL columns non-nullable."""
    from laminardb.sql.types import parse_type

    desc = conn.execute(f"DESCRIBE {source}").to_arrow().to_pylist()
    return pa.schema([pa.field(r["column"], parse_type(r["type"]), nullable=bool(r["nullable"]))
                      for r in desc])


class _Progress:
    """Rows/s and % of input bytes on stderr, for inputs that take more than a second."""

    def __init__(self, stream: TextIO, readers: dict[str, Any]) -> None:
        self.stream, self.readers = stream, readers
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = self.last = time.monotonic()
        self.shown = False

    def rows(self) -> int:
        return sum(r.report.rows + r.report.rejected for r in self.readers.values())

    def update(self, *, final: bool = False) -> None:
        now = time.monotonic()
        every = _PROGRESS_TTY_EVERY_S if self.tty else _PROGRESS_LOG_EVERY_S
        if not final and (now - self.start < _PROGRESS_AFTER_S or now - self.last < every):
            return
        if final and not self.shown:
            return
        self.last, self.shown = now, True
        total = sum(r.total_bytes for r in self.readers.values()) or 1
        done = sum(r.progress * r.total_bytes for r in self.readers.values())
        rate = self.rows() / max(now - self.start, 1e-9)
        text = (f"{self.rows():,} rows  {rate:,.0f} rows/s  {100 * done / total:5.1f}% of "
                f"{total / 1e6:,.1f} MB  {now - self.start:,.1f}s")
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}" + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def run_pipeline(sql: str, *, inputs: dict[str, str], outputs: dict[str, str],
                 variables: dict[str, str] | None = None, batch_rows: int = 65536,
                 progress: TextIO | None = None) -> PipelineResult:
    """Run a SQL pipeline over files: the engine of ``laminardb run``.

    Args:
        sql: the script (CREATE SOURCE / STREAM / VIEW / SINK …), ``;``-separated.
        inputs: source name → input file (CSV / JSONL / Parquet, by extension).
        outputs: stream or view name → output file (format by extension).
        variables: ``${NAME}`` substitutions for the SQL.
        batch_rows: the most rows per insert.
        progress: where to show progress for long inputs (None: nowhere).

    Inputs are read round-robin, one batch from each in turn, so the watermarks of several
    sources advance together. Rejected input rows go to ``<input>.rejected``.
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
        try:
            for name, path in outputs.items():
                subs[name] = conn.subscribe_stream(name, history_rows=0)
                sinks[name] = FileSink(path, schema=subs[name].schema)
            for name, path in inputs.items():
                readers[name] = read_file(path, schema=_source_schema(conn, name),
                                          batch_rows=batch_rows)
            meter = _Progress(progress, readers) if progress is not None else None
            conn.start()

            def drain() -> None:
                for name, sub in subs.items():
                    while (batch := sub.try_next()) is not None:
                        sinks[name].write(batch)

            active = dict(readers)
            while active:
                for name, reader in list(active.items()):
                    batch = next(reader, None)
                    if batch is None:
                        del active[name]
                        continue
                    conn.insert(name, batch)
                    drain()
                    if meter is not None:
                        meter.update()
            conn.finish()
            for name, sub in subs.items():
                for batch in sub:  # ends once finish() has delivered everything
                    sinks[name].write(batch)
            if meter is not None:
                meter.update(final=True)
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
        result.rows_out = {name: sink.rows_written for name, sink in sinks.items()}
    result.seconds = time.monotonic() - start
    return result


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        with open(args.sql_file, encoding="utf-8") as fh:
            sql = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read SQL file {args.sql_file!r}: {exc.strerror}; check the path",
                          code="LDB-9002") from exc
    inputs = parse_assignments(args.input, "--input")
    outputs = parse_assignments(args.output, "--output")
    if not outputs:
        print("warning: no --output given; results are computed and discarded", file=sys.stderr)
    result = run_pipeline(sql, inputs=inputs, outputs=outputs,
                          variables=parse_assignments(args.var, "--var"),
                          batch_rows=args.batch_rows, progress=sys.stderr)
    if not args.quiet:
        ins = ", ".join(f"{n}: {c:,} rows" for n, c in result.rows_in.items()) or "no input"
        outs = ", ".join(f"{n}: {c:,} rows → {outputs[n]}" for n, c in result.rows_out.items())
        print(f"read {ins}; wrote {outs or 'nothing'} in {result.seconds:.2f}s", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from laminardb.demo import run_demo

    return run_demo(seconds=args.seconds, symbols=args.symbols, rate=args.rate, seed=args.seed)


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

    run = sub.add_parser("run", help="run a SQL file over input files, write streams to files")
    run.add_argument("sql_file", metavar="FILE.sql")
    run.add_argument("--input", action="append", metavar="SOURCE=PATH",
                     help="feed a CSV/JSONL/Parquet file into a source (repeatable)")
    run.add_argument("--output", action="append", metavar="STREAM=PATH",
                     help="write a stream or view to a .jsonl/.csv/.parquet file (repeatable)")
    run.add_argument("--var", action="append", metavar="NAME=VALUE",
                     help="value of ${NAME} in the SQL (repeatable)")
    run.add_argument("--batch-rows", type=_positive(int), default=65536,
                     help="most rows per inserted batch")
    run.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    run.set_defaults(func=_cmd_run)

    try:
        from laminardb.raft.cli import register
    except ImportError:  # control plane not installed: embedded commands only
        pass
    else:
        register(sub)
    return parser


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
