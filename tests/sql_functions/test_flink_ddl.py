"""Flink's own DDL: Nexmark's published scripts (``CREATE TABLE … WITH ('connector' =
'blackhole'); INSERT INTO …``) run unchanged and equal DuckDB over the same generated rows;
datagen and filesystem tables are sources, kafka and filesystem tables sinks; views, CREATE
FUNCTION and the mistakes are handled as documented in ``laminardb/sql/flink_ddl.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import laminardb
from laminardb.connectors.datagen import DatagenSource
from laminardb.nexmark import SOURCES_DDL, NexmarkConfig, generate, tables
from laminardb.sql.exceptions import (
    JavaFunctionError,
    SqlTypeError,
    UnknownObjectError,
    UnsupportedSqlError,
)
from tests.engine.oracle import duck
from tests.nexmark.test_nexmark import _normalize
from tests.sql_functions.harness import count_char

PUBLISHED = Path(__file__).parent / "nexmark"
SLOW = NexmarkConfig(rate=1000.0)  # 1,000 events/s of event time: sessions and windows open and close
EVENTS = 30_000

_T = '"dateTime"'
_HOUR = f"hour({_T})"
ORACLE = {
    "q0": f"SELECT auction, bidder, price, {_T}, extra FROM bid",
    "q1": f"SELECT auction, bidder, round(0.908::DOUBLE * price, 3), {_T}, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q11": f"""WITH s AS (SELECT bidder, epoch_ms(CAST({_T} AS TIMESTAMP)) AS t,
                   CASE WHEN epoch_ms(CAST({_T} AS TIMESTAMP)) - lag(epoch_ms(CAST({_T} AS TIMESTAMP))) OVER (PARTITION BY bidder ORDER BY {_T}) < 10000
                        THEN 0 ELSE 1 END AS new FROM bid),
               g AS (SELECT *, sum(new) OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM s)
               SELECT bidder, count(*), min(t), max(t) + 10000
               FROM g GROUP BY bidder, sid""",
    "q14": f"""SELECT auction, bidder, round(0.908::DOUBLE * price, 3),
                  CASE WHEN {_HOUR} >= 8 AND {_HOUR} <= 18 THEN 'dayTime'
                       WHEN {_HOUR} <= 6 OR {_HOUR} >= 20 THEN 'nightTime' ELSE 'otherTime' END,
                  {_T}, extra, length(extra) - length(replace(extra, 'c', ''))
               FROM bid WHERE 0.908::DOUBLE * price > 1000000 AND 0.908::DOUBLE * price < 50000000""",
    "q21": """SELECT auction, bidder, price, channel,
                  CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
                       WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
                       WHEN regexp_matches(url, '(&|^)channel_id=([^&]*)')
                       THEN regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END
              FROM bid WHERE regexp_matches(url, '(&|^)channel_id=([^&]*)')
                          OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "q22": """SELECT auction, bidder, price, channel, string_split(url, '/')[4], string_split(url, '/')[5],
                     string_split(url, '/')[6] FROM bid""",
}


@pytest.fixture(scope="module")
def rows() -> dict[str, pa.Table]:
    return tables(EVENTS, seed=7, config=SLOW)


def _published(name: str) -> str:
    return (PUBLISHED / f"{name}.sql").read_text()


@pytest.mark.parametrize("name", list(ORACLE))
def test_published_nexmark_script_runs_unchanged_and_equals_duckdb(name, rows):
    db = laminardb.open()
    db.register_udf("count_char", count_char, "BIGINT")  # q14's CREATE FUNCTION count_char AS '…CountChar'
    db.execute(SOURCES_DDL)
    db.execute(_published(name))
    sink = f"nexmark_{name}"
    assert db.execute("SHOW STREAMS").to_arrow()["name"].to_pylist() == [sink]
    sub = db.subscribe_stream(sink)
    for stream, batch in generate(EVENTS, seed=7, batch_events=4_096, config=SLOW):
        db.insert(stream, batch)
    db.finish()
    got = sub.to_arrow()
    db.close()
    want = duck(ORACLE[name], **rows)
    assert got.num_rows == want.num_rows > 0
    assert _normalize(got) == _normalize(want)


def test_insert_fits_the_query_to_the_declared_columns(rows):
    """Names and types come from the table, by position (q1: DECIMAL(23, 3) is DOUBLE rounded to
    3 digits; q11: SESSION_START … are the table's starttime/endtime)."""
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute(_published("q1") + ";" + _published("q11"))
    d1 = db.execute("DESCRIBE nexmark_q1").to_arrow().to_pylist()
    assert [(r["column"], r["type"]) for r in d1] == [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "DOUBLE"),
                                                      ("dateTime", "TIMESTAMP(3)"), ("extra", "VARCHAR")]
    d11 = db.execute("DESCRIBE nexmark_q11").to_arrow()["column"].to_pylist()
    assert d11 == ["bidder", "bid_count", "starttime", "endtime"]
    db.close()


def test_published_q10_script_runs_unchanged(tmp_path, rows):
    """q10.sql's PARTITIONED BY (dt, hm) filesystem table: Hive directories (tests/nexmark/test_q10.py
    checks the rows against DuckDB)."""
    db = laminardb.open(config={"vars": {"NEXMARK_DIR": str(tmp_path), "SUBMIT_TIME": "0"}})
    db.execute(SOURCES_DDL)
    db.execute(_published("q10"))
    assert db.execute("SHOW SINKS").to_arrow()["name"].to_pylist() == ["nexmark_q10_insert"]
    db.insert("bid", rows["bid"].slice(0, 500))
    db.finish()
    db.close()
    assert list((tmp_path / "data/output/0/bid").glob("dt=*/hm=*/part-*.csv"))


def test_create_function_of_a_java_class(db):
    script = _published("q14")
    db.execute(SOURCES_DDL)
    with pytest.raises(JavaFunctionError) as e:
        db.execute(script)
    assert e.value.code == "LDB-1013"
    assert "com.github.nexmark.flink.udf.CountChar" in str(e.value) and "conn.register_udf('count_char'" in str(e.value)
    db.register_udf("count_char", count_char, "BIGINT")
    db.execute(script)  # now the statement names the Python UDF
    assert db.list_streams() == ["nexmark_q14"]
    with pytest.raises(JavaFunctionError, match="a Python function"):
        db.execute("CREATE TEMPORARY SYSTEM FUNCTION other AS 'mod.fn' LANGUAGE PYTHON")


# --------------------------------------------------------------------------- declarations and INSERT


def test_table_and_insert_in_separate_executes_and_partial_column_list(db):
    db.execute("CREATE SOURCE s (a BIGINT, b VARCHAR)")
    db.execute("CREATE TEMPORARY TABLE out (x BIGINT, y VARCHAR, z DOUBLE) WITH ('connector' = 'blackhole')")
    assert db.list_streams() == []  # a declaration: nothing runs yet
    db.execute("INSERT INTO out (z, x) SELECT a * 1.5, a FROM s")
    sub = db.subscribe_stream("out")
    db.insert("s", [{"a": 2, "b": "q"}])
    assert sub.to_arrow().to_pylist() == [{"x": 2, "y": None, "z": 3.0}]
    assert db.execute("SHOW STREAMS").to_arrow()["sql"].to_pylist()[0].startswith("SELECT CAST(a AS BIGINT) AS x")


@pytest.mark.parametrize("sql,error,fragment", [
    ("INSERT INTO nowhere SELECT a FROM s", UnknownObjectError, "no table 'nowhere' was declared"),
    ("INSERT INTO out SELECT a FROM s", SqlTypeError, "the query gives 1 columns for 2 (x, y)"),
    ("INSERT INTO out (x, w) SELECT a, b FROM s", UnknownObjectError, "has no column 'w'"),
    ("INSERT INTO out VALUES (1, 'a')", UnsupportedSqlError, "conn.insert()"),
    ("INSERT OVERWRITE out SELECT a, b FROM s", UnsupportedSqlError, "use INSERT INTO"),
    ("INSERT INTO gen SELECT a, b FROM s", UnsupportedSqlError, "datagen table generates rows"),
])
def test_insert_mistakes(db, sql, error, fragment):
    db.execute("CREATE SOURCE s (a BIGINT, b VARCHAR)")
    db.execute("CREATE TABLE out (x BIGINT, y VARCHAR) WITH ('connector' = 'blackhole')")
    db.execute("CREATE TABLE gen (x BIGINT, y VARCHAR) WITH ('connector' = 'datagen', 'number-of-rows' = '1')")
    with pytest.raises(error) as e:
        db.execute(sql)
    assert fragment in str(e.value)


@pytest.mark.parametrize("sql,fragment", [
    ("CREATE TABLE t (x BIGINT) WITH ('connector' = 'hbase-2.2', 'zookeeper.quorum' = 'x')", "connector 'hbase-2.2' is not supported"),
    ("CREATE TEMPORARY TABLE t (x BIGINT)", "needs WITH ('connector' = …)"),
    ("CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'fields.y.kind' = 'random')", "no column 'y'"),
    ("CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'fields.x.kind' = 'sequence')", "needs 'fields.x.start'"),
    ("CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'rows-per-sec' = '1')", "unknown option 'rows-per-sec'"),
    ("CREATE TABLE t (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '/x', 'format' = 'avro')", "'avro' is not"),
    ("CREATE TABLE t (x BIGINT, p AS PROCTIME()) WITH ('connector' = 'blackhole')", "computed column"),
    ("CREATE TABLE t (x ROW<a INT>) WITH ('connector' = 'blackhole')", "is not supported"),
])
def test_table_mistakes_are_refused_at_create(db, sql, fragment):
    with pytest.raises(UnsupportedSqlError) as e:
        db.execute(sql)
    assert fragment in str(e.value)


def test_views_of_a_flink_script_are_streams(db):
    db.execute("CREATE SOURCE bid (auction BIGINT, price BIGINT)")
    db.execute("""CREATE TABLE out (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole');
                  CREATE VIEW cheap AS SELECT * FROM bid WHERE price < 10;
                  INSERT INTO out SELECT auction, price FROM cheap""")
    kinds = dict(zip(*[db.execute("SHOW ALL").to_arrow()[c].to_pylist() for c in ("name", "kind")], strict=True))
    assert kinds["cheap"] == "stream" and kinds["out"] == "stream"
    db.execute("CREATE TEMPORARY VIEW tv AS SELECT auction FROM bid")
    db.execute("CREATE VIEW mv AS SELECT auction FROM bid")  # outside a Flink script: a materialized view
    kinds = dict(zip(*[db.execute("SHOW ALL").to_arrow()[c].to_pylist() for c in ("name", "kind")], strict=True))
    assert kinds["tv"] == "stream" and kinds["mv"] == "view"
    sub = db.subscribe_stream("out")
    db.insert("bid", [{"auction": 1, "price": 5}, {"auction": 2, "price": 50}])
    assert sub.to_arrow().to_pylist() == [{"auction": 1, "price": 5}]


def test_qualified_star_over_one_input(db):
    db.execute("CREATE SOURCE bid (auction BIGINT, price BIGINT)")
    db.execute("CREATE STREAM a AS SELECT B.*, B.price * 2 AS p2 FROM bid B")
    db.execute("CREATE STREAM b AS SELECT bid.* FROM bid")
    sa, sb = db.subscribe_stream("a"), db.subscribe_stream("b")
    db.insert("bid", [{"auction": 1, "price": 5}])
    assert sa.to_arrow().to_pylist() == [{"auction": 1, "price": 5, "p2": 10}]
    assert sb.to_arrow().to_pylist() == [{"auction": 1, "price": 5}]
    with pytest.raises(UnknownObjectError, match="the query reads B, not 'A'"):
        db.execute("CREATE STREAM c AS SELECT A.* FROM bid B")


def test_explain_and_drop_of_a_declared_table(db):
    db.execute("CREATE SOURCE s (a BIGINT)")
    db.execute("CREATE TABLE out (x BIGINT) WITH ('connector' = 'blackhole')")
    plan = db.execute("EXPLAIN INSERT INTO out SELECT a + 1 FROM s").to_arrow()["plan"].to_pylist()
    assert any("CAST(a + 1 AS BIGINT)" in line for line in plan)
    db.execute("DROP TABLE out")  # only a declaration: nothing to drop in the engine
    with pytest.raises(UnknownObjectError, match="no table 'out' was declared"):
        db.execute("INSERT INTO out SELECT a FROM s")


def test_durable_database_recovers_an_insert_as_its_laminardb_statement(tmp_path):
    path = tmp_path / "db"
    db = laminardb.open(path, config={"checkpoint_interval": "off"})
    db.execute("""CREATE SOURCE s (a BIGINT);
                  CREATE TABLE out (x BIGINT, y DECIMAL(10, 2)) WITH ('connector' = 'blackhole');
                  INSERT INTO out SELECT a, a / 3 FROM s""")
    db.insert("s", [{"a": 1}])
    db.close()
    db = laminardb.open(path, config={"checkpoint_interval": "off"})  # a new connection: no declarations
    sub = db.subscribe_stream("out")
    db.insert("s", [{"a": 2}])
    assert sub.to_arrow().to_pylist() == [{"x": 2, "y": 0.67}]
    db.close()


# --------------------------------------------------------------------------- datagen


def _datagen_script(rows: int = 5_000) -> str:
    return f"""
    CREATE TABLE gen (id BIGINT, name VARCHAR, price DOUBLE, qty INT, ok BOOLEAN, ts TIMESTAMP(3),
        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
    ) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000', 'number-of-rows' = '{rows}',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '100', 'fields.id.end' = '1000000',
        'fields.name.length' = '6', 'fields.name.null-rate' = '0.25',
        'fields.price.min' = '1', 'fields.price.max' = '10', 'fields.qty.min' = '-3', 'fields.qty.max' = '3');
    CREATE TABLE out (id BIGINT, name VARCHAR, price DOUBLE, qty INT, ok BOOLEAN) WITH ('connector' = 'blackhole');
    INSERT INTO out SELECT id, name, price, qty, ok FROM gen;
    CREATE TABLE counts (n BIGINT, ws TIMESTAMP(3)) WITH ('connector' = 'blackhole');
    INSERT INTO counts SELECT count(*), window_start FROM TABLE(TUMBLE(TABLE gen, DESCRIPTOR(ts), INTERVAL '1' HOUR))
        GROUP BY window_start, window_end
    """


def test_datagen_table_generates_the_rows_it_is_told_to():
    db = laminardb.open()
    db.execute(_datagen_script())
    out, counts = db.subscribe_stream("out"), db.subscribe_stream("counts")
    db.start()
    db.flush(timeout_s=30)
    got = out.to_arrow()
    assert got["id"].to_pylist() == list(range(100, 5_100))
    assert set(pc.utf8_length(got["name"].drop_null()).to_pylist()) == {6}
    assert 0.15 < got["name"].null_count / got.num_rows < 0.35
    assert pc.min(got["price"]).as_py() >= 1 and pc.max(got["price"]).as_py() <= 10
    assert set(got["qty"].to_pylist()) == set(range(-3, 4)) and got.schema.field("qty").type == pa.int32()
    assert set(got["ok"].to_pylist()) == {True, False}
    # a bounded source ends with its watermark at the end of time: its windows close without finish()
    assert sum(counts.to_arrow()["n"].to_pylist()) == 5_000
    db.close()


def test_datagen_values_are_the_same_on_every_run_and_after_a_restore():
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("x", pa.float64())])
    opts = {"fields.id.kind": "sequence", "fields.id.start": "0", "fields.id.end": "99999"}
    a = DatagenSource(name="g", schema=schema, options=opts)
    first = a.rows(0, 20_000)
    again = DatagenSource(name="g", schema=schema, options=opts).rows(0, 20_000)
    assert first.equals(again)
    resumed = DatagenSource(name="g", schema=schema, options=opts, restore_state={"rows": 12_345})
    assert resumed.rows(12_345, 7_655).equals(first.slice(12_345))
    assert not DatagenSource(name="h", schema=schema, options=opts).rows(0, 100)["s"].equals(first["s"].slice(0, 100))


def test_datagen_keeps_its_pace():
    schema = pa.schema([("id", pa.int64())])
    src = DatagenSource(name="g", schema=schema, options={"rows-per-second": "200"})
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 0.5:
        batch, _ = src.poll(50)
        n += 0 if batch is None else batch.num_rows
    assert 20 <= n <= 200  # about 100 rows in half a second at 200/s (bounds generous for a busy machine)
    src.close()


# --------------------------------------------------------------------------- filesystem


def test_filesystem_tables_read_a_directory_and_write_a_file(tmp_path):
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    for part in range(3):  # read in name order; _SUCCESS-style files are skipped
        lines = [json.dumps({"k": f"k{i % 4}", "v": i, "ts": 1000 * i}) for i in range(part * 10, part * 10 + 10)]
        (src_dir / f"part-{part}.json").write_text("\n".join(lines) + "\n")
    (src_dir / "_SUCCESS").write_text("")
    out = tmp_path / "out.jsonl"
    db = laminardb.open()
    db.execute(f"""
        CREATE TABLE events (k VARCHAR, v BIGINT, ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
        WITH ('connector' = 'filesystem', 'path' = 'file://{src_dir}', 'format' = 'json');
        CREATE TABLE totals (k VARCHAR, total BIGINT, ws BIGINT)
        WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
        INSERT INTO totals SELECT k, sum(v), window_start FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts),
            INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end""")
    kinds = dict(zip(*[db.execute("SHOW ALL").to_arrow()[c].to_pylist() for c in ("name", "kind")], strict=True))
    assert kinds == {"events": "source", "totals_insert": "sink"}
    db.start()
    db.flush(timeout_s=30)
    db.close()
    got = sorted((r["k"], r["ws"], r["total"]) for r in map(json.loads, out.read_text().splitlines()))
    want = sorted((f"k{k}", w * 10_000, sum(i for i in range(w * 10, w * 10 + 10) if i % 4 == k))
                  for w in range(3) for k in range(4))
    assert got == want


# --------------------------------------------------------------------------- kafka


def test_kafka_tables_read_one_topic_and_write_another(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    src, dst = "flink-ddl-in", "flink-ddl-out"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    for i in range(6):
        producer.send(src, json.dumps({"id": i, "url": f"https://x.com/a/b{i}?q=1&channel_id={i * 7}"}).encode())
    producer.flush()
    producer.close()
    common = (f"'properties.bootstrap.servers' = '{kafka_broker.bootstrap}', 'format' = 'json', "
              "'properties.group.id' = 'nexmark', 'scan.startup.mode' = 'earliest-offset', "
              "'sink.partitioner' = 'round-robin'")
    db = laminardb.open()
    try:
        db.execute(f"""
            CREATE TABLE clicks (id BIGINT, url VARCHAR) WITH ('connector' = 'kafka', 'topic' = '{src}', {common});
            CREATE TABLE channels (id BIGINT, channel_id VARCHAR, dir VARCHAR)
                WITH ('connector' = 'kafka', 'topic' = '{dst}', {common});
            INSERT INTO channels SELECT id, REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2),
                SPLIT_INDEX(url, '/', 4) FROM clicks WHERE id % 2 = 0""")
        kinds = dict(zip(*[db.execute("SHOW ALL").to_arrow()[c].to_pylist() for c in ("name", "kind")], strict=True))
        assert kinds["clicks"] == "source" and kinds["channels_insert"] == "sink" and "channels" not in kinds
        db.start()
        db.flush(timeout_s=30)
        consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=None, enable_auto_commit=False)
        try:
            deadline = time.monotonic() + 20
            parts: set[int] = set()
            while not parts and time.monotonic() < deadline:
                parts = consumer.partitions_for_topic(dst) or set()
                time.sleep(0.05)
            tps = [TopicPartition(dst, p) for p in sorted(parts)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            got: list[dict] = []
            while len(got) < 3 and time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=200).values():
                    got.extend(json.loads(r.value) for r in recs)
        finally:
            consumer.close()
        assert sorted(got, key=lambda r: r["id"]) == [
            {"id": i, "channel_id": str(i * 7), "dir": f"b{i}?q=1&channel_id={i * 7}"} for i in (0, 2, 4)]
    finally:
        db.close()
