"""``laminardb run``: results independent of --batch-rows (the --watermark-every rule), late rows
reported, one ``.rejected`` schema, a progress line; ``laminardb sql``: the shell, driven by stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import laminardb

_TIMEOUT_S = 180
_T0 = datetime(2024, 1, 2, 9, 30)

PIPELINE = """
CREATE SOURCE trades (ts TIMESTAMP(3) NOT NULL, symbol VARCHAR, qty BIGINT,
                      WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM bars AS SELECT symbol, window_start, count(*) AS n, sum(qty) AS volume
    FROM trades GROUP BY symbol, tumble(ts, INTERVAL '1' SECOND);
"""


def cli(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminardb.cli.commands", *map(str, args)], input=stdin, cwd=cwd,
                          capture_output=True, text=True, timeout=_TIMEOUT_S)


def _rows(n: int = 300, behind_at: int = 150) -> list[dict]:
    """Trades 100 ms apart, a little out of order, and one 2 hours behind at ``behind_at``."""
    rows = []
    for i in range(n):
        jitter = -300 if i % 7 == 3 else 0
        ts = _T0 + timedelta(milliseconds=100 * i + jitter)
        rows.append({"ts": ts.isoformat(), "symbol": "AB"[i % 2], "qty": i})
    rows.insert(behind_at, {"ts": (_T0 - timedelta(hours=2)).isoformat() + "Z", "symbol": "OLD", "qty": 1})
    return rows


@pytest.fixture
def pipeline(tmp_path) -> Path:
    path = tmp_path / "p.sql"
    path.write_text(PIPELINE)
    return path


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_output_does_not_depend_on_batch_rows(tmp_path, pipeline):
    src = _write_jsonl(tmp_path / "in.jsonl", _rows())
    outs = {}
    for rows in ("1", "7", "65536"):
        out = tmp_path / f"bars-{rows}.jsonl"
        res = cli("run", pipeline, "--input", f"trades={src}", "--output", f"bars={out}",
                  "--batch-rows", rows, "--watermark-every", "40")
        assert res.returncode == 0, res.stderr
        outs[rows] = out.read_bytes()
        # the row 2 h behind came in the 4th chunk of 40: its window had closed, it is late
        assert "rows dropped as late (bars: 1)" in res.stderr, res.stderr
    assert outs["1"] == outs["7"] == outs["65536"]
    # the rule, through the Python API: chunks of 40 rows, one insert each
    with laminardb.open() as db:
        db.execute(PIPELINE)
        sub = db.subscribe_stream("bars")
        rows = _rows()
        for i in range(0, len(rows), 40):
            db.insert("trades", rows[i:i + 40])
        db.finish()
        expected = sorted((r["symbol"], r["window_start"].isoformat()[:19], r["n"])
                          for r in sub.to_arrow().to_pylist())
    got = sorted((r["symbol"], r["window_start"][:19], r["n"]) for r in map(json.loads, outs["1"].splitlines()))
    assert got == expected
    assert not any(s == "OLD" for s, _, _ in got)


def test_a_chunk_keeps_a_row_behind_that_the_next_one_drops(tmp_path, pipeline):
    src = _write_jsonl(tmp_path / "in.jsonl", _rows(behind_at=10))
    out = tmp_path / "bars.jsonl"
    res = cli("run", pipeline, "--input", f"trades={src}", "--output", f"bars={out}", "--batch-rows", "1")
    assert res.returncode == 0, res.stderr
    bars = [json.loads(line) for line in out.read_text().splitlines()]
    assert [b["n"] for b in bars if b["symbol"] == "OLD"] == [1], "same chunk: not late, its own bar"
    assert "dropped as late" not in res.stderr


def test_rejected_file_has_one_schema(tmp_path, pipeline):
    rows = _rows(20, behind_at=0)[1:]
    lines = [json.dumps(r) for r in rows]
    lines[3] = '{"ts": "2024-01-02T09:30:00", "symbol": '                       # does not parse
    lines[5] = json.dumps({"ts": "2024-01-02T09:30:01", "symbol": "A", "qty": "x"})  # wrong type
    lines[8] = json.dumps({"ts": 1704187800000 * 1000, "symbol": "A", "qty": 1})       # epoch µs
    lines.insert(10, "")                                                            # blank: not a record
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    res = cli("run", pipeline, "--input", f"trades={src}", "--output", f"bars={tmp_path / 'b.csv'}")
    assert res.returncode == 0, res.stderr
    assert "17 rows, 3 rejected" in res.stderr
    dead = [json.loads(line) for line in (tmp_path / "in.jsonl.rejected").read_text().splitlines()]
    assert all(set(d) == {"index", "raw", "error"} and isinstance(d["raw"], str) for d in dead)
    by_index = {d["index"]: d for d in dead}
    assert sorted(by_index) == [3, 5, 8]
    assert by_index[3]["raw"] == lines[3] and "line 4" in by_index[3]["error"]
    assert "'qty': x is not a valid BIGINT" in by_index[5]["error"]
    assert "looks like epoch microseconds" in by_index[8]["error"]
    assert json.loads(by_index[8]["raw"])["ts"] == 1704187800000000
    csv = tmp_path / "in.csv"
    csv.write_text("ts,symbol,qty\n2024-01-02T09:30:00Z,A,1\n2024-01-02T09:30:01Z,A\n2024-01-02T09:30:02Z,A,y\n")
    res = cli("run", pipeline, "--input", f"trades={csv}")
    dead = [json.loads(line) for line in (tmp_path / "in.csv.rejected").read_text().splitlines()]
    assert [(d["index"], set(d)) for d in dead] == [(1, {"index", "raw", "error"}), (2, {"index", "raw", "error"})]


def test_progress_line_when_forced(tmp_path, pipeline):
    src = _write_jsonl(tmp_path / "in.jsonl", _rows())
    res = cli("run", pipeline, "--input", f"trades={src}", "--progress", "--watermark-every", "50")
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stderr.splitlines() if "rows/s" in x)
    assert "watermark trades 2024-01-02 09:30" in line and " late " in line
    quiet = cli("run", pipeline, "--input", f"trades={src}")  # not a terminal: no progress
    assert "rows/s" not in quiet.stderr


# ------------------------------------------------------------------ laminardb sql
SCRIPT = """\
CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v DOUBLE,
                 WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);  -- a comment
CREATE STREAM s AS SELECT k, window_start, count(*) AS n
    FROM t GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS total FROM t GROUP BY k;
INSERT INTO t VALUES (100, 'a', 1.5), (200, 'b;c', -2), (300, 'a', NULL);
INSERT INTO t (k, ts) VALUES ('a', 2500);
INSERT INTO t VALUES (1, 'x', 'not a number');
SELECT * FROM m ORDER BY k;
.streams
"""


def test_sql_shell_from_stdin(tmp_path):
    res = cli("sql", stdin=SCRIPT)
    assert res.returncode == 1, "a statement failed"
    out = res.stdout
    assert "created source t" in out and "created stream s" in out and "created view m" in out
    assert "inserted 3 rows" in out and "inserted 1 row\n" in out
    # the stream printed as it emitted: the insert of ts 2500 closed [0, 1000)
    emitted = out[out.index("inserted 1 row"):]
    assert emitted.index("-- s: 2 rows") < emitted.index("k   | total")
    assert "a   | 0            | 2" in emitted and "b;c | 0            | 1" in emitted
    assert "a   | 1.5" in out and "b;c | -2.0" in out  # SELECT from the view
    assert "error: [LDB-2003] insert into 't': row 0: column 'v'" in res.stderr
    assert "t    | source" in out and "s    | stream" in out  # .streams


def test_sql_shell_on_a_directory_continues(tmp_path):
    d = tmp_path / "db"
    first = cli("sql", d, stdin=SCRIPT.replace("INSERT INTO t VALUES (1, 'x', 'not a number');\n", ""))
    assert first.returncode == 0, first.stderr
    second = cli("sql", d, stdin="INSERT INTO t VALUES (3700, 'a', 1.0);\nSELECT * FROM m ORDER BY k;\n.finish\n")
    assert second.returncode == 0, second.stderr
    assert "a   | 2.5" in second.stdout  # the view continued from the first session
    # the stream is followed again: .finish closes the window left open by the first session
    # ([2000, 3000) holds its ts 2500) and the new one
    assert "-- s: 2 rows\nk | window_start | n\n--+--------------+--\na | 2000         | 1\na | 3000         | 1" \
        in second.stdout
    assert "finished" in second.stdout


def test_sql_shell_errors_say_what_to_do():
    res = cli("sql", stdin="INSERT INTO t SELECT 1;\n.nope\nSELECT * FROM nothing;\n")
    assert res.returncode == 1
    assert "[LDB-1002]" in res.stderr and "unknown command '.nope'" in res.stderr
    assert "[LDB-1003]" in res.stderr


def test_sql_shell_in_a_terminal():
    """A real terminal (a pty): prompts, a continuation prompt, stream rows before the next prompt."""
    import os
    import pty
    import select
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "laminardb.cli.commands", "sql"], stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    buf = b""

    def until(text: str) -> str:
        nonlocal buf
        end = time.monotonic() + _TIMEOUT_S
        while text.encode() not in buf:
            ready, _, _ = select.select([master], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"no {text!r} in {buf.decode(errors='replace')!r}"
            buf += os.read(master, 4096)
        i = buf.index(text.encode()) + len(text)
        out, buf = buf[:i], buf[i:]
        return out.decode(errors="replace")

    try:
        assert ".help for help" in until("laminardb> ")
        os.write(master, b"CREATE SOURCE t (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts);\n")
        assert "created source t" in until("laminardb> ")
        os.write(master, b"CREATE STREAM s AS SELECT ts\n")
        until("...> ")
        os.write(master, b"FROM t WHERE ts > 5;\n")
        assert "created stream s" in until("laminardb> ")
        os.write(master, b"INSERT INTO t VALUES (5), (7), (9);\n")
        out = until("laminardb> ")
        assert "inserted 3 rows" in out and "-- s: 2 rows" in out and "7\r\n9" in out
        os.write(master, b"\x04")  # Ctrl-D: leave
        assert proc.wait(_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_progress_on_a_terminal_after_a_few_seconds(tmp_path, pipeline, monkeypatch):
    import io

    from laminardb.cli import commands as cli_module

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    src = _write_jsonl(tmp_path / "in.jsonl", _rows())
    for after, shown in ((3600.0, False), (0.0, True)):  # a short run stays quiet
        monkeypatch.setattr(cli_module, "_PROGRESS_AFTER_S", after)
        term = Terminal()
        res = cli_module.run_pipeline(PIPELINE, inputs={"trades": str(src)}, outputs={}, progress=term,
                                      watermark_every=100)
        assert res.rows_in == {"trades": 301}
        text = term.getvalue()
        assert ("\r\x1b[K" in text and "rows/s" in text and "late" in text) is shown, text
        assert "rows dropped as late (bars: 1)" in text
