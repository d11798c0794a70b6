"""The sqlglot dialect laminardb parses with: ANSI-ish, identifiers in "x" or `x`,
and SESSION usable as a function name (legacy Flink ``GROUP BY SESSION(ts, gap)``).

Entry point: ``parse_select``. sqlglot is lenient where laminardb is strict: before parsing,
the tokens are checked for stray commas (``SELECT x,, FROM a``, which sqlglot would read as
``SELECT x FROM a``) and for JOINs laminardb does not plan (SEMI, ANTI, LATERAL …: no syntax
error but an unsupported construct, reported as one). ``MATCH_CONDITION`` is a keyword (as in
Snowflake's dialect) and ``LEFT ASOF JOIN`` parses as ``ASOF LEFT JOIN``.
"""

from __future__ import annotations

from sqlglot import exp, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from laminardb.sql.exceptions import SqlParseError, UnsupportedJoinError


def _timestampdiff(args: list) -> exp.Expression:
    """Flink's ``TIMESTAMPDIFF(unit, start, end)`` (sqlglot's default reads (start, end, unit))."""
    if len(args) != 3:
        raise ParseError("TIMESTAMPDIFF takes (unit, start, end)")
    unit, start, end = args
    return exp.TimestampDiff(this=end, expression=start, unit=exp.var(unit.name.upper()))


class LaminarDialect(Dialect):
    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]
        KEYWORDS = {**{k: v for k, v in tokens.Tokenizer.KEYWORDS.items() if k != "SESSION"},
                    "MATCH_CONDITION": tokens.TokenType.MATCH_CONDITION,  # ASOF JOIN … MATCH_CONDITION(…)
                    "//": tokens.TokenType.DIV}  # integer division, parsed as IntDiv (as DuckDB's dialect)

    class Parser(parser.Parser):
        FUNCTIONS = {**parser.Parser.FUNCTIONS, "TIMESTAMPDIFF": _timestampdiff}

        def _parse_join_parts(self):
            method, side, kind = super()._parse_join_parts()
            if method is None and side is not None and self._match(tokens.TokenType.ASOF):
                method = self._prev  # LEFT ASOF JOIN (LaminarDB's, Spark's order) as ASOF LEFT JOIN
            return method, side, kind


DIALECT = LaminarDialect()


def tokenize(text: str, *, base_line: int = 0) -> list[tokens.Token]:
    try:
        return DIALECT.tokenize(text)
    except TokenError as e:
        raise SqlParseError(str(e).split("\n")[0]) from None


def _names(*names: str) -> frozenset:
    return frozenset(t for t in (getattr(tokens.TokenType, n, None) for n in names) if t is not None)


# a comma may not follow these tokens (nothing before it) …
_BEFORE_ITEM = _names("SELECT", "L_PAREN", "COMMA", "DISTINCT", "GROUP_BY", "ORDER_BY", "PARTITION_BY")
# … nor precede these (nothing after it)
_AFTER_ITEM = _names("COMMA", "R_PAREN", "FROM", "WHERE", "GROUP_BY", "HAVING", "ORDER_BY", "LIMIT",
                     "UNION", "EXCEPT", "INTERSECT", "WINDOW", "QUALIFY", "SEMICOLON")
_JOIN_WORDS = {"ASOF", "LEFT", "RIGHT", "FULL", "INNER", "OUTER", "CROSS", "SEMI", "ANTI", "NATURAL",
               "TEMPORAL", "PROBE", "LOOKUP", "GLOBAL", "ANY", "ALL", "LATERAL"}
_PLANNED_JOIN_WORDS = {"LEFT", "RIGHT", "FULL", "INNER", "OUTER", "CROSS", "ASOF"}  # joins laminardb plans


def _where(tok: tokens.Token, base_line: int, base_col: int) -> tuple[int, int]:
    col = tok.col - len(tok.text) + 1
    return tok.line + base_line, col + base_col if tok.line == 1 else col


def check_tokens(toks: list[tokens.Token], *, base_line: int = 0, base_col: int = 0) -> None:
    """Refuse stray commas (LDB-1001) and JOINs of every kind (LDB-1002) in a query's tokens."""
    for i, tok in enumerate(toks):
        if tok.token_type == tokens.TokenType.COMMA:
            prev = toks[i - 1] if i else None
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if prev is None or prev.token_type in _BEFORE_ITEM:
                after = f"after {prev.text!r}" if prev is not None else "at the start"
                line, col = _where(tok, base_line, base_col)
                raise SqlParseError(f"stray comma {after}: nothing comes before it; remove it", line=line, col=col)
            if nxt is None or nxt.token_type in _AFTER_ITEM:
                before = f"before {nxt.text!r}" if nxt is not None else "at the end"
                if nxt is not None and nxt.token_type == tokens.TokenType.COMMA:
                    before = "(two commas in a row)"
                line, col = _where(tok, base_line, base_col)
                raise SqlParseError(f"stray comma {before}: nothing comes after it; remove it", line=line, col=col)
        elif tok.token_type == tokens.TokenType.JOIN:
            j = i
            while j > 0 and toks[j - 1].text.upper() in _JOIN_WORDS:
                j -= 1
            kind = " ".join(t.text.upper() for t in toks[j : i + 1])
            if {t.text.upper() for t in toks[j:i]} <= _PLANNED_JOIN_WORDS:
                continue  # inner/outer/cross/ASOF joins: the planner (sql/binder.py) takes them
            raise UnsupportedJoinError(
                f"{kind} is not supported: laminardb plans inner and LEFT/RIGHT/FULL outer equi-joins (with "
                "interval bounds), [LEFT] ASOF JOIN … MATCH_CONDITION(…) ON …, and JOIN t FOR SYSTEM_TIME AS OF "
                "l.time (temporal and lookup joins); write the query with one of those")


def parse_select(text: str, *, base_line: int = 0, base_col: int = 0):
    """Parse one SELECT (or other query) with sqlglot; errors carry line/column."""
    try:
        toks = DIALECT.tokenize(text)
    except TokenError as e:
        raise SqlParseError(str(e).split("\n")[0]) from None
    check_tokens(toks, base_line=base_line, base_col=base_col)
    try:
        stmts = DIALECT.parse(text)
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        line = err.get("line")
        col = err.get("col")
        if line is not None:
            if line == 1:
                col = (col or 0) + base_col
            line += base_line
        desc = err.get("description", str(e))
        hl = err.get("highlight")
        if hl:
            desc += f" (near {hl!r})"
        raise SqlParseError(desc, line=line, col=col) from None
    except TokenError as e:
        raise SqlParseError(str(e).split("\n")[0]) from None
    if len(stmts) != 1 or stmts[0] is None:
        raise SqlParseError("expected exactly one query")
    return _expand_negations(stmts[0])


def _expand_negations(tree: exp.Expression) -> exp.Expression:
    """Rewrite ``negate=True`` nodes as ``NOT (node)``.

    sqlglot 30.30 and later parse ``x NOT LIKE p`` (also NOT ILIKE, IS NOT) as one node with
    ``negate=True``; older releases gave ``Not(Like(…))``. The compiler only knows the second
    shape, so every tree is brought to it here, whatever the sqlglot release.
    """
    # one node at a time, searching again after each rewrite: a rewrite copies the node, so a
    # nested negated node found before it would be left in the discarded original
    while True:
        node = next((n for n in tree.find_all(exp.Like, exp.ILike, exp.Is) if n.args.get("negate")), None)
        if node is None:
            return tree
        node.set("negate", None)
        target = node.parent if isinstance(node.parent, exp.Escape) and node.parent.this is node else node
        inner = target.copy()  # x NOT LIKE p ESCAPE c: NOT (x LIKE p ESCAPE c)
        if target is tree:
            return exp.Not(this=exp.Paren(this=inner))
        target.replace(exp.Not(this=exp.Paren(this=inner)))

