"""``laminardb sql [DIR]``: an interactive SQL shell over an embedded database.

Entry point: ``run_shell(directory, …)`` → exit status. Statements end with ``;`` and may span
lines. ``CREATE`` / ``DROP`` / ``SHOW`` / ``DESCRIBE`` / ``EXPLAIN`` and ``SELECT`` (from
materialized views) run through ``Connection.execute``; ``INSERT INTO s [(col, …)] VALUES (…),
(…)`` is parsed with sqlglot (literals only) and becomes one ``insert()`` — one batch. Every
stream is subscribed when it is created (and, for a directory, every stream it already has):
its rows are printed as the engine emits them, before the next prompt. Dot commands:
``.help``, ``.streams``, ``.start`` (read connector sources), ``.finish`` (end of input: every window closes), ``.checkpoint``,
``.metrics``, ``.quit`` — and, on a line of their own, ``\\q``, ``quit`` and ``exit`` (as psql,
sqlite3 and mysql users type them), ``\\?``/``help``, ``\\d``.

Read from a pipe (``laminardb sql < script.sql``) it prints no prompts and exits with 1 if any
statement failed (each failure prints ``error: [LDB-NNNN] …`` on stderr and the shell goes on).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import Any, TextIO

import pyarrow as pa

from laminardb.errors import LaminarError, SqlError

_PROMPT, _MORE = "laminardb> ", "      ...> "
_MAX_ROWS = 100  # rows printed per result or emitted batch; the rest is counted
_DRAIN_S = 10.0  # how long to wait for stream output to be printed after a statement

_HELP = """\
Statements end with ';'. Examples:
  CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v DOUBLE, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
  CREATE STREAM s AS SELECT k, window_start, count(*) AS n FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
  INSERT INTO t VALUES (1000, 'a', 1.5), (2500, 'b', 2.0);
  CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS total FROM t GROUP BY k;
  SELECT * FROM m;
Streams print their rows as they are emitted.
.streams     list sources, streams, views and sinks
.start       read connector sources (Kafka, Flink filesystem/datagen tables); insert needs none
.finish      end of input: close every window (then open a new shell to go on)
.checkpoint  checkpoint now (a database opened on a directory)
.metrics     engine metrics
.quit        leave (also \\q, quit, exit; a directory keeps everything; in memory it is gone)"""


def format_table(table: pa.Table | pa.RecordBatch, *, max_rows: int = _MAX_ROWS) -> str:
    """Rows as an aligned text table (NULL for missing values)."""
    names = table.schema.names
    shown = table.slice(0, max_rows).to_pylist()
    cells = [[_cell(r[n]) for n in names] for r in shown]
    widths = [max([len(n)] + [len(row[i]) for row in cells]) for i, n in enumerate(names)]
    lines = [" | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip(),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    if table.num_rows > max_rows:
        lines.append(f"… {table.num_rows - max_rows:,} more rows")
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def split_statements(text: str) -> tuple[list[str], str]:
    """Complete ``;``-terminated statements in ``text`` (quotes, ``--`` and ``/* */`` comments
    respected), and the unfinished rest."""
    out, start, quote, i = [], 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif text.startswith("--", i):
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:  # the comment goes on in the next lines: the statement is unfinished
                break
            i = end + 2
            continue
        elif ch == ";":
            stmt = text[start:i].strip()
            if _strip_comments(stmt):
                out.append(stmt)
            start = i + 1
        i += 1
    return out, text[start:]


def _strip_comments(text: str) -> str:
    from laminardb.sql._lexer import blank_comments
    from laminardb.sql.exceptions import SqlParseError

    try:
        return blank_comments(text).strip()
    except SqlParseError:  # an open /* comment: unfinished text, not empty
        return text.strip()


def parse_insert(text: str) -> tuple[str, list[str] | None, list[list[Any]]]:
    """``INSERT INTO s [(cols)] VALUES (…), (…)`` → (source, columns or None, rows of values)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as exc:
        raise SqlError(f"cannot read INSERT: {str(exc).splitlines()[0]}", code="LDB-1001") from None
    if not isinstance(tree, exp.Insert) or not isinstance(tree.expression, exp.Values):
        raise SqlError("write INSERT INTO source [(col, …)] VALUES (…), (…) with literal values",
                       code="LDB-1002")
    target = tree.this
    columns = None
    if isinstance(target, exp.Schema):
        columns = [c.name for c in target.expressions]
        target = target.this
    rows = []
    for tup in tree.expression.expressions:
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        rows.append([_literal(e) for e in items])
    return target.name, columns, rows


def _literal(e: Any) -> Any:
    from sqlglot import exp

    if isinstance(e, exp.Paren):
        return _literal(e.this)
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if isinstance(e, exp.Neg):
        v = _literal(e.this)
        if isinstance(v, int | float):
            return -v
    if isinstance(e, exp.Literal):
        if e.is_string:
            return e.this
        t = e.this
        return int(t) if t.lstrip("+-").isdigit() else float(t)
    if isinstance(e, exp.Cast) and isinstance(e.this, exp.Literal):  # TIMESTAMP '2024-…'
        return _literal(e.this)
    raise SqlError(f"INSERT takes literal values; {e.sql()!r} is not one (write numbers, 'text', "
                   "TRUE/FALSE, NULL, or TIMESTAMP '2024-01-02 09:30:00')", code="LDB-1002")


class Shell:
    """One shell session over one connection; see the module docstring."""

    def __init__(self, conn: Any, *, stdout: TextIO, stderr: TextIO) -> None:
        self.conn, self.out, self.err = conn, stdout, stderr
        self.errors = 0
        self._subs: dict[str, Any] = {}
        self._print_lock = threading.Lock()

    # -- output ----------------------------------------------------------------
    def _print(self, text: str) -> None:
        with self._print_lock:
            self.out.write(text + "\n")
            self.out.flush()

    def _on_batch(self, name: str, batch: pa.RecordBatch) -> None:
        self._print(f"-- {name}: {batch.num_rows} row{'s' if batch.num_rows != 1 else ''}\n"
                    f"{format_table(batch)}")

    def _error(self, exc: BaseException) -> None:
        self.errors += 1
        with self._print_lock:
            self.out.flush()
            self.err.write(f"error: {exc}\n")
            self.err.flush()

    def _settle(self) -> None:
        """Wait until every subscribed stream has printed what it emitted so far."""
        for sub in list(self._subs.values()):
            sub._drain(_DRAIN_S)

    def follow(self, name: str) -> None:
        if name not in self._subs:
            self._subs[name] = self.conn.subscribe_callback(
                name, lambda batch, n=name: self._on_batch(n, batch),
                lambda exc, n=name: self._error(RuntimeError(f"printing {n}: {exc}")))

    def follow_existing(self) -> None:
        streams = self.conn.execute("SHOW STREAMS").to_arrow().column("name").to_pylist()
        for name in streams:
            self.follow(name)

    # -- statements --------------------------------------------------------------
    def run(self, stmt: str) -> bool:
        """Run one statement or dot command; False to quit."""
        if stmt.startswith("."):
            return self._dot(stmt)
        try:
            head = _strip_comments(stmt).split(None, 1)[0].upper()
            if head == "INSERT" and re.search(r"(?i)\bVALUES\b", _strip_comments(stmt)):
                self._insert(stmt)  # rows typed in; INSERT INTO t SELECT … is Flink's: execute() maps it
            else:
                self._execute(stmt)
        except LaminarError as exc:
            self._error(exc)
        self._settle()
        return True

    def _insert(self, stmt: str) -> None:
        source, columns, rows = parse_insert(stmt)
        if columns is None:
            desc = self.conn.execute(f"DESCRIBE {source}").to_arrow()
            columns = desc.column("column").to_pylist()
        width = len(columns)
        for i, row in enumerate(rows):
            if len(row) != width:
                raise SqlError(f"INSERT row {i} has {len(row)} values for {width} columns "
                               f"({', '.join(columns)})", code="LDB-1002")
        with self._print_lock:  # what the insert emits prints after this line, never before it
            n = self.conn.insert(source, [dict(zip(columns, row, strict=True)) for row in rows])
            self.out.write(f"inserted {n} row{'s' if n != 1 else ''}\n")
            self.out.flush()

    def _execute(self, stmt: str) -> None:
        res = self.conn.execute(stmt)
        for r in res.statements or [res]:
            if r.kind in ("show", "describe", "explain", "select"):
                self._print(format_table(r.table) if r.kind != "explain"
                            else "\n".join(r.table.column(0).to_pylist()))
            elif r.kind == "create_stream":
                self.follow(r.name)
                self._print(f"created stream {r.name} (its rows print as they are emitted)")
            elif r.kind.startswith("create_"):
                self._print(f"created {r.kind[len('create_'):]} {r.name}")
            elif r.kind == "drop":
                sub = self._subs.pop(r.name, None)
                if sub is not None:
                    sub.cancel()
                self._print(f"dropped {r.name}")

    def _dot(self, command: str) -> bool:
        word = command.split()[0].lower().rstrip(";")
        try:
            if word in (".quit", ".exit", ".q"):
                return False
            if word == ".help":
                self._print(_HELP)
            elif word in (".streams", ".tables"):
                self._print(format_table(self.conn.execute("SHOW ALL").to_arrow().drop(["sql"])))
            elif word == ".start":
                self.conn.start()
                self._print("started: connector sources (Kafka, filesystem, datagen tables) are being read")
            elif word == ".finish":
                self.conn.finish()
                self._print("finished: every window is closed")
            elif word == ".checkpoint":
                self._print(f"checkpoint {self.conn.checkpoint()}")
            elif word == ".metrics":
                self._print(json.dumps(self.conn.metrics(), indent=2, default=str))
            else:
                self._error(SqlError(f"unknown command {word!r}; .help lists them", code="LDB-1002"))
        except LaminarError as exc:
            self._error(exc)
        self._settle()
        return True


# what users of psql, sqlite3 and the mysql client type to leave or get help, on a line of its own
_ALIASES = {"\\q": ".quit", "\\quit": ".quit", "quit": ".quit", "exit": ".quit", "\\?": ".help",
            "\\h": ".help", "help": ".help", "\\d": ".streams"}


def _command(line: str) -> str | None:
    """The dot command a line is (``.quit``; ``\\q``, ``quit``, ``exit`` too), or None for SQL."""
    text = line.strip()
    if text.startswith("."):
        return text
    word = text.rstrip(";").strip().lower()
    if word in _ALIASES:
        return _ALIASES[word]
    if text.startswith("\\"):
        return "." + text[1:]  # an unknown backslash command: refused like an unknown dot command
    return None


def _reader(stdin: TextIO, stdout: TextIO, interactive: bool):
    """``read(unfinished) -> line | None`` (None at end of input); prompts when interactive."""
    def read(unfinished: bool) -> str | None:
        if interactive:
            try:
                return input(_MORE if unfinished else _PROMPT)
            except EOFError:
                stdout.write("\n")
                return None
        line = stdin.readline()
        return line.rstrip("\n") if line else None
    return read


def run_shell(directory: str | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
              stderr: TextIO | None = None, variables: dict[str, str] | None = None,
              interactive: bool | None = None) -> int:
    """Run the shell until ``.quit`` or end of input; 0, or 1 when a statement failed."""
    import laminardb

    stdin = stdin or sys.stdin
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if interactive is None:
        interactive = stdin is sys.stdin and stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:
            pass
    conn = laminardb.open(directory or ":memory:", config={"vars": dict(variables or {})})
    shell = Shell(conn, stdout=stdout, stderr=stderr)
    try:
        shell.follow_existing()
        if interactive:
            where = f"database {directory}" if directory else "an in-memory database"
            stdout.write(f"laminardb {laminardb.__version__} — {where}; .help for help, .quit to leave\n")
        buffer = ""
        read = _reader(stdin, stdout, interactive)
        while True:
            try:
                line = read(bool(_strip_comments(buffer)))
            except KeyboardInterrupt:  # Ctrl-C drops the statement being typed
                buffer = ""
                stdout.write("\n")
                continue
            if line is None:
                break
            command = _command(line) if not _strip_comments(buffer) else None
            if command is not None:
                buffer = ""
                if not shell.run(command):
                    break
                continue
            statements, buffer = split_statements(buffer + line + "\n")
            if not all(shell.run(stmt) for stmt in statements):
                break
        if _strip_comments(buffer):
            shell.run(buffer.strip())  # the last statement may lack its ';'
    finally:
        conn.close()
    return 1 if shell.errors else 0
