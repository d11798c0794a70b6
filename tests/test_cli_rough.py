"""Rough edges of the command line and the lifecycle a new user hit:

* ``laminardb run`` of a Flink script (its own filesystem source and INSERT INTO sink) reads the
  whole file before ending input, and reports what the script's connectors read and wrote;
* ``laminardb run`` exits 3 when every row of an input was rejected;
* ``laminardb sql`` knows ``\\q``, ``quit`` and ``exit``;
* ``close()`` without ``start()`` says that the script's sources were never read.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest

import laminardb
from laminardb.cli.commands import main
from laminardb.cli.shell import run_shell

ROWS = 300_000  # several polls of the file source (65,536 rows each)


def _flink_script(tmp_path: Path, rows: int) -> Path:
    src = tmp_path / "orders.csv"
    with src.open("w") as f:
        f.write("id,amount,ts\n")
        f.writelines(f"{i},{i % 7},2024-01-02 10:{(i // 6000) % 60:02d}:{(i // 100) % 60:02d}\n" for i in range(rows))
    script = tmp_path / "p.sql"
    script.write_text(f"""
        CREATE TABLE orders (id BIGINT, amount DOUBLE, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
        WITH ('connector' = 'filesystem', 'path' = '{src}', 'format' = 'csv');
        CREATE TABLE big (id BIGINT, amount DOUBLE)
        WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'out.csv'}', 'format' = 'csv');
        INSERT INTO big SELECT id, amount FROM orders WHERE amount > 3;
    """)
    return script


def test_run_of_a_flink_script_reads_the_whole_file_and_says_so(tmp_path, capsys):
    script = _flink_script(tmp_path, ROWS)
    assert main(["run", str(script)]) == 0
    want = sum(1 for i in range(ROWS) if i % 7 > 3)
    assert (tmp_path / "out.csv").read_text().count("\n") == want + 1  # + the header
    err = capsys.readouterr().err
    assert f"read orders: {ROWS:,} rows (its connector); wrote big_insert: {want:,} rows (sink)" in err
    assert "no --output" not in err


def test_run_exits_3_when_every_row_of_an_input_is_rejected(tmp_path, capsys):
    (tmp_path / "p.sql").write_text("CREATE SOURCE s (id BIGINT NOT NULL, v DOUBLE); CREATE STREAM o AS SELECT * FROM s;")
    (tmp_path / "in.csv").write_text("id,v\nx,1\ny,2\n")
    args = ["run", str(tmp_path / "p.sql"), "--input", f"s={tmp_path / 'in.csv'}", "--output", f"o={tmp_path / 'o.jsonl'}"]
    assert main(args) == 3  # laminardb.cli.commands.EXIT_ALL_REJECTED
    err = capsys.readouterr().err
    assert "every row of input 's' was rejected (2 rows" in err and "in.csv.rejected" in err
    (tmp_path / "in.csv").write_text("id,v\nx,1\n2,2\n")  # one row fits: a success with a warning
    assert main(args) == 0


@pytest.mark.parametrize("leave", ["\\q", "quit", "exit;", "\\quit", ".quit"])
def test_shell_leaves_on_q_quit_and_exit(leave):
    stdin = io.StringIO(f"CREATE SOURCE t (x BIGINT);\n{leave}\nCREATE SOURCE after_quit (x BIGINT);\n")
    out, err = io.StringIO(), io.StringIO()
    assert run_shell(None, stdin=stdin, stdout=out, stderr=err, interactive=False) == 0
    assert "created source t" in out.getvalue() and "after_quit" not in out.getvalue() + err.getvalue()


def test_shell_refuses_an_unknown_backslash_command():
    out, err = io.StringIO(), io.StringIO()
    assert run_shell(None, stdin=io.StringIO("\\zz\n"), stdout=out, stderr=err, interactive=False) == 1
    assert "unknown command" in err.getvalue()


def test_close_without_start_warns_that_nothing_was_read(tmp_path):
    script = _flink_script(tmp_path, 10).read_text()
    db = laminardb.open()
    db.execute(script)
    with pytest.warns(UserWarning, match=r"close\(\) without start\(\).*'orders' \(filesystem, feeding big_insert\)"):
        db.close()
    db = laminardb.open()
    db.execute(script)
    db.start()
    db.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # started: no warning
        db.close()
    assert (tmp_path / "out.csv").read_text().count("\n") == 1 + sum(1 for i in range(10) if i % 7 > 3)


def test_shell_start_starts_connector_sources():
    script = ("CREATE TABLE g (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
              "'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3');\n"
              "CREATE STREAM ids AS SELECT id FROM g;\n.start\n.quit\n")
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # started: close() has nothing to warn about
        assert run_shell(None, stdin=io.StringIO(script), stdout=out, stderr=err, interactive=False) == 0, \
            err.getvalue()
    assert "started: connector sources" in out.getvalue()
    with pytest.warns(UserWarning, match=r"in `laminardb sql`: \.start"):  # and without .start, it says so
        run_shell(None, stdin=io.StringIO(script.replace(".start\n", "")), stdout=io.StringIO(),
                  stderr=io.StringIO(), interactive=False)


def test_shell_runs_a_flink_insert_into_select():
    script = ("CREATE TABLE g (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');\n"
              "CREATE TABLE bh (id BIGINT) WITH ('connector' = 'blackhole');\n"
              "INSERT INTO bh SELECT id FROM g;\n.start\n")
    out, err = io.StringIO(), io.StringIO()
    assert run_shell(None, stdin=io.StringIO(script), stdout=out, stderr=err, interactive=False) == 0, err.getvalue()
    assert "created stream bh" in out.getvalue()  # it was refused as "write INSERT … VALUES" before
