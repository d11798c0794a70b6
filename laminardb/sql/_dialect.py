"""The sqlglot dialect laminardb parses with: ANSI-ish, identifiers in "x" or `x`,
and SESSION usable as a function name (legacy Flink ``GROUP BY SESSION(ts, gap)``)."""

from __future__ import annotations

from sqlglot import tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from laminardb.sql.exceptions import SqlParseError


class LaminarDialect(Dialect):
    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]
        KEYWORDS = {k: v for k, v in tokens.Tokenizer.KEYWORDS.items() if k != "SESSION"}


DIALECT = LaminarDialect()


def tokenize(text: str, *, base_line: int = 0) -> list[tokens.Token]:
    try:
        return DIALECT.tokenize(text)
    except TokenError as e:
        raise SqlParseError(str(e).split("\n")[0]) from None


def parse_select(text: str, *, base_line: int = 0, base_col: int = 0):
    """Parse one SELECT (or other query) with sqlglot; errors carry line/column."""
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
    return stmts[0]
