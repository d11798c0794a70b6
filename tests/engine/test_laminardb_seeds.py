"""The seed examples of LaminarDB run as written, each checked against DuckDB over the same rows.

Sources of the SQL (quoted verbatim, whitespace aside): LaminarDB's README (github.com/laminardb/
laminardb, the current one and the earlier one), its docs/SQL_REFERENCE.md, and the README of
laminardb-python. Left out: joins, OVER, Delta Lake, ad-hoc SELECTs over a source (a source keeps
no rows here: the same SELECT runs as a stream) and statements that need a broker (the Kafka
forms are checked where they are parsed: ``test_strict_sql.py``). Where an example uses a source
it does not declare, the source is declared here (``# ours``).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest
from oracle import duck

import laminardb

EPOCH0 = 1_704_187_800_000  # 2024-01-02 09:30:00 UTC in ms
SYMBOLS = ["AAPL", "MSFT", "GOOG"]


def _when(ms: int) -> datetime:
    return datetime(1970, 1, 1) + timedelta(milliseconds=ms)


def trades(n: int = 1300, *, step: int = 9_000, timestamp: bool = False, seed: int = 7) -> list[dict]:
    """Trades every ``step`` ms ± 40 % (in order: no row is late even under a zero-delay watermark)."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        ms = EPOCH0 + i * step + rnd.randint(-step * 2 // 5, step * 2 // 5)
        rows.append({"symbol": rnd.choice(SYMBOLS), "price": round(100 + rnd.gauss(0, 5), 2),
                     "volume": rnd.randint(1, 500), "ts": _when(ms) if timestamp else ms,
                     "account_id": f"acc{rnd.randint(1, 4)}", "side": rnd.choice(["buy", "sell"]),
                     "order_ref": f"o{i}"})
    return rows


def readings(n: int = 600, *, key: str = "device", value: str = "value", seed: int = 3) -> list[dict]:
    """Sensor readings: per device, bursts (gaps of 0.2–2 s) separated by pauses of 15–40 s."""
    rnd = random.Random(seed)
    rows, t = [], EPOCH0
    for _ in range(n):
        t += rnd.randint(200, 2_000) if rnd.random() < 0.85 else rnd.randint(15_000, 40_000)
        rows.append({"ts": t, key: f"d{rnd.randint(1, 4)}", value: round(rnd.uniform(-30, 260), 1),
                     "humidity": round(rnd.uniform(30, 60), 1)})
    return rows


def clicks(n: int = 500, seed: int = 5) -> list[dict]:
    """Clicks per user: gaps of 1–20 s inside a session, 45–90 s between (never exactly 30 s)."""
    rnd = random.Random(seed)
    t = {u: EPOCH0 + rnd.randint(0, 5_000) for u in ("u1", "u2", "u3")}
    rows = []
    for _ in range(n):
        u = rnd.choice(list(t))
        t[u] += rnd.randint(1_000, 20_000) if rnd.random() < 0.8 else rnd.randint(45_000, 90_000)
        rows.append({"user_id": u, "ts": t[u]})
    rows.sort(key=lambda r: r["ts"])
    return rows


def run(script: str, source: str, rows: list[dict], out: str, *, view: bool = False) -> pa.Table:
    """Run ``script``, insert ``rows`` (50 per insert), finish; what ``out`` emitted (consolidated)."""
    db = laminardb.open()
    db.execute(script)
    columns = db.execute(f"DESCRIBE {source}").to_arrow()["column"].to_pylist()
    sub = db.subscribe_stream(out)
    for i in range(0, len(rows), 50):
        db.insert(source, [{c: r[c] for c in columns if c in r} for r in rows[i : i + 50]])
    db.finish()
    table = db.query(f"SELECT * FROM {out}").to_arrow() if view else sub.to_arrow()
    db.close()
    return _consolidate(table) if "__weight" in table.column_names else table


def _consolidate(changelog: pa.Table) -> pa.Table:
    """A changelog as the multiset it sums to (rows of several windows may repeat: no window column)."""
    cols = [c for c in changelog.column_names if c != "__weight"]
    count: dict[tuple, int] = {}
    for r in changelog.to_pylist():
        k = tuple(r[c] for c in cols)
        count[k] = count.get(k, 0) + r["__weight"]
    assert all(w >= 0 for w in count.values()), "a row retracted more often than inserted"
    rows = [dict(zip(cols, k, strict=True)) for k, w in count.items() for _ in range(w)]
    return pa.Table.from_pylist(rows, schema=pa.schema([f for f in changelog.schema if f.name != "__weight"]))


def frame(rows: list[dict]) -> pd.DataFrame:
    """The rows for DuckDB: ``ms`` is the event time in epoch ms, ``seq`` the arrival order."""
    df = pd.DataFrame(rows)
    df["ms"] = [int((t - datetime(1970, 1, 1)) / timedelta(milliseconds=1)) if isinstance(t, datetime) else t
                for t in df["ts"]]
    df["seq"] = range(len(df))
    return df


def same(got: pa.Table, expected: pa.Table) -> None:
    """Equal multisets of rows over the expected columns; timestamps as epoch ms, floats to 1e-6."""
    assert got.num_rows > 0, "the example emitted nothing"

    def norm(t: pa.Table) -> list[tuple]:
        cols = []
        for name in expected.column_names:
            col = t.column(name)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.timestamp("ms")).cast(pa.int64())
            cols.append(col.to_pylist())
        rows = [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in zip(*cols, strict=True)]
        return sorted(rows, key=repr)

    assert norm(got) == norm(expected)


def _value(v):
    if isinstance(v, Decimal):  # DuckDB sums BIGINT into DECIMAL
        v = int(v) if v == v.to_integral_value() else float(v)
    return round(v, 6) if isinstance(v, float) else v


def tumble_ms(size: int, offset: int = 0) -> str:
    return f"((ms - {offset}) // {size}) * {size} + {offset}"


def hop_pairs(size: int, slide: int) -> str:
    return (f"(SELECT *, k * {slide} AS ws FROM (SELECT *, unnest(generate_series("
            f"CAST(floor((ms - {size}) / {slide}) AS BIGINT) + 1, CAST(floor(ms / {slide}) AS BIGINT))) AS k FROM src))")


def sessions(key: str, gap: int) -> str:
    return (f"(SELECT *, sum(brk) OVER (PARTITION BY {key} ORDER BY ms, seq ROWS UNBOUNDED PRECEDING) AS sn FROM "
            f"(SELECT *, CASE WHEN ms - lag(ms) OVER (PARTITION BY {key} ORDER BY ms, seq) <= {gap} THEN 0 ELSE 1 END "
            "AS brk FROM src))")


OPEN_CLOSE = ("arg_min(price, ms * 100000 + seq) AS open, max(price) AS high, min(price) AS low, "
              "arg_max(price, ms * 100000 + seq) AS close")

# ---------------------------------------------------------------------------------------------
# LaminarDB README (current)

README_TRADES_TS = """CREATE SOURCE trades (
        symbol VARCHAR NOT NULL,
        price DOUBLE NOT NULL,
        volume BIGINT NOT NULL,
        ts TIMESTAMP NOT NULL,
        WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
    )"""
README_WATERMARK_SOURCE = """CREATE SOURCE trades (
    symbol VARCHAR, price DOUBLE, volume BIGINT, ts TIMESTAMP,
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
);"""

SEEDS: dict[str, tuple] = {
    # name: (script, source, rows, output, DuckDB over src, view?)
    "readme_rust_vwap": (README_TRADES_TS + ";" + """CREATE STREAM vwap AS
        SELECT symbol,
               SUM(price * CAST(volume AS DOUBLE)) / SUM(CAST(volume AS DOUBLE)) AS vwap,
               COUNT(*) AS trades
        FROM trades
        GROUP BY symbol, TUMBLE(ts, INTERVAL '1' MINUTE)
        EMIT ON WINDOW CLOSE""", "trades", trades(timestamp=True), "vwap",
        f"SELECT symbol, SUM(price * volume) / SUM(volume) AS vwap, COUNT(*) AS trades FROM src "
        f"GROUP BY symbol, {tumble_ms(60_000)}"),
    "readme_ohlc_1m": (README_WATERMARK_SOURCE + """
CREATE STREAM ohlc_1m AS
SELECT symbol,
       FIRST_VALUE(price) AS open,
       MAX(price) AS high, MIN(price) AS low,
       LAST_VALUE(price) AS close,
       SUM(volume) AS volume
FROM trades
GROUP BY symbol, TUMBLE(ts, INTERVAL '1' MINUTE)
EMIT ON WINDOW CLOSE;""", "trades", trades(timestamp=True), "ohlc_1m",
        f"SELECT symbol, {OPEN_CLOSE}, SUM(volume) AS volume FROM src GROUP BY symbol, {tumble_ms(60_000)}"),
    "readme_user_sessions": ("CREATE SOURCE clickstream (user_id VARCHAR, ts BIGINT);  -- ours\n" + """
CREATE STREAM user_sessions AS
SELECT user_id, COUNT(*) AS clicks,
       MAX(ts) - MIN(ts) AS duration_ms
FROM clickstream
GROUP BY user_id, SESSION(ts, INTERVAL '30' SECOND)
EMIT ON WINDOW CLOSE;""", "clickstream", clicks(), "user_sessions",
        f"SELECT user_id, COUNT(*) AS clicks, MAX(ms) - MIN(ms) AS duration_ms FROM {sessions('user_id', 30_000)} "
        "GROUP BY user_id, sn"),
    # -----------------------------------------------------------------------------------------
    # LaminarDB README (earlier)
    "old_readme_rust_vwap": ("""CREATE SOURCE trades (
        symbol VARCHAR NOT NULL,
        price DOUBLE NOT NULL,
        volume BIGINT NOT NULL,
        ts BIGINT NOT NULL
    );
    CREATE STREAM vwap AS
        SELECT symbol, SUM(price * volume) / SUM(volume) AS vwap, COUNT(*) AS trades
        FROM trades
        GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
    """, "trades", trades(), "vwap",
        f"SELECT symbol, SUM(price * volume) / SUM(volume) AS vwap, COUNT(*) AS trades FROM src "
        f"GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_python_sensors": ("""CREATE SOURCE sensors (device_id VARCHAR, temp DOUBLE, ts BIGINT);
    CREATE STREAM avg_temp AS
    SELECT device_id, AVG(temp) AS avg_temp, COUNT(*) AS readings
    FROM sensors
    GROUP BY device_id, tumble(ts, INTERVAL '10' SECOND)
""", "sensors", [{"device_id": "a1", "temp": 22.5, "ts": 1700000000000}]
        + readings(key="device_id", value="temp"), "avg_temp",
        f"SELECT device_id, AVG(temp) AS avg_temp, COUNT(*) AS readings FROM src "
        f"GROUP BY device_id, {tumble_ms(10_000)}"),
    "old_readme_trades_1m": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                             """CREATE STREAM trades_1m AS
SELECT symbol, SUM(volume) AS total_volume, COUNT(*) AS trade_count
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
EMIT ON WINDOW CLOSE;""", "trades", trades(), "trades_1m",
        f"SELECT symbol, SUM(volume) AS total_volume, COUNT(*) AS trade_count FROM src GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_moving_avg": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                              """CREATE STREAM moving_avg AS
SELECT symbol, AVG(price) AS avg_price
FROM trades
GROUP BY symbol, slide(ts, INTERVAL '5' MINUTE, INTERVAL '1' MINUTE)
EMIT ON WINDOW CLOSE;""", "trades", trades(), "moving_avg",
        f"SELECT symbol, AVG(price) AS avg_price FROM {hop_pairs(300_000, 60_000)} GROUP BY symbol, ws"),
    "old_readme_hop": ("CREATE SOURCE readings (sensor_id VARCHAR, temp DOUBLE, ts BIGINT);  -- ours\n"
                       """CREATE STREAM peaks AS  -- ours: the example is a bare SELECT
SELECT sensor_id, MAX(temp) AS peak_temp
FROM readings
GROUP BY sensor_id, hop(ts, INTERVAL '10' SECOND, INTERVAL '5' SECOND);""", "readings",
        readings(key="sensor_id", value="temp"), "peaks",
        f"SELECT sensor_id, MAX(temp) AS peak_temp FROM {hop_pairs(10_000, 5_000)} GROUP BY sensor_id, ws"),
    "old_readme_live_totals": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                               """CREATE STREAM live_totals AS
SELECT symbol, SUM(volume) AS running_volume
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
EMIT CHANGES;""", "trades", trades(), "live_totals",
        f"SELECT symbol, SUM(volume) AS running_volume FROM src GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_first_last": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                              """CREATE STREAM ohlc_1m AS
SELECT symbol,
       FIRST(price) AS open, MAX(price) AS high,
       MIN(price) AS low, LAST(price) AS close,
       SUM(volume) AS volume
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
EMIT ON WINDOW CLOSE;""", "trades", trades(), "ohlc_1m",
        f"SELECT symbol, {OPEN_CLOSE}, SUM(volume) AS volume FROM src GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_lateness": ("""CREATE SOURCE trades (
    symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT
) WITH (
    watermark = 'ts',
    allowed_lateness = INTERVAL '5' SECOND
);
CREATE STREAM results AS
SELECT symbol, COUNT(*) AS cnt
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
WITH (allowed_lateness = INTERVAL '10' SECOND);""", "trades", trades(), "results",
        f"SELECT symbol, COUNT(*) AS cnt FROM src GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_ohlc_1min": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                             """CREATE STREAM ohlc_1min AS
SELECT symbol,
       MIN(price) AS low, MAX(price) AS high,
       SUM(volume) AS total_volume
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE);""", "trades", trades(), "ohlc_1min",
        f"SELECT symbol, MIN(price) AS low, MAX(price) AS high, SUM(volume) AS total_volume FROM src "
        f"GROUP BY symbol, {tumble_ms(60_000)}"),
    "old_readme_cascading_view": ("CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT);  -- ours\n"
                                  """CREATE STREAM ohlc_1min AS  -- ours: the bars the example reads
SELECT symbol, tumble(ts, INTERVAL '1' MINUTE) AS bar_start,
       FIRST(price) AS open, MAX(price) AS high, MIN(price) AS low, LAST(price) AS close
FROM trades GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE);
CREATE MATERIALIZED VIEW ohlc_1h AS
SELECT symbol,
       FIRST(open) AS open, MAX(high) AS high,
       MIN(low) AS low, LAST(close) AS close
FROM ohlc_1min
GROUP BY symbol, tumble(bar_start, INTERVAL '1' HOUR);""", "trades", trades(), "ohlc_1h",
        f"SELECT symbol, {OPEN_CLOSE} FROM src GROUP BY symbol, {tumble_ms(3_600_000)}", True),
    # -----------------------------------------------------------------------------------------
    # docs/SQL_REFERENCE.md
}

SQL_REFERENCE_TRADES = """CREATE SOURCE trades (
    account_id VARCHAR NOT NULL,
    symbol     VARCHAR NOT NULL,
    side       VARCHAR NOT NULL,
    price      DOUBLE NOT NULL,
    volume     BIGINT NOT NULL,
    order_ref  VARCHAR NOT NULL,
    ts         TIMESTAMP NOT NULL,
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
);
"""
SEEDS |= {
    "ref_ohlc_tumble_in_select": (SQL_REFERENCE_TRADES + """CREATE STREAM ohlc AS
SELECT symbol,
       tumble(ts, INTERVAL '5' SECOND) AS window_start,
       first_value(price) AS open,
       MAX(price) AS high,
       MIN(price) AS low,
       last_value(price) AS close,
       SUM(volume) AS volume,
       COUNT(*) AS trade_count
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '5' SECOND)""", "trades", trades(timestamp=True, step=1_500), "ohlc",
        f"SELECT symbol, {tumble_ms(5_000)} AS window_start, {OPEN_CLOSE}, SUM(volume) AS volume, "
        "COUNT(*) AS trade_count FROM src GROUP BY ALL"),
    "ref_tumble_offset": (SQL_REFERENCE_TRADES + """CREATE STREAM hourly AS  -- ours: the example is a bare SELECT
SELECT symbol,
       tumble(ts, INTERVAL '1' HOUR, INTERVAL '8' HOUR) AS window_start,
       COUNT(*) AS trade_count
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '1' HOUR, INTERVAL '8' HOUR)""", "trades", trades(timestamp=True), "hourly",
        f"SELECT symbol, {tumble_ms(3_600_000, 8 * 3_600_000)} AS window_start, COUNT(*) AS trade_count FROM src "
        "GROUP BY ALL"),
    "ref_hop_slide_first": (SQL_REFERENCE_TRADES + """CREATE STREAM vol_baseline AS
SELECT symbol,
       SUM(volume) AS total_volume,
       COUNT(*) AS trade_count,
       AVG(price) AS avg_price
FROM trades
GROUP BY symbol, HOP(ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)""", "trades", trades(timestamp=True, step=1_500),
        "vol_baseline",
        f"SELECT symbol, SUM(volume) AS total_volume, COUNT(*) AS trade_count, AVG(price) AS avg_price "
        f"FROM {hop_pairs(10_000, 2_000)} GROUP BY symbol, ws"),
    "ref_rapid_fire_session": (SQL_REFERENCE_TRADES + """CREATE STREAM rapid_fire AS
SELECT account_id,
       COUNT(*) AS burst_trades,
       SUM(volume) AS burst_volume,
       MIN(price) AS low,
       MAX(price) AS high
FROM trades
GROUP BY account_id, SESSION(ts, INTERVAL '2' SECOND)""", "trades", trades(timestamp=True, step=700), "rapid_fire",
        f"SELECT account_id, COUNT(*) AS burst_trades, SUM(volume) AS burst_volume, MIN(price) AS low, "
        f"MAX(price) AS high FROM {sessions('account_id', 2_000)} GROUP BY account_id, sn"),
    "ref_wash_score_case_when": (SQL_REFERENCE_TRADES + """CREATE STREAM wash_score AS
SELECT account_id,
       symbol,
       SUM(CASE WHEN side = 'buy' THEN volume ELSE CAST(0 AS BIGINT) END) AS buy_volume,
       SUM(CASE WHEN side = 'sell' THEN volume ELSE CAST(0 AS BIGINT) END) AS sell_volume,
       SUM(CASE WHEN side = 'buy' THEN 1 ELSE 0 END) AS buy_count,
       SUM(CASE WHEN side = 'sell' THEN 1 ELSE 0 END) AS sell_count
FROM trades
GROUP BY account_id, symbol, TUMBLE(ts, INTERVAL '5' SECOND)""", "trades", trades(timestamp=True, step=1_500),
        "wash_score",
        "SELECT account_id, symbol, SUM(CASE WHEN side = 'buy' THEN volume ELSE 0 END) AS buy_volume, "
        "SUM(CASE WHEN side = 'sell' THEN volume ELSE 0 END) AS sell_volume, "
        "SUM(CASE WHEN side = 'buy' THEN 1 ELSE 0 END) AS buy_count, "
        "SUM(CASE WHEN side = 'sell' THEN 1 ELSE 0 END) AS sell_count "
        f"FROM src GROUP BY account_id, symbol, {tumble_ms(5_000)}"),
    "ref_computed_columns": (SQL_REFERENCE_TRADES + """CREATE STREAM ranges AS  -- ours: the example is a bare SELECT
SELECT symbol,
       MAX(price) - MIN(price) AS price_range,
       AVG(price) * COUNT(*) AS notional
FROM trades
GROUP BY symbol, tumble(ts, INTERVAL '5' SECOND)""", "trades", trades(timestamp=True, step=1_500), "ranges",
        f"SELECT symbol, MAX(price) - MIN(price) AS price_range, AVG(price) * COUNT(*) AS notional FROM src "
        f"GROUP BY symbol, {tumble_ms(5_000)}"),
}

# ---------------------------------------------------------------------------------------------
# laminardb-python README
PY_SENSORS = "CREATE SOURCE sensors (ts BIGINT, device VARCHAR, value DOUBLE);\n"
SEEDS |= {
    "py_filter_chain": (PY_SENSORS + """CREATE STREAM high_temp AS
    SELECT * FROM sensors WHERE value > 100.0;
CREATE STREAM critical_alerts AS
    SELECT * FROM high_temp WHERE value > 200.0""", "sensors", readings(), "critical_alerts",
        "SELECT ts, device, value FROM src WHERE value > 200.0"),
    "py_sensor_stats": (PY_SENSORS + """CREATE STREAM sensor_stats AS
    SELECT device, COUNT(*) AS cnt, AVG(value) AS avg_value
    FROM sensors
    GROUP BY device""", "sensors", readings(), "sensor_stats",
        "SELECT device, COUNT(*) AS cnt, AVG(value) AS avg_value FROM src GROUP BY device"),
    "py_tumble_ms": (PY_SENSORS + """CREATE STREAM avg_temp_5s AS
    SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt
    FROM sensors
    GROUP BY device, TUMBLE(ts, 5000)""", "sensors", readings(), "avg_temp_5s",
        f"SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt FROM src GROUP BY device, {tumble_ms(5_000)}"),
    "py_hopping_ms": (PY_SENSORS + """CREATE STREAM avg_temp_hop AS
    SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt
    FROM sensors
    GROUP BY device, HOPPING(ts, 5000, 2500)""", "sensors", readings(), "avg_temp_hop",
        f"SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt FROM {hop_pairs(5_000, 2_500)} GROUP BY device, ws"),
    "py_session_ms": (PY_SENSORS + """CREATE STREAM session_stats AS
    SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt
    FROM sensors
    GROUP BY device, SESSION(ts, 10000)""", "sensors", readings(), "session_stats",
        f"SELECT device, AVG(value) AS avg_value, COUNT(*) AS cnt FROM {sessions('device', 10_000)} GROUP BY device, sn"),
    "py_iot_monitoring": ("""CREATE SOURCE sensors (
        ts       BIGINT,
        device   VARCHAR,
        temp     DOUBLE,
        humidity DOUBLE
    );
    CREATE STREAM temp_alerts AS
    SELECT ts, device, temp
    FROM sensors
    WHERE temp > 80.0 OR temp < -20.0;
    CREATE STREAM device_stats AS
    SELECT
        device,
        COUNT(*)   AS reading_count,
        AVG(temp)  AS avg_temp,
        MAX(temp)  AS max_temp,
        MIN(temp)  AS min_temp
    FROM sensors
    GROUP BY device""", "sensors", readings(value="temp"), "device_stats",
        "SELECT device, COUNT(*) AS reading_count, AVG(temp) AS avg_temp, MAX(temp) AS max_temp, "
        "MIN(temp) AS min_temp FROM src GROUP BY device"),
    "py_whale_trades": ("""CREATE SOURCE trades (
        ts      BIGINT,
        symbol  VARCHAR,
        price   DOUBLE,
        volume  BIGINT
    );
    CREATE STREAM whale_trades AS
    SELECT ts, symbol, price, volume
    FROM trades
    WHERE volume > 400""", "trades", trades(), "whale_trades",
        "SELECT ms AS ts, symbol, price, volume FROM src WHERE volume > 400"),
}


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_example_runs_as_written_and_matches_duckdb(name):
    script, source, rows, out, duck_sql, *view = SEEDS[name]
    got = run(script, source, rows, out, view=bool(view and view[0]))
    assert_rows = duck(duck_sql, src=frame(rows))
    same(got, assert_rows)


def test_python_readme_quick_start_as_a_stream():
    """``conn.sql("SELECT * FROM sensors WHERE value > 43.0")`` reads a source's rows: here sources keep
    none, so the same SELECT runs as a stream (docs/sql.md, "Not supported yet")."""
    db = laminardb.open()
    db.execute("CREATE SOURCE sensors (ts BIGINT, device VARCHAR, value DOUBLE)")
    db.execute("CREATE STREAM hot AS SELECT * FROM sensors WHERE value > 43.0")
    sub = db.subscribe_stream("hot")
    db.insert("sensors", [
        {"ts": 1, "device": "sensor_a", "value": 42.0},
        {"ts": 2, "device": "sensor_b", "value": 43.5},
        {"ts": 3, "device": "sensor_a", "value": 44.1},
    ])
    assert sub.to_arrow().to_pylist() == [{"ts": 2, "device": "sensor_b", "value": 43.5},
                                          {"ts": 3, "device": "sensor_a", "value": 44.1}]
    with pytest.raises(laminardb.LaminarError, match="keeps no rows"):
        db.query("SELECT * FROM sensors WHERE value > 43.0")
