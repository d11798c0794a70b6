"""SQL comments (``-- …``, ``/* … */``) may stand wherever a token can: inside column lists and
``WITH (…)`` options too, where the DDL parser splits text rather than tokens. Pasted Flink DDL and
the documented ``event_time_range`` example are full of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import laminardb
from laminardb.sql._lexer import blank_comments
from laminardb.sql.exceptions import SqlParseError

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_documented_event_time_range_example_runs():
    text = (DOCS / "python.md").read_text()
    blocks = [b for b in re.findall(r"```sql\n(.*?)```", text, re.S) if "event_time_range" in b]
    assert blocks and "--" in blocks[0]
    with laminardb.open() as db:
        db.execute(blocks[0])
        desc = db.execute("DESCRIBE s").to_arrow().to_pylist()
        assert [r["column"] for r in desc] == ["ts"]
        # the options took effect: 1999 is outside the documented 2000/2100 range
        with pytest.raises(laminardb.DataError, match="LDB-2004"):
            db.insert("s", {"ts": 915148800000})


def test_pasted_flink_ddl_with_comments(tmp_path):
    src = tmp_path / "orders.csv"
    src.write_text("id,amount,ts\n1,2.5,2024-01-02 10:00:00\n2,4.0,2024-01-02 10:00:01\n")
    out = tmp_path / "out.jsonl"
    script = f"""
    -- orders, read once from a file
    CREATE TABLE orders (
        id     BIGINT,            -- the order id
        amount DOUBLE,            /* in EUR */
        ts     TIMESTAMP(3),
        /* event time, 5 s out of order */
        WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
    ) WITH (
        'connector' = 'filesystem',   -- bounded
        'path' = '{src}',             /* a single file */
        'format' = 'csv'
    );
    CREATE TABLE big (
        id BIGINT, -- copied
        amount DOUBLE
    ) WITH ('connector' = 'filesystem', 'path' = '{out}', /* one object per line */ 'format' = 'json');
    INSERT INTO big SELECT id, amount FROM orders WHERE amount > 3 -- only the big ones
    """
    db = laminardb.open()
    try:
        db.execute(script)
        kinds = {r["name"]: r["kind"] for r in db.execute("SHOW ALL").to_arrow().to_pylist()}
        assert kinds["orders"] == "source"
        assert [r["column"] for r in db.execute("DESCRIBE orders").to_arrow().to_pylist()] == ["id", "amount", "ts"]
        db.start()
        db.flush()
    finally:
        db.close()
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"id": 2, "amount": 4.0}]


def test_comment_text_is_kept_inside_quotes_and_positions_stay():
    sql = "SELECT '-- not a comment', \"a/*b\" -- gone\nFROM t /* x\ny */ WHERE a = 1"
    blanked = blank_comments(sql)
    assert len(blanked) == len(sql) and blanked.count("\n") == sql.count("\n")
    assert "'-- not a comment'" in blanked and '"a/*b"' in blanked
    assert "gone" not in blanked and "x" not in blanked.split("FROM t", 1)[1]


def test_variable_in_a_comment_needs_no_value_and_unterminated_comment_is_refused():
    with laminardb.open() as db:
        db.execute("CREATE SOURCE s (ts BIGINT) -- was ${OLD_NAME}")
        with pytest.raises(SqlParseError, match="unterminated"):
            db.execute("CREATE SOURCE t (ts BIGINT /* open")


def test_parse_error_without_a_column_says_no_column_none():
    with laminardb.open() as db, pytest.raises(SqlParseError) as e:
        db.execute("CREATE SOURCE s (ts BIGINT, price)")
    assert "None" not in str(e.value)


def test_shell_splits_statements_around_block_comments():
    import io

    from laminardb.cli.shell import run_shell

    script = "CREATE SOURCE t (x BIGINT, /* a ; b */\n y BIGINT -- c;\n);\n/* two\nlines; */\nDESCRIBE t;\n"
    out, err = io.StringIO(), io.StringIO()
    assert run_shell(None, stdin=io.StringIO(script), stdout=out, stderr=err, interactive=False) == 0, err.getvalue()
    assert "created source t" in out.getvalue() and "\ny      | BIGINT" in out.getvalue()
