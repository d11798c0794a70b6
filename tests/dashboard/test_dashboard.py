"""The web dashboard: its JSON API, its security rules, and the page in a real headless Chromium."""

from __future__ import annotations

import io
import json
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

import laminardb
from laminardb.cli.commands import build_parser
from laminardb.dashboard import (
    DashboardConfigError,
    InsecureDashboardError,
    WeakDashboardTokenError,
    run_dashboard,
)
from laminardb.errors import ConfigError
from tests._services.ray_local import start_local_ray

TOKEN = "s3cret-token-of-32-bytes-exactly!"


def get(url: str, *, headers: dict[str, str] | None = None, method: str = "GET"):
    """(status, headers, body) of one request; HTTP errors are answers, not exceptions."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(url: str, **kw):
    status, _, body = get(url, **kw)
    assert status == 200, (status, body[:500])
    return json.loads(body)


# -- API -----------------------------------------------------------------------------------------


def test_graph_api_lists_nodes_edges_and_columns(live_pipeline):
    conn, _ = live_pipeline
    g = get_json(conn.dashboard_url + "api/graph")
    kinds = {n["name"]: n["kind"] for n in g["nodes"]}
    assert kinds == {"trades": "source", "bars": "stream", "totals": "view", "bars_out": "sink"}
    edges = {(e["from"], e["to"]) for e in g["edges"]}
    assert edges == {("trades", "bars"), ("bars", "totals"), ("bars", "bars_out")}
    column = {n["name"]: n["column"] for n in g["nodes"]}
    assert column == {"trades": 0, "bars": 1, "totals": 2, "bars_out": 3}  # sinks in the last column
    assert g["columns"] == 4
    sql = {n["name"]: n["sql"] for n in g["nodes"]}
    assert "tumble" in sql["bars"].lower()


def test_metrics_api_has_metrics_timestamp_and_rates(live_pipeline):
    conn, feeder = live_pipeline
    time.sleep(2.2)  # the sampler's second and third samples
    m = get_json(conn.dashboard_url + "api/metrics")
    assert abs(m["ts"] - time.time()) < 5
    assert m["metrics"]["events_ingested"] > 0
    assert m["metrics"]["streams"]["bars"]["kind"] == "stream"
    sampler = m["sampler"]
    assert sampler["counters"]["trades"] > 0
    assert sampler["rates"]["trades"] > 0  # rows/s over the last second
    assert len(sampler["rate_history"]["trades"]) >= 2
    src = sampler["sources"]["trades"]
    assert src["watermark_ms"] is not None and 0 <= src["lag_ms"] < 60_000  # wall-clock event times
    assert len(src["lag_history"]) == len(sampler["ts"])


def test_binds_loopback_only_and_stops_on_close():
    conn = laminardb.open(config={"dashboard_port": 0})
    try:
        url = urlsplit(conn.dashboard_url)
        assert url.hostname == "127.0.0.1" and url.port
        assert conn._dashboard.address[0] == "127.0.0.1"
        status, headers, body = get(conn.dashboard_url)
        assert status == 200 and b'id="graph"' in body
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        other = _non_loopback_address()
        if other is not None:  # the same port on this machine's routable address: nobody listens
            with pytest.raises(OSError):
                socket.create_connection((other, url.port), timeout=2).close()
    finally:
        conn.close()
    assert conn.dashboard_url is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", url.port), timeout=2).close()


def _non_loopback_address() -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.254.254.254", 1))  # no packet is sent: this only picks the route's source
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def test_no_dashboard_without_port():
    conn = laminardb.open()
    try:
        assert conn.dashboard_url is None
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_non_loopback_without_allow_remote_is_refused(host):
    with pytest.raises(InsecureDashboardError) as e:
        laminardb.open(config={"dashboard_port": 0, "dashboard_host": host})
    assert isinstance(e.value, ConfigError) and e.value.code == "LDB-9041"
    assert "allow_remote" in str(e.value)


@pytest.mark.parametrize("token", [None, "short", b"bytes-are-not-a-token-string"])
def test_allow_remote_needs_a_strong_token(token):
    config = {"dashboard_port": 0, "dashboard_host": "0.0.0.0", "allow_remote": True}
    if token is not None:
        config["dashboard_token"] = token
    with pytest.raises(WeakDashboardTokenError) as e:
        laminardb.open(config=config)
    assert e.value.code == "LDB-9042"


@pytest.mark.parametrize("port", [-1, 70000, "8080", True])
def test_bad_port_is_refused(port):
    with pytest.raises(DashboardConfigError):
        laminardb.open(config={"dashboard_port": port})


def test_port_in_use_is_a_typed_error(open_dashboard):
    first = open_dashboard()
    port = urlsplit(first.dashboard_url).port
    with pytest.raises(DashboardConfigError) as e:
        laminardb.open(config={"dashboard_port": port})
    assert e.value.code == "LDB-9045"


def test_allow_remote_requires_the_token(open_dashboard):
    # allow_remote with a loopback bind: the token rules apply, nothing is exposed by the test
    conn = open_dashboard(allow_remote=True, dashboard_token=TOKEN)
    base = conn.dashboard_url
    for path in ("", "api/graph", "api/metrics", "static/app.js"):
        status, headers, _ = get(base + path)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Bearer")
    assert get(base + "api/graph", headers={"Authorization": "Bearer wrong-token-of-some-length"})[0] == 401
    assert get(base + "api/graph?token=" + TOKEN[:-1])[0] == 401
    assert get(base + "api/graph", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert get(base + "api/graph", headers={"X-Laminardb-Token": TOKEN})[0] == 200
    assert get(base + "?token=" + TOKEN)[0] == 200


def test_read_only_and_no_files_beyond_static(open_dashboard):
    base = open_dashboard().dashboard_url
    for method in ("POST", "PUT", "DELETE"):
        assert get(base + "api/graph", method=method)[0] == 405
    assert get(base + "static/../server.py")[0] == 404
    assert get(base + "static/%2e%2e/server.py")[0] == 404
    assert get(base + "static/app.js")[0] == 200
    assert get(base + "api/nothing")[0] == 404


def test_foreign_host_header_is_refused_on_loopback(open_dashboard):
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not read the API."""
    base = open_dashboard().dashboard_url
    assert get(base + "api/graph", headers={"Host": "evil.example:80"})[0] == 403
    assert get(base + "api/graph", headers={"Host": f"localhost:{urlsplit(base).port}"})[0] == 200


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_parses_dashboard_command():
    args = build_parser().parse_args(["dashboard", "--demo", "--port", "0"])
    assert args.demo and args.port == 0 and args.func.__name__ == "_cmd_dashboard"


def test_run_dashboard_demo_serves_and_stops():
    out = io.StringIO()
    assert run_dashboard(demo=True, port=0, seconds=1.5, out=out) == 0
    assert "laminardb dashboard: http://127.0.0.1:" in out.getvalue()


def test_run_dashboard_needs_a_pipeline():
    with pytest.raises(DashboardConfigError):
        run_dashboard(port=0, seconds=0.1, out=io.StringIO())


# -- the page in a real browser ----------------------------------------------------------------


def _num(el: dict[str, str]) -> float:
    return float(el["data-value"]) if el.get("data-value") not in (None, "") else float("nan")


def test_page_shows_the_running_pipeline_and_its_numbers_move(browser, live_pipeline, parse_dom):
    conn, feeder = live_pipeline
    url = conn.dashboard_url
    first = parse_dom(browser.dump_dom(url))
    assert first.by_id["status"].get("data-state") == "live", first.by_id["status"]
    nodes = {e["data-node"]: e["data-kind"] for e in first.with_attr("data-node")}
    assert nodes == {"trades": "source", "bars": "stream", "totals": "view", "bars_out": "sink"}
    edges = {e["data-edge"] for e in first.with_attr("data-edge") if e["_tag"] == "path"}
    assert edges == {"trades->bars", "bars->totals", "bars->bars_out"}
    for rate_id in ("rate-trades-bars", "rate-bars-totals", "rate-bars-bars_out"):
        assert rate_id in first.by_id and first.by_id[rate_id]["_text"].endswith("rows/s")
    assert first.by_id["cluster-body"]["_text"].startswith("not available")

    time.sleep(3.0)
    second = parse_dom(browser.dump_dom(url))
    rows1, rows2 = _num(first.by_id["count-trades"]), _num(second.by_id["count-trades"])
    assert 0 < rows1 < rows2, (rows1, rows2)
    assert _num(second.by_id["src-rows-trades"]) == rows2
    assert _num(second.by_id["count-bars"]) > 0  # 1-second windows closed and were emitted
    assert _num(second.by_id["rate-trades-bars"]) > 0
    assert second.by_id["rate-trades-bars"]["_text"] != "— rows/s"
    wm1, wm2 = _num(first.by_id["src-wm-trades"]), _num(second.by_id["src-wm-trades"])
    assert wm2 > wm1 > 0
    assert _num(second.by_id["total-ingested"]) > _num(first.by_id["total-ingested"])
    sparks = [e for e in second.all if e["_tag"] == "polyline"]
    assert sparks, "the sources table draws sparklines once two samples exist"


def test_screenshot_is_a_png_of_the_page(browser, live_pipeline, tmp_path):
    conn, _ = live_pipeline
    time.sleep(2.0)  # some history for the sparklines
    png = browser.screenshot(conn.dashboard_url, tmp_path / "dashboard.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 1000)
    assert len(data) > 20_000  # a drawn page, not a blank one (a blank 1400x1000 PNG is ~5 KB)


@pytest.fixture
def ray_one_cpu():
    ray = pytest.importorskip("ray")
    start_local_ray(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.integration
def test_cluster_section_shows_actors_and_vnodes(browser, parse_dom, ray_one_cpu):
    """A real one-actor Ray cluster: the page lists the actor and its 256 vnodes."""
    conn = laminardb.connect("ray://auto", actors=1, config={"dashboard_port": 0})
    try:
        conn.execute("CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, "
                     "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND); "
                     "CREATE STREAM bars AS SELECT sym, window_start, count(*) AS n "
                     "FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
        conn.insert("trades", [{"ts": int(time.time() * 1000), "sym": "A", "price": 1.0}] * 5)
        dom = parse_dom(browser.dump_dom(conn.dashboard_url))
        assert _num(dom.by_id["cluster-actors"]) == 1
        assert _num(dom.by_id["cluster-dead"]) == 0
        members = [e for e in dom.with_attr("data-member") if e["_tag"] == "tr"]
        assert len(members) == 1
        vnodes = [e for e in dom.all if e["_tag"] == "td" and e.get("data-value") == "256"]
        assert vnodes, "the actor owns all 256 vnodes"
        assert dom.by_id["raft-leader"]["_text"] == "not available"  # planned in-process: no Raft
        assert {e["data-node"] for e in dom.with_attr("data-node")} == {"trades", "bars"}
    finally:
        conn.drop_database()


@pytest.mark.integration
def test_killed_broker_shows_on_the_page(browser, parse_dom):
    """A Kafka source whose broker dies turns to 'error' in the sources table within seconds."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests._services.kafka import start_kafka_broker

    broker = start_kafka_broker()
    conn = laminardb.open(config={"dashboard_port": 0})
    try:
        conn.execute(f"""CREATE SOURCE k (ts BIGINT NOT NULL, sym VARCHAR,
                            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
                         FROM KAFKA (brokers = '{broker.bootstrap}', topic = 'dash-k', format = 'json',
                                     offset_reset = 'earliest')""")
        conn.start()
        deadline = time.monotonic() + 15
        while conn.metrics()["sources"]["k"]["status"] != "connected" and time.monotonic() < deadline:
            time.sleep(0.1)
        before = parse_dom(browser.dump_dom(conn.dashboard_url))
        assert before.by_id["src-status-k"].get("data-value") == "connected"
        broker.stop()
        killed = time.monotonic()
        while conn.metrics()["sources"]["k"]["status"] != "error" and time.monotonic() - killed < 15:
            time.sleep(0.1)
        noticed = time.monotonic() - killed
        after = parse_dom(browser.dump_dom(conn.dashboard_url))
        print(f"error in metrics after {noticed:.1f} s, page dumped after {time.monotonic() - killed:.1f} s")
        assert after.by_id["src-status-k"].get("data-value") == "error"
        assert "errors" in after.by_id["src-status-k"]["_text"]
        assert noticed < 10
        assert time.monotonic() - killed < 20  # the page itself never waits on the dead broker
    finally:
        conn.close()
        broker.stop()
