"""Streaming DDL: statement dataclasses and the parser for the parts sqlglot does not know.

Entry point: ``parse_script(sql, variables) -> list[Statement]``. Queries inside
CREATE STREAM / VIEW / SINK and bare SELECTs are handed to sqlglot (``_dialect``);
CREATE SOURCE (column list, WATERMARK clause, WITH options) and the rest are parsed here, Flink's
own statements in ``flink_ddl.py``. The statement dataclasses and the parsing both share live in
``statements.py`` (re-exported here: a statement is what this parser returns).
"""

from __future__ import annotations

import re
from dataclasses import replace

from laminardb.sql import _lexer, options
from laminardb.sql._lexer import close_paren
from laminardb.sql.exceptions import SqlParseError, UnsupportedSqlError
from laminardb.sql.statements import (
    IDENT,
    Column,
    CreateSink,
    CreateSource,
    CreateStream,
    Describe,
    Drop,
    Explain,
    Query,
    Show,
    Statement,
    TableHead,
    parse_query,
    position,
    read_table,
    source_from_options,
    unquote,
    with_stream_options,
)

__all__ = ["Column", "CreateSink", "CreateSource", "CreateStream", "Describe", "Drop", "Explain", "Query",
           "Show", "Statement", "TableHead", "parse_script", "parse_script_with_text", "parse_statement",
           "read_table", "source_from_options", "unquote"]


def parse_script(sql: str, variables: dict[str, object] | None = None) -> list[Statement]:
    return [stmt for stmt, _ in parse_script_with_text(sql, variables)]


def parse_script_with_text(sql: str, variables: dict[str, object] | None = None, *,
                           written: bool = False) -> list[tuple[Statement, str]]:
    """Each statement with its text after ``${VAR}`` substitution (the cluster re-sends it).
    ``written``: the user writes the script now (``execute``), so the checks that a replayed
    catalog skips run too (``options.check_new_statement``)."""
    # comments go first: a ``${NAME}`` in a comment needs no value, and no later step (the
    # Flink translation reads statement text too) has to know about comments
    sql = _lexer.substitute(_lexer.blank_comments(sql), variables or {})
    parsed = [(parse_statement(s.text, line=s.line, col=s.col), s.text) for s in _lexer.split_statements(sql)]
    if written:
        for stmt, _ in parsed:
            options.check_new_statement(stmt)
    from laminardb.sql import (
        flink_ddl,  # Flink's CREATE TABLE / INSERT INTO / CREATE FUNCTION → ours
    )

    return flink_ddl.translate(parsed)


def parse_statement(text: str, *, line: int = 0, col: int = 0) -> Statement:
    text = _lexer.blank_comments(text)  # comments may stand wherever a token can (pasted Flink DDL)
    head = re.sub(r"\s+", " ", text[:60]).strip().upper()
    if head.startswith("EXPLAIN "):
        return Explain(parse_statement(text[len("EXPLAIN") :].strip(), line=line, col=col))
    if head.startswith(("CREATE SOURCE", "CREATE TABLE", "CREATE TEMPORARY TABLE")):
        from laminardb.sql import flink_ddl

        if flink_ddl.is_flink_table(text):  # CREATE TABLE … WITH ('connector' = …): sql/flink_ddl.py
            return flink_ddl.parse_table(text, line, col)
        return _create_source(text, line, col)
    if head.startswith(("INSERT ", "CREATE FUNCTION", "CREATE TEMPORARY FUNCTION", "CREATE TEMPORARY SYSTEM")):
        from laminardb.sql import flink_ddl

        return flink_ddl.parse_statement(text, line, col)  # type: ignore[return-value]  # translated away
    tv = re.match(r"(?is)\s*CREATE\s+(?:OR\s+REPLACE\s+)?(TEMPORARY\s+VIEW)\b", text)
    if tv:  # Flink's view is a named query: our (non-materialized) stream; same length, same positions
        text = text[: tv.start(1)] + "STREAM".ljust(tv.end(1) - tv.start(1)) + text[tv.end(1) :]
    m = re.match(
        rf"(?is)\s*CREATE\s+(OR\s+REPLACE\s+)?(STREAM|MATERIALIZED\s+VIEW|VIEW)\s+(IF\s+NOT\s+EXISTS\s+)?({IDENT})\s*",
        text,
    )
    if m:
        return _create_stream(text, m, line, col)
    if head.startswith("CREATE SINK"):
        return _create_sink(text, line, col)
    m = re.match(
        rf"(?is)\s*DROP\s+(SOURCE|STREAM|MATERIALIZED\s+VIEW|VIEW|SINK|TABLE)\s+(IF\s+EXISTS\s+)?({IDENT})\s*$",
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
    m = re.match(rf"(?is)\s*(?:DESCRIBE|DESC)\s+({IDENT})\s*$", text)
    if m:
        return Describe(unquote(m.group(1)))
    if head.startswith("SELECT") or head.startswith("WITH") or head.startswith("("):
        query = parse_query(text, line, col)
        if query.options or query.allowed_lateness_ms is not None:
            raise UnsupportedSqlError("WITH (…) / ALLOW LATENESS after a query belong to CREATE STREAM or "
                                      "CREATE MATERIALIZED VIEW; an ad-hoc SELECT reads a snapshot")
        return query
    first = text.split(None, 1)[0] if text.strip() else ""
    raise SqlParseError(
        f"unknown statement {first!r}; expected CREATE SOURCE/STREAM/MATERIALIZED VIEW/SINK, "
        "DROP, SHOW, DESCRIBE, EXPLAIN or SELECT",
        line=line + 1,
        col=col + 1,
    )


def _create_stream(text: str, m: re.Match, line: int, col: int) -> CreateStream:
    """``CREATE [OR REPLACE] STREAM|MATERIALIZED VIEW [IF NOT EXISTS] name [WITH (…)] AS query [WITH (…)]``."""
    name = unquote(m.group(4))
    pos = m.end()
    before: dict[str, str] = {}
    w = re.match(r"(?is)WITH\s*\(", text[pos:])
    if w:
        close = close_paren(text, pos + w.end() - 1, "WITH (…)")
        before = options.read_options(text[pos + w.end() : close], what=f"WITH (…) of {name!r}")
        pos = close + 1
    a = re.match(r"(?is)\s*AS\s+", text[pos:])
    if not a:
        kind = re.sub(r"\s+", " ", m.group(2).upper())
        raise SqlParseError(f"expected CREATE {kind} {name} AS SELECT …", line=line + 1, col=col + 1)
    start = pos + a.end()
    query = parse_query(text[start:], *position(text, start, line, col))
    query = with_stream_options(query, name, before)
    materialized = m.group(2).upper() != "STREAM"
    return CreateStream(name, query, materialized, bool(m.group(3)), bool(m.group(1)))


# --------------------------------------------------------------------------- CREATE SOURCE

def _create_source(text: str, line: int, col: int) -> CreateSource:
    if re.match(r"(?is)\s*CREATE\s+TEMPORARY\s+", text):
        raise UnsupportedSqlError("CREATE TEMPORARY TABLE takes WITH ('connector' = …) (a Flink table); "
                                  "a source that insert() feeds is CREATE SOURCE name (…)")
    head = read_table(text, line, col)
    name, rest = head.name, head.rest
    opts: dict[str, str] = {}
    connector, conn_opts = None, {}
    while rest:
        om = re.match(r"(?is)WITH\s*\(", rest)
        fm = re.match(r"(?is)FROM\s+([A-Za-z_]+)\s*\(", rest)
        if om:
            close = close_paren(rest, om.end() - 1, "WITH (…)")
            if opts:
                raise SqlParseError(f"source {name!r}: WITH (…) is given twice")
            opts = options.read_options(rest[om.end() : close], what=f"WITH (…) of source {name!r}")
        elif fm:
            close = close_paren(rest, fm.end() - 1, f"FROM {fm.group(1)} (…)")
            connector = fm.group(1).lower()
            conn_opts = options.read_options(rest[fm.end() : close], what=f"FROM {fm.group(1).upper()} (…)")
        else:
            raise UnsupportedSqlError(
                f"unexpected text after the column list of source {name!r}: {rest[:40]!r} "
                "(expected WITH (key = 'value', …) and/or FROM KAFKA | POSTGRES_CDC | MYSQL_CDC (…))"
            )
        rest = rest[close + 1 :].strip()
    return source_from_options(head, opts, connector, conn_opts)


# --------------------------------------------------------------------------- CREATE SINK


def _create_sink(text: str, line: int, col: int) -> CreateSink:
    ine = re.match(r"(?is)\s*CREATE\s+SINK\s+IF\s+NOT\s+EXISTS\s+", text)
    if ine:  # parse the rest as a plain CREATE SINK
        text = "CREATE SINK " + text[ine.end():]
    m = re.match(
        rf"(?is)\s*CREATE\s+SINK\s+({IDENT})\s+FROM\s+({IDENT})\s+INTO\s+([A-Za-z_]+)\s*\((.*)\)\s*$", text
    )
    if m:
        opts = options.read_options(m.group(4), what=f"INTO {m.group(3).upper()} (…)")
        return CreateSink(unquote(m.group(1)), m.group(3).lower(), opts, from_name=unquote(m.group(2)),
                          if_not_exists=bool(ine))
    m = re.match(rf"(?is)\s*CREATE\s+SINK\s+({IDENT})\s+INTO\s+([A-Za-z_]+)\s*\(", text)
    if m:
        close = close_paren(text, m.end() - 1, f"INTO {m.group(2).upper()} (…)")
        opts = options.read_options(text[m.end() : close], what=f"INTO {m.group(2).upper()} (…)")
        rest = re.match(r"(?is)\s*AS\s+(.*)$", text[close + 1 :])
        if rest:
            name = unquote(m.group(1))
            query = parse_query(rest.group(1), line, col)
            query = with_stream_options(query, name, {})
            return CreateSink(name, m.group(2).lower(), opts, query=query, if_not_exists=bool(ine))
    m = re.match(rf"(?is)\s*CREATE\s+SINK\s+({IDENT})\s+AS\s+(.*)$", text)
    if m:  # LaminarDB's form: CREATE SINK name AS SELECT … WITH ('connector' = '…', …)
        name = unquote(m.group(1))
        query = parse_query(m.group(2), *position(text, m.start(2), line, col))
        if not query.options:
            raise SqlParseError(f"sink {name!r}: say where it writes: CREATE SINK {name} INTO FILE (path = '…') "
                                "AS SELECT …, or … AS SELECT … WITH ('connector' = 'kafka', …)",
                                line=line + 1, col=col + 1)
        connector, opts = options.sink_with_options(name, query.options)
        return CreateSink(name, connector, opts, query=replace(query, options={}), if_not_exists=bool(ine))
    raise SqlParseError(
        "expected CREATE SINK name FROM stream INTO FILE (path = '…', format = 'jsonl') "
        "or CREATE SINK name INTO FILE (…) AS SELECT …",
        line=line + 1,
        col=col + 1,
    )
