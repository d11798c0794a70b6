"""Streaming DDL: statement dataclasses and the parser for the parts sqlglot does not know.

Entry point: ``parse_script(sql, variables) -> list[Statement]``. Queries inside
CREATE STREAM / VIEW / SINK and bare SELECTs are handed to sqlglot (``_dialect``);
CREATE SOURCE (column list, WATERMARK clause, WITH options) and the rest are parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa
from sqlglot import exp

from laminardb.sql import _lexer
from laminardb.sql._dialect import parse_select
from laminardb.sql.exceptions import SqlParseError, UnsupportedSqlError
from laminardb.sql.intervals import interval_ms
from laminardb.sql.types import parse_type


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    not_null: bool = False


@dataclass(frozen=True)
class CreateSource:
    name: str
    columns: list[Column]
    watermark_col: str | None = None
    watermark_delay_ms: int = 0
    options: dict[str, str] = field(default_factory=dict)
    if_not_exists: bool = False
    connector: str | None = None  # e.g. "kafka" for FROM KAFKA (…)
    connector_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    """A SELECT with its streaming clauses; ``select`` is the sqlglot tree."""

    select: exp.Expression
    text: str
    emit: str | None = None
    late_data_to: str | None = None
    tvf: _lexer.WindowTvf | None = None


@dataclass(frozen=True)
class CreateStream:
    name: str
    query: Query
    materialized: bool = False
    if_not_exists: bool = False
    or_replace: bool = False


@dataclass(frozen=True)
class CreateSink:
    name: str
    connector: str
    options: dict[str, str]
    from_name: str | None = None
    query: Query | None = None
    if_not_exists: bool = False


@dataclass(frozen=True)
class Drop:
    kind: str  # SOURCE | STREAM | MATERIALIZED VIEW | SINK
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class Show:
    kind: str  # SOURCES | STREAMS | MATERIALIZED VIEWS | SINKS | ALL


@dataclass(frozen=True)
class Describe:
    name: str


@dataclass(frozen=True)
class Explain:
    statement: object


Statement = CreateSource | CreateStream | CreateSink | Drop | Show | Describe | Explain | Query

_IDENT = r'(?:"(?:[^"]|"")+"|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)'


def unquote(name: str) -> str:
    """Object names: quoted keep their case; unquoted fold to lower case."""
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"`":
        return name[1:-1].replace('""', '"')
    return name.lower()


def parse_script(sql: str, variables: dict[str, object] | None = None) -> list[Statement]:
    return [stmt for stmt, _ in parse_script_with_text(sql, variables)]


def parse_script_with_text(sql: str, variables: dict[str, object] | None = None) -> list[tuple[Statement, str]]:
    """Each statement with its text after ``${VAR}`` substitution (the cluster re-sends it)."""
    sql = _lexer.substitute(sql, variables or {})
    return [(parse_statement(s.text, line=s.line, col=s.col), s.text) for s in _lexer.split_statements(sql)]


def parse_statement(text: str, *, line: int = 0, col: int = 0) -> Statement:
    head = re.sub(r"\s+", " ", text[:60]).upper()
    if head.startswith("EXPLAIN "):
        return Explain(parse_statement(text[len("EXPLAIN") :].strip(), line=line, col=col))
    if head.startswith("CREATE SOURCE") or head.startswith("CREATE TABLE"):
        return _create_source(text, line, col)
    m = re.match(
        rf"(?is)\s*CREATE\s+(OR\s+REPLACE\s+)?(STREAM|MATERIALIZED\s+VIEW|VIEW)\s+(IF\s+NOT\s+EXISTS\s+)?({_IDENT})\s+AS\s+(.*)$",
        text,
    )
    if m:
        materialized = m.group(2).upper() != "STREAM"
        query = _query(m.group(5), *_position(text, m.start(5), line, col))
        return CreateStream(unquote(m.group(4)), query, materialized, bool(m.group(3)), bool(m.group(1)))
    if head.startswith("CREATE SINK"):
        return _create_sink(text, line, col)
    m = re.match(
        rf"(?is)\s*DROP\s+(SOURCE|STREAM|MATERIALIZED\s+VIEW|VIEW|SINK|TABLE)\s+(IF\s+EXISTS\s+)?({_IDENT})\s*$",
        text,
    )
    if m:
        kind = re.sub(r"\s+", " ", m.group(1).upper())
        kind = {"VIEW": "MATERIALIZED VIEW", "TABLE": "SOURCE"}.get(kind, kind)
        return Drop(kind, unquote(m.group(3)), bool(m.group(2)))
    m = re.match(r"(?is)\s*SHOW\s+(SOURCES|STREAMS|MATERIALIZED\s+VIEWS|VIEWS|SINKS|TABLES|ALL)\s*$", text)
    if m:
        kind = re.sub(r"\s+", " ", m.group(1).upper())
        kind = {"VIEWS": "MATERIALIZED VIEWS", "TABLES": "SOURCES"}.get(kind, kind)
        return Show(kind)
    m = re.match(rf"(?is)\s*(?:DESCRIBE|DESC)\s+({_IDENT})\s*$", text)
    if m:
        return Describe(unquote(m.group(1)))
    if head.startswith("SELECT") or head.startswith("WITH") or head.startswith("("):
        return _query(text, line, col)
    first = text.split(None, 1)[0] if text.strip() else ""
    raise SqlParseError(
        f"unknown statement {first!r}; expected CREATE SOURCE/STREAM/MATERIALIZED VIEW/SINK, "
        "DROP, SHOW, DESCRIBE, EXPLAIN or SELECT",
        line=line + 1,
        col=col + 1,
    )


def _position(text: str, offset: int, line: int, col: int) -> tuple[int, int]:
    """(line, column) of ``text[offset]`` given where ``text`` starts in the script."""
    breaks = text.count("\n", 0, offset)
    if breaks == 0:
        return line, col + offset
    return line + breaks, offset - (text.rfind("\n", 0, offset) + 1)


def _query(text: str, line: int, col: int) -> Query:
    body, clauses = _lexer.strip_streaming_clauses(text)
    body, tvf = _lexer.rewrite_window_tvf(body)
    select = parse_select(body, base_line=line, base_col=col)
    if not isinstance(select, exp.Select):
        raise UnsupportedSqlError(
            f"only a single SELECT is supported as a query here (got {select.key.upper()}); "
            "UNION and other set operations are not supported yet"
        )
    late = unquote(clauses.late_data_to) if clauses.late_data_to else None
    return Query(select, text, clauses.emit, late, tvf)


# --------------------------------------------------------------------------- CREATE SOURCE


def _create_source(text: str, line: int, col: int) -> CreateSource:
    m = re.match(rf"(?is)\s*CREATE\s+(?:SOURCE|TABLE)\s+(IF\s+NOT\s+EXISTS\s+)?({_IDENT})\s*\(", text)
    if not m:
        raise SqlParseError(
            "expected CREATE SOURCE name (col TYPE, …, WATERMARK FOR col AS col - INTERVAL 'n' SECOND)",
            line=line + 1,
            col=col + 1,
        )
    name = unquote(m.group(2))
    body_start = m.end()
    body_end = _close_paren(text, body_start - 1)
    items = _split_top_level(text[body_start:body_end])
    columns: list[Column] = []
    wm_col = None
    wm_delay = 0
    for item in items:
        wm = re.match(rf"(?is)\s*WATERMARK\s+FOR\s+({_IDENT})\s+AS\s+(.+)$", item)
        if wm:
            wm_col = unquote(wm.group(1))
            wm_delay = _watermark_delay(wm_col, wm.group(2))
            continue
        cm = re.match(rf"(?is)\s*({_IDENT})\s+(.+?)(\s+NOT\s+NULL)?(\s+NULL)?\s*$", item)
        if not cm:
            raise SqlParseError(f"cannot read column definition {item.strip()!r}", line=line + 1)
        columns.append(Column(unquote(cm.group(1)), parse_type(cm.group(2)), bool(cm.group(3))))
    if not columns:
        raise SqlParseError(f"source {name!r} declares no columns")
    names = [c.name for c in columns]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SqlParseError(f"column {sorted(dup)[0]!r} is declared twice in source {name!r}")
    if wm_col is not None and wm_col not in names:
        raise SqlParseError(f"WATERMARK FOR {wm_col}: source {name!r} has no column {wm_col!r}")
    rest = text[body_end + 1 :].strip()
    options: dict[str, str] = {}
    connector, conn_opts = None, {}
    while rest:
        om = re.match(r"(?is)WITH\s*\(", rest)
        fm = re.match(r"(?is)FROM\s+([A-Za-z_]+)\s*\(", rest)
        if om:
            close = _close_paren(rest, om.end() - 1)
            options = _options(rest[om.end() : close])
        elif fm:
            close = _close_paren(rest, fm.end() - 1)
            connector, conn_opts = fm.group(1).lower(), _options(rest[fm.end() : close])
        else:
            raise UnsupportedSqlError(
                f"unexpected text after the column list of source {name!r}: {rest[:40]!r} "
                "(expected WITH (key = 'value', …) and/or FROM KAFKA (…))"
            )
        rest = rest[close + 1 :].strip()
    return CreateSource(name, columns, wm_col, wm_delay, options, bool(m.group(1)), connector, conn_opts)


def _watermark_delay(col: str, expr_text: str) -> int:
    e = parse_select(f"SELECT {expr_text}").expressions[0]
    if isinstance(e, exp.Column):
        return 0
    if isinstance(e, exp.Sub) and isinstance(e.this, exp.Column):
        return interval_ms(e.expression)
    raise UnsupportedSqlError(
        f"WATERMARK FOR {col} AS {expr_text.strip()}: write it as `{col} - INTERVAL 'n' SECOND` "
        f"or `{col}`"
    )


def _top_level(text: str, start: int = 0):
    """Yield (index, char, depth) for characters outside quotes; depth after '(' / before ')'."""
    depth, quote = 0, None
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        yield i, ch, depth


def _close_paren(text: str, open_at: int) -> int:
    for i, ch, depth in _top_level(text, open_at):
        if ch == ")" and depth == 0:
            return i
    raise SqlParseError("unbalanced parentheses in column list")


def _split_top_level(text: str) -> list[str]:
    out, start = [], 0
    for i, ch, depth in _top_level(text):
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s for s in out if s.strip()]


def _options(text: str) -> dict[str, str]:
    opts = {}
    for item in _split_top_level(text):
        m = re.match(r"""(?is)\s*(['"`]?)([A-Za-z_][\w.\-]*)\1\s*=\s*(?:'((?:[^']|'')*)'|([^\s,]+))\s*$""", item)
        if not m:
            raise SqlParseError(f"cannot read option {item.strip()!r}; write key = 'value'")
        value = m.group(3).replace("''", "'") if m.group(3) is not None else m.group(4)
        opts[m.group(2).lower()] = value
    return opts


# --------------------------------------------------------------------------- CREATE SINK


def _create_sink(text: str, line: int, col: int) -> CreateSink:
    ine = re.match(r"(?is)\s*CREATE\s+SINK\s+IF\s+NOT\s+EXISTS\s+", text)
    if ine:  # parse the rest as a plain CREATE SINK
        text = "CREATE SINK " + text[ine.end():]
    m = re.match(
        rf"(?is)\s*CREATE\s+SINK\s+({_IDENT})\s+FROM\s+({_IDENT})\s+INTO\s+([A-Za-z_]+)\s*\((.*)\)\s*$", text
    )
    if m:
        return CreateSink(unquote(m.group(1)), m.group(3).lower(), _options(m.group(4)), from_name=unquote(m.group(2)),
                          if_not_exists=bool(ine))
    m = re.match(rf"(?is)\s*CREATE\s+SINK\s+({_IDENT})\s+INTO\s+([A-Za-z_]+)\s*\(", text)
    if m:
        close = _close_paren(text, m.end() - 1)
        opts = _options(text[m.end() : close])
        rest = re.match(r"(?is)\s*AS\s+(.*)$", text[close + 1 :])
        if rest:
            query = _query(rest.group(1), line, col)
            return CreateSink(unquote(m.group(1)), m.group(2).lower(), opts, query=query, if_not_exists=bool(ine))
    raise SqlParseError(
        "expected CREATE SINK name FROM stream INTO FILE (path = '…', format = 'jsonl') "
        "or CREATE SINK name INTO FILE (…) AS SELECT …",
        line=line + 1,
        col=col + 1,
    )
