"""Flink SQL's own DDL, mapped onto laminardb's sources, streams and sinks, so that a Flink SQL
script (Nexmark's ``CREATE TABLE … WITH ('connector' = 'blackhole'); INSERT INTO … SELECT …``)
runs unchanged.

Entry points: ``is_flink_table`` / ``parse_table`` / ``parse_statement`` (called by
``ddl.parse_statement``) and ``translate(statements)``, which ``ddl.parse_script_with_text``
runs over every script. A Flink table is a declaration; what it becomes depends on its
connector and on how the script uses it:

============================  =====================================================================
``CREATE TABLE t … WITH``      becomes
============================  =====================================================================
kafka / filesystem / datagen,  ``CREATE SOURCE t`` — unless the script only ``INSERT``s INTO t (then
                               it is only a sink); postgres-cdc / mysql-cdc: a changelog source. datagen and filesystem are polled by
                               ``Connection.start()`` (``connectors/flink_tables.py`` builds them from
                               the specs of ``sql/table_specs.py``)
jdbc / postgres                a lookup table (``sql/lookup_tables.py``): a source node never polled, read
                               only by ``JOIN t FOR SYSTEM_TIME AS OF o.proc_time`` (PostgreSQL, per batch)
blackhole                      nothing until ``INSERT INTO t SELECT …`` = ``CREATE STREAM t AS SELECT …``
                               (rows go nowhere unless subscribed: ``subscribe('t')``)
``INSERT INTO t SELECT …``     kafka/filesystem: ``CREATE SINK t_insert INTO KAFKA|FILE (…) AS SELECT …``
                               (``PARTITIONED BY (a, b)``: ``FILE (…, partitioned_by = 'a, b')``,
                               Hive-style ``a=…/b=…/part-…`` directories; Flink's rolling and
                               partition-commit options are accepted, files roll and become
                               visible per checkpoint)
============================  =====================================================================

The SELECT of an ``INSERT`` is fitted to the table as Flink does: its columns by position,
each cast to the declared type and named after the table's column (``DECIMAL(p, s)`` is DOUBLE
rounded to s digits: laminardb has no DECIMAL); ``INSERT INTO t (a, b)`` fills the other
columns with NULL. What reaches the catalog (and a durable database's WAL, and a cluster's
actors) is the equivalent laminardb statement, so it re-plans without the declaration.
``CREATE [TEMPORARY] VIEW`` is a stream (Flink's view is a named query, not a materialized
one; a plain ``CREATE VIEW`` outside a Flink script stays laminardb's materialized view).
``CREATE FUNCTION f AS 'com.x.Y'`` is refused (``JavaFunctionError``) unless a Python UDF
``f`` is registered on the connection — then it is accepted and names that UDF.
The declarations live in the connection's ``UdfRegistry`` (``laminardb/sql/udf.py``), so an
``INSERT`` may come in a later ``execute()`` than its ``CREATE TABLE``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.tokens import TokenType

from laminardb.sql import function_registry, options
from laminardb.sql._dialect import parse_select, tokenize
from laminardb.sql._lexer import close_paren
from laminardb.sql.changelog_kinds import CHANGELOG_KINDS
from laminardb.sql.exceptions import (
    JavaFunctionError,
    SqlParseError,
    SqlTypeError,
    UnknownObjectError,
    UnknownOptionError,
    UnsupportedSqlError,
)
from laminardb.sql.lookup_tables import LOOKUP_CONNECTORS, LOOKUP_KIND, check_lookup_options
from laminardb.sql.options import FILE_LIFECYCLE
from laminardb.sql.statements import (
    IDENT,
    CreateSink,
    CreateSource,
    CreateStream,
    Drop,
    Explain,
    Query,
    parse_query,
    position,
    read_table,
    source_from_options,
    unquote,
    with_stream_options,
)
from laminardb.sql.table_specs import check_datagen_options
from laminardb.sql.types import parse_type, type_name
from laminardb.sql.udf import UdfRegistry

__all__ = ["FlinkTable", "InsertInto", "CreateFunction", "is_flink_table", "parse_table", "parse_statement",
           "translate", "flink_type"]

# CDC connectors (postgres-cdc, mysql-cdc): sql/changelog_kinds.py
_CDC_CONNECTORS = tuple(k.flink_name for k in CHANGELOG_KINDS.values())
CONNECTORS = ("kafka", "filesystem", "datagen", "blackhole", *_CDC_CONNECTORS, *LOOKUP_CONNECTORS)
# jdbc / postgres: a lookup table (sql/lookup_tables.py), kept as a source node that is never polled
_SOURCE_CONNECTORS = ("kafka", "filesystem", "datagen", *_CDC_CONNECTORS, *LOOKUP_CONNECTORS)
# Kafka keys that concern reading only / writing only: dropped from the other side's options
_KAFKA_READ_ONLY = ("scan.", "properties.group.id", "group.id")
_KAFKA_WRITE_ONLY = ("sink.",)
_FILE_FORMATS = {"csv": "csv", "json": "jsonl", "parquet": "parquet"}
_IDENT = IDENT


@dataclass(frozen=True)
class FlinkTable(CreateSource):
    """``CREATE [TEMPORARY] TABLE … WITH ('connector' = …)``: as a CreateSource (what reading it
    creates), with the Flink connector, its raw options and each column's declared type."""

    flink_connector: str = ""
    flink_options: dict[str, str] = field(default_factory=dict)
    declared_types: tuple[str, ...] = ()
    partitioned_by: tuple[str, ...] = ()

    def as_source(self) -> CreateSource:
        return CreateSource(self.name, self.columns, self.watermark_col, self.watermark_delay_ms, self.options,
                                self.if_not_exists, self.connector, self.connector_options, self.primary_key,
                                self.proctime_col)


@dataclass(frozen=True)
class InsertInto:
    """``INSERT INTO t [(cols)] SELECT …``: the query as written (``query``) and its text."""

    table: str
    columns: tuple[str, ...] | None
    query: Query
    select_text: str
    line: int = 0
    col: int = 0


@dataclass(frozen=True)
class CreateFunction:
    """``CREATE [TEMPORARY [SYSTEM]] FUNCTION name AS 'class' [LANGUAGE …]``."""

    name: str
    class_name: str
    language: str = "JAVA"


# --------------------------------------------------------------------------- types


def flink_type(text: str) -> pa.DataType:
    """A Flink column type → Arrow: DECIMAL/NUMERIC are DOUBLE, TIMESTAMP_LTZ(p) and
    ``TIMESTAMP(p) WITH[OUT] [LOCAL] TIME ZONE`` are TIMESTAMP(p); the rest as ``parse_type``."""
    t = re.sub(r"\s+", " ", text.strip().upper())
    if re.fullmatch(r"(DECIMAL|NUMERIC|DEC)(\s*\(\s*\d+\s*(,\s*\d+\s*)?\))?", t):
        return pa.float64()
    m = re.fullmatch(r"TIMESTAMP_LTZ\s*(\(\s*\d\s*\))?|TIMESTAMP\s*(\(\s*\d\s*\))?\s*WITH(OUT)?( LOCAL)? TIME ZONE", t)
    if m:
        precision = m.group(1) or m.group(2) or "(3)"
        return parse_type(f"TIMESTAMP{precision}")
    return parse_type(t)


def _decimal_scale(text: str) -> int | None:
    m = re.fullmatch(r"(?is)\s*(?:DECIMAL|NUMERIC|DEC)\s*(?:\(\s*\d+\s*(?:,\s*(\d+)\s*)?\))?\s*", text)
    if not m:
        return None
    return int(m.group(1) or 0)


# --------------------------------------------------------------------------- parsing


def _with_options(rest: str, name: str) -> tuple[dict[str, str], tuple[str, ...], str]:
    """(WITH options, PARTITIONED BY columns, text left over) of what follows a column list."""
    partitioned: tuple[str, ...] = ()
    pm = re.match(r"(?is)\s*PARTITIONED\s+BY\s*\(", rest)
    if pm:
        close = close_paren(rest, pm.end() - 1, "PARTITIONED BY (…)")
        partitioned = tuple(unquote(c) for c in rest[pm.end() : close].split(",") if c.strip())
        rest = rest[close + 1 :]
    om = re.match(r"(?is)\s*WITH\s*\(", rest)
    if not om:
        return {}, partitioned, rest.strip()
    close = close_paren(rest, om.end() - 1, "WITH (…)")
    opts = options.read_options(rest[om.end() : close], what=f"WITH (…) of table {name!r}")
    return opts, partitioned, rest[close + 1 :].strip()


def is_flink_table(text: str) -> bool:
    """Whether a CREATE TABLE / CREATE SOURCE is Flink's: CREATE [TEMPORARY] TABLE … WITH
    ('connector' = …). (CREATE SOURCE keeps laminardb's own rules.)"""
    m = re.match(rf"(?is)\s*CREATE\s+(TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_IDENT})\s*\(", text)
    if not m:
        return False
    try:
        close = close_paren(text, m.end() - 1)
        opts, _, _ = _with_options(text[close + 1 :], "")
    except SqlParseError:
        return bool(m.group(1))
    return "connector" in opts or bool(m.group(1))


def parse_table(text: str, line: int = 0, col: int = 0) -> FlinkTable:
    """``CREATE [TEMPORARY] TABLE name (…) [PARTITIONED BY (…)] WITH ('connector' = …, …)``."""
    head = read_table(text, line, col, parse=flink_type, proctime_ok=True)
    name = head.name
    opts, partitioned, rest = _with_options(head.rest, name)
    if rest:
        raise UnsupportedSqlError(f"table {name!r}: unexpected {rest[:40]!r} after WITH (…) (LIKE clauses are "
                                  "not supported: write the columns out)")
    connector = opts.get("connector", "").lower()
    if connector not in CONNECTORS:
        got = f"connector {connector!r} is not supported" if connector else "needs WITH ('connector' = …)"
        raise UnknownOptionError(f"table {name!r}: {got}; laminardb maps Flink's "
                                 f"{', '.join(repr(c) for c in CONNECTORS)}")
    src_connector, src_opts, laminar_opts = None, {}, {}
    wm_col, wm_delay = head.watermark_col, head.watermark_delay_ms
    if connector == "kafka":  # the Kafka source of CREATE SOURCE … WITH ('connector' = 'kafka'), checked alike
        kafka = {k: v for k, v in opts.items() if not k.startswith(_KAFKA_WRITE_ONLY)}
        src = source_from_options(head, kafka)
        src_connector, src_opts, laminar_opts = src.connector, src.connector_options, src.options
        wm_col, wm_delay = src.watermark_col, src.watermark_delay_ms
    elif connector in _CDC_CONNECTORS:  # a changelog keyed by its PRIMARY KEY (sql/changelog_kinds.py)
        src = source_from_options(head, opts)
        src_connector, src_opts, laminar_opts = src.connector, src.connector_options, src.options
        wm_col, wm_delay = src.watermark_col, src.watermark_delay_ms
    elif connector == "datagen":
        schema = pa.schema([pa.field(c.name, c.type) for c in head.columns])
        src_opts = check_datagen_options(name, schema, opts)
        src_connector = "datagen"
    elif connector == "filesystem":  # its keys: options.check_file_table_keys, when the statement is written
        src_connector, src_opts = "filesystem", _file_source_options(name, opts)
    elif connector in LOOKUP_CONNECTORS:  # read on demand by FOR SYSTEM_TIME AS OF joins only
        src_connector, src_opts = LOOKUP_KIND, check_lookup_options(name, opts)
    if head.proctime_col is not None and (connector not in _SOURCE_CONNECTORS or connector in LOOKUP_CONNECTORS):
        raise UnsupportedSqlError(f"table {name!r}: computed column {head.proctime_col} AS PROCTIME() applies to "
                                  "tables read as streams (kafka, filesystem, datagen); compute it in the query")
    if partitioned and connector != "filesystem":
        raise UnsupportedSqlError(f"table {name!r}: PARTITIONED BY applies to filesystem tables")
    declared = [c.name for c in head.columns]
    for p in partitioned:
        if p not in declared:
            raise UnknownObjectError(f"table {name!r}: PARTITIONED BY names {p!r}, which is not one of its columns "
                                     f"({', '.join(declared)})")
    if partitioned and len(set(partitioned)) == len(declared):
        raise UnsupportedSqlError(f"table {name!r}: every column is a partition column; the files would hold none")
    return FlinkTable(name, head.columns, wm_col, wm_delay, laminar_opts,
                      head.if_not_exists, src_connector, src_opts, head.primary_key, flink_connector=connector,
                      flink_options=opts,
                      declared_types=tuple(head.types), partitioned_by=partitioned, proctime_col=head.proctime_col)


def _file_path(name: str, opts: dict[str, str]) -> str:
    path = opts.get("path")
    if not path:
        raise UnsupportedSqlError(f"table {name!r}: connector 'filesystem' needs 'path' = '…'")
    return re.sub(r"^file://", "", path)


def _file_source_options(name: str, opts: dict[str, str]) -> dict[str, str]:
    fmt = (opts.get("format") or "").lower()
    if fmt not in _FILE_FORMATS:
        raise UnknownOptionError(f"table {name!r}: filesystem 'format' = {fmt!r} is not supported; use "
                                 f"{', '.join(repr(f) for f in _FILE_FORMATS)}")
    out = {"path": _file_path(name, opts), "format": _FILE_FORMATS[fmt]}
    return out


def parse_statement(text: str, line: int = 0, col: int = 0) -> InsertInto | CreateFunction:
    """``INSERT INTO …`` or ``CREATE [TEMPORARY [SYSTEM]] FUNCTION …``."""
    if re.match(r"(?is)\s*INSERT\b", text):
        return _parse_insert(text, line, col)
    m = re.match(rf"(?is)\s*CREATE\s+(?:TEMPORARY\s+(?:SYSTEM\s+)?)?FUNCTION\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                 rf"((?:{_IDENT}\.)*{_IDENT})\s+AS\s+'([^']*)'(?:\s+LANGUAGE\s+(\w+))?(?:\s+USING\s+.*)?\s*$", text)
    if not m:
        raise SqlParseError("expected CREATE FUNCTION name AS 'class.Name' [LANGUAGE JAVA|SCALA|PYTHON]",
                            line=line + 1, col=col + 1)
    name = unquote(re.split(r"\.(?=[^.]*$)", m.group(1))[-1])
    return CreateFunction(name, m.group(2), (m.group(3) or "JAVA").upper())


def _parse_insert(text: str, line: int, col: int) -> InsertInto:
    m = re.match(rf"(?is)\s*INSERT\s+(INTO|OVERWRITE)\s+(?:TABLE\s+)?((?:{_IDENT}\.)*{_IDENT})\s*", text)
    if not m:
        raise SqlParseError("expected INSERT INTO table [(col, …)] SELECT …", line=line + 1, col=col + 1)
    if m.group(1).upper() == "OVERWRITE":
        raise UnsupportedSqlError("INSERT OVERWRITE replaces a table's content, which a stream never ends to do; "
                                  "use INSERT INTO")
    table = unquote(re.split(r"\.(?=[^.]*$)", m.group(2))[-1])
    pos = m.end()
    columns = None
    if text[pos : pos + 1] == "(" and not re.match(r"(?is)\(\s*(SELECT|WITH)\b", text[pos:]):
        close = close_paren(text, pos, f"column list of INSERT INTO {table}")
        columns = tuple(unquote(c) for c in text[pos + 1 : close].split(",") if c.strip())
        pos = close + 1
        pos += len(text[pos:]) - len(text[pos:].lstrip())
    rest = text[pos:]
    if re.match(r"(?is)(VALUES|PARTITION)\b", rest):
        word = rest.split(None, 1)[0].upper()
        raise UnsupportedSqlError(
            f"INSERT INTO {table} {word} …: laminardb's INSERT INTO takes a SELECT (it feeds a Flink table); "
            "insert rows into a source with conn.insert() (or INSERT … VALUES in the `laminardb sql` shell)")
    if not re.match(r"(?is)(SELECT|WITH|\()", rest):
        raise SqlParseError(f"expected SELECT after INSERT INTO {table}", line=line + 1, col=col + 1)
    qline, qcol = position(text, pos, line, col)
    query = parse_query(rest, qline, qcol)
    return InsertInto(table, columns, query, rest, qline, qcol)


# --------------------------------------------------------------------------- the SELECT of an INSERT


def _quote(name: str) -> str:
    """A name as SQL text that unquotes to ``name`` again."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _select_items(text: str) -> tuple[int, int, list[str]] | None:
    """(start, end, items) of the top-level SELECT list of ``text`` (None: not a plain SELECT)."""
    toks = tokenize(text)
    if not toks or toks[0].token_type != TokenType.SELECT:
        return None
    i = 1
    while i < len(toks) and toks[i].token_type in (TokenType.DISTINCT, TokenType.ALL):
        i += 1
    if i >= len(toks):
        return None
    start = item = toks[i].start
    depth = 0
    items: list[str] = []
    for j in range(i, len(toks)):
        t = toks[j]
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.token_type == TokenType.COMMA:
            items.append(text[item : t.start])
            item = toks[j + 1].start if j + 1 < len(toks) else t.end + 1
        elif depth == 0 and t.token_type == TokenType.FROM:
            items.append(text[item : t.start])
            return start, t.start, items
    return None


def _unaliased(item: str) -> str | None:
    """An item's expression text without its alias (None: a star, which cannot be fitted)."""
    e = parse_select(f"SELECT {item}").expressions[0]
    if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
        return None
    if not isinstance(e, exp.Alias):
        return item.strip()
    toks = tokenize(item)
    cut = toks[-2] if len(toks) >= 2 and toks[-2].token_type == TokenType.ALIAS else toks[-1]
    return item[: cut.start].strip()


def _fitted(expr: str, type_text: str, t: pa.DataType) -> str:
    scale = _decimal_scale(type_text)
    if scale is not None:
        return f"ROUND(CAST({expr} AS DOUBLE), {scale})"
    return f"CAST({expr} AS {type_name(t)})"


def fit_select(ins: InsertInto, table: FlinkTable) -> str:
    """The INSERT's SELECT with its columns cast to the table's types and named after them;
    unchanged when it selects ``*`` (then the columns are the query's own)."""
    found = _select_items(ins.select_text)
    if found is None:
        return ins.select_text
    start, end, items = found
    found_exprs = [_unaliased(i) for i in items]
    exprs = [e for e in found_exprs if e is not None]
    if len(exprs) != len(found_exprs):  # a star: the columns are the query's own
        return ins.select_text
    names = [c.name for c in table.columns]
    targets = list(ins.columns) if ins.columns is not None else names
    unknown = [c for c in targets if c not in names]
    if unknown:
        raise UnknownObjectError(f"INSERT INTO {table.name}: the table has no column {unknown[0]!r}; its columns are "
                                 f"{', '.join(names)}")
    if len(exprs) != len(targets):
        raise SqlTypeError(f"INSERT INTO {table.name}: the query gives {len(exprs)} columns for {len(targets)} "
                           f"({', '.join(targets)}); select one expression per column, in order")
    given = dict(zip(targets, exprs, strict=True))
    out = []
    for c, type_text in zip(table.columns, table.declared_types, strict=True):
        expr = given.get(c.name, "NULL")
        out.append(f"{_fitted(expr, type_text, c.type)} AS {_quote(c.name)}")
    return ins.select_text[:start] + ", ".join(out) + " " + ins.select_text[end:]


# --------------------------------------------------------------------------- translation


def _reads(stmt: object) -> set[str]:
    """Names of the relations a statement's query reads (FROM, TVFs, CREATE SINK … FROM)."""
    queries = []
    if isinstance(stmt, Query):
        queries.append(stmt)
    elif isinstance(stmt, CreateStream | InsertInto):
        queries.append(stmt.query)
    elif isinstance(stmt, CreateSink):
        if stmt.query is not None:
            queries.append(stmt.query)
        if stmt.from_name:
            return {stmt.from_name.lower()}
    elif isinstance(stmt, Explain):
        return _reads(stmt.statement)
    out: set[str] = set()
    for q in queries:
        if q.tvf is not None:
            out.add(unquote(q.tvf.table).lower())
        for t in q.select.find_all(exp.Table):
            if t.name:
                out.add(t.name.lower())
    return out


def _inserted(stmt: object) -> str | None:
    if isinstance(stmt, Explain):
        return _inserted(stmt.statement)
    return stmt.table.lower() if isinstance(stmt, InsertInto) else None


def translate(statements: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """Replace the Flink statements of a script by laminardb's (see the module docstring)."""
    flinkish = (FlinkTable, InsertInto, CreateFunction)
    registry = function_registry.current()
    declared = registry.flink_tables if registry is not None else {}
    if not any(isinstance(s, flinkish) or isinstance(getattr(s, "statement", None), flinkish)
               or (isinstance(s, Drop) and s.name in declared) for s, _ in statements):
        return statements
    tables: dict[str, FlinkTable] = dict(registry.flink_tables) if registry is not None else {}
    reads = set().union(*(_reads(s) for s, _ in statements))
    inserts = {n for n in (_inserted(s) for s, _ in statements) if n is not None}
    out: list[tuple[Any, str]] = []
    for stmt, text in statements:
        if isinstance(stmt, FlinkTable):
            tables[stmt.name] = stmt
            key = stmt.name.lower()
            if stmt.flink_connector in _SOURCE_CONNECTORS and (key in reads or key not in inserts):
                out.append((stmt.as_source(), text))
        elif isinstance(stmt, InsertInto):
            out.append(_translate_insert(stmt, tables))
        elif isinstance(stmt, Explain) and isinstance(stmt.statement, InsertInto):
            new, _ = _translate_insert(stmt.statement, tables)
            assert new.query is not None  # an INSERT always has its query
            out.append((Explain(CreateStream(new.name, new.query)), text))
        elif isinstance(stmt, CreateFunction):
            _check_function(stmt, registry)
        elif isinstance(stmt, CreateStream) and stmt.materialized and re.match(
                r"(?is)\s*CREATE\s+(OR\s+REPLACE\s+)?VIEW\b", text):
            # a Flink script's CREATE VIEW is a named query: our stream
            new_text = re.sub(r"(?is)^(\s*CREATE\s+(?:OR\s+REPLACE\s+)?)VIEW\b", r"\1STREAM", text, count=1)
            out.append((replace(stmt, materialized=False), new_text))
        elif isinstance(stmt, Drop) and stmt.kind == "SOURCE" and stmt.name in tables:
            table = tables.pop(stmt.name)
            if table.flink_connector in _SOURCE_CONNECTORS:
                out.append((stmt, text))  # a table read as a source; one only written to has no object
        else:
            out.append((stmt, text))
    if registry is not None:
        registry.flink_tables.clear()
        registry.flink_tables.update(tables)
    return out


def _translate_insert(ins: InsertInto, tables: dict[str, FlinkTable]) -> tuple[CreateStream | CreateSink, str]:
    table = tables.get(ins.table) or next((t for k, t in tables.items() if k.lower() == ins.table.lower()), None)
    if table is None:
        known = ", ".join(sorted(tables)) or "none"
        raise UnknownObjectError(
            f"INSERT INTO {ins.table}: no table {ins.table!r} was declared with CREATE TABLE … WITH ('connector' = "
            f"…) on this connection (declared: {known}); INSERT INTO … SELECT feeds such a table (blackhole: a "
            "stream, kafka/filesystem: a sink). Rows go into a source with conn.insert()")
    body = fit_select(ins, table)
    query = parse_query(body, ins.line, ins.col)
    if table.flink_connector == "blackhole":
        name = table.name
        query = with_stream_options(query, name, {})
        return CreateStream(name, query), f"CREATE STREAM {_quote(name)} AS {body}"
    if table.flink_connector in LOOKUP_CONNECTORS:
        raise UnsupportedSqlError(f"INSERT INTO {table.name}: a {table.flink_connector!r} table is read by lookup "
                                  "joins (FOR SYSTEM_TIME AS OF); laminardb does not write to it")
    if table.flink_connector in ("datagen", *_CDC_CONNECTORS):
        what = "generates rows" if table.flink_connector == "datagen" else "reads a database's changes"
        raise UnsupportedSqlError(f"INSERT INTO {table.name}: a {table.flink_connector} table {what}; it cannot "
                                  "be written to (use 'blackhole', 'kafka' or 'filesystem')")
    name = f"{table.name}_insert"
    native, opts = options.sink_with_options(name, _sink_options(table))
    query = with_stream_options(query, name, {})
    listed = ", ".join(f"{_quote_key(k)} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in opts.items())
    text = f"CREATE SINK {_quote(name)} INTO {native.upper()} ({listed}) AS {body}"
    return CreateSink(name, native, opts, query=query), text


def _quote_key(key: str) -> str:
    return key if re.fullmatch(r"[a-z_][a-z0-9_]*", key) else f"'{key}'"


def _sink_options(table: FlinkTable) -> dict[str, str]:
    """The table's WITH options as a sink takes them (what only concerns reading is left out)."""
    opts = dict(table.flink_options)
    if table.flink_connector == "kafka":
        opts = {k: v for k, v in opts.items() if not k.startswith(_KAFKA_READ_ONLY) and k != "sink.partitioner"}
    elif table.flink_connector == "filesystem":
        fmt = (opts.get("format") or "").lower()
        opts["path"] = _file_path(table.name, opts)
        if fmt in _FILE_FORMATS:
            opts["format"] = _FILE_FORMATS[fmt]
        # how Flink rolls files and when it declares a partition complete: laminardb rolls and
        # makes files visible per checkpoint (exactly-once), so these are accepted, not applied
        opts = {k: v for k, v in opts.items() if not k.startswith(FILE_LIFECYCLE)}
        if table.partitioned_by:
            opts["partitioned_by"] = ", ".join(table.partitioned_by)
    return opts


def _check_function(stmt: CreateFunction, registry: UdfRegistry | None) -> None:
    if registry is not None and stmt.name in registry:
        return  # the Python UDF registered under that name stands in for the class
    what = "a Java class" if stmt.language in ("JAVA", "SCALA") else f"a {stmt.language.title()} function"
    raise JavaFunctionError(
        f"CREATE FUNCTION {stmt.name} AS '{stmt.class_name}' names {what}, which laminardb cannot load. Register "
        f"a Python UDF under that name before running the script: conn.register_udf('{stmt.name}', fn, "
        "'BIGINT'), where fn takes pyarrow Arrays and returns a pyarrow Array (docs/sql.md, Python UDFs); "
        "this statement is then accepted and names it")
