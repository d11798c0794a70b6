"""Bind the joins that pick rows by time: ASOF, event-time temporal and processing-time lookup.

Entry point: ``special_join(builder, k, kind, left, right, conds)``, called by ``binder`` for
FROM item ``k`` when its JOIN is one of:

* ``[LEFT] ASOF JOIN r MATCH_CONDITION(l.t OP r.t) ON l.k = r.k`` (LaminarDB's and Snowflake's
  form; ``ASOF LEFT JOIN`` and DuckDB's form, the inequality among the ON conjuncts, too)
  → ``plan.AsofJoin``;
* ``JOIN r FOR SYSTEM_TIME AS OF l.t [AS s] ON l.k = r.pk`` where ``l.t`` is an event-time
  column of the left input (with a watermark) → the event-time temporal join, an ``AsofJoin`` with ``>=`` against a
  versioned source (``PRIMARY KEY (…) NOT ENFORCED``, with a watermark);
* the same with anything else as of (a ``PROCTIME()`` column: Nexmark q13) → ``plan.LookupJoin``,
  or ``plan.ExternalLookupJoin`` when the right input is a jdbc / postgres table (read from
  PostgreSQL by its keys, ``sql/lookup_tables.py``).

``conds`` are the ON conjuncts the binder left at the join: right-only conjuncts were already
pushed into the right input (they filter the rows a match is chosen from, as in Snowflake and
Spark), left-only ones of an inner join into the left. What remains must be equalities (the
keys) and, for ASOF, the time condition; a lookup join keeps any other condition as a residual.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from laminardb.sql._join_inputs import and_all, cast_to, key_type, side_schema, side_times
from laminardb.sql.exceptions import SqlTypeError, UnknownColumnError, UnsupportedJoinError
from laminardb.sql.expressions import Expr, Scope, compile_expr
from laminardb.sql.plan import AsofJoin, ExternalLookupJoin, Filter, LookupJoin, Scan
from laminardb.sql.types import ticks_per_ms
from laminardb.sql.watermarks import WatermarkMap, on_processing_time

_OPS = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<"}
_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}


def special_join(builder, k: int, kind: str, left, right, conds: list[exp.Expression]):
    b = builder.b
    items = b.items
    it = items[k]
    form, arg = builder.special[k]
    what = "ASOF JOIN" if form == "asof" else f"JOIN {it.alias} FOR SYSTEM_TIME AS OF"
    if kind not in ("inner", "left"):
        raise UnsupportedJoinError(f"{kind.upper()} {what}: only inner and LEFT joins pick rows by time; "
                                   f"write {what.replace('JOIN', 'LEFT JOIN', 1)} or swap the inputs")
    lschema, rschema = side_schema(items[:k]), side_schema([it])
    ltimes, lprimary = side_times(items[:k])
    rtimes, rprimary = side_times([it])
    lscope, rscope = Scope(lschema), Scope(rschema)
    lkeys: list[Expr] = []
    rkeys: list[Expr] = []
    right_key_cols: list[str] = []
    key_cols: list[str | None] = []  # per key: the right column it equals (None: an expression)
    rest: list[exp.Expression] = []
    for c in conds:
        if isinstance(c, exp.EQ):
            rx, ry = b.refs(c.this), b.refs(c.expression)
            if rx and ry and (max(rx) < k and ry == {k} or rx == {k} and max(ry) < k):
                lx, rx_ = (c.this, c.expression) if ry == {k} else (c.expression, c.this)
                le, re_ = compile_expr(b.rewrite(lx), lscope), compile_expr(b.rewrite(rx_), rscope)
                t = key_type(le.type, re_.type, c.sql())
                lkeys.append(cast_to(le, t))
                rkeys.append(cast_to(re_, t))
                key_cols.append(None)
                if isinstance(rx_, exp.Column):
                    right_key_cols.append(it.schema.field(b.resolve(rx_)[1]).name)
                    key_cols[-1] = right_key_cols[-1]
                continue
        rest.append(c)
    cond_sql = " AND ".join(c.sql() for c in conds)
    schema = pa.schema(list(lschema) + list(rschema))
    if not lkeys:
        raise UnsupportedJoinError(
            f"{what} {it.alias} needs an equality between the two inputs (ON l.key = {it.alias}.key): the rows "
            f"of each key are what a match is picked from; {cond_sql or 'no condition'} has none")

    if form == "as_of":
        col = arg.args.get("expression")
        kind_of = (arg.args.get("kind") or "").upper()
        if kind_of != "AS OF":
            raise UnsupportedJoinError(f"FOR SYSTEM_TIME {kind_of or '…'} is not supported; write FOR SYSTEM_TIME AS OF "
                                       "l.time (an event-time column, or a PROCTIME() column for a lookup)")
        r = b.resolve(col) if isinstance(col, exp.Column) else None
        lname = items[r[0]].internal(r[1]) if r is not None and r[0] < k else None
        processing = lname is not None and lname in ltimes and on_processing_time(ltimes[lname])
        table = _lookup_table(right)
        if table is not None:
            return _external(builder, k, kind, left, right, table, processing, col, lkeys, key_cols, rest, lschema,
                             rschema, schema, ltimes, lprimary, cond_sql)
        if lname is None or lname not in ltimes or processing:
            if left.changelog and not processing:  # no event time: a changelog (EMIT CHANGES) has none
                _append_only(left, right, what, it.alias)
            # processing time: the right input as it is when each left row arrives
            res = None
            if rest:
                res = builder._compile_bool(b.rewrite(and_all(rest)), Scope(schema))
            times = dict(ltimes)
            return LookupJoin(kind, left, right, lkeys, rkeys, res, schema, lprimary if lprimary in times else None,
                              times, f"AS OF {col.sql()} ON {cond_sql}")
        _append_only(left, right, what, it.alias)
        pk = it.node.primary_key if isinstance(it.node, Scan) else ()
        if not pk:
            src = it.node.name if isinstance(it.node, Scan) else it.alias
            raise UnsupportedJoinError(
                f"the temporal join of {src!r} AS OF event time {col.sql()} needs a versioned source: declare "
                f"its key in CREATE SOURCE {src} (…, PRIMARY KEY (key) NOT ENFORCED, WATERMARK FOR ts AS …); "
                f"for a lookup of its rows as they are when each row arrives, join AS OF a PROCTIME() column")
        missing = [c for c in pk if c not in right_key_cols]
        if missing:
            raise UnsupportedJoinError(
                f"the temporal join of {it.alias!r} must join on its whole primary key ({', '.join(pk)}): add "
                f"{' AND '.join(f'… = {it.alias}.{c}' for c in missing)} to ON")
        if rprimary is None:
            raise UnsupportedJoinError(f"the temporal join of {it.alias!r} needs its event time: declare WATERMARK "
                                       f"FOR <ts> AS … in CREATE SOURCE {it.alias}")
        if rest:
            raise UnsupportedJoinError(f"the temporal join of {it.alias!r} takes equalities on its key only; "
                                       f"move {' AND '.join(c.sql() for c in rest)} to WHERE")
        return _asof(k, kind, left, right, lkeys, rkeys, lname, ">=", rprimary, lschema, rschema, ltimes, rtimes,
                     schema, f"AS OF {col.sql()} ON {cond_sql}", temporal=True)

    _append_only(left, right, what, it.alias)
    # ASOF: the time condition from MATCH_CONDITION, or DuckDB's inequality among the ON conjuncts
    match = arg
    if match is None:
        ineq = [c for c in rest if type(c) in _OPS]
        if len(ineq) != 1:
            raise UnsupportedJoinError(
                f"ASOF JOIN {it.alias} needs one time condition: MATCH_CONDITION(l.ts >= {it.alias}.ts) (or >, <=, <)")
        match = ineq[0]
        rest = [c for c in rest if c is not match]
    if rest:
        raise UnsupportedJoinError(f"ASOF JOIN {it.alias}: ON takes equalities (the keys) only; move "
                                   f"{' AND '.join(c.sql() for c in rest)} to WHERE")
    op = _OPS.get(type(match))
    if op is None or not isinstance(match.this, exp.Column) or not isinstance(match.expression, exp.Column):
        raise UnsupportedJoinError(f"MATCH_CONDITION({match.sql()}): compare two time columns with >=, >, <= or <")
    x, y = b.resolve(match.this), b.resolve(match.expression)
    if x is None or y is None:
        raise UnknownColumnError(f"MATCH_CONDITION({match.sql()}): a column is no column of the joined inputs")
    if x[0] == k and y[0] < k:
        x, y, op = y, x, _FLIP[op]
    if not (x[0] < k and y[0] == k):
        raise UnsupportedJoinError(f"MATCH_CONDITION({match.sql()}) compares a column of the left input with one "
                                   f"of {it.alias}")
    lname, rname = items[x[0]].internal(x[1]), it.internal(y[1])
    for name, times, side in ((lname, ltimes, "the left input"), (rname, rtimes, it.alias)):
        if name not in times:
            raise UnsupportedJoinError(
                f"MATCH_CONDITION({match.sql()}): {name.split('.', 1)[1]!r} is no event-time column of {side}; an "
                "ASOF match is emitted once the watermark passes it: compare columns with a watermark "
                "(WATERMARK FOR ts AS … in CREATE SOURCE)")
    return _asof(k, kind, left, right, lkeys, rkeys, lname, op, rname, lschema, rschema, ltimes, rtimes, schema,
                 f"MATCH_CONDITION({match.sql()}) ON {cond_sql}")


def _lookup_table(right):
    """The ``LookupTableSpec`` of a jdbc / postgres table read as the right input (None: another input)."""
    scan = right.child if isinstance(right, Filter) else right
    return getattr(scan, "lookup", None) if isinstance(scan, Scan) else None


def _external(builder, k, kind, left, right, table, processing, col, lkeys, key_cols, rest, lschema, rschema,
              schema, ltimes, lprimary, cond_sql) -> ExternalLookupJoin:
    """A lookup join against a PostgreSQL table: keys are plain columns of it (they become the
    ``WHERE … = ANY(…)`` of the fetch); the left input is append-only."""
    alias = builder.b.items[k].alias
    if not processing:
        raise UnsupportedJoinError(
            f"{alias!r} is a lookup table (read from PostgreSQL when each row arrives): join it FOR SYSTEM_TIME "
            f"AS OF a PROCTIME() column of the left input, not {col.sql()} (… FROM (SELECT *, PROCTIME() AS "
            f"proc_time FROM s) AS o JOIN {alias} FOR SYSTEM_TIME AS OF o.proc_time …)")
    if None in key_cols:
        raise UnsupportedJoinError(f"the lookup of {alias!r} fetches rows by its columns: each ON equality must name "
                                   f"a column of {alias} on its side ({alias}.id = o.x + 1, not o.id = {alias}.x + 1)")
    if left.changelog:
        raise UnsupportedJoinError(f"the lookup of {alias!r} reads an append-only left input; this one is a changelog "
                                   "(EMIT CHANGES, an outer join, a Top-N): look up the rows of its source instead")
    res = builder._compile_bool(builder.b.rewrite(and_all(rest)), Scope(schema)) if rest else None
    table_filter = right.predicate if isinstance(right, Filter) else None
    times = dict(ltimes)
    return ExternalLookupJoin(kind, left, table, rschema, lkeys, list(key_cols), [e.type for e in lkeys],
                              table_filter, res, schema, lprimary if lprimary in times else None, times,
                              f"AS OF {col.sql()} ON {cond_sql}")


def _append_only(left, right, what: str, alias: str) -> None:
    """Refuse a changelog input. An ASOF or temporal join emits each match once, when it is
    final, and then forgets the right rows no later left row needs: a retraction would have to
    revise a match already emitted from rows no longer held (and a changelog has no event time
    to say when a match is final). So both inputs must be append-only."""
    if not (left.changelog or right.changelog):
        return
    side = "its left input" if left.changelog else f"its right input {alias!r}"
    msg = (f"{what}: an ASOF or temporal join reads append-only inputs, and {side} is a changelog (its rows "
           "carry __weight: an EMIT CHANGES aggregate, an outer join, a Top-N); a retraction would revise a match "
           "already emitted. Make that input append-only: aggregate over a window with EMIT ON WINDOW CLOSE "
           "upstream (each window is emitted once, final, with window_end as event time), or join the source it "
           "reads; to look up a changing table as each row arrives, join FOR SYSTEM_TIME AS OF a PROCTIME() "
           "column (a lookup join, which follows a right input's changelog)")
    raise UnsupportedJoinError(msg)


def _asof(k, kind, left, right, lkeys, rkeys, lname, op, rname, lschema, rschema, ltimes, rtimes, schema, sql,
          *, temporal: bool = False) -> AsofJoin:
    lt, rt = lschema.field(lname).type, rschema.field(rname).type
    if ticks_per_ms(lt) != ticks_per_ms(rt):
        raise SqlTypeError(f"{sql}: the two time columns have different units ({lt} and {rt}); CAST one of them")
    lmap, rmap = ltimes[lname], rtimes[rname]
    time_cols: dict[str, WatermarkMap] = {}
    time_col = None
    if op in (">=", ">") and lmap == rmap:
        # a left row is emitted once the watermark passes it, never behind it: its time stays event time
        time_cols[lname] = lmap
        time_col = lname
    return AsofJoin(kind, left, right, lkeys, rkeys, op, lschema.get_field_index(lname),
                    rschema.get_field_index(rname), lmap, rmap, schema, time_col, time_cols, sql, temporal)
