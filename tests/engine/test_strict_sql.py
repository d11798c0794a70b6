"""Options are checked and the SQL front end is strict: every WITH key is known or refused
(LDB-1002, naming the known keys), Flink's and LaminarDB's connector DDL maps onto laminardb's,
stray commas are syntax errors, and what is not supported (aggregates, joins, OVER, subqueries)
is named as such with what is supported instead. After every error the catalog is unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import laminardb
from laminardb.sql import ddl
from laminardb.sql.exceptions import (
    SqlParseError,
    UnknownOptionError,
    UnsupportedAggregateError,
    UnsupportedJoinError,
    UnsupportedSqlError,
)
from laminardb.sql.options import known_sink_options

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests._services
from tests._services.fixtures import kafka_broker  # noqa: E402,F401

SOURCE = ("CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, qty BIGINT, "
          "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")


@pytest.fixture
def db():
    conn = laminardb.open()
    conn.execute(SOURCE)
    yield conn
    conn.close()


def _refused(db, sql: str, error: type, *fragments: str):
    before = db.execute("SHOW ALL").to_arrow().to_pylist()
    with pytest.raises(error) as e:
        db.execute(sql)
    for f in fragments:
        assert f in str(e.value), str(e.value)
    assert db.execute("SHOW ALL").to_arrow().to_pylist() == before  # nothing half-created
    return e.value


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize("sql,fragments", [
    ("CREATE SOURCE s (x INT) WITH (foo = 'bar')",
     ["unknown option 'foo' for source 's'", "known options: watermark, allowed_lateness, connector"]),
    ("CREATE SOURCE s (x INT, ts BIGINT) WITH ('watermark' = 'ts', 'retain' = '1')", ["unknown option 'retain'"]),
    ("CREATE STREAM s AS SELECT sym, count(*) FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) "
     "WITH ('retain_history' = '64mb')", ["unknown option 'retain_history' for stream 's'",
                                          "known options: allowed_lateness"]),
    ("CREATE STREAM s WITH (emit = 'changes') AS SELECT sym FROM trades", ["unknown option 'emit'"]),
    ("CREATE SOURCE s (x INT) WITH (watermark = 'ts')", ["watermark = 'ts' names no column", "x"]),
    ("CREATE SOURCE s (x INT, ts BIGINT) WITH (allowed_lateness = INTERVAL '5' SECOND)",
     ["name its event-time column too", "watermark = 'ts'"]),
    ("CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts) WITH (watermark = 'ts')", ["given twice"]),
    ("CREATE SOURCE s (ts BIGINT) WITH ('connector' = 'datagen')",
     ["connector 'datagen' is not supported", "'connector' = 'kafka'", "insert()"]),
    ("CREATE SOURCE s (ts BIGINT) WITH (connector = 'websocket', 'url' = 'wss://x')",
     ["connector 'websocket' is not supported"]),
    ("CREATE TABLE ft (x INT) WITH ('connector'='kafka', 'topic'='x')",
     ["connector 'kafka' needs 'properties.bootstrap.servers'"]),
    ("CREATE TABLE ft (x INT) WITH ('connector'='kafka', 'topic'='x', 'properties.bootstrap.servers'='h:1', "
     "'scan.startup.mode'='group-offsets')", ["'group-offsets' is not supported", "'earliest-offset'"]),
    ("CREATE TABLE ft (x INT) WITH ('connector'='kafka', 'topic'='x', 'properties.bootstrap.servers'='h:1', "
     "'json.fail-on-missing-field'='false')", ["unknown option 'json.fail-on-missing-field'", "properties.*"]),
])
def test_unknown_or_wrong_options_are_refused(db, sql, fragments):
    e = _refused(db, sql, UnsupportedSqlError, *fragments)
    assert e.code == "LDB-1002"


def test_unknown_option_is_a_typed_error(db):
    e = _refused(db, "CREATE SOURCE s (x INT) WITH (foo = 1)", UnknownOptionError)
    assert isinstance(e, KeyError) and str(e).startswith("[LDB-1002] unknown option 'foo'")


@pytest.mark.parametrize("sql", [
    "CREATE SOURCE s (x INT) WITH (a = '1', a = '2')",
    "CREATE SOURCE s (x INT) WITH (a = '1',, b = '2')",
    "CREATE SOURCE s (x INT,, y INT)",
    "CREATE SOURCE s (x INT, y INT,)",
    "CREATE SOURCE s (x INT) WITH (a = )",
])
def test_malformed_option_and_column_lists_are_syntax_errors(db, sql):
    assert _refused(db, sql, SqlParseError).code == "LDB-1001"


@pytest.mark.parametrize("sql,fragment", [
    ("CREATE TABLE t (id BIGINT, UNIQUE (id))", "constraints are not supported"),  # PRIMARY KEY … NOT ENFORCED runs
    ("CREATE TABLE t (id BIGINT, ts AS TO_TIMESTAMP(id))", "computed column"),
])
def test_flink_table_features_that_sources_lack(db, sql, fragment):
    _refused(db, sql, UnsupportedSqlError, fragment)


def test_flink_kafka_table_maps_to_the_kafka_source():
    stmt = ddl.parse_statement("""CREATE TABLE orders (id BIGINT, amount DOUBLE, ts TIMESTAMP(3),
        WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH (
        'connector' = 'kafka', 'topic' = 'orders', 'properties.bootstrap.servers' = 'localhost:9092',
        'properties.group.id' = 'g1', 'format' = 'json', 'scan.startup.mode' = 'earliest-offset',
        'properties.fetch.max.wait.ms' = '50')""")
    assert stmt.connector == "kafka" and stmt.watermark_col == "ts" and stmt.watermark_delay_ms == 5000
    assert stmt.connector_options == {"topic": "orders", "brokers": "localhost:9092", "format": "json",
                                      "offset_reset": "earliest", "kafka.fetch.max.wait.ms": "50"}


def test_laminardb_python_kafka_source_maps_to_the_kafka_source():
    stmt = ddl.parse_statement("""
    CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts TIMESTAMP)
    WITH (
        connector = 'kafka',
        'bootstrap.servers' = 'localhost:9092',
        'topic' = 'market-trades',
        'group.id' = 'laminardb-consumer',
        'auto.offset.reset' = 'earliest',
        'format' = 'json'
    )""")
    assert stmt.connector == "kafka"
    assert stmt.connector_options == {"brokers": "localhost:9092", "topic": "market-trades",
                                      "offset_reset": "earliest", "format": "json"}


def test_laminardb_readme_kafka_source_parses_as_written():
    stmt = ddl.parse_statement("""CREATE SOURCE trades (
        symbol VARCHAR, price DOUBLE, volume BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
    ) FROM KAFKA (
        brokers = 'localhost:9092',
        topic = 'market-trades',
        group_id = 'laminar-analytics',
        format = 'json',
        offset_reset = 'earliest'
    )""")
    assert stmt.connector == "kafka" and stmt.connector_options["topic"] == "market-trades"


def test_flink_kafka_table_reads_the_topic(kafka_broker):  # noqa: F811 - the fixture
    """``CREATE TABLE … WITH ('connector' = 'kafka', …)`` is the Kafka source, not a plain one."""
    from kafka import KafkaProducer

    topic = "flink-ddl-orders"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    for i in range(5):
        producer.send(topic, json.dumps({"id": i, "amount": 1.5 * i, "ts": 1_000 * i}).encode())
    producer.flush()
    producer.close()
    db = laminardb.open()
    try:
        db.execute(f"""CREATE TABLE orders (id BIGINT, amount DOUBLE, ts BIGINT,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
            'connector' = 'kafka', 'topic' = '{topic}',
            'properties.bootstrap.servers' = '{kafka_broker.bootstrap}',
            'format' = 'json', 'scan.startup.mode' = 'earliest-offset')""")
        db.execute("CREATE STREAM big AS SELECT id, amount FROM orders WHERE amount > 2")
        sub = db.subscribe_stream("big")
        db.start()
        db.flush(timeout_s=30)
        assert sorted(r["id"] for r in sub.to_arrow().to_pylist()) == [2, 3, 4]  # read from the topic
        assert db.engine.reactor.nodes["orders"].source_connector == "kafka"
    finally:
        db.close()


def test_sink_with_options_form(tmp_path, db):
    """laminardb-python's ``CREATE SINK name AS SELECT … WITH ('connector' = …)``."""
    stmt = ddl.parse_statement("""CREATE SINK alerts AS
        SELECT symbol, price FROM trades WHERE price > 1000
    WITH (
        connector = 'kafka',
        'bootstrap.servers' = 'localhost:9092',
        'topic' = 'price-alerts',
        'format' = 'json'
    )""")
    assert (stmt.connector, stmt.options) == ("kafka", {"brokers": "localhost:9092", "topic": "price-alerts",
                                                        "format": "json"})
    assert stmt.query is not None and stmt.query.options == {}
    out = tmp_path / "hot.jsonl"
    db.execute(f"CREATE SINK hot AS SELECT sym, price FROM trades WHERE price > 2 "
               f"WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'jsonl')")
    db.insert("trades", [{"ts": 1, "sym": "A", "price": 1.0}, {"ts": 2, "sym": "B", "price": 3.0}])
    db.finish()
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"sym": "B", "price": 3.0}]
    _refused(db, "CREATE SINK x AS SELECT sym FROM trades WITH (connector = 'kafka', 'topic' = 't', "
             "'acks' = 'all')", UnknownOptionError, "unknown option 'acks'", "properties.*")
    _refused(db, "CREATE SINK x AS SELECT sym FROM trades WITH (connector = 'websocket')", UnknownOptionError,
             "connector 'websocket' is not supported")
    _refused(db, "CREATE SINK x AS SELECT sym FROM trades", SqlParseError, "say where it writes")


def test_known_sink_options():
    assert known_sink_options("FILE") == ("path", "format", "partitioned_by", "partition_default_name")
    assert "topic" in known_sink_options("kafka") and "kafka.*" in known_sink_options("kafka")
    assert known_sink_options("delta") == known_sink_options("DELTA_LAKE")
    with pytest.raises(UnknownOptionError):
        known_sink_options("websocket")


# --------------------------------------------------------------------------- strict SQL


@pytest.mark.parametrize("sql,where", [
    ("CREATE STREAM s AS SELECT sym,, FROM trades", "two commas in a row"),
    ("CREATE STREAM s AS SELECT sym, FROM trades", "before 'FROM'"),
    ("CREATE STREAM s AS SELECT , sym FROM trades", "after 'SELECT'"),
    ("CREATE STREAM s AS SELECT sym, count(*) FROM trades GROUP BY sym,", "at the end"),
    ("CREATE STREAM s AS SELECT sym, count(*) FROM trades GROUP BY , sym", "after 'GROUP BY'"),
    ("CREATE STREAM s AS SELECT coalesce(price, , 0) FROM trades", "two commas in a row"),
    ("CREATE STREAM s AS SELECT sym FROM trades WHERE sym IN ('a', )", "before ')'"),
])
def test_stray_commas_are_syntax_errors(db, sql, where):
    e = _refused(db, sql, SqlParseError, "stray comma", where)
    assert e.code == "LDB-1001" and "line 1, column" in str(e)


def test_stray_comma_position_in_a_script(db):
    e = _refused(db, "SHOW STREAMS;\nCREATE STREAM s AS\nSELECT sym,\n  , price FROM trades", SqlParseError)
    assert "line 3, column 11" in str(e), str(e)


@pytest.mark.parametrize("agg", ["STDDEV(price)", "stddev_pop(price)", "VARIANCE(price)", "median(price)",
                                 "approx_count_distinct(sym)", "array_agg(sym)", "string_agg(sym, ',')",
                                 "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY price)", "bool_and(price > 1)",
                                 "any_value(sym)"])
def test_unsupported_aggregates_are_named(db, agg):
    e = _refused(db, f"CREATE STREAM s AS SELECT sym, {agg} AS x FROM trades GROUP BY sym",
                 UnsupportedAggregateError,
                 "supported: COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE, COUNT(DISTINCT)")
    assert e.code == "LDB-1002" and str(e).startswith("[LDB-1002] unsupported aggregate ")


def test_stddev_message_is_exact(db):
    e = _refused(db, "CREATE STREAM s AS SELECT STDDEV(price) FROM trades GROUP BY sym", UnsupportedAggregateError)
    assert e.message == ("unsupported aggregate STDDEV; supported: COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, "
                         "LAST_VALUE, COUNT(DISTINCT)")


@pytest.mark.parametrize("sql,kind", [
    ("SELECT t.symbol, p.offset_ms, mid AS ref_price FROM trades t TEMPORAL PROBE JOIN prices r "
     "ON (symbol) TIMESTAMPS (ts, ts) RANGE FROM 0s TO 30s STEP 5s AS p", "TEMPORAL PROBE JOIN"),
    ("SELECT * FROM trades a LEFT OUTER JOIN trades b USING (sym)", "USING"),
    ("SELECT * FROM trades a NATURAL JOIN trades b", "NATURAL JOIN"),
    ("SELECT * FROM trades a, trades b", "needs an equality"),
    ("SELECT * FROM trades a JOIN trades b ON a.price > b.price", "needs an equality"),
])
def test_joins_are_unsupported_not_syntax_errors(db, sql, kind):
    """Equi-joins (inner, outer, interval), ASOF and temporal joins run (tests/joins); these kinds
    are refused, typed."""
    e = _refused(db, f"CREATE STREAM s AS {sql}", UnsupportedJoinError, kind, "not supported")
    assert e.code == "LDB-1002"


@pytest.mark.parametrize("sql,fragments", [
    ("SELECT sym, price, RANK() OVER (PARTITION BY sym ORDER BY ts) AS r FROM trades",
     ["OVER (…) is not supported yet", "tumble/hop/session"]),  # LAG/LEAD, aggregates run: tests/over
    ("SELECT sym, ROW_NUMBER() OVER (PARTITION BY sym ORDER BY price DESC) AS rank FROM trades", ["OVER"]),
    ("SELECT sym FROM trades WHERE price > (SELECT max(price) FROM trades)", ["subqueries are not supported"]),
    ("SELECT sym FROM trades WHERE sym IN (SELECT sym FROM trades)", ["subqueries are not supported"]),
    ("SELECT lower(sym) FILTER (WHERE price > 1) FROM trades", ["FILTER (WHERE …) applies to aggregate", "CASE WHEN"]),
    ("SELECT initcap(sym) FROM trades", ["function INITCAP is not supported", "ABS, CAST, CEIL"]),
    ("SELECT my_udf(price) FROM trades", ["function MY_UDF is not supported"]),
    ("WITH x AS (SELECT sym FROM trades) SELECT sym FROM x", ["common table expressions"]),
    ("SELECT sym, count(*) FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) EMIT EVERY INTERVAL '1' SECOND",
     ["periodic emission", "EMIT CHANGES"]),
    ("SELECT sym, tumble(ts, INTERVAL '2' SECOND) AS w FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)",
     ["must repeat the GROUP BY window"]),
])
def test_other_unsupported_constructs_say_so(db, sql, fragments):
    assert _refused(db, f"CREATE STREAM s AS {sql}", UnsupportedSqlError, *fragments).code == "LDB-1002"


def test_engine_keeps_working_after_refused_sql(db):
    for sql in ("CREATE STREAM s AS SELECT sym,, FROM trades", "CREATE STREAM s AS SELECT STDDEV(price) FROM trades",
                "CREATE SOURCE x (a INT) WITH (nope = 1)"):
        with pytest.raises(laminardb.LaminarError):
            db.execute(sql)
    db.execute("CREATE STREAM s AS SELECT sym, count(*) AS n FROM trades GROUP BY sym")
    sub = db.subscribe_stream("s")
    db.insert("trades", {"ts": 1, "sym": "A", "price": 1.0, "qty": 1})
    assert sub.to_arrow().to_pylist() == [{"sym": "A", "n": 1, "__weight": 1}]
