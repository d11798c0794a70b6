"""One metrics registry exposed three ways: ``metrics()``, the Prometheus endpoint, ``laminardb top``.

The pipeline: a source, a windowed stream, a view and a FILE sink; the sink's rows must equal
the file's. The Kafka test starts a broker of its own and kills it: the source must show the
error in ``metrics()`` and the logs within seconds, and ``flush()`` must raise naming it.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from pathlib import Path

import pytest

import laminardb
from laminardb.cli.commands import main
from laminardb.connectors.exceptions import SourceFailingError
from laminardb.metrics import MetricsExposedError
from laminardb.metrics.top import render, scrape

T0 = 1_700_000_000_000

PIPELINE = """
CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, qty BIGINT,
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM bars AS SELECT sym, window_start, count(*) AS n, sum(qty) AS q
    FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW totals AS SELECT sym, count(*) AS n FROM trades GROUP BY sym;
CREATE SINK out FROM bars INTO FILE (path = '{path}', format = 'jsonl');
"""

# 40 rows over 4 s (10 per second, 2 symbols), then one late row (ts T0, watermark T0 + 2900)
ROWS = [{"ts": T0 + i * 100, "sym": "AB"[i % 2], "qty": i} for i in range(40)]
LATE = {"ts": T0, "sym": "A", "qty": 1}


def _wait(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def pipeline(tmp_path: Path):
    out = tmp_path / "bars.jsonl"
    db = laminardb.open(config={"metrics_port": 0})
    db.execute(PIPELINE.format(path=out))
    db.insert("trades", ROWS)
    db.insert("trades", [LATE])
    n = db.insert("trades", [{"ts": T0 + 5000, "sym": "A", "qty": "x"}], on_error="skip")
    assert n == 0
    db.flush()
    yield db, out
    db.close()


def test_metrics_content(pipeline):
    db, out = pipeline
    m = db.metrics()
    # the keys tests and tools already read are kept
    assert {"events_ingested", "events_emitted", "late_events_dropped", "late_events_routed",
            "watermarks", "streams", "checkpoints"} <= set(m)
    src = m["sources"]["trades"]
    assert src["rows_in"] == 41 and src["bytes_in"] > 0
    assert src["parse_errors"] == 1 and src["dead_letters"] == 0
    assert src["watermark"] == T0 + 3900 - 1000
    assert src["watermark_lag_ms"] > 0  # event time of 2023: far behind the wall clock
    assert src["status"] == "ok" and src["errors"] == 0 and src["kafka_lag"] is None

    bars = m["queries"]["bars"]
    assert bars["rows_in"] == 41 and bars["late_dropped"] == 1
    # windows [T0, T0+1 s) and [T0+1 s, T0+2 s) closed: 2 symbols each; [T0+2 s, T0+4 s) open
    assert bars["rows_out"] == 4
    assert bars["state_rows"] == 4 and bars["state_bytes"] > 0 and bars["busy_s"] > 0
    assert m["queries"]["totals"]["state_rows"] == 2

    file_rows = [json.loads(line) for line in out.read_text().splitlines()]
    sink = m["sinks"]["out"]
    assert sink["rows_written"] == len(file_rows) == 4
    assert sink["errors"] == 0 and sink["connector"] == "FileSink"
    assert m["streams"]["out"]["rows_emitted"] == 4, "a sink reports the rows it wrote"

    proc = m["process"]
    assert proc["rss_bytes"] > 10 << 20 and proc["cpu_s"] > 0
    assert m["checkpoints"] is None


def test_prometheus_endpoint_shows_the_same_numbers(pipeline):
    db, _ = pipeline
    url = db.metrics_url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    s = scrape(url)
    m = db.metrics()
    assert s.get("laminardb_source_rows_total", source="trades") == m["sources"]["trades"]["rows_in"]
    assert s.get("laminardb_query_state_rows", query="bars") == m["queries"]["bars"]["state_rows"]
    assert s.get("laminardb_query_late_dropped_total", query="bars") == 1
    assert s.get("laminardb_sink_rows_total", sink="out") == 4
    assert s.get("laminardb_source_up", source="trades") == 1
    assert s.get("laminardb_watermark_lag_seconds", source="trades") > 0
    assert s.get("laminardb_process_resident_memory_bytes") > 0
    # bound to loopback only: the port does not answer on this machine's other addresses
    server = db._metrics_server._httpd
    assert server.server_address[0] == "127.0.0.1"


def test_non_loopback_host_needs_allow_remote(tmp_path: Path):
    with pytest.raises(MetricsExposedError, match="allow_remote"):
        laminardb.open(config={"metrics_port": 0, "metrics_host": "0.0.0.0"})
    # a durable database refused this way leaves its directory free
    with pytest.raises(MetricsExposedError):
        laminardb.open(tmp_path / "db", config={"metrics_port": 0, "metrics_host": "10.1.2.3"})
    laminardb.open(tmp_path / "db").close()


def test_close_stops_the_endpoint(tmp_path: Path):
    db = laminardb.open(config={"metrics_port": 0})
    url = db.metrics_url
    urllib.request.urlopen(url, timeout=5).read()
    db.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2).read()


def test_top_once(pipeline, capsys):
    db, _ = pipeline
    assert main(["top", "--once", "--url", db.metrics_url]) == 0
    frame = capsys.readouterr().out
    lines = frame.splitlines()
    src = next(line for line in lines if line.startswith("trades "))
    assert "ok" in src and "41" in src
    sink = next(line for line in lines if line.startswith("out "))
    assert "FileSink" in sink and " 4" in sink
    assert any(line.startswith("bars ") for line in lines)
    assert "CHECKPOINTS" in frame


def test_top_rates_from_two_scrapes(pipeline):
    db, _ = pipeline
    first = scrape(db.metrics_url)
    db.insert("trades", [{"ts": T0 + 4000 + i, "sym": "A", "qty": i} for i in range(100)])
    second = scrape(db.metrics_url)
    frame = render(second, first)
    row = next(line for line in frame.splitlines() if line.startswith("trades "))
    assert "141" in row and " - " not in row.split("141", 1)[1][:12]


def test_top_unreachable_once(capsys):
    assert main(["top", "--once", "--url", "http://127.0.0.1:9/metrics"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_durable_checkpoint_and_committed_rows(tmp_path: Path):
    db = laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off", "metrics_port": 0})
    try:
        db.execute(PIPELINE.format(path=tmp_path / "bars"))
        db.insert("trades", ROWS)
        m = db.metrics()
        assert m["sinks"]["out"]["rows_written"] == 4 and m["sinks"]["out"]["rows_committed"] == 0
        db.checkpoint()
        m = db.metrics()
        assert m["sinks"]["out"]["rows_committed"] == 4 and m["sinks"]["out"]["commits"] == 1
        files = [p for p in (tmp_path / "bars").iterdir() if p.is_file()]
        assert sum(len(p.read_text().splitlines()) for p in files) == 4
        assert m["checkpoints"]["checkpoints"] == 1
        s = scrape(db.metrics_url)
        assert s.get("laminardb_checkpoints_total") == 1
        assert s.get("laminardb_checkpoint_duration_seconds") > 0
        assert s.get("laminardb_sink_rows_committed_total", sink="out") == 4
    finally:
        db.close()


def test_failing_sink_is_counted_and_raised(tmp_path: Path, caplog):
    db = laminardb.open()
    try:
        db.execute(PIPELINE.format(path=tmp_path / "bars.jsonl"))
        sink = db.engine.reactor.nodes["out"].sinks[0]

        def broken(batch):
            raise OSError("disk full")

        sink.write = broken
        with caplog.at_level(logging.WARNING, logger="laminardb.sink"), pytest.raises(OSError, match="disk full"):
            db.insert("trades", ROWS)
        m = db.metrics()["sinks"]["out"]
        assert m["errors"] == 1 and "disk full" in m["last_error"]
        assert any(r.name == "laminardb.sink" and "disk full" in r.getMessage() for r in caplog.records)
    finally:
        db.close()


def test_killed_broker_shows_in_metrics_logs_and_flush(own_broker, caplog):
    from kafka import KafkaProducer

    topic = "metrics-trades"
    producer = KafkaProducer(bootstrap_servers=own_broker.bootstrap, linger_ms=5, acks="all")
    db = laminardb.open(config={"metrics_port": 0, "source_error_timeout": 1.0})
    try:
        with caplog.at_level(logging.INFO, logger="laminardb.source"):
            db.execute(f"""CREATE SOURCE k (ts BIGINT NOT NULL, sym VARCHAR, qty BIGINT,
                WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
                FROM KAFKA (brokers = '{own_broker.bootstrap}', topic = '{topic}', format = 'json',
                            offset_reset = 'earliest')""")
            db.execute("CREATE STREAM s AS SELECT sym, window_start, count(*) AS n FROM k "
                       "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
            for row in ROWS:
                producer.send(topic, value=json.dumps(row).encode())
            producer.send(topic, value=b"not json")
            producer.flush(timeout=10)
            db.start()
            _wait(lambda: db.metrics()["sources"]["k"]["rows_in"] == len(ROWS), 20, "the rows from Kafka")
            src = _wait(lambda: (lambda s: s if s["status"] == "connected" else None)(db.metrics()["sources"]["k"]),
                        10, "the source to report connected")
            assert src["errors"] == 0 and src["parse_errors"] == 1
            _wait(lambda: db.metrics()["sources"]["k"]["kafka_lag_total"] == 0, 10, "the lag to reach 0")
            assert db.metrics()["sources"]["k"]["kafka_lag"] == {0: 0}
            assert any("connected" in r.getMessage() for r in caplog.records if r.name == "laminardb.source")

            own_broker.stop()
            killed = time.monotonic()
            src = _wait(lambda: (lambda s: s if s["status"] == "error" else None)(db.metrics()["sources"]["k"]),
                        10, "the source to report the broker's loss")
            noticed = time.monotonic() - killed
            assert src["errors"] > 0 and src["last_error"]
            assert noticed < 10
            warnings = [r for r in caplog.records if r.name == "laminardb.source" and r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "k" in warnings[0].getMessage()
            s = scrape(db.metrics_url)
            assert s.get("laminardb_source_up", source="k") == 0
            assert s.get("laminardb_source_status", source="k", status="error") == 1
            assert s.get("laminardb_source_errors_total", source="k") > 0

            t0 = time.monotonic()
            with pytest.raises(SourceFailingError, match="'k'") as info:
                db.flush(timeout_s=20)
            assert time.monotonic() - t0 < 10
            assert src["last_error"].split(":")[0] in str(info.value)
            # the warning is not repeated while the broker stays down
            time.sleep(1.0)
            warnings = [r for r in caplog.records if r.name == "laminardb.source" and r.levelno == logging.WARNING]
            assert len(warnings) == 1
    finally:
        producer.close(timeout=2)
        db.close()
