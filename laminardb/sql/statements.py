"""Streaming SQL statements as dataclasses, and the parsing that laminardb's DDL (``ddl.py``) and
Flink's (``flink_ddl.py``) share.

Entry points: the statements (``CreateSource``, ``CreateStream``, ``CreateSink``, ``Drop``,
``Show``, ``Describe``, ``Explain``, ``Query``), ``parse_query(text, line, col)`` (a SELECT with
its streaming clauses), ``read_table`` (a CREATE SOURCE / TABLE up to its column list's end),
``source_from_options`` (its WITH options checked into a ``CreateSource``),
``with_stream_options``, ``unquote``, ``position`` and ``IDENT`` (the identifier pattern).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import pyarrow as pa
from sqlglot import exp

from laminardb.sql import _lexer, options
from laminardb.sql._dialect import parse_select
from laminardb.sql._lexer import close_paren, split_top_level
from laminardb.sql.changelog_kinds import check_changelog_source, is_changelog_kind, native_kind
from laminardb.sql.exceptions import SqlParseError, UnknownOptionError, UnsupportedSqlError
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
    # PRIMARY KEY (…) NOT ENFORCED: a versioned source (each row the new version of its key from
    # its event time on), which a temporal join (FOR SYSTEM_TIME AS OF) reads
    primary_key: tuple[str, ...] = ()
    # Flink's ``proc_time AS PROCTIME()``: a processing-time column queries see (never stored)
    proctime_col: str | None = None


@dataclass(frozen=True)
class Query:
    """A SELECT with its streaming clauses; ``select`` is the sqlglot tree."""

    select: exp.Expression
    text: str
    emit: str | None = None
    late_data_to: str | None = None
    tvf: _lexer.WindowTvf | None = None
    options: dict[str, str] = field(default_factory=dict)  # a trailing WITH (…), as written
    allowed_lateness_ms: int | None = None  # WITH (allowed_lateness = …) / ALLOW LATENESS …
    # every window TVF of the query, in the order written (``tvf`` is the first); the
    # ``exp.Table`` each one reads carries ``meta["tvf"]``, its index here
    tvfs: tuple[_lexer.WindowTvf, ...] = ()


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

IDENT = r'(?:"(?:[^"]|"")+"|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)'


def unquote(name: str) -> str:
    """Object names: quoted keep their case; unquoted fold to lower case."""
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"`":
        return name[1:-1].replace('""', '"')
    return name.lower()


def position(text: str, offset: int, line: int, col: int) -> tuple[int, int]:
    """(line, column) of ``text[offset]`` given where ``text`` starts in the script."""
    breaks = text.count("\n", 0, offset)
    if breaks == 0:
        return line, col + offset
    return line + breaks, offset - (text.rfind("\n", 0, offset) + 1)


def parse_query(text: str, line: int, col: int) -> Query:
    body, clauses = _lexer.strip_streaming_clauses(text)
    body, tvfs = _lexer.rewrite_window_tvfs(body)
    select = parse_select(body, base_line=line, base_col=col)
    _tag_tvfs(select, tvfs)
    if not isinstance(select, exp.Select):
        raise UnsupportedSqlError(
            f"only a single SELECT is supported as a query here (got {select.key.upper()}); "
            "UNION and other set operations are not supported yet"
        )
    _single_input_stars(select)
    late = unquote(clauses.late_data_to) if clauses.late_data_to else None
    opts = options.read_options(clauses.options, what="the WITH (…) after the query") if clauses.options else {}
    lateness = None
    if clauses.lateness is not None:
        lateness = options.lateness_ms(clauses.lateness, "ALLOW LATENESS")
    return Query(select, text, clauses.emit, late, tvfs[0] if tvfs else None, opts, lateness, tuple(tvfs))


def _tag_tvfs(select: exp.Expression, tvfs: list[_lexer.WindowTvf]) -> None:
    """Put back the table name of each window TVF (``__tvf<i>``, see ``_lexer``) and tag its
    ``exp.Table`` with ``meta["tvf"] = i`` (the tag survives copies of the tree)."""
    if not tvfs:
        return
    found = set()
    for t in select.find_all(exp.Table):
        name = t.name
        if not name.startswith(_lexer.TVF_PLACEHOLDER) or not name[len(_lexer.TVF_PLACEHOLDER):].isdigit():
            continue
        i = int(name[len(_lexer.TVF_PLACEHOLDER):])
        table = tvfs[i].table
        quoted = len(table) >= 2 and table[0] == table[-1] and table[0] in "`\""
        t.set("this", exp.Identifier(this=table[1:-1] if quoted else table, quoted=quoted))
        t.meta["tvf"] = i
        found.add(i)
    if len(found) != len(tvfs):
        raise UnsupportedSqlError("a window TVF (TABLE(TUMBLE|HOP|SESSION(TABLE t, DESCRIPTOR(ts), …))) belongs "
                                  "in FROM or after JOIN, in place of a table")


def _single_input_stars(select: exp.Expression) -> None:
    """``A.*`` in a SELECT that reads one relation (no join) is ``*``: the qualifier must name
    that relation (its alias, or its name when it has none). SELECTs with joins keep ``A.*``."""
    for sel in list(select.find_all(exp.Select)):
        frm = sel.args.get("from_") or sel.args.get("from")
        if frm is None or sel.args.get("joins"):
            continue
        rel = frm.this
        names = {rel.alias_or_name} if rel.alias_or_name else set()
        for i, e in enumerate(sel.expressions):
            if not (isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table):
                continue
            if e.table not in names and e.table.lower() not in {n.lower() for n in names}:
                from laminardb.sql.exceptions import UnknownObjectError

                raise UnknownObjectError(f"{e.sql()}: the query reads {', '.join(sorted(names)) or 'a subquery'}, "
                                         f"not {e.table!r}; write {next(iter(names), '') or ''}.* or *")
            sel.expressions[i].replace(exp.Star())


def with_stream_options(query: Query, name: str, before: dict[str, str]) -> Query:
    """Fold a stream's WITH (…) options (before AS and/or after the query) into its query."""
    given = dict(before)
    for key, value in query.options.items():
        if key in given:
            raise SqlParseError(f"option {key!r} of {name!r} is given twice (before AS and after the query)")
        given[key] = value
    lateness = options.stream_options(name, given)
    if lateness is not None and query.allowed_lateness_ms is not None:
        raise SqlParseError(f"{name!r}: give allowed_lateness once (WITH (…) or ALLOW LATENESS)")
    if lateness is None:
        lateness = query.allowed_lateness_ms
    return replace(query, options=given, allowed_lateness_ms=lateness)


# --------------------------------------------------------------------------- CREATE SOURCE / TABLE

_CONSTRAINT = re.compile(r"(?is)\s*(PRIMARY\s+KEY|CONSTRAINT|UNIQUE|FOREIGN\s+KEY|CHECK)\b")


@dataclass(frozen=True)
class TableHead:
    """``CREATE SOURCE|TABLE name (columns…, WATERMARK FOR …)`` read up to the column list's end."""

    name: str
    columns: list[Column]
    types: list[str]  # each column's type as written
    watermark_col: str | None
    watermark_delay_ms: int
    rest: str  # the text after the column list
    if_not_exists: bool = False
    primary_key: tuple[str, ...] = ()
    proctime_col: str | None = None  # ``name AS PROCTIME()`` (read_table(proctime_ok=True) only)


def read_table(text: str, line: int, col: int, *, parse=parse_type, proctime_ok: bool = False) -> TableHead:
    """The name, columns and watermark of a CREATE SOURCE / CREATE [TEMPORARY] TABLE;
    ``proctime_ok``: one computed column ``name AS PROCTIME()`` is accepted (Flink tables)."""
    m = re.match(rf"(?is)\s*CREATE\s+(?:TEMPORARY\s+)?(?:SOURCE|TABLE)\s+(IF\s+NOT\s+EXISTS\s+)?({IDENT})\s*\(", text)
    if not m:
        raise SqlParseError(
            "expected CREATE SOURCE name (col TYPE, …, WATERMARK FOR col AS col - INTERVAL 'n' SECOND)",
            line=line + 1,
            col=col + 1,
        )
    name = unquote(m.group(2))
    body_start = m.end()
    body_end = close_paren(text, body_start - 1)
    items = split_top_level(text[body_start:body_end], f"column list of source {name!r}")
    columns: list[Column] = []
    types: list[str] = []
    wm_col = None
    wm_delay = 0
    pk: tuple[str, ...] = ()
    proctime = None
    for item in items:
        wm = re.match(rf"(?is)\s*WATERMARK\s+FOR\s+({IDENT})\s+AS\s+(.+)$", item)
        if wm:
            wm_col = unquote(wm.group(1))
            wm_delay = _watermark_delay(wm_col, wm.group(2))
            continue
        km = re.match(r"(?is)\s*(?:CONSTRAINT\s+\S+\s+)?PRIMARY\s+KEY\s*\(([^)]*)\)\s*(NOT\s+ENFORCED)?\s*$", item)
        if km:
            if not km.group(2):
                raise UnsupportedSqlError(
                    f"source {name!r}: laminardb does not enforce keys; declare it as Flink does, "
                    f"PRIMARY KEY ({km.group(1).strip()}) NOT ENFORCED (each row is the new version of its key)")
            pk = tuple(unquote(c) for c in km.group(1).split(",") if c.strip())
            continue
        if _CONSTRAINT.match(item):
            raise UnsupportedSqlError(
                f"source {name!r}: {item.strip()[:40]!r} — constraints are not supported on sources "
                "(a source is an append-only stream of rows); remove it")
        computed = re.match(rf"(?is)\s*({IDENT})\s+AS\s+", item)
        if computed and proctime_ok and proctime is None and re.fullmatch(
                rf"(?is)\s*{IDENT}\s+AS\s+PROCTIME\s*\(\s*\)\s*", item):
            proctime = unquote(computed.group(1))
            continue
        if computed:
            raise UnsupportedSqlError(
                f"source {name!r}: computed column {item.strip()[:40]!r} is not supported; compute it in "
                "a stream: CREATE STREAM … AS SELECT …, <expression> AS col FROM " + name)
        cm = re.match(rf"(?is)\s*({IDENT})\s+(.+?)(\s+NOT\s+NULL)?(\s+NULL)?\s*$", item)
        if not cm:
            raise SqlParseError(f"cannot read column definition {item.strip()!r}", line=line + 1)
        columns.append(Column(unquote(cm.group(1)), parse(cm.group(2)), bool(cm.group(3))))
        types.append(cm.group(2).strip())
    if not columns:
        raise SqlParseError(f"source {name!r} declares no columns")
    names = [c.name for c in columns]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SqlParseError(f"column {sorted(dup)[0]!r} is declared twice in source {name!r}")
    if wm_col is not None and wm_col not in names:
        raise SqlParseError(f"WATERMARK FOR {wm_col}: source {name!r} has no column {wm_col!r}")
    for c in pk:
        if c not in names:
            raise SqlParseError(f"PRIMARY KEY ({', '.join(pk)}): source {name!r} has no column {c!r}")
    if proctime is not None and proctime in names:
        raise SqlParseError(f"column {proctime!r} is declared twice in source {name!r}")
    return TableHead(name, columns, types, wm_col, wm_delay, text[body_end + 1 :].strip(), bool(m.group(1)), pk,
                     proctime)


def source_from_options(head: TableHead, opts: dict[str, str], connector: str | None = None,
                        conn_opts: dict[str, str] | None = None) -> CreateSource:
    """The CreateSource of a table head and its WITH (…) options (checked here)."""
    name, wm_col, wm_delay = head.name, head.watermark_col, head.watermark_delay_ms
    conn_opts = dict(conn_opts or {})
    given = options.source_options(name, opts, [c.name for c in head.columns])
    if given.watermark_col is not None:
        if wm_col is not None:
            raise UnknownOptionError(
                f"source {name!r}: the watermark is given twice (WATERMARK FOR {wm_col} and WITH (watermark = "
                f"'{given.watermark_col}')); keep one")
        wm_col, wm_delay = given.watermark_col, given.delay_ms or 0
    if given.connector is not None:
        if connector is not None:
            raise UnknownOptionError(f"source {name!r}: give the connector once, as FROM {connector.upper()} (…) "
                                     f"or as WITH ('connector' = '{given.connector}', …)")
        connector, conn_opts = given.connector, dict(given.connector_options or {})
    if is_changelog_kind(connector):  # FROM POSTGRES_CDC (…) / WITH ('connector' = 'postgres-cdc', …)
        connector = native_kind(connector)
        conn_opts = check_changelog_source(name, connector, conn_opts, head.primary_key,
                                           [c.name for c in head.columns])
    return CreateSource(name, head.columns, wm_col, wm_delay, opts, head.if_not_exists, connector, conn_opts,
                        head.primary_key)


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
