"""The ``laminardb`` command, run as a subprocess; results are checked against DuckDB over the
same input files."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

# Generous: the first engine start in a fresh process may compile numba kernels.
_TIMEOUT_S = 180
_T0 = datetime(2024, 1, 2, 9, 30)

PIPELINE_SQL = """
-- trades in, 2-second tumbling windows (size from --var WIN) and running totals out
CREATE SOURCE trades (
    ts TIMESTAMP(3) NOT NULL, symbol VARCHAR, price DOUBLE, qty BIGINT,
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
);
CREATE STREAM counts AS
    SELECT symbol, window_start, window_end, count(*) AS n, sum(qty) AS volume, max(price) AS high
    FROM trades GROUP BY symbol, tumble(ts, INTERVAL '${WIN}' SECOND);
CREATE MATERIALIZED VIEW totals AS
    SELECT symbol, count(*) AS c, sum(qty) AS vol FROM trades GROUP BY symbol;
"""

ORACLE_COUNTS = """
    SELECT symbol, epoch_ms(ts) // 2000 * 2000 AS ws, count(*) AS n, sum(qty) AS volume,
           max(price) AS high
    FROM {src} GROUP BY ALL ORDER BY ws, symbol
"""


def laminardb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminardb.cli.commands", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=_TIMEOUT_S)


@pytest.fixture
def trades() -> pa.Table:
    """2,000 trades over ~20 s, a little out of order but never later than the 1 s delay."""
    rng = np.random.default_rng(7)
    n = 2000
    ms = np.sort(rng.integers(0, 20_000, n)) - rng.integers(0, 600, n) * (rng.random(n) < 0.2)
    ms = np.maximum(ms, 0)
    return pa.table({
        "ts": pa.array([_T0 + timedelta(milliseconds=int(m)) for m in ms], pa.timestamp("ms")),
        "symbol": rng.choice(["AAA", "BBB", "CCC"], n),
        "price": np.round(100 + rng.normal(0, 1, n).cumsum(), 2),
        "qty": rng.integers(1, 500, n),
    })


@pytest.fixture
def sql_file(tmp_path) -> Path:
    path = tmp_path / "pipeline.sql"
    path.write_text(PIPELINE_SQL)
    return path


def _oracle(src: str) -> list[tuple]:
    return duckdb.sql(ORACLE_COUNTS.format(src=src)).fetchall()


def _engine(src: str) -> list[tuple]:
    q = (f"SELECT symbol, epoch_ms(window_start::TIMESTAMP) AS ws, n, volume, high FROM {src} "
         "ORDER BY ws, symbol")
    return duckdb.sql(q).fetchall()


def _totals(src: str) -> list[tuple]:
    # a changelog: the final state is what has a positive total weight
    q = (f"SELECT symbol, c, vol FROM {src} GROUP BY symbol, c, vol "
         "HAVING sum(__weight) > 0 ORDER BY symbol")
    return duckdb.sql(q).fetchall()


def test_version():
    script = Path(sys.executable).with_name("laminardb")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "laminardb.cli.commands"]
    out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=_TIMEOUT_S)
    assert out.returncode == 0
    assert out.stdout.strip().startswith("laminardb 0.")


def test_run_csv_in_jsonl_and_parquet_out(tmp_path, trades, sql_file):
    src = tmp_path / "trades.csv"
    pacsv.write_csv(trades, src)  # timestamps as "2024-01-02 09:30:00.123"
    out = laminardb("run", sql_file, "--input", f"trades={src}", "--var", "WIN=2",
                    "--output", f"counts={tmp_path / 'counts.jsonl'}",
                    "--output", f"totals={tmp_path / 'totals.parquet'}", "--batch-rows", "300")
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stderr
    expected = _oracle(f"read_csv('{src}')")
    assert len(expected) > 20
    assert _engine(f"read_json('{tmp_path / 'counts.jsonl'}')") == expected
    first = json.loads((tmp_path / "counts.jsonl").read_text().splitlines()[0])
    assert first["window_start"].startswith("2024-01-02T09:30:00")
    totals = duckdb.sql(f"SELECT symbol, count(*), sum(qty) FROM read_csv('{src}') "
                        "GROUP BY symbol ORDER BY symbol").fetchall()
    assert _totals(f"read_parquet('{tmp_path / 'totals.parquet'}')") == totals


def test_run_jsonl_in_with_epoch_ms_and_bad_rows_csv_out(tmp_path, trades, sql_file):
    src = tmp_path / "trades.jsonl"
    epoch = pc.cast(trades.column("ts"), pa.int64())
    rows = trades.set_column(0, "ts", epoch).to_pylist()
    lines = [json.dumps(r) for r in rows]
    lines.insert(100, '{"ts": 1, "symbol": "AAA", ')  # not JSON
    lines.insert(200, json.dumps({"ts": None, "symbol": "AAA", "price": 1.0, "qty": 1}))
    src.write_text("\n".join(lines) + "\n")
    out = laminardb("run", sql_file, "--input", f"trades={src}", "--var", "WIN=2",
                    "--output", f"counts={tmp_path / 'counts.csv'}")
    assert out.returncode == 0, out.stderr
    assert "2 rejected" in out.stderr and "trades.jsonl.rejected" in out.stderr
    assert len((tmp_path / "trades.jsonl.rejected").read_text().splitlines()) == 2
    good = tmp_path / "good.parquet"
    pq.write_table(trades, good)
    assert _engine(f"read_csv('{tmp_path / 'counts.csv'}')") == _oracle(f"read_parquet('{good}')")


def test_bad_sql_exits_2_with_code(tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE SOURCE trades (ts TIMESTAMP(3) NOT NULL,;\nSELEKT 1;")
    out = laminardb("run", bad)
    assert out.returncode == 2
    assert "error: [LDB-1" in out.stderr


def test_user_errors_exit_2_and_say_what_to_do(tmp_path, sql_file):
    missing = laminardb("run", sql_file, "--var", "WIN=2", "--input",
                        f"trades={tmp_path / 'nope.csv'}")
    assert missing.returncode == 2 and "[LDB-4002]" in missing.stderr
    assert "does not exist" in missing.stderr
    malformed = laminardb("run", sql_file, "--input", "trades")
    assert malformed.returncode == 2 and "[LDB-9001]" in malformed.stderr
    no_sql = laminardb("run", tmp_path / "none.sql")
    assert no_sql.returncode == 2 and "[LDB-9002]" in no_sql.stderr
    unknown = laminardb("run", sql_file, "--var", "WIN=2",
                        "--output", f"nosuch={tmp_path / 'x.jsonl'}")
    assert unknown.returncode == 2 and "[LDB-1" in unknown.stderr


def test_demo_runs_and_exits(tmp_path):
    out = laminardb("demo", "--seconds", "3", "--rate", "500", "--symbols", "3", "--seed", "1")
    assert out.returncode == 0, out.stderr
    assert "laminardb demo" in out.stdout
    assert "LMNR" in out.stdout and "done:" in out.stdout
    assert "late dropped 0" in out.stdout
