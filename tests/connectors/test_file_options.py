"""FILE sinks and Flink filesystem tables refuse keys they do not take (LDB-1002, naming the
known keys), as every other object does: a misspelt ``fromat`` or an unsupported ``compression``
used to be ignored, so the sink wrote something other than what was asked for."""

from __future__ import annotations

import pytest

import laminardb
from laminardb.sql.exceptions import UnknownOptionError

STREAM = "CREATE SOURCE s (id BIGINT); CREATE STREAM st AS SELECT id FROM s;"


@pytest.mark.parametrize("extra", ["compression = 'gzip'", "fromat = 'csv'", "bogus = 1"])
@pytest.mark.parametrize("form", ["from", "as"])
def test_into_file_refuses_unknown_keys_and_creates_nothing(tmp_path, extra, form):
    path = tmp_path / "out.parquet"
    if form == "from":
        sink = f"CREATE SINK k FROM st INTO FILE (path = '{path}', format = 'parquet', {extra})"
    else:
        sink = f"CREATE SINK k INTO FILE (path = '{path}', format = 'parquet', {extra}) AS SELECT id FROM s"
    with laminardb.open() as db:
        with pytest.raises(UnknownOptionError) as e:
            db.execute(STREAM + sink)
        assert e.value.code == "LDB-1002"
        key = extra.split()[0]
        assert repr(key) in str(e.value) and "known options: path, format, partitioned_by" in str(e.value)
        if key == "compression":
            assert "Snappy" in str(e.value)
        assert db.list_streams() == []  # the whole script was refused, the sink's query too
        db.execute(STREAM + f"CREATE SINK k FROM st INTO FILE (path = '{path}', format = 'parquet')")


def test_into_file_refuses_unknown_key_as_a_second_execute(tmp_path):
    with laminardb.open() as db:
        db.execute(STREAM)
        with pytest.raises(UnknownOptionError, match="'bogus'"):
            db.execute(f"CREATE SINK k INTO FILE (path = '{tmp_path / 'o.jsonl'}', bogus = 1) AS SELECT id FROM s")
        assert "k__query" not in db.engine.reactor.nodes
        db.execute(f"CREATE SINK k INTO FILE (path = '{tmp_path / 'o.jsonl'}') AS SELECT id FROM s")


def test_flink_filesystem_source_table_refuses_unknown_key(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id\n1\n")
    ddl = ("CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', "
           "'format' = 'csv'{})")
    with laminardb.open() as db:
        with pytest.raises(UnknownOptionError) as e:
            db.execute(ddl.format(src, ", 'formt' = 'json'"))
        assert "'formt'" in str(e.value) and "known options: connector, path, format" in str(e.value)
        db.execute(ddl.format(src, ", 'sink.rolling-policy.rollover-interval' = '1min'"))  # accepted, not applied


def test_flink_filesystem_sink_table_refuses_unknown_key(tmp_path):
    script = ("CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');"
              f"CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'o.csv'}', "
              "'format' = 'csv', 'bogus' = '1'); INSERT INTO t SELECT id FROM src")
    with laminardb.open() as db, pytest.raises(UnknownOptionError, match="'bogus' for filesystem table 't'"):
        db.execute(script)


def test_a_durable_catalog_that_took_an_unknown_key_before_still_opens(tmp_path, monkeypatch):
    """Keys are checked when a statement is written, not when a catalog is replayed: a database
    whose FILE sink or filesystem table took a key before the check existed is not locked."""
    from laminardb.sql import options

    src = tmp_path / "in.csv"
    src.write_text("id\n1\n")
    script = (STREAM + f"CREATE SINK k FROM st INTO FILE (path = '{tmp_path / 'out'}', format = 'jsonl', bogus = 1);"
              f"CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{src}', 'format' = 'csv', "
              "'formt' = 'json')")
    with monkeypatch.context() as m:
        m.setattr(options, "check_new_statement", lambda stmt: None)  # as before the check existed
        with laminardb.open(tmp_path / "db") as db:
            db.execute(script)
    with laminardb.open(tmp_path / "db") as db:
        assert {r["name"] for r in db.execute("SHOW ALL").to_arrow().to_pylist()} >= {"s", "st", "k", "t"}
        db.insert("s", {"id": 7})
        with pytest.raises(UnknownOptionError, match="'bogus'"):  # written anew: refused
            db.execute(f"CREATE SINK k2 FROM st INTO FILE (path = '{tmp_path / 'out2'}', bogus = 1)")
