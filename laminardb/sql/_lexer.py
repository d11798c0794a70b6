"""Script-level text handling: ``${VAR}`` substitution, statement splitting, and the
streaming clauses sqlglot does not know (EMIT …, LATE DATA TO, Flink window TVFs).

Entry points: ``substitute``, ``blank_comments``, ``split_statements``, ``strip_streaming_clauses``,
``rewrite_window_tvf``; ``close_paren`` / ``split_top_level`` for parenthesized lists.
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


def blank_comments(sql: str) -> str:
    """``sql`` with every ``-- …`` and ``/* … */`` comment outside quotes replaced by spaces.

    The DDL parser reads column lists and ``WITH (…)`` options by splitting text, not tokens, so a
    comment there would end up inside a column definition or an option (pasted Flink DDL is full
    of them). Blanking keeps the length and every newline, so line/column positions in errors
    still point into the text as written.
    """
    if "--" not in sql and "/*" not in sql:
        return sql
    out = list(sql)
    i, n, quote = 0, len(sql), None
    while i < n:
        ch = sql[i]
        if quote:
            if ch == quote:
                quote = None  # a doubled quote ('' inside text) reopens at once: still inside
            i += 1
            continue
        if ch in "'\"`":
            quote = ch
            i += 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise SqlParseError("unterminated /* comment: close it with */",
                                    line=sql.count("\n", 0, i) + 1)
            end += 2
        else:
            i += 1
            continue
        for k in range(i, end):
            if out[k] != "\n":
                out[k] = " "
        i = end
    return "".join(out)


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
    options: str | None = None  # the text inside a trailing WITH (…) (LaminarDB's stream options)
    lateness: str | None = None  # the interval of ALLOW[ED] LATENESS <interval>


_EMIT_FORMS = {
    ("EMIT", "CHANGES"): "changes",
    ("EMIT", "FINAL"): "close",
    ("EMIT", "ON", "WINDOW", "CLOSE"): "close",
    ("EMIT", "ON", "UPDATE"): "changes",
    ("EMIT", "AFTER", "WATERMARK"): "close",
    ("EMIT", "ON", "WATERMARK"): "close",
}
_EMIT_UNSUPPORTED = {("EMIT", "EVERY"), ("EMIT", "PERIODICALLY")}
_EXPECTED = ("expected EMIT CHANGES, EMIT ON WINDOW CLOSE, EMIT FINAL, LATE DATA TO <stream>, "
             "ALLOW LATENESS <interval> or WITH (allowed_lateness = …)")


def strip_streaming_clauses(text: str) -> tuple[str, StreamingClauses]:
    """Remove the trailing streaming clauses of a query, in any order: ``EMIT …``,
    ``LATE DATA TO name``, ``ALLOW[ED] LATENESS <interval>`` and ``WITH (key = value, …)``."""
    toks = tokenize(text)
    i = _first_clause(toks)
    if i is None:
        return text, StreamingClauses(None, None)
    emit = late = options = lateness = None
    words = [t.text.upper() if t.token_type != TokenType.IDENTIFIER else t.text for t in toks]
    j = i
    while j < len(toks):
        matched = False
        for form, mode in _EMIT_FORMS.items():
            if tuple(words[j : j + len(form)]) == form:
                if emit is not None:
                    raise SqlParseError("EMIT is given twice")
                emit, j, matched = mode, j + len(form), True
                break
        if matched:
            continue
        tok = toks[j]
        if tuple(words[j : j + 2]) in _EMIT_UNSUPPORTED:
            from laminardb.sql.exceptions import UnsupportedSqlError

            raise UnsupportedSqlError(
                f"{words[j]} {words[j + 1]} … (periodic emission) is not supported; use EMIT CHANGES "
                "(every update, as a changelog) or EMIT ON WINDOW CLOSE (once per window)")
        if words[j : j + 3] == ["LATE", "DATA", "TO"] and j + 3 < len(toks):
            late, j = toks[j + 3].text, j + 4
            continue
        if words[j] in ("ALLOW", "ALLOWED") and j + 1 < len(toks) and words[j + 1] == "LATENESS":
            k = j + 2
            while k < len(toks) and not _starts_clause(toks, k):
                k += 1
            if k == j + 2:
                raise SqlParseError("ALLOW LATENESS needs an interval, e.g. ALLOW LATENESS INTERVAL '10' SECOND",
                                    line=tok.line, col=tok.col)
            if lateness is not None:
                raise SqlParseError("ALLOW LATENESS is given twice")
            lateness = text[toks[j + 2].start : toks[k - 1].end + 1]
            j = k
            continue
        if tok.token_type == TokenType.WITH and j + 1 < len(toks) and toks[j + 1].token_type == TokenType.L_PAREN:
            close = _matching_paren(toks, j + 1)
            if options is not None:
                raise SqlParseError("WITH (…) is given twice after the query")
            options = text[toks[j + 1].end + 1 : toks[close].start]
            j = close + 1
            continue
        raise SqlParseError(f"unexpected {tok.text!r}; {_EXPECTED}", line=tok.line, col=tok.col)
    return text[: toks[i].start].rstrip(), StreamingClauses(emit, late, options, lateness)


def _starts_clause(toks: list[Token], i: int) -> bool:
    t = toks[i]
    word = t.text.upper()
    if t.token_type == TokenType.VAR and word in ("EMIT", "LATE"):
        return True
    if t.token_type == TokenType.VAR and word in ("ALLOW", "ALLOWED"):
        return i + 1 < len(toks) and toks[i + 1].text.upper() == "LATENESS"
    return t.token_type == TokenType.WITH and i > 0 and i + 1 < len(toks) and toks[i + 1].token_type == TokenType.L_PAREN


def _first_clause(toks: list[Token]) -> int | None:
    """The first top-level token that starts a streaming clause (a leading WITH is a CTE)."""
    depth = 0
    for i, t in enumerate(toks):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and _starts_clause(toks, i):
            return i
    return None


@dataclass(frozen=True)
class WindowTvf:
    """``TABLE(TUMBLE|HOP|SESSION|CUMULATE(TABLE t, DESCRIPTOR(ts), …))`` found in FROM or after JOIN."""

    kind: str
    table: str
    time_col: str
    args: list[str]  # the interval arguments as SQL text, in the order written


_TVF_KINDS = ("TUMBLE", "HOP", "SESSION", "CUMULATE")


def rewrite_window_tvf(text: str) -> tuple[str, WindowTvf | None]:
    """Replace a Flink window TVF in FROM by its table name; return the window it named."""
    return _rewrite_one_tvf(text, None)


TVF_PLACEHOLDER = "__tvf"  # ``__tvf<i>``: the table of the i-th window TVF, until ddl tags it


def rewrite_window_tvfs(text: str) -> tuple[str, list[WindowTvf]]:
    """Replace every Flink window TVF in FROM (q5 has two) by ``__tvf<i>``, in the order written;
    ``ddl`` puts each table's name back and tags its ``exp.Table`` with ``meta["tvf"] = i``, so
    each SELECT block finds its own window wherever it sits."""
    tvfs: list[WindowTvf] = []
    while True:
        text, tvf = _rewrite_one_tvf(text, f"{TVF_PLACEHOLDER}{len(tvfs)}")
        if tvf is None:
            return text, tvfs
        tvfs.append(tvf)


def _rewrite_one_tvf(text: str, placeholder: str | None) -> tuple[str, WindowTvf | None]:
    toks = tokenize(text)
    for i in range(len(toks) - 3):
        a, b, c = toks[i], toks[i + 1], toks[i + 2]
        if a.text.upper() == "TABLE" and b.token_type == TokenType.L_PAREN and c.text.upper() in _TVF_KINDS:
            if i == 0 or toks[i - 1].token_type not in (TokenType.FROM, TokenType.JOIN):
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
            new = text[: a.start] + (placeholder or table) + text[toks[close].end + 1 :]
            time_col = d.group(1).strip()
            # Flink writes the descriptor quoted (DESCRIPTOR(`dateTime`), Nexmark's queries): the
            # column is the name inside the quotes, as anywhere else in the query.
            if len(time_col) >= 2 and time_col[0] == time_col[-1] and time_col[0] in "`\"":
                time_col = time_col[1:-1]
            tvf = WindowTvf(c.text.upper(), table, time_col, [x.strip() for x in args[2:]])
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


# --------------------------------------------------------------------------- parenthesized lists


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


def close_paren(text: str, open_at: int, what: str = "column list") -> int:
    """Index of the ``)`` matching the ``(`` at ``open_at`` (quotes respected)."""
    for i, ch, depth in _top_level(text, open_at):
        if ch == ")" and depth == 0:
            return i
    raise SqlParseError(f"unbalanced parentheses in {what}")


def split_top_level(text: str, what: str = "list") -> list[str]:
    """Split at top-level commas; an empty item (``a,, b`` or a trailing comma) is an error."""
    out, start = [], 0
    for i, ch, depth in _top_level(text):
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    if len(out) == 1 and not out[0].strip():
        return []
    for i, item in enumerate(out):
        if not item.strip():
            where = "a trailing comma" if i == len(out) - 1 else ("a leading comma" if i == 0 else "two commas in a row")
            raise SqlParseError(f"stray comma in the {what}: {where} ({text.strip()[:60]!r}); remove it")
    return out
