"""Script-level text handling: ``${VAR}`` substitution, statement splitting, and the
streaming clauses sqlglot does not know (EMIT …, LATE DATA TO, Flink window TVFs).

Entry points: ``substitute``, ``split_statements``, ``strip_streaming_clauses``,
``rewrite_window_tvf``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

from laminardb.sql._dialect import tokenize
from laminardb.sql.exceptions import MissingVariableError, SqlParseError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")


def substitute(sql: str, variables: dict[str, object]) -> str:
    """Replace every ``${NAME}`` with the connection's config variable NAME."""

    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name not in variables:
            line = sql.count("\n", 0, m.start()) + 1
            known = ", ".join(sorted(variables)) or "none are set"
            raise MissingVariableError(
                f"${{{name}}} at line {line} has no value; pass it in open(config={{'vars': "
                f"{{'{name}': ...}}}}) (known variables: {known})"
            )
        return str(variables[name])

    return _VAR.sub(repl, sql)


@dataclass(frozen=True)
class StatementText:
    text: str
    line: int  # 0-based line of the statement's first character in the script
    col: int


def split_statements(sql: str) -> list[StatementText]:
    """Split a script at top-level semicolons (quotes and comments respected)."""
    toks = tokenize(sql)
    out: list[StatementText] = []
    start_tok: Token | None = None
    for tok in toks:
        if tok.token_type == TokenType.SEMICOLON:
            if start_tok is not None:
                out.append(_stmt(sql, start_tok, tok.start))
            start_tok = None
        elif start_tok is None:
            start_tok = tok
    if start_tok is not None:
        out.append(_stmt(sql, start_tok, len(sql)))
    return out


def _stmt(sql: str, first: Token, end: int) -> StatementText:
    start = first.start
    # comments before the first token belong to no statement; keep positions exact
    line = sql.count("\n", 0, start)
    col = start - (sql.rfind("\n", 0, start) + 1)
    return StatementText(sql[start:end].strip(), line, col)


@dataclass(frozen=True)
class StreamingClauses:
    emit: str | None  # "changes" | "close" | None (the query's default)
    late_data_to: str | None


_EMIT_FORMS = {
    ("EMIT", "CHANGES"): "changes",
    ("EMIT", "FINAL"): "close",
    ("EMIT", "ON", "WINDOW", "CLOSE"): "close",
    ("EMIT", "ON", "UPDATE"): "changes",
}


def strip_streaming_clauses(text: str) -> tuple[str, StreamingClauses]:
    """Remove trailing ``EMIT …`` and ``LATE DATA TO name`` (either order) from a query."""
    toks = tokenize(text)
    emit = late = None
    cut = len(text)
    i = _first_top_level(toks, "EMIT", "LATE")
    if i is None:
        return text, StreamingClauses(None, None)
    cut = toks[i].start
    words = [t.text.upper() if t.token_type != TokenType.IDENTIFIER else t.text for t in toks[i:]]
    raw = [t.text for t in toks[i:]]
    j = 0
    while j < len(words):
        matched = False
        for form, mode in _EMIT_FORMS.items():
            if tuple(words[j : j + len(form)]) == form:
                if emit is not None:
                    raise SqlParseError("EMIT is given twice")
                emit, j, matched = mode, j + len(form), True
                break
        if matched:
            continue
        if words[j : j + 3] == ["LATE", "DATA", "TO"] and j + 3 < len(words):
            late, j = raw[j + 3], j + 4
            continue
        tok = toks[i + j]
        raise SqlParseError(
            f"unexpected {tok.text!r}; expected EMIT CHANGES, EMIT ON WINDOW CLOSE, EMIT FINAL "
            "or LATE DATA TO <stream>",
            line=tok.line,
            col=tok.col,
        )
    return text[:cut].rstrip(), StreamingClauses(emit, late)


def _first_top_level(toks: list[Token], *words: str) -> int | None:
    depth = 0
    for i, t in enumerate(toks):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.token_type == TokenType.VAR and t.text.upper() in words:
            return i
    return None


@dataclass(frozen=True)
class WindowTvf:
    """``TABLE(TUMBLE|HOP|SESSION|CUMULATE(TABLE t, DESCRIPTOR(ts), …))`` found in FROM."""

    kind: str
    table: str
    time_col: str
    args: list[str]  # the interval arguments as SQL text, in the order written


_TVF_KINDS = ("TUMBLE", "HOP", "SESSION", "CUMULATE")


def rewrite_window_tvf(text: str) -> tuple[str, WindowTvf | None]:
    """Replace a Flink window TVF in FROM by its table name; return the window it named."""
    toks = tokenize(text)
    for i in range(len(toks) - 3):
        a, b, c = toks[i], toks[i + 1], toks[i + 2]
        if a.text.upper() == "TABLE" and b.token_type == TokenType.L_PAREN and c.text.upper() in _TVF_KINDS:
            if i == 0 or toks[i - 1].token_type != TokenType.FROM:
                continue
            close = _matching_paren(toks, i + 1)
            inner_open = i + 3
            if inner_open >= len(toks) or toks[inner_open].token_type != TokenType.L_PAREN:
                continue
            args = _split_args(text, toks, inner_open, _matching_paren(toks, inner_open))
            if len(args) < 2:
                raise SqlParseError(f"{c.text} needs TABLE t, DESCRIPTOR(ts) and interval arguments")
            m = re.fullmatch(r"(?is)\s*TABLE\s+(.+?)(\s+PARTITION\s+BY\s+.*)?", args[0])
            d = re.fullmatch(r"(?is)\s*DESCRIPTOR\s*\(\s*(.+?)\s*\)\s*", args[1])
            if not m or not d:
                raise SqlParseError(
                    f"{c.text} window TVF expects (TABLE name, DESCRIPTOR(time_col), …)",
                    line=c.line,
                    col=c.col,
                )
            table = m.group(1).strip()
            new = text[: a.start] + table + text[toks[close].end + 1 :]
            tvf = WindowTvf(c.text.upper(), table, d.group(1).strip(), [x.strip() for x in args[2:]])
            return new, tvf
    return text, None


def _matching_paren(toks: list[Token], open_idx: int) -> int:
    depth = 0
    for j in range(open_idx, len(toks)):
        if toks[j].token_type == TokenType.L_PAREN:
            depth += 1
        elif toks[j].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j
    raise SqlParseError("unbalanced parentheses")


def _split_args(text: str, toks: list[Token], open_idx: int, close_idx: int) -> list[str]:
    args, depth, start = [], 0, toks[open_idx].end + 1
    for j in range(open_idx + 1, close_idx):
        t = toks[j]
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == TokenType.COMMA and depth == 0:
            args.append(text[start : t.start])
            start = t.end + 1
    args.append(text[start : toks[close_idx].start])
    return [a for a in args if a.strip()]
