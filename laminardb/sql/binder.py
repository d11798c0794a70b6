"""Bind a FROM with joins: resolve qualified columns, push conjuncts down, build ``Join`` nodes.

Entry point: ``bind_joins(sel, items, options) -> (select, RelationInfo, Join)``. ``items`` are
the FROM inputs already planned (a ``Scan`` or a subquery's plan, with its alias). The result
is the SELECT with every column reference rewritten to the joined schema's internal names
(``alias.column``, quoted), the relation a SELECT block is planned over, and the join tree
(left-deep, in FROM order).

Why by hand and not sqlglot's optimizer (``qualify``, ``pushdown_predicates``): ``qualify``
normalizes identifier case (``dateTime`` → ``datetime``, while laminardb resolves an unquoted
name exactly first, then case-insensitively, like DuckDB), cannot resolve the streaming
pseudo-columns (``window_start``, a window call in GROUP BY) and renames outputs; and
``pushdown_predicates`` needs its qualified tree. What a streaming join needs is small and
specific: split WHERE/ON into conjuncts, send one-input conjuncts below the join where the
join kind allows (never into the NULL-supplying side), take equalities across the two sides
as keys and ``a.ts BETWEEN b.ts - x AND b.ts + y`` over event-time columns as the interval
that bounds state; the rest is a residual condition over the joined row.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from laminardb.sql._join_inputs import (
    FromItem,
    and_all,
    cast_to,
    conjuncts,
    key_type,
    side_schema,
    side_times,
)
from laminardb.sql._temporal import special_join
from laminardb.sql.exceptions import (
    SqlTypeError,
    UnknownColumnError,
    UnsupportedJoinError,
    UnsupportedSqlError,
)
from laminardb.sql.expressions import Expr, Scope, compile_expr
from laminardb.sql.intervals import interval_ms
from laminardb.sql.options import lateness_ms
from laminardb.sql.plan import Filter, IntervalBounds, Join, JoinKind, Shift
from laminardb.sql.types import ticks_per_ms, type_name
from laminardb.sql.watermarks import WatermarkMap


class _Binder:
    def __init__(self, items: list[FromItem]) -> None:
        self.items = items
        seen: dict[str, str] = {}
        for it in items:
            key = it.alias if it.quoted else it.alias.lower()
            if key in seen:
                raise UnsupportedSqlError(f"{it.alias!r} names two inputs of FROM; give each its own alias "
                                          f"(… AS a JOIN … AS b)")
            seen[key] = it.alias

    def _find(self, item: FromItem, name: str, quoted: bool) -> int | None:
        names = item.schema.names
        if name in names:
            return names.index(name)
        if not quoted:
            low = [n.lower() for n in names]
            if name.lower() in low:
                return low.index(name.lower())
        return None

    def _item_of(self, qual: exp.Identifier) -> int:
        name, quoted = qual.name, bool(qual.args.get("quoted"))
        for i, it in enumerate(self.items):
            if (it.alias == name) if quoted or it.quoted else (it.alias.lower() == name.lower()):
                return i
        known = ", ".join(it.alias for it in self.items)
        raise UnknownColumnError(f"unknown input {name!r} in {name}.…; the inputs of FROM are {known}")

    def resolve(self, col: exp.Column) -> tuple[int, int] | None:
        """(item, column) of a column reference; None for an unqualified name no input has
        (a window pseudo-column, a SELECT alias): the block planner decides about those."""
        name, quoted = col.name, bool(col.this.args.get("quoted"))
        qual = col.args.get("table")
        if qual is not None:
            i = self._item_of(qual)
            j = self._find(self.items[i], name, quoted)
            if j is None:
                cols = ", ".join(self.items[i].schema.names)
                raise UnknownColumnError(f"unknown column {qual.name}.{name}; {self.items[i].alias} has {cols}")
            return i, j
        hits = [(i, j) for i, it in enumerate(self.items) if (j := self._find(it, name, quoted)) is not None]
        if len(hits) > 1:
            where = " and ".join(self.items[i].alias for i, _ in hits)
            raise UnknownColumnError(f"column {name!r} is ambiguous: {where} both have it; qualify it "
                                     f"({self.items[hits[0][0]].alias}.{name})")
        return hits[0] if hits else None

    def refs(self, node: exp.Expression) -> set[int] | None:
        """The inputs an expression reads (None: it names something no input has)."""
        out: set[int] = set()
        for c in node.find_all(exp.Column):
            r = self.resolve(c)
            if r is None:
                return None
            out.add(r[0])
        return out

    def rewrite(self, node: exp.Expression) -> exp.Expression:
        """Every column reference → the quoted internal name (``alias.column``)."""

        def fn(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                r = self.resolve(n)
                if r is None:
                    return n
                return exp.column(self.items[r[0]].internal(r[1]), quoted=True)
            return n

        return node.copy().transform(fn)


def _kind(j: exp.Join) -> JoinKind:
    method = (j.args.get("method") or "").upper()
    if method and method != "ASOF" or j.args.get("using"):
        what = "NATURAL JOIN" if j.args.get("method") else "JOIN … USING (…)"
        raise UnsupportedJoinError(f"{what} is not supported yet; write the condition out: JOIN b ON a.k = b.k")
    side = (j.args.get("side") or "").upper()
    return {"LEFT": "left", "RIGHT": "right", "FULL": "full"}.get(side, "inner")  # type: ignore[return-value]


def _time_term(node: exp.Expression) -> tuple[exp.Column, int] | None:
    """``col``, ``col + INTERVAL``, ``col - INTERVAL`` → (column, offset in ms)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return node, 0
    if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
        inner = _time_term(node.this)
        if inner is None:
            return None
        ms = interval_ms(node.expression)
        return inner[0], inner[1] + (ms if isinstance(node, exp.Add) else -ms)
    return None


def _comparisons(c: exp.Expression) -> list[tuple[exp.Expression, str, exp.Expression]] | None:
    """A conjunct as (x, op, y) comparisons: BETWEEN is two."""
    if isinstance(c, exp.Between):
        return [(c.this, ">=", c.args["low"]), (c.this, "<=", c.args["high"])]
    ops = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<"}
    for cls, op in ops.items():
        if isinstance(c, cls):
            return [(c.this, op, c.expression)]
    return None


_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}
_UNBOUNDED = 1 << 62


class _JoinBuilder:
    def __init__(self, binder: _Binder, ttl_ms: int | None, special: dict | None = None) -> None:
        self.b = binder
        self.ttl_ms = ttl_ms
        # item k → ("asof", MATCH_CONDITION or None) | ("as_of", FOR SYSTEM_TIME AS OF expression)
        self.special: dict[int, tuple[str, exp.Expression | None]] = special or {}

    def interval(self, c: exp.Expression, k: int, left_times, right_times, lschema, rschema):
        """Bounds on left.ts − right.ts from one conjunct, or None when it is no time bound."""
        comps = _comparisons(c)
        if comps is None:
            return None
        out = []
        for x, op, y in comps:
            tx, ty = _time_term(x), _time_term(y)
            if tx is None or ty is None:
                return None
            rx, ry = self.b.resolve(tx[0]), self.b.resolve(ty[0])
            if rx is None or ry is None:
                return None
            if rx[0] == k and ry[0] < k:  # right OP left: flip to left OP right
                tx, ty, rx, ry, op = ty, tx, ry, rx, _FLIP[op]
            if not (rx[0] < k and ry[0] == k):
                return None
            lname, rname = self.b.items[rx[0]].internal(rx[1]), self.b.items[ry[0]].internal(ry[1])
            if lname not in left_times or rname not in right_times:
                return None
            lt, rt = lschema.field(lname).type, rschema.field(rname).type
            if ticks_per_ms(lt) != ticks_per_ms(rt):
                return None
            tpm = ticks_per_ms(lt)
            # l + a OP r + b  ⇔  l − r OP b − a
            d = (ty[1] - tx[1]) * tpm
            lo, hi = -_UNBOUNDED, _UNBOUNDED
            if op == ">=":
                lo = d
            elif op == ">":
                lo = d + 1
            elif op == "<=":
                hi = d
            else:
                hi = d - 1
            out.append((lname, rname, lo, hi))
        return out

    def build(self, kinds: list[JoinKind], on: list[list[exp.Expression]], where: list[exp.Expression]):
        """The left-deep join tree; returns (root Join, WHERE conjuncts left above it)."""
        items = self.b.items
        n = len(items)
        pushed: dict[int, list[exp.Expression]] = {i: [] for i in range(n)}  # filters on item i
        at_join: dict[int, list[exp.Expression]] = {k: list(on[k]) for k in range(1, n)}
        left_filters: dict[int, list[exp.Expression]] = {k: [] for k in range(1, n)}
        remaining: list[exp.Expression] = []
        for c in where:
            refs = self.b.refs(c)
            if not refs or any(isinstance(x, exp.AggFunc) for x in c.walk()):
                remaining.append(c)
                continue
            m = max(refs)
            ok = all(kinds[j] in ("inner", "left") for j in range(m + 1, n))
            if m in self.special:  # a filter on an ASOF/temporal/lookup match applies after it
                ok = False
            if m >= 1:
                ok = ok and (kinds[m] in ("inner", "right") if len(refs) == 1 else kinds[m] == "inner")
            if not ok:
                remaining.append(c)
            elif len(refs) == 1:
                pushed[m].append(c)
            else:
                at_join[m].append(c)
        node = self._item_node(0, pushed[0])
        for k in range(1, n):
            residual: list[exp.Expression] = []
            for c in list(at_join[k]):
                refs = self.b.refs(c)
                if refs is None:
                    raise UnknownColumnError(f"join condition {c.sql()}: a column is no column of the joined inputs")
                if refs == {k} and kinds[k] in ("inner", "left"):
                    pushed[k].append(c)
                elif refs and max(refs) < k and kinds[k] in ("inner", "right"):
                    left_filters[k].append(c)
                else:
                    residual.append(c)
            left = node
            if left_filters[k]:
                lscope = Scope(side_schema(items[:k]))
                left = Filter(left, self._compile_bool(self.b.rewrite(and_all(left_filters[k])), lscope))
            right = self._item_node(k, pushed[k])
            if k in self.special:
                node = special_join(self, k, kinds[k], left, right, residual)
                continue
            node = self._join(k, kinds[k], left, right, residual)
        return node, remaining

    def _item_node(self, i: int, conjuncts: list[exp.Expression]):
        it = self.b.items[i]
        if not conjuncts:
            return it.node
        scope = Scope(side_schema([it]))
        return Filter(it.node, self._compile_bool(self.b.rewrite(and_all(conjuncts)), scope))

    @staticmethod
    def _compile_bool(node: exp.Expression, scope: Scope) -> Expr:
        e = compile_expr(node, scope)
        if not pa.types.is_boolean(e.type):
            raise SqlTypeError(f"condition {e.sql} is {type_name(e.type)}, not BOOLEAN")
        return e

    def _join(self, k: int, kind: JoinKind, left, right, conds: list[exp.Expression]) -> Join:
        items = self.b.items
        lschema, rschema = side_schema(items[:k]), side_schema([items[k]])
        ltimes, lprimary = side_times(items[:k])
        rtimes, rprimary = side_times([items[k]])
        lscope, rscope = Scope(lschema), Scope(rschema)
        lkeys: list[Expr] = []
        rkeys: list[Expr] = []
        residual: list[exp.Expression] = []
        bounds: list[tuple[str, str, int, int]] = []
        window_eq: list[tuple[str, str, int, int]] = []
        for c in conds:
            if isinstance(c, exp.EQ):
                rx, ry = self.b.refs(c.this), self.b.refs(c.expression)
                if rx and ry and max(rx) < k and ry == {k} or rx == {k} and ry and max(ry) < k:
                    lx, rx_ = (c.this, c.expression) if ry == {k} else (c.expression, c.this)
                    le = compile_expr(self.b.rewrite(lx), lscope)
                    re_ = compile_expr(self.b.rewrite(rx_), rscope)
                    t = key_type(le.type, re_.type, c.sql())
                    lkeys.append(cast_to(le, t))
                    rkeys.append(cast_to(re_, t))
                    # equal event times (a window join: a.window_end = b.window_end) also bound
                    # state, as the interval [0, 0]
                    same = self.interval(exp.Between(this=c.this, low=c.expression, high=c.expression), k,
                                         ltimes, rtimes, lschema, rschema)
                    window_eq += same or []
                    continue
            iv = self.interval(c, k, ltimes, rtimes, lschema, rschema)
            if iv:
                bounds += iv
                continue
            residual.append(c)
        if not bounds and window_eq:  # one pair bounds state; the others stay keys
            bounds = [b for b in window_eq if b[:2] == window_eq[0][:2]]
        cond_sql = " AND ".join(c.sql() for c in conds)
        if not lkeys:
            raise UnsupportedJoinError(
                f"join of {items[k].alias!r} needs an equality between the two inputs (ON a.key = b.key); "
                f"a join on {cond_sql or 'nothing'} (a cross or theta join) is not supported")
        schema = pa.schema(list(lschema) + list(rschema))
        res = None
        if residual:
            res = self._compile_bool(self.b.rewrite(and_all(residual)), Scope(schema))
        interval = None
        time_cols: dict[str, WatermarkMap] = {}
        time_col = None
        if bounds:
            pairs = {(lc, rc) for lc, rc, _, _ in bounds}
            if len(pairs) > 1:
                raise UnsupportedJoinError(f"an interval join bounds one pair of event-time columns; "
                                           f"{cond_sql} bounds {len(pairs)}")
            lc, rc = next(iter(pairs))
            lo = max(b[2] for b in bounds)
            hi = min(b[3] for b in bounds)
            if lo <= -_UNBOUNDED or hi >= _UNBOUNDED:
                # one-sided: a time bound, but state on one side never expires — keep it a residual
                res_parts = residual + [c for c in conds if self.interval(c, k, ltimes, rtimes, lschema, rschema)]
                res = self._compile_bool(self.b.rewrite(and_all(res_parts)), Scope(schema))
            else:
                lmap, rmap = ltimes[lc], rtimes[rc]
                interval = IntervalBounds(lschema.get_field_index(lc), rschema.get_field_index(rc), lo, hi,
                                          lmap, rmap)
                if lmap == rmap:
                    # a future output row has l ≥ min(wl, wr + lo) and r ≥ min(wr, wl − hi)
                    time_cols[lc] = lmap.then(Shift(min(0, lo)))  # type: ignore[arg-type]
                    time_cols[rc] = rmap.then(Shift(min(0, -hi)))  # type: ignore[arg-type]
                    time_col = lc
        ttl = None
        ttl_cols: tuple = (None, None)
        if interval is None and self.ttl_ms is not None:
            if lprimary is None or rprimary is None:
                side = items[k].alias if rprimary is None else "the left input"
                raise UnsupportedSqlError(f"state_ttl needs an event-time column on both inputs of the join; "
                                          f"{side} has none")
            tpm = ticks_per_ms(lschema.field(lprimary).type)
            ttl = self.ttl_ms * tpm
            ttl_cols = ((lschema.get_field_index(lprimary), ltimes[lprimary]),
                        (rschema.get_field_index(rprimary), rtimes[rprimary]))
        return Join(kind, left, right, lkeys, rkeys, res, schema, interval, ttl, ttl_cols, time_col, time_cols,
                    cond_sql)


def bind_joins(sel: exp.Select, items: list[FromItem], joins: list[exp.Join], options: dict[str, str],
               relation: Callable[..., object]):
    """Plan the joins of ``sel`` over its planned FROM ``items``; see the module docstring.

    ``relation(name, schema, time_col, changelog, time_cols)`` builds the ``RelationInfo`` the
    SELECT block is planned over (passed in: the planner owns that class).
    """
    offset = 0
    for it in items:
        it.offset = offset
        offset += len(it.schema)
    binder = _Binder(items)
    kinds: list[JoinKind] = ["inner"] + [_kind(j) for j in joins]
    on = [[]] + [conjuncts(j.args.get("on")) for j in joins]
    ttl = options.get("state_ttl")
    ttl_ms = lateness_ms(ttl, "state_ttl") if ttl is not None else None
    where = sel.args.get("where")
    special = {}
    for k, j in enumerate(joins, start=1):
        if (j.args.get("method") or "").upper() == "ASOF":
            special[k] = ("asof", j.args.get("match_condition"))
        elif isinstance(j.this, exp.Table) and j.this.args.get("version") is not None:
            special[k] = ("as_of", j.this.args["version"])
    builder = _JoinBuilder(binder, ttl_ms, special)
    root, remaining = builder.build(kinds, on, conjuncts(where.this if where else None))

    out = sel.copy()
    out.set("joins", None)
    out.set("from_" if "from_" in out.args else "from", exp.From(this=exp.to_table("__join")))
    out.set("where", exp.Where(this=binder.rewrite(and_all(remaining))) if remaining else None)
    out.set("expressions", _select_list(sel.expressions, binder))
    for clause in ("group", "having"):
        node = out.args.get(clause)
        if node is not None:
            out.set(clause, binder.rewrite(node))
    rel = relation("__join", root.schema, root.time_col, root.changelog, dict(root.time_cols))
    return out, rel, root


def _select_list(expressions: list[exp.Expression], binder: _Binder) -> list[exp.Expression]:
    """Rewrite the SELECT list; ``*`` / ``a.*`` expand, bare columns keep their own name as
    the output name (a second ``dateTime`` becomes ``dateTime0``, as in Flink)."""
    out: list[exp.Expression] = []
    taken: set[str] = set()
    explicit = {e.alias.lower() for e in expressions if isinstance(e, exp.Alias)}

    def name_for(name: str) -> str:
        base, n = name, 0
        while name.lower() in taken or (name != base and name.lower() in explicit):
            name = f"{base}{n}"
            n += 1
        taken.add(name.lower())
        return name

    for e in expressions:
        star_of = None
        if isinstance(e, exp.Star):
            star_of = list(range(len(binder.items)))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            star_of = [binder._item_of(e.args["table"])]
        if star_of is not None:
            for i in star_of:
                it = binder.items[i]
                for j, f in enumerate(it.schema):
                    out.append(exp.alias_(exp.column(it.internal(j), quoted=True), name_for(f.name), quoted=True))
            continue
        if isinstance(e, exp.Alias):
            taken.add(e.alias.lower())
            out.append(binder.rewrite(e))
            continue
        if isinstance(e, exp.Column) and binder.resolve(e) is not None:
            # an input's column, window bounds too (a.window_start): named as the input names it
            i, j = binder.resolve(e)
            name = name_for(binder.items[i].schema.field(j).name)
            out.append(exp.alias_(binder.rewrite(e), name, quoted=True))
            continue
        out.append(binder.rewrite(e))
    return out
