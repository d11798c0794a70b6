"""The productions of the differential test's grammar: every function and operator of
docs/sql.md, by result type, each as (laminardb SQL, DuckDB SQL computing the same rule).

A production is ``f(depth) -> strategy of E``. Where laminardb follows Flink and DuckDB does
not, the DuckDB side calls a macro of ``fuzz_grammar.MACROS`` or spells Flink's rule out;
the comment says which rule. Pairs laminardb refuses by design are generated with
``refused=True``: the test then expects a typed error when the query is planned.
"""

from __future__ import annotations

from tests.sql_functions import fuzz_gen as st  # hypothesis's vocabulary over random.Random
from tests.sql_functions.fuzz_grammar import (
    ALL,
    DUCK_TYPE,
    INTS,
    NUMS,
    SQL_TYPE,
    TIMES,
    E,
    expressions,
    q,
)

# --------------------------------------------------------------------------- helpers


def ex(t, depth):
    return expressions(t, depth)


def one_of_types(types, depth):
    return st.sampled_from(types).flatmap(lambda t: ex(t, depth))


def operands(t: str, depth):
    """Two numeric operands whose arithmetic has type ``t`` (INT op INT is INT, a BIGINT makes
    BIGINT, a DOUBLE makes DOUBLE)."""
    if t == "INT":
        return st.tuples(ex("INT", depth), ex("INT", depth))
    if t == "BIGINT":
        return st.one_of(st.tuples(ex("BIGINT", depth), one_of_types(INTS, depth)),
                         st.tuples(one_of_types(INTS, depth), ex("BIGINT", depth)))
    return st.one_of(st.tuples(ex("DOUBLE", depth), one_of_types(NUMS, depth)),
                     st.tuples(one_of_types(NUMS, depth), ex("DOUBLE", depth)))


def _wider(t1: str, t2: str) -> str:
    if "DOUBLE" in (t1, t2):
        return "DOUBLE"
    if t1 == t2 == "INT":
        return "INT"
    return "BIGINT"


def _arith(t):
  def rule(depth):
    """+ - * between numbers: integers wrap around (Java), DOUBLE is IEEE."""
    def build(args):
        (x, y), op = args
        t = _wider(x.type, y.type)
        lam = f"({x.lam} {op} {y.lam})"
        if t == "DOUBLE":
            return E(lam, f"(CAST({x.duck} AS DOUBLE) {op} CAST({y.duck} AS DOUBLE))", t)
        wrap = "wrap32" if t == "INT" else "wrap64"
        return E(lam, f"{wrap}(CAST({x.duck} AS HUGEINT) {op} CAST({y.duck} AS HUGEINT))", t)
    return st.tuples(operands(t, depth), st.sampled_from("+-*")).map(build)
  return rule


def _int_ops(t):
  def rule(depth):
    """// and % / MOD of integers: truncating toward zero, by zero NULL."""
    def build(args):
        (x, y), op = args
        t = _wider(x.type, y.type)
        wrap = "wrap32" if t == "INT" else "wrap64"
        h = f"CAST({x.duck} AS HUGEINT)"
        if op == "//":
            return E(f"({x.lam} // {y.lam})", f"CASE WHEN {y.duck} <> 0 THEN {wrap}({h} // {y.duck}) END", t)
        lam = f"({x.lam} % {y.lam})" if op == "%" else f"MOD({x.lam}, {y.lam})"
        return E(lam, f"CASE WHEN {y.duck} <> 0 THEN {wrap}({h} % {y.duck}) END", t)
    return st.tuples(operands(t, depth), st.sampled_from(["//", "%", "MOD"])).map(build)
  return rule


def _int_unary(t):
  def rule(depth):
    def build(args):
        x, fn = args
        wrap = "wrap32" if x.type == "INT" else "wrap64"
        if fn == "-":
            return E(f"(-{x.lam})", f"{wrap}(-CAST({x.duck} AS HUGEINT))", x.type)
        return E(f"ABS({x.lam})", f"{wrap}(abs(CAST({x.duck} AS HUGEINT)))", x.type)
    return st.tuples(ex(t, depth), st.sampled_from(["-", "ABS"])).map(build)
  return rule


# --------------------------------------------------------------------------- CAST


def cast_rule(x: E, target: str) -> E:
    """CAST(x AS target), with Flink's rule (docs/sql.md, *CAST*) on the DuckDB side."""
    s, lam = x.type, f"CAST({x.lam} AS {SQL_TYPE[target]})"
    d = x.duck
    refused = {("BOOLEAN", "TIMESTAMP"), ("BOOLEAN", "TIMESTAMP6"), ("BOOLEAN", "DATE"), ("DATE", "BOOLEAN"),
               ("TIMESTAMP", "BOOLEAN"), ("TIMESTAMP6", "BOOLEAN"), ("DATE", "INT"), ("DATE", "BIGINT"),
               ("DATE", "DOUBLE"), ("INT", "DATE"), ("BIGINT", "DATE"), ("DOUBLE", "DATE"), ("DOUBLE", "TIMESTAMP"),
               ("DOUBLE", "TIMESTAMP6"), ("TIMESTAMP", "DOUBLE"), ("TIMESTAMP6", "DOUBLE")}
    if (s, target) in refused:
        return E(lam, "NULL", target, refused=True)
    if s == target:
        return E(lam, d, target)
    dt = DUCK_TYPE[target]
    if target == "VARCHAR":
        if s == "BOOLEAN":
            return E(lam, f"b2s({d})", target)
        if s == "TIMESTAMP":
            return E(lam, f"strftime({d}, '%Y-%m-%d %H:%M:%S.%g')", target)
        if s == "TIMESTAMP6":
            return E(lam, f"strftime({d}, '%Y-%m-%d %H:%M:%S.%f')", target)
        return E(lam, f"CAST({d} AS VARCHAR)", target)
    if s == "VARCHAR":
        fn = {"INT": f"TRY_CAST(s2i({d}) AS INTEGER)", "BIGINT": f"TRY_CAST(s2i({d}) AS BIGINT)",
              "DOUBLE": f"s2f({d})", "BOOLEAN": f"s2b({d})", "TIMESTAMP": f"to_ms(s2ts({d}))",
              "TIMESTAMP6": f"s2ts({d})", "DATE": f"s2d({d})"}[target]
        return E(lam, fn, target)
    if target in INTS:
        if s == "DOUBLE":
            return E(lam, f"{'f2i32' if target == 'INT' else 'f2i64'}({d})", target)
        if s in ("TIMESTAMP", "TIMESTAMP6"):
            return E(lam, f"TRY_CAST(ts2ms({d}) AS {dt})", target)
        return E(lam, f"TRY_CAST({d} AS {dt})", target)
    if target in ("TIMESTAMP", "TIMESTAMP6"):
        if s in INTS:
            return E(lam, f"CAST(ms2ts({d}) AS {dt})", target)
        if s == "TIMESTAMP6" and target == "TIMESTAMP":
            return E(lam, f"to_ms({d})", target)
        return E(lam, f"CAST({d} AS {dt})", target)
    if target == "DATE":
        return E(lam, f"CAST({d} AS DATE)", target)
    return E(lam, f"CAST({d} AS {dt})", target)


def _cast(target):
    def rule(depth):
        return one_of_types(ALL, depth).map(lambda x: cast_rule(x, target))
    return rule


def _float_cast(depth):
    """CAST to FLOAT (REAL) and back: single precision, out of its range ±inf."""
    def build(x):
        d = f"CAST({x.duck} AS DOUBLE)"
        duck = (f"CASE WHEN abs({d}) > 3.4028234663852886e38 AND NOT isinf({d}) THEN CAST(sign({d}) AS DOUBLE) * "
                f"CAST('inf' AS DOUBLE) ELSE CAST(CAST({d} AS FLOAT) AS DOUBLE) END")
        return E(f"CAST(CAST({x.lam} AS FLOAT) AS DOUBLE)", duck, "DOUBLE")
    return one_of_types(NUMS, depth).map(build)


def _try_cast(target):
    def rule(depth):
        def build(x):
            e = cast_rule(x, target)
            return E("TRY_" + e.lam, e.duck, e.type, e.refused)
        return one_of_types(ALL, depth).map(build)
    return rule


# --------------------------------------------------------------------------- generic: CASE, IF, COALESCE …


def _generic(t):
    def rule(depth):
        c, a, b = ex("BOOLEAN", depth), ex(t, depth), ex(t, depth)

        def case(args):
            c, a, b = args
            return E(f"CASE WHEN {c.lam} THEN {a.lam} ELSE {b.lam} END", f"CASE WHEN {c.duck} THEN {a.duck} ELSE {b.duck} END", t)

        def case_simple(args):
            k, a, b = args
            return E(f"CASE {k.lam} WHEN {a.lam} THEN {b.lam} END", f"CASE WHEN {k.duck} = {a.duck} THEN {b.duck} END", t) \
                if t != "DOUBLE" else E(f"CASE {k.lam} WHEN {a.lam} THEN {b.lam} END",
                                        f"CASE WHEN fcmp_eq({k.duck}, {a.duck}) THEN {b.duck} END", t)

        def if_(args):
            c, a, b = args
            return E(f"IF({c.lam}, {a.lam}, {b.lam})", f"CASE WHEN {c.duck} THEN {a.duck} ELSE {b.duck} END", t)

        def coalesce(args):
            _, a, b = args
            return E(f"COALESCE({a.lam}, {b.lam})", f"COALESCE({a.duck}, {b.duck})", t)

        def nullif(args):
            _, a, b = args
            eq = f"fcmp_eq({a.duck}, {b.duck})" if t == "DOUBLE" else f"{a.duck} = {b.duck}"
            return E(f"NULLIF({a.lam}, {b.lam})", f"CASE WHEN {eq} THEN NULL ELSE {a.duck} END", t)

        def greatest(args):
            _, a, b = args
            fn = st.sampled_from(["GREATEST", "LEAST"])
            return fn.map(lambda f: _greatest(f, a, b, t))

        parts = st.tuples(c, a, b)
        choices = [parts.map(case), st.tuples(ex(t, depth), a, b).map(case_simple), parts.map(if_),
                   parts.map(coalesce), parts.map(nullif)]
        if t not in ("BOOLEAN",):
            choices.append(parts.flatmap(greatest))
        return st.one_of(*choices)
    return rule


def _greatest(fn: str, a: E, b: E, t: str) -> E:
    """GREATEST/LEAST: NULL when any argument is NULL (Flink; DuckDB skips NULLs); a NaN wins
    (Java's Math.max/min; DuckDB's LEAST ignores it)."""
    inner = f"{fn.lower()}({a.duck}, {b.duck})"
    if t == "DOUBLE":
        inner = f"CASE WHEN fnan({a.duck}, {b.duck}) THEN CAST('nan' AS DOUBLE) ELSE {inner} END"
    duck = f"CASE WHEN {a.duck} IS NULL OR {b.duck} IS NULL THEN NULL ELSE {inner} END"
    return E(f"{fn}({a.lam}, {b.lam})", duck, t)


# --------------------------------------------------------------------------- BOOLEAN


def _compare(depth):
    ops = {"=": "eq", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}

    def build(args):
        t, op = args
        return st.tuples(ex(t, depth), ex(t, depth)).map(lambda xy: _cmp(xy[0], op, xy[1], ops[op]))
    pairs = st.sampled_from(["INT", "BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN", "TIMESTAMP", "TIMESTAMP6", "DATE", "MIXED"])
    return st.tuples(pairs, st.sampled_from(list(ops))).flatmap(
        lambda a: build(a) if a[0] != "MIXED" else st.tuples(one_of_types(NUMS, depth), one_of_types(NUMS, depth)).map(
            lambda xy: _cmp(xy[0], a[1], xy[1], ops[a[1]])))


def _cmp(x: E, op: str, y: E, name: str) -> E:
    lam = f"({x.lam} {op} {y.lam})"
    if "DOUBLE" in (x.type, y.type):
        return E(lam, f"fcmp_{name}({x.duck}, {y.duck})", "BOOLEAN")
    return E(lam, f"({x.duck} {op} {y.duck})", "BOOLEAN")


def _logic(depth):
    b = ex("BOOLEAN", depth)

    def build(args):
        x, y, op = args
        if op == "NOT":
            return E(f"(NOT {x.lam})", f"(NOT {x.duck})", "BOOLEAN")
        return E(f"({x.lam} {op} {y.lam})", f"({x.duck} {op} {y.duck})", "BOOLEAN")
    return st.tuples(b, b, st.sampled_from(["AND", "OR", "NOT"])).map(build)


def _null_tests(depth):
    def build(args):
        x, test = args
        if test in ("TRUE", "FALSE", "NOT TRUE", "NOT FALSE"):
            return None
        return E(f"({x.lam} IS {test})", f"({x.duck} IS {test})", "BOOLEAN")

    def build_bool(args):
        x, test = args
        return E(f"({x.lam} IS {test})", f"({x.duck} IS {test})", "BOOLEAN")
    return st.one_of(
        st.tuples(one_of_types(ALL, depth), st.sampled_from(["NULL", "NOT NULL"])).map(build),
        st.tuples(ex("BOOLEAN", depth), st.sampled_from(["TRUE", "FALSE", "NOT TRUE", "NOT FALSE"])).map(build_bool))


def _distinct(depth):
    def build(args):
        t, neg = args
        def make(xy):
            x, y = xy
            kw = "IS NOT DISTINCT FROM" if neg else "IS DISTINCT FROM"
            if t == "DOUBLE":  # IEEE: NaN is distinct from everything, itself too
                same = (f"(({x.duck} IS NULL AND {y.duck} IS NULL) OR COALESCE(fcmp_eq({x.duck}, {y.duck}), false))")
                duck = same if neg else f"(NOT {same})"
                return E(f"({x.lam} {kw} {y.lam})", duck, "BOOLEAN")
            return E(f"({x.lam} {kw} {y.lam})", f"({x.duck} {kw} {y.duck})", "BOOLEAN")
        return st.tuples(ex(t, depth), ex(t, depth)).map(make)
    return st.tuples(st.sampled_from(ALL), st.booleans()).flatmap(build)


def _in_between(depth):
    def build(args):
        t, kind, neg = args
        if kind == "IN":
            def make(xs):
                x, vals = xs[0], xs[1:]
                not_ = "NOT " if neg else ""
                if t == "DOUBLE":
                    anyeq = " OR ".join(f"fcmp_eq({x.duck}, {v.duck})" for v in vals)
                    return E(f"({x.lam} {not_}IN ({', '.join(v.lam for v in vals)}))", f"({'NOT ' if neg else ''}({anyeq}))", "BOOLEAN")
                return E(f"({x.lam} {not_}IN ({', '.join(v.lam for v in vals)}))",
                         f"({x.duck} {not_}IN ({', '.join(v.duck for v in vals)}))", "BOOLEAN")
            null = E("NULL", "NULL", t)  # a bare NULL in the list: NULL when nothing matches
            return st.lists(st.one_of(ex(t, depth), ex(t, depth), st.just(null)), min_size=2, max_size=4).map(
                lambda xs: make(xs) if xs[0].lam != "NULL" else make([xs[1], *xs]))

        def make_b(xs):
            x, lo, hi = xs
            not_ = "NOT " if neg else ""
            if t == "DOUBLE":
                inner = f"(fcmp_ge({x.duck}, {lo.duck}) AND fcmp_le({x.duck}, {hi.duck}))"
                return E(f"({x.lam} {not_}BETWEEN {lo.lam} AND {hi.lam})", f"({not_}{inner})", "BOOLEAN")
            return E(f"({x.lam} {not_}BETWEEN {lo.lam} AND {hi.lam})",
                     f"({x.duck} {not_}BETWEEN {lo.duck} AND {hi.duck})", "BOOLEAN")
        return st.tuples(ex(t, depth), ex(t, depth), ex(t, depth)).map(make_b)
    return st.tuples(st.sampled_from(ALL), st.sampled_from(["IN", "BETWEEN"]), st.booleans()).flatmap(build)


LIKE_PATTERNS = ["%", "_", "H%", "%l%", "%o", "a%b", "a!%b", "a\\b", "a\\%", "%!_%", "", "_%_", "%é%", "ß", "!!%",
                 "%x%", "2020%", "%\\%"]


def _like(depth):
    def build(args):
        x, pat, kind, neg, esc = args
        not_ = "NOT " if neg else ""
        escape = " ESCAPE '!'" if esc else ""
        if esc:  # '!' before anything but %, _ or ! is refused
            i, bad = 0, False
            while i < len(pat):
                if pat[i] == "!":
                    if pat[i + 1 : i + 2] not in ("%", "_", "!"):
                        bad = True
                    i += 2
                else:
                    i += 1
            if bad:
                return E(f"({x.lam} {not_}{kind} {q(pat)}{escape})", "NULL", "BOOLEAN", refused=True)
        return E(f"({x.lam} {not_}{kind} {q(pat)}{escape})", f"({x.duck} {not_}{kind} {q(pat)}{escape})", "BOOLEAN")
    return st.tuples(ex("VARCHAR", depth), st.sampled_from(LIKE_PATTERNS), st.sampled_from(["LIKE", "ILIKE"]),
                     st.booleans(), st.booleans()).map(build)


# --------------------------------------------------------------------------- numbers


_F1 = {"SQRT": "sqrt", "LN": "ln", "LOG10": "log10", "LOG2": "log2", "EXP": "exp", "SIN": "sin", "COS": "cos",
       "TAN": "tan"}


def _double_fns(depth):
    def build(args):
        x, y, fn = args
        xd = f"CAST({x.duck} AS DOUBLE)"
        if fn in _F1:
            # DuckDB raises for ln/log of 0 or negatives in some builds: IEEE results spelled out
            if fn in ("LN", "LOG10", "LOG2"):
                return E(f"{fn}({x.lam})", f"CASE WHEN {xd} = 0 THEN CAST('-inf' AS DOUBLE) WHEN {xd} < 0 "
                                           f"THEN CAST('nan' AS DOUBLE) ELSE {_F1[fn]}({xd}) END", "DOUBLE")
            if fn == "SQRT":
                return E(f"SQRT({x.lam})", f"CASE WHEN {xd} < 0 THEN CAST('nan' AS DOUBLE) ELSE sqrt({xd}) END", "DOUBLE")
            if fn in ("SIN", "COS", "TAN"):
                return E(f"{fn}({x.lam})", f"CASE WHEN isinf({xd}) THEN CAST('nan' AS DOUBLE) ELSE {_F1[fn]}({xd}) END", "DOUBLE")
            return E(f"{fn}({x.lam})", f"{_F1[fn]}({xd})", "DOUBLE")
        yd = f"CAST({y.duck} AS DOUBLE)"
        if fn == "/":
            return E(f"({x.lam} / {y.lam})", f"({xd} / {yd})", "DOUBLE")
        if fn == "POWER":
            return E(f"POWER({x.lam}, {y.lam})", f"pow({xd}, {yd})", "DOUBLE")
        if fn == "%":  # Java's double remainder: fmod (NaN by zero)
            return E(f"({x.lam} % {y.lam})", f"({xd} % {yd})", "DOUBLE") if "DOUBLE" in (x.type, y.type) else None
        if fn == "ABS":
            return E(f"ABS({x.lam})", f"abs({xd})", "DOUBLE") if x.type == "DOUBLE" else None
        if fn in ("CEIL", "FLOOR", "TRUNC"):
            return E(f"{fn}({x.lam})", f"{fn.lower()}({xd})", "DOUBLE") if x.type == "DOUBLE" else None
        if fn == "ROUND":  # Flink: the shortest decimal text, half away from zero (DuckDB: the binary value)
            return E(f"ROUND({x.lam})", f"fround({xd}, 0)", "DOUBLE") if x.type == "DOUBLE" else None
        if fn == "ROUND2":
            return E(f"ROUND({x.lam}, 2)", f"fround({xd}, 2)", "DOUBLE") if x.type == "DOUBLE" else None
        if fn == "SIGN":  # Java's signum: NaN stays NaN (DuckDB gives 0)
            return E(f"SIGN({x.lam})", f"CASE WHEN isnan({xd}) THEN {xd} ELSE CAST(sign({xd}) AS DOUBLE) END", "DOUBLE") \
                if x.type == "DOUBLE" else None
        if fn == "-":
            return E(f"(-{x.lam})", f"(-{xd})", "DOUBLE") if x.type == "DOUBLE" else None
        if fn == "LOG":  # Flink: the natural logarithm (DuckDB's log is base 10)
            return E(f"LOG({x.lam})", f"CASE WHEN {xd} = 0 THEN CAST('-inf' AS DOUBLE) WHEN {xd} < 0 "
                                      f"THEN CAST('nan' AS DOUBLE) ELSE ln({xd}) END", "DOUBLE")
        if fn == "LOGB":  # LOG(base, x) = ln(x) / ln(base), IEEE
            def ln(v):
                return (f"CASE WHEN {v} = 0 THEN CAST('-inf' AS DOUBLE) WHEN {v} < 0 THEN CAST('nan' AS DOUBLE) "
                        f"ELSE ln({v}) END")
            return E(f"LOG({x.lam}, {y.lam})", f"({ln(yd)} / {ln(xd)})", "DOUBLE")
        return None
    fns = [*_F1, "/", "POWER", "%", "ABS", "CEIL", "FLOOR", "TRUNC", "ROUND", "ROUND2", "SIGN", "-", "LOG", "LOGB"]
    return st.tuples(one_of_types(("DOUBLE", "DOUBLE", "BIGINT", "INT"), depth), one_of_types(NUMS, depth),
                     st.sampled_from(fns)).map(build).filter(
        lambda e: e is not None)


# --------------------------------------------------------------------------- strings


def _string_fns(depth):
    s = ex("VARCHAR", depth)

    def build(args):
        x, y, fn, k, pat = args
        if fn in ("UPPER", "LOWER"):
            return E(f"{fn}({x.lam})", f"{fn.lower()}({x.duck})", "VARCHAR")
        if fn == "SUBSTRING":  # Flink: position 0 is 1, negative counts from the end
            n = k
            start = f"CASE WHEN {n} > 0 THEN {n} WHEN {n} = 0 THEN 1 ELSE length({x.duck}) + {n} + 1 END"
            length_ = abs(k) + 1
            return E(f"SUBSTRING({x.lam}, {n}, {length_})",
                     f"CASE WHEN {n} < 0 AND length({x.duck}) + {n} < 0 THEN '' ELSE substring({x.duck}, {start}, {length_}) END",
                     "VARCHAR")
        if fn == "SUBSTR1":
            return E(f"SUBSTRING({x.lam}, {abs(k) + 1})", f"substring({x.duck}, {abs(k) + 1})", "VARCHAR")
        if fn in ("TRIM", "LTRIM", "RTRIM"):
            return E(f"{fn}({x.lam})", f"{fn.lower()}({x.duck}, ' ')", "VARCHAR")
        if fn == "TRIMX":
            return E(f"TRIM(BOTH 'a' FROM {x.lam})", f"trim({x.duck}, 'a')", "VARCHAR")
        if fn == "REPLACE":
            return E(f"REPLACE({x.lam}, {q(pat)}, 'Z')", f"replace({x.duck}, {q(pat)}, 'Z')", "VARCHAR") if pat else None
        if fn == "CONCAT":  # Flink: NULL when any argument is NULL
            return E(f"CONCAT({x.lam}, {y.lam})", f"({x.duck} || {y.duck})", "VARCHAR")
        if fn == "||":
            return E(f"({x.lam} || {y.lam})", f"({x.duck} || {y.duck})", "VARCHAR")
        if fn == "TRIMLT":
            side = "LEADING" if k % 2 else "TRAILING"
            return E(f"TRIM({side} 'a!' FROM {x.lam})", f"{'ltrim' if k % 2 else 'rtrim'}({x.duck}, 'a!')", "VARCHAR")
        if fn == "CONCAT_WS":  # NULL arguments skipped, a NULL separator gives NULL
            if k % 2:
                return E(f"CONCAT_WS({y.lam}, {x.lam}, 'x', {x.lam})", f"concat_ws({y.duck}, {x.duck}, 'x', {x.duck})", "VARCHAR")
            return E(f"CONCAT_WS({y.lam}, {x.lam}, {x.lam})", f"concat_ws({y.duck}, {x.duck}, {x.duck})", "VARCHAR")
        if fn in ("LPAD", "RPAD"):
            pad = pat if k % 3 else ""
            f = "flpad" if fn == "LPAD" else "frpad"
            n = k if k % 4 else -1
            return E(f"{fn}({x.lam}, {n}, {q(pad)})", f"{f}({x.duck}, {n}, {q(pad)})", "VARCHAR")
        if fn == "REGEXP_REPLACE":  # every match (Java's replaceAll); $1 is group 1
            return E(f"REGEXP_REPLACE({x.lam}, '([a-z])(l+)', '<$2$1>')",
                     f"regexp_replace({x.duck}, '([a-z])(l+)', '<\\2\\1>', 'g')", "VARCHAR")
        if fn == "REGEXP_EXTRACT":  # NULL when nothing matches (DuckDB: '')
            return E(f"REGEXP_EXTRACT({x.lam}, '([a-z]+)([0-9]*)', 1)",
                     f"CASE WHEN regexp_matches({x.duck}, '([a-z]+)([0-9]*)') THEN regexp_extract({x.duck}, '([a-z]+)([0-9]*)', 1) END",
                     "VARCHAR")
        if fn == "SPLIT_INDEX":
            i = abs(k) % 4
            return E(f"SPLIT_INDEX({x.lam}, ',', {i})",
                     f"CASE WHEN {x.duck} = '' THEN NULL ELSE string_split({x.duck}, ',')[{i + 1}] END", "VARCHAR")
        return None
    fns = ["UPPER", "LOWER", "SUBSTRING", "SUBSTR1", "TRIM", "LTRIM", "RTRIM", "TRIMX", "TRIMLT", "REPLACE", "CONCAT", "||",
           "CONCAT_WS", "LPAD", "RPAD", "REGEXP_REPLACE", "REGEXP_EXTRACT", "SPLIT_INDEX"]
    return st.tuples(s, s, st.sampled_from(fns), st.integers(-4, 6), st.sampled_from(["l", "ab", "é", "", "!"])).map(
        build).filter(lambda e: e is not None)


def _concat_any(depth):
    """CONCAT / || of any types: each written as CAST(… AS VARCHAR) would."""
    def build(args):
        x, y, op = args
        xs, ys = cast_rule(x, "VARCHAR"), cast_rule(y, "VARCHAR")
        if not (xs.ok() and ys.ok()):
            return None
        lam = f"CONCAT({x.lam}, {y.lam})" if op == "CONCAT" else f"({x.lam} || {y.lam})"
        return E(lam, f"({xs.duck} || {ys.duck})", "VARCHAR")
    return st.tuples(one_of_types(ALL, depth), one_of_types(ALL, depth), st.sampled_from(["CONCAT", "||"])).map(
        build).filter(lambda e: e is not None)


def _length(depth):
    return ex("VARCHAR", depth).map(lambda x: E(f"LENGTH({x.lam})", f"length({x.duck})", "BIGINT"))


# --------------------------------------------------------------------------- time

JAVA_FORMATS = [("yyyy-MM-dd HH:mm:ss.SSS", "%Y-%m-%d %H:%M:%S.%g"), ("yyyy-MM-dd", "%Y-%m-%d"), ("HH:mm", "%H:%M"),
                ("yy/M/d H:m:s", "%y/%-m/%-d %-H:%-M:%-S"), ("EEE, d MMM yyyy hh:mm a", "%a, %-d %b %Y %I:%M %p"),
                ("DDD", "%j")]


def _time_of(depth):
    """A TIMESTAMP(3|6) or DATE expression, or a BIGINT read as epoch milliseconds."""
    return one_of_types(TIMES, depth)


def as_ts(e: E) -> str:
    return e.duck


def _date_format(depth):
    def build(args):
        t, (java, fmt) = args
        d = f"CAST({t.duck} AS TIMESTAMP)"
        return E(f"DATE_FORMAT({t.lam}, {q(java)})", f"strftime({d}, {q(fmt)})", "VARCHAR")
    return st.tuples(one_of_types(("TIMESTAMP", "TIMESTAMP6"), depth), st.sampled_from(JAVA_FORMATS)).map(build)


_PARTS = {"YEAR": "year", "MONTH": "month", "DAYOFMONTH": "day", "DAY": "day", "HOUR": "hour", "MINUTE": "minute",
          "SECOND": "second"}
_EXTRACT = {"YEAR": "year", "QUARTER": "quarter", "MONTH": "month", "WEEK": "week", "DAY": "day", "DOY": "dayofyear",
            "DOW": "dow", "ISODOW": "isodow", "HOUR": "hour", "MINUTE": "minute", "SECOND": "second",
            "MILLISECOND": "millisecond", "MICROSECOND": "microsecond", "EPOCH": "epoch"}


def _time_ints(depth):
    def build(args):
        t, kind, unit, t2 = args
        d = f"CAST({t.duck} AS TIMESTAMP)"
        if kind == "PART":
            fn = list(_PARTS)[list(_EXTRACT).index(unit) % len(_PARTS)]
            return E(f"{fn}({t.lam})", f"{_PARTS[fn]}({d})", "BIGINT")
        if kind == "EXTRACT":
            if unit == "DOW":  # Flink: Sunday is 1 (DuckDB: 0)
                return E(f"EXTRACT(DOW FROM {t.lam})", f"(dayofweek({d}) + 1)", "BIGINT")
            if unit == "EPOCH":
                return E(f"EXTRACT(EPOCH FROM {t.lam})", f"CAST(floor(epoch_us({d}) / 1000000) AS BIGINT)", "BIGINT")
            return E(f"EXTRACT({unit} FROM {t.lam})", f"{_EXTRACT[unit]}({d})", "BIGINT")
        u = ["SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"][list(_EXTRACT).index(unit) % 8]
        d2 = f"CAST({t2.duck} AS TIMESTAMP)"
        duck = f"date_sub('{u.lower()}', {d}, {d2})"
        return E(f"TIMESTAMPDIFF({u}, {t.lam}, {t2.lam})", duck, "BIGINT")
    return st.tuples(_time_of(depth), st.sampled_from(["PART", "EXTRACT", "DIFF"]), st.sampled_from(list(_EXTRACT)),
                     _time_of(depth)).map(build)


def _epoch_part(depth):
    """A time part of a BIGINT epoch-milliseconds column (laminardb's event-time convention)."""
    def build(args):
        a, fn = args
        return E(f"{fn}({a.lam})", f"{_PARTS[fn]}(ms2ts({a.duck}))", "BIGINT")
    return st.tuples(ex("BIGINT", 0), st.sampled_from(list(_PARTS))).map(build)


def _timestamps(depth):
    def build(args):
        t, kind, unit, s = args
        if kind == "TRUNC":
            u = ["SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR", "MILLISECOND"][list(_EXTRACT).index(unit) % 9]
            typ = "TIMESTAMP"
            d = t.duck if t.type != "DATE" else f"CAST({t.duck} AS TIMESTAMP_MS)"
            return E(f"DATE_TRUNC('{u}', {t.lam})", f"date_trunc('{u.lower()}', {d})", typ)
        if kind == "PLUS":
            n = (list(_EXTRACT).index(unit) % 7) - 3
            if t.type == "DATE":
                return None
            sign = "+" if n >= 0 else "-"
            u = ["SECOND", "MINUTE", "HOUR", "DAY"][abs(n) % 4]
            lam = f"({t.lam} {sign} INTERVAL '{abs(n)}' {u})"
            return E(lam, f"({t.duck} {sign} INTERVAL '{abs(n)}' {u})", t.type)
        if kind == "FLOORTO":
            u = ["SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"][list(_EXTRACT).index(unit) % 8]
            if t.type == "DATE":
                return None
            fn = "FLOOR" if list(_EXTRACT).index(unit) % 2 else "CEIL"
            duck = (f"date_trunc('{u.lower()}', {t.duck})" if fn == "FLOOR" else
                    f"CASE WHEN date_trunc('{u.lower()}', {t.duck}) = {t.duck} THEN {t.duck} "
                    f"ELSE date_trunc('{u.lower()}', {t.duck}) + INTERVAL 1 {u} END")
            return E(f"{fn}({t.lam} TO {u})", f"CAST({duck} AS TIMESTAMP_MS)", "TIMESTAMP")
        if kind == "TO_TIMESTAMP":
            return E(f"TO_TIMESTAMP({s.lam})", f"to_ms(s2ts({s.duck}))", "TIMESTAMP")
        # with a pattern: Java's DateTimeFormatter, fields zero-padded
        return E(f"TO_TIMESTAMP({s.lam}, 'dd/MM/yyyy HH:mm:ss')",
                 f"CASE WHEN regexp_full_match({s.duck}, '[0-9]{{2}}/[0-9]{{2}}/[0-9]{{4}} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}') "
                 f"THEN CAST(try_strptime({s.duck}, '%d/%m/%Y %H:%M:%S') AS TIMESTAMP_MS) END", "TIMESTAMP")
    return st.tuples(one_of_types(("TIMESTAMP", "DATE"), depth), st.sampled_from(["TRUNC", "PLUS", "TO_TIMESTAMP", "TO_TIMESTAMP_F", "FLOORTO"]),
                     st.sampled_from(list(_EXTRACT)), ex("VARCHAR", depth)).map(build).filter(lambda e: e is not None)


def _ts6(depth):
    """TIMESTAMP(6): DATE_TRUNC keeps the precision; ± INTERVAL."""
    def build(args):
        t, unit, n = args
        if n % 2:
            return E(f"DATE_TRUNC('{unit}', {t.lam})", f"date_trunc('{unit.lower()}', {t.duck})", "TIMESTAMP6")
        return E(f"({t.lam} - INTERVAL '{n}' {unit})", f"({t.duck} - INTERVAL '{n}' {unit})", "TIMESTAMP6")
    return st.tuples(ex("TIMESTAMP6", depth), st.sampled_from(["SECOND", "MINUTE", "HOUR", "DAY"]),
                     st.integers(0, 5)).map(build)


def _ts_vs_text(depth):
    """A TIMESTAMP compared with 'YYYY-MM-DD[ hh:mm:ss]' text."""
    def build(args):
        t, lit, op = args
        return E(f"({t.lam} {op} {q(lit)})", f"({t.duck} {op} TIMESTAMP {q(lit)})", "BOOLEAN")
    return st.tuples(ex("TIMESTAMP", depth), st.sampled_from(["2020-02-29", "2020-02-29 12:00:00", "1970-01-01"]),
                     st.sampled_from(["<", ">=", "="])).map(build)


# --------------------------------------------------------------------------- the table

RULES = {
    "BIGINT": [_arith("BIGINT"), _int_ops("BIGINT"), _int_unary("BIGINT"), _length, _time_ints, _epoch_part, _cast("BIGINT"), _try_cast("BIGINT"),
               _generic("BIGINT")],
    "INT": [_arith("INT"), _int_ops("INT"), _int_unary("INT"), _cast("INT"), _generic("INT")],
    "DOUBLE": [_arith("DOUBLE"), _double_fns, _cast("DOUBLE"), _float_cast, _generic("DOUBLE")],
    "VARCHAR": [_string_fns, _concat_any, _date_format, _cast("VARCHAR"), _generic("VARCHAR")],
    "BOOLEAN": [_compare, _logic, _null_tests, _distinct, _in_between, _like, _ts_vs_text, _cast("BOOLEAN"),
                _generic("BOOLEAN")],
    "TIMESTAMP": [_timestamps, _cast("TIMESTAMP"), _generic("TIMESTAMP")],
    "TIMESTAMP6": [_ts6, _cast("TIMESTAMP6"), _generic("TIMESTAMP6")],
    "DATE": [_cast("DATE"), _generic("DATE")],
}
