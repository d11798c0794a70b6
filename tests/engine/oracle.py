"""An independent oracle for the embedded engine: simulate event time in Python, aggregate in DuckDB.

Entry points: ``Scenario`` (rows + batch cuts + watermark delay), ``run_engine`` (feeds the
batches through laminardb, snapshotting every subscription after each batch),
``expected_windowed`` / ``expected_sessions`` / ``expected_unwindowed`` (DuckDB over the rows
the watermark rule keeps) and ``assert_same_rows`` (sorted multiset comparison, floats
compared with ``pytest.approx``).

The oracle never imports laminardb internals: it re-derives lateness from the documented rule
(per source watermark = max event time seen − delay, advanced after each ``insert()``; rows of
one batch are judged against the watermark as it stood before the batch; a window
``[start, end)`` closes when watermark ≥ end) and lets DuckDB do the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

import laminardb

# Moderate example counts keep tests/engine under ~3 minutes on 2 cores.
ENGINE_SETTINGS = settings(max_examples=30, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NEG_INF = -(2**62)  # the watermark before any row was seen

SOURCE_COLUMNS = ["ts", "sym", "tag", "price", "qty"]
SOURCE_DDL = (
    "CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, tag VARCHAR, price DOUBLE, qty BIGINT, "
    "WATERMARK FOR ts AS ts - INTERVAL '{delay}' MILLISECOND)"
)
SOURCE_ARROW = pa.schema([
    ("ts", pa.int64()), ("sym", pa.string()), ("tag", pa.string()),
    ("price", pa.float64()), ("qty", pa.int64()),
])


# (engine expression, DuckDB expression, output name). ``seq`` is the global arrival index;
# FIRST/LAST_VALUE order by event time, ties by arrival, skipping NULLs.
AGGREGATES: list[tuple[str, str, str]] = [
    ("count(*)", "count(*)", "n"),
    ("count(qty)", "count(qty)", "cq"),
    ("count(DISTINCT qty)", "count(DISTINCT qty)", "cdq"),
    ("count(DISTINCT tag)", "count(DISTINCT tag)", "cdt"),
    ("sum(qty)", "CAST(sum(qty) AS BIGINT)", "sq"),
    ("sum(price)", "sum(price)", "sp"),
    ("avg(price)", "avg(price)", "ap"),
    ("avg(qty)", "avg(qty)", "aq"),
    ("min(price)", "min(price)", "mnp"),
    ("max(qty)", "max(qty)", "mxq"),
    ("min(tag)", "min(tag)", "mnt"),
    ("max(tag)", "max(tag)", "mxt"),
    ("first_value(price)", "arg_min(price, ts * 1000000 + seq) FILTER (WHERE price IS NOT NULL)", "fp"),
    ("last_value(price)", "arg_max(price, ts * 1000000 + seq) FILTER (WHERE price IS NOT NULL)", "lp"),
    ("first_value(tag)", "arg_min(tag, ts * 1000000 + seq) FILTER (WHERE tag IS NOT NULL)", "ft"),
    ("last_value(qty)", "arg_max(qty, ts * 1000000 + seq) FILTER (WHERE qty IS NOT NULL)", "lq"),
]


def agg_select(which: str, aggs=AGGREGATES) -> str:
    """The SELECT list of aggregates, for ``which`` in {"engine", "duck"}."""
    i = 0 if which == "engine" else 1
    return ", ".join(f"{a[i]} AS {a[2]}" for a in aggs)


@dataclass
class Scenario:
    """Rows in arrival order, cut into ``insert()`` batches, and the watermark delay in ms."""

    rows: list[dict[str, Any]]
    cuts: list[int] = field(default_factory=list)  # sorted batch boundaries (row indexes)
    delay_ms: int = 0

    def batches(self) -> list[list[dict[str, Any]]]:
        edges = [0, *sorted(set(c for c in self.cuts if 0 < c < len(self.rows))), len(self.rows)]
        return [self.rows[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]

    def annotated(self) -> pd.DataFrame:
        """One row per input row: seq, batch, wm_before (watermark the row is judged against), wm_after."""
        out = []
        max_ts = None
        seq = 0
        for b, batch in enumerate(self.batches()):
            wm_before = NEG_INF if max_ts is None else max_ts - self.delay_ms
            for r in batch:
                max_ts = r["ts"] if max_ts is None else max(max_ts, r["ts"])
            wm_after = max_ts - self.delay_ms
            for r in batch:
                out.append({**{c: r.get(c) for c in SOURCE_COLUMNS}, "seq": seq, "batch": b,
                            "wm_before": wm_before, "wm_after": wm_after})
                seq += 1
        df = pd.DataFrame(out, columns=[*SOURCE_COLUMNS, "seq", "batch", "wm_before", "wm_after"])
        return df.astype({"ts": "int64", "seq": "int64", "batch": "int64",
                          "wm_before": "int64", "wm_after": "int64", "qty": "Int64", "price": "float64"})

    def wm_after_batches(self) -> list[int]:
        res, max_ts = [], None
        for batch in self.batches():
            for r in batch:
                max_ts = r["ts"] if max_ts is None else max(max_ts, r["ts"])
            res.append(max_ts - self.delay_ms)
        return res


# --------------------------------------------------------------------------- engine side
@dataclass
class EngineRun:
    per_batch: list[pa.Table]        # everything the main subscription had after each batch
    final: pa.Table                  # ... after finish()
    late: pa.Table | None            # the LATE DATA TO stream's rows, if any
    metrics: dict[str, Any]


def run_engine(stream_sql: str, scenario: Scenario, *, source_ddl: str | None = None,
               stream: str = "out", late_stream: str | None = None) -> EngineRun:
    db = laminardb.open()
    db.execute(source_ddl or SOURCE_DDL.format(delay=scenario.delay_ms))
    db.execute(stream_sql)
    sub = db.subscribe_stream(stream)
    late_sub = db.subscribe_stream(late_stream) if late_stream else None
    per_batch = []
    for batch in scenario.batches():
        db.insert("trades", pa.Table.from_pylist(batch, schema=SOURCE_ARROW))
        per_batch.append(sub.to_arrow())
    db.finish()
    run = EngineRun(per_batch, sub.to_arrow(), late_sub.to_arrow() if late_sub else None, db.metrics())
    db.close()
    return run


# --------------------------------------------------------------------------- DuckDB side
def oracle_connection(**tables: Any) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``tables`` registered, the one way every test builds its oracle.

    Arrow timestamps other than µs are registered as µs (DuckDB's own TIMESTAMP, lossless for
    ms and s): DuckDB 2.0.1's ``epoch_ms()`` fails on a TIMESTAMP_MS column ("Unimplemented type
    for cast (INT64 -> INT64)"). ``x % 0`` is NULL, as in DuckDB 1.x and in laminardb (a stream
    cannot stop on one row); newer DuckDB raises unless told otherwise.
    """
    con = duckdb.connect()
    try:
        con.execute("SET error_on_division_by_zero = false")
    except duckdb.Error:
        pass
    for name, t in tables.items():
        con.register(name, _timestamps_as_us(t) if isinstance(t, pa.Table | pa.RecordBatch) else t)
    return con


def _timestamps_as_us(t: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    fields = [pa.field(f.name, pa.timestamp("us", f.type.tz), f.nullable)
              if pa.types.is_timestamp(f.type) and f.type.unit != "us" else f for f in t.schema]
    schema = pa.schema(fields, metadata=t.schema.metadata)
    return t if schema == t.schema else t.cast(schema)


def duck(sql: str, **tables: Any) -> pa.Table:
    rel = oracle_connection(**tables).sql(sql)
    for name in ("to_arrow_table", "arrow", "fetch_arrow_table"):  # the name moved between duckdb releases
        if hasattr(rel, name):
            t = getattr(rel, name)()
            return t.read_all() if isinstance(t, pa.RecordBatchReader) else t
    raise RuntimeError("this duckdb cannot return Arrow")


def expected_windowed(scenario: Scenario, *, size: int, slide: int | None = None,
                      aggs=AGGREGATES, having: str = "", keyed: bool = True) -> pa.Table:
    """Tumble (slide=None) or hop windows: a (row, window) pair counts iff the window was open
    (end > watermark before the row's batch) when the row arrived. Adds column ``closed_after``:
    the batch after which the window closed (len(batches) = at finish)."""
    slide = slide or size
    rows = scenario.annotated()
    wms = scenario.wm_after_batches()
    closes = pa.table({"b": list(range(len(wms))), "wm": wms})
    key = "sym, " if keyed else ""
    sql = f"""
    WITH w AS (
        SELECT *, k * {slide} AS window_start, k * {slide} + {size} AS window_end
        FROM (SELECT *, unnest(generate_series(
                  CAST(floor((ts - {size}) / {slide}) AS BIGINT) + 1,
                  CAST(floor(ts / {slide}) AS BIGINT))) AS k
              FROM rows)
    ), kept AS (SELECT * FROM w WHERE window_end > wm_before)
    SELECT * , coalesce((SELECT min(b) FROM closes WHERE closes.wm >= g.window_end), {len(wms)}) AS closed_after
    FROM (SELECT {key} window_start, window_end, {agg_select("duck", aggs)}
          FROM kept GROUP BY {key} window_start, window_end {having}) g
    """
    return duck(sql, rows=rows, closes=closes)


def simulate_sessions(scenario: Scenario, gap: int) -> tuple[pd.DataFrame, dict[int, int]]:
    """Assign each row a session id (or mark it late), merging sessions that touch.

    Per batch, each key's rows are visited in event-time order; a row joins every open session of
    its key whose [start, end) touches [ts, ts + gap] (merging them); otherwise it is late if
    ts + gap ≤ watermark-before-batch, else it opens a new session. After the batch, sessions
    with end ≤ the new watermark close and are forgotten. Returns (rows with ``sid`` and
    ``late`` columns, {sid: batch after which it closed}).
    """
    rows = scenario.annotated()
    rows["sid"] = -1
    rows["late"] = False
    sid_of: dict[int, int] = {}        # seq -> sid (before merge resolution)
    parent: dict[int, int] = {}
    open_: dict[Any, list[list[int]]] = {}  # key -> [[sid, start, end]]
    closed_after: dict[int, int] = {}
    next_sid = 0

    def find(s):
        while parent[s] != s:
            s = parent[s]
        return s

    n_batches = int(rows["batch"].max()) + 1 if len(rows) else 0
    for b in range(n_batches):
        part = rows[rows["batch"] == b]
        wm_before = int(part["wm_before"].iloc[0])
        for _, r in part.sort_values(["ts", "seq"], kind="stable").iterrows():
            k = r["sym"]
            key = ("<null>",) if k is None or (isinstance(k, float) and math.isnan(k)) else (k,)
            lo, hi = int(r["ts"]), int(r["ts"]) + gap
            sess = open_.setdefault(key, [])
            touching = [s for s in sess if s[1] <= hi and lo <= s[2]]
            if not touching:
                if hi <= wm_before:
                    rows.loc[rows["seq"] == r["seq"], "late"] = True
                    continue
                parent[next_sid] = next_sid
                sess.append([next_sid, lo, hi])
                sid_of[int(r["seq"])] = next_sid
                next_sid += 1
                continue
            tgt = touching[0]
            for s in touching[1:]:
                parent[s[0]] = tgt[0]
                tgt[1], tgt[2] = min(tgt[1], s[1]), max(tgt[2], s[2])
                sess.remove(s)
            tgt[1], tgt[2] = min(tgt[1], lo), max(tgt[2], hi)
            sid_of[int(r["seq"])] = tgt[0]
        wm_after = int(part["wm_after"].iloc[0])
        for sess in open_.values():
            for s in [s for s in sess if s[2] <= wm_after]:
                closed_after[s[0]] = b
                sess.remove(s)
    for sess in open_.values():
        for s in sess:
            closed_after[s[0]] = n_batches
    for seq, sid in sid_of.items():
        rows.loc[rows["seq"] == seq, "sid"] = find(sid)
    return rows, closed_after


def expected_sessions(scenario: Scenario, *, gap: int, aggs=AGGREGATES, having: str = "") -> tuple[pa.Table, pd.DataFrame]:
    rows, closed_after = simulate_sessions(scenario, gap)
    kept = rows[~rows["late"]].drop(columns=["late"])
    closes = pa.table({"sid": list(closed_after), "closed_after": list(closed_after.values())})
    sql = f"""
    SELECT g.*, closes.closed_after FROM (
        SELECT sid, sym, min(ts) AS window_start, max(ts) + {gap} AS window_end, {agg_select("duck", aggs)}
        FROM kept GROUP BY sid, sym {having}) g JOIN closes USING (sid)
    """
    return duck(sql, kept=kept, closes=closes).drop(["sid"]), rows


def duck_sessions_by_gap(rows: pd.DataFrame, *, gap: int, aggs=AGGREGATES) -> pa.Table:
    """Sessions the textbook way (lag + running sum), valid when no session closes early."""
    sql = f"""
    WITH f AS (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY sym ORDER BY ts, seq) <= {gap}
                              THEN 0 ELSE 1 END AS brk FROM rows),
         s AS (SELECT *, sum(brk) OVER (PARTITION BY sym ORDER BY ts, seq ROWS UNBOUNDED PRECEDING) AS sn FROM f)
    SELECT sym, min(ts) AS window_start, max(ts) + {gap} AS window_end, {agg_select("duck", aggs)}
    FROM s GROUP BY sym, sn
    """
    return duck(sql, rows=rows)


def expected_unwindowed(rows: pd.DataFrame, *, aggs=AGGREGATES, having: str = "") -> pa.Table:
    return duck(f"SELECT sym, {agg_select('duck', aggs)} FROM rows GROUP BY sym {having}", rows=rows)


# --------------------------------------------------------------------------- comparison
def consolidate(changelog: pa.Table) -> pa.Table:
    """Sum ``__weight`` per distinct row; keep rows with non-zero weight (asserting weight 1)."""
    cols = [c for c in changelog.column_names if c != "__weight"]
    acc: dict[tuple, int] = {}
    first: dict[tuple, dict] = {}
    for r in changelog.to_pylist():
        k = tuple(_hashable(r[c]) for c in cols)
        acc[k] = acc.get(k, 0) + r["__weight"]
        first.setdefault(k, {c: r[c] for c in cols})
    bad = {k: w for k, w in acc.items() if w not in (0, 1)}
    assert not bad, f"changelog consolidates to weights other than 0/1: {list(bad.items())[:5]}"
    live = [first[k] for k, w in acc.items() if w == 1]
    schema = pa.schema([f for f in changelog.schema if f.name != "__weight"])
    return pa.Table.from_pylist(live, schema=schema)


def _hashable(v):
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def _sort_key(row: dict, cols: list[str]):
    out = []
    for c in cols:
        v = row[c]
        if isinstance(v, float):
            continue  # floats may differ in the last bits; exact columns identify the group
        out.append((v is None, "" if v is None else str(type(v)), v if v is not None else 0))
    return tuple(out)


def _norm(v):
    if isinstance(v, float):
        if math.isnan(v):
            return pytest.approx(v, nan_ok=True)
        if math.isinf(v):
            return v
        return pytest.approx(v, rel=1e-9, abs=1e-9)
    return v


def assert_same_rows(got: pa.Table, expected: pa.Table | list[dict], *, cols: list[str] | None = None,
                     context: str = "") -> None:
    """Equal as multisets of rows over ``cols`` (default: the expected columns)."""
    exp_rows = expected.to_pylist() if isinstance(expected, pa.Table) else list(expected)
    cols = cols or (expected.column_names if isinstance(expected, pa.Table) else list(exp_rows[0]) if exp_rows else got.column_names)
    missing = [c for c in cols if c not in got.column_names]
    assert not missing, f"{context}: engine output lacks columns {missing}; has {got.column_names}"
    g = [{c: r[c] for c in cols} for r in got.to_pylist()]
    e = [{c: r[c] for c in cols} for r in exp_rows]
    g.sort(key=lambda r: _sort_key(r, cols))
    e.sort(key=lambda r: _sort_key(r, cols))
    if len(g) != len(e):
        raise AssertionError(f"{context}: {len(g)} rows from the engine, {len(e)} expected\n"
                             f"got={_show(g)}\nexpected={_show(e)}")
    for gr, er in zip(g, e, strict=True):
        assert gr == {c: _norm(v) for c, v in er.items()}, f"{context}: row differs\ngot={gr}\nexpected={er}\n" \
            f"all got={_show(g)}\nall expected={_show(e)}"


def _show(rows: list[dict], limit: int = 30) -> str:
    return "\n  " + "\n  ".join(map(str, rows[:limit])) + ("\n  …" if len(rows) > limit else "")
