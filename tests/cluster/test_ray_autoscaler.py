"""Ray's real autoscaler gives a capped database a node, and the database scales out onto it.

The one test here starts a Ray head of its own with Ray's **fake multi-node provider** (the
provider of ``ray.cluster_utils.AutoscalingCluster``: a worker "node" is one more raylet on this
machine, launched by Ray's autoscaler monitor itself), replicating ``AutoscalingCluster.start``
without its ``ray stop --force`` (which would kill every Ray instance on the machine):

1. ``RAY_FAKE_CLUSTER=1 AUTOSCALER_UPDATE_INTERVAL_S=1 ray start --head --num-cpus=1
   --autoscaling-config=<json>`` with a temp dir, GCS port and every other port of its own, and
   token auth with a throwaway token (``RAY_AUTH_TOKEN_PATH``; never ``~/.ray/auth_token``). The
   config is ``fake_multi_node/example.yaml`` written out (the wheel does not ship that file):
   one worker type ``{"CPU": 1}``, ``min_workers`` 0, ``max_workers`` 1, and the provider's
   ``gcs_address`` (it assumes ``<node ip>:6379`` otherwise). Meanwhile this process produces
   the backlog to a Kafka topic (Tansu) and a subprocess computes the embedded reference;
2. in a *subprocess* (this process never calls ``ray.init``; ``RAY_ADDRESS`` points at the head):
   ``laminardb.connect("ray://auto", actors=1, config={"autoscale": True, "max_actors": 2, …})``
   over that topic — the sliding-window workload of ``tests/delta/test_autoscale.py``, with a
   backlog one actor alone would lag on for well over 20 s. The head's one CPU holds the first
   actor, so the decisions say "capped at 1: no free CPUs (0 free)" and the driver asks Ray for
   CPUs (``request_resources``); Ray's autoscaler launches a worker node (``ray.nodes()``
   grows), a later evaluation sees the free CPU and rescales 1 → 2, the new actor runs on the
   new node, the request is withdrawn, the backlog drains;
3. the output equals the embedded engine over the same rows;
4. ``finally``: the script drops the database and calls ``ray.shutdown()``; the test stops
   exactly this run's Ray processes (``ray start``, GCS, raylets of the head and of the fake
   node, autoscaler monitor, workers — found by temp dir / GCS port, and their descendants) by
   pid, bounded, and checks that none is left.

Ray's side is read from its own log (``monitor.log``): a ``request_resources`` demand, then
"Adding 1 node(s) of type ray.worker.cpu". Other Ray instances on the machine (other
engineers', CI's) are never touched: nothing here runs ``ray stop`` or kills by name.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests._services.fixtures import kafka_broker  # noqa: F401
from tests._services.procs import REPO_ROOT, free_port, kill_proc, pids_with_arg
from tests.cluster.test_ray_up import _env, _our_ray_processes, _terminate
from tests.delta.test_autoscale import FAST, SLIDING_DDL, _backlog, _topic, _topics

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
DDL = SLIDING_DDL  # test_autoscale's sliding window (60 s every 100 ms: each row in 600 windows)
# One actor alone would lag on this backlog for 20-40 s (it reads 30-60k rows/s here). Fewer
# rows in more windows each (a 240 s window, 300k rows) would take less producing, but was seen
# to fail: the policy said "no processing-rate sample yet" for ~13 s while the actor read the
# whole topic, then "no lag" (the lag is Kafka offsets read, not rows processed) — no scale-out.
ROWS = 1_200_000
_START_TIMEOUT_S = 60.0
_REFERENCE_TIMEOUT_S = 90.0
_CLIENT_TIMEOUT_S = 120.0
# the policy's FAST knobs, but no scale-in while the test reads the output
KNOBS = {**FAST, "scale_in_cooldown": "10m"}
_REQUEST = re.compile(r"\{'CPU': 1(?:\.0)?\}: (\d+) from request_resources\(\)")
_LAUNCH = re.compile(r"Adding (\d+) node\(s\) of type ray\.worker\.cpu")


def _autoscaling_config(gcs_address: str) -> dict:
    """Ray's ``fake_multi_node/example.yaml`` (not in the wheel) with this test's node types."""
    return {
        "cluster_name": "laminardb-fake",
        "max_workers": 1,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True,
                     "gcs_address": gcs_address},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "ray.worker.cpu": {"resources": {"CPU": 1, "object_store_memory": 200 * 2**20},
                               "node_config": {}, "min_workers": 0, "max_workers": 1},
        },
        "head_node_type": "ray.head.default",
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 10,
        "docker": {}, "auth": {"ssh_user": "ubuntu"},
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
    }


# The embedded engine over the backlog's rows (the same deterministic rows): argv rows, path.
# In batches of REFERENCE_BATCH rows: one insert of all 1.2M rows took 60-78 s here, batches ~35 s.
REFERENCE = r'''
import json, os, sys
import laminardb
from tests.delta.test_autoscale import REFERENCE_BATCH, _windows
from tests.delta.workload import batch

rows, ddl, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with laminardb.open() as ref:
    ref.execute("CREATE SOURCE trades (k BIGINT NOT NULL, seq BIGINT NOT NULL, v BIGINT, ts BIGINT NOT NULL, "
                "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND); CREATE STREAM" + ddl.split("CREATE STREAM", 1)[1])
    sub = ref.subscribe_stream("sliding")
    table = batch(0, rows=rows)  # the backlog's rows, in order, a poll-sized batch at a time
    for start in range(0, rows, REFERENCE_BATCH):
        ref.insert("trades", table.slice(start, REFERENCE_BATCH))
    ref.finish()
    windows = _windows(sub.to_arrow())
with open(path + ".tmp", "w") as fh:
    json.dump(windows, fh, default=str)
os.replace(path + ".tmp", path)  # whole or absent: the client reads it while this runs
'''

# Runs against the fake cluster (RAY_ADDRESS); prints one JSON line: what it saw, and when.
CLIENT = r'''
import json, os, sys, time
import laminardb
import ray

a = json.loads(sys.argv[1])
t0 = time.monotonic()
out = {"timeline": {}, "capped": [], "decisions": [], "error": None}
tl = out["timeline"]


def now():
    return round(time.monotonic() - t0, 2)


def alive():
    return [n["NodeID"] for n in ray.nodes() if n["Alive"]]


db = laminardb.connect("ray://auto", database=a["database"], actors=1,
                       config={"autoscale": True, "max_actors": 2, "coordinator": "local",
                               "checkpoint_interval": "1s", "checkpoint_dir": a["ckpt"], **a["knobs"]})
try:
    tl["connected"] = now()
    out["nodes_before"] = alive()
    out["cpus_before"] = ray.cluster_resources().get("CPU")
    out["members_before"] = [m["node_id"] for m in db.metrics()["cluster"]["members"]]
    db.execute(a["ddl"])
    sub = db.subscribe_stream("sliding")
    db.start()
    tl["started"] = now()
    deadline = t0 + a["timeout"]
    seen = set()
    while time.monotonic() < deadline:
        m = db.metrics()
        auto = m["autoscale"]
        for d in (auto.get("decisions") or []):
            if (d.get("time"), d.get("reason")) not in seen:
                seen.add((d.get("time"), d.get("reason")))
                out["decisions"].append({"t": now(), "capped_by": d.get("capped_by"), "reason": d.get("reason")})
                if d.get("capped_by") == "free_cpus":
                    out["capped"].append({"t": now(), "reason": d.get("reason")})
        if auto.get("cpus_asked_of_ray"):
            tl.setdefault("asked", now())
            out["asked_max"] = max(out.get("asked_max", 0), auto["cpus_asked_of_ray"])
        if "node_joined" not in tl and len(alive()) > len(out["nodes_before"]):
            tl["node_joined"] = now()
        done = [r for r in auto["rescales_done"] if (r["previous"], r["actors"]) == (1, 2)]
        if done:
            tl["rescaled"] = now()
            out["rescale"] = done[0]
            out["ingested_at_rescale"] = m["events_ingested"]
            break
        time.sleep(0.2)
    if "rescaled" in tl:
        out["members_after"] = [m["node_id"] for m in db.metrics()["cluster"]["members"]]
        out["nodes_after"] = alive()
        expected = None  # the reference's window count, once it is done (it runs beside this client)
        while time.monotonic() < deadline:
            if expected is None and os.path.exists(a["expected"]):
                with open(a["expected"]) as fh:
                    expected = len(json.load(fh))
            if expected is not None and sub.to_arrow().num_rows >= expected:
                break
            time.sleep(0.5)
        tl["drained"] = now()
        time.sleep(1.0)  # later checkpoints and evaluations must not add rows
        auto = db.metrics()["autoscale"]
        out["rescales"] = [(r["previous"], r["actors"]) for r in auto["rescales_done"]]
        out["errors"] = auto["errors"]
        out["last_error"] = auto["last_error"]
        out["asked_after"] = auto.get("cpus_asked_of_ray")
        with open(a["windows"], "w") as fh:
            json.dump(sorted((r["k"], r["window_start"], r["c"], r["s"]) for r in sub.to_arrow().to_pylist()),
                      fh, default=str)
    else:
        out["autoscale"] = db.metrics()["autoscale"]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
finally:
    try:
        db.drop_database()
        tl["dropped"] = now()
    finally:
        ray.shutdown()
print("RESULT " + json.dumps(out, default=str))
'''


def _spawn(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, cwd=REPO_ROOT)


def _start_head(ray_temp: str, port: int, config: Path, token: Path, log: Path) -> subprocess.Popen:
    """``ray start --head`` with the fake provider (``AutoscalingCluster.start``'s env), every
    port its own; in the background. Never ``ray stop``."""
    cmd = [str(BIN / "ray"), "start", "--head", f"--autoscaling-config={config}",
           "--num-cpus=1", f"--port={port}", f"--temp-dir={ray_temp}", "--disable-usage-stats",
           "--include-dashboard=false", f"--dashboard-port={free_port()}",
           f"--ray-client-server-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}",
           f"--object-store-memory={200 * 2**20}"]
    return _spawn(cmd, log, _env(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1",
                                 RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token)))


def _wait(proc: subprocess.Popen, what: str, timeout: float, log: Path) -> None:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_proc(proc, hard=True)
        pytest.fail(f"{what} timed out after {timeout:.0f} s:\n{log.read_text()[-5000:]}",
                    pytrace=False)
    assert rc == 0, f"{what} failed (rc {rc}):\n{log.read_text()[-5000:]}"


def _monitor_log(ray_temp: str) -> str:
    """Ray's autoscaler log (the monitor of this run's head)."""
    path = Path(ray_temp) / "session_latest" / "logs" / "monitor.log"
    try:
        return path.read_text(errors="replace")
    except OSError:
        return "(no monitor.log)"


def test_capped_database_gets_a_node_from_rays_autoscaler_and_scales_out(
        tmp_path: Path, kafka_broker) -> None:  # noqa: F811
    import ray._private.services as services  # no ray.init here: only the node's address

    started = time.monotonic()
    timings: dict[str, float] = {}
    # Unix socket paths under the Ray temp dir must stay short (< 108 bytes).
    ray_temp = tempfile.mkdtemp(prefix="ldbras-", dir="/tmp")
    port = free_port()
    gcs = f"{services.get_node_ip_address()}:{port}"  # where the provider's nodes join
    token = Path(ray_temp) / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    config = tmp_path / "autoscaling.json"
    config.write_text(json.dumps(_autoscaling_config(gcs)))
    (tmp_path / "client.py").write_text(CLIENT)
    (tmp_path / "reference.py").write_text(REFERENCE)
    logs = {k: tmp_path / f"{k}.log" for k in ("ray_start", "reference", "client")}
    expected_file, windows_file = tmp_path / "expected.json", tmp_path / "windows.json"
    result: dict | None = None
    procs: list[subprocess.Popen] = []
    survivors: list[int] = []
    monitor = ""
    try:
        # Ray starts and the reference is computed while the backlog is produced; the reference
        # goes on beside the client (which reads its window count when it needs it, to know
        # when the backlog drained).
        t = time.monotonic()
        head = _start_head(ray_temp, port, config, token, logs["ray_start"])
        procs.append(head)
        ref = _spawn([sys.executable, str(tmp_path / "reference.py"), str(ROWS), DDL,
                      str(expected_file)], logs["reference"], _env())
        procs.append(ref)
        bootstrap = kafka_broker.bootstrap
        src = _topic("raynode-in")
        _topics(bootstrap, src)
        _backlog(bootstrap, src, ROWS)
        timings["produce backlog"] = time.monotonic() - t
        _wait(head, "ray start", _START_TIMEOUT_S, logs["ray_start"])
        timings["ray start (+ backlog)"] = time.monotonic() - t
        current = (Path(ray_temp) / "ray_current_cluster").read_text().strip()
        assert current == gcs, (current, gcs)

        # The database, in a subprocess.
        args = {"database": f"raynode-{os.getpid()}", "ckpt": str(tmp_path / "ckpt"),
                "knobs": KNOBS, "ddl": DDL.format(brokers=bootstrap, src=src),
                "expected": str(expected_file), "windows": str(windows_file),
                "timeout": _CLIENT_TIMEOUT_S - 20}
        t = time.monotonic()
        client = _spawn([sys.executable, str(tmp_path / "client.py"), json.dumps(args)],
                        logs["client"], _env(RAY_ADDRESS=gcs, RAY_AUTH_MODE="token",
                                             RAY_AUTH_TOKEN_PATH=str(token)))
        procs.append(client)
        _wait(ref, "the embedded reference", _REFERENCE_TIMEOUT_S, logs["reference"])
        expected = json.loads(expected_file.read_text())
        timings["reference, after the backlog"] = time.monotonic() - t
        _wait(client, "the client", _CLIENT_TIMEOUT_S, logs["client"])
        timings["client"] = time.monotonic() - t
        lines = [ln for ln in logs["client"].read_text().splitlines() if ln.startswith("RESULT ")]
        assert lines, logs["client"].read_text()[-5000:]
        result = json.loads(lines[-1][len("RESULT "):])
    finally:
        t = time.monotonic()
        for proc in procs:
            kill_proc(proc)
        _terminate(_our_ray_processes(ray_temp, port))
        survivors = _our_ray_processes(ray_temp, port) + pids_with_arg(ray_temp)
        monitor = _monitor_log(ray_temp)
        (tmp_path / "monitor.log").write_text(monitor)
        subprocess.run(["rm", "-rf", ray_temp], timeout=30)
        timings["stop this Ray by pid"] = time.monotonic() - t
        timings["total"] = time.monotonic() - started
        print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
        if result is not None:
            print("timeline (s since the client started): " + json.dumps(result["timeline"]))
            print(f"rows one actor read before the rescale: {result.get('ingested_at_rescale')} "
                  f"of {ROWS}; rescale: {result.get('rescale')}")
    assert not survivors, f"processes of this run's Ray survived: {survivors}"

    tl = result["timeline"]
    decisions = "\n".join(f"{d['t']:6.2f} {d['reason']}" for d in result["decisions"][:40])
    assert result["error"] is None, f"{result['error']}\nmonitor.log:\n{monitor[-3000:]}"
    assert "rescaled" in tl, (f"no 1 → 2 rescale: {tl}\ndecisions:\n{decisions}\n"
                              f"monitor.log:\n{monitor[-3000:]}")
    # 1. Capped by free CPUs first: the head's one CPU holds the first actor, no other node.
    assert result["cpus_before"] == 1 and len(result["nodes_before"]) == 1, result
    assert result["members_before"] == result["nodes_before"], result
    assert any("capped at 1: no free CPUs (0 free)" in c["reason"] for c in result["capped"]), \
        decisions
    # 2. Ray's autoscaler got the database's request_resources, then added one worker node.
    requests = [(m.start(), int(m.group(1))) for m in _REQUEST.finditer(monitor)]
    launches = [(m.start(), int(m.group(1))) for m in _LAUNCH.finditer(monitor)]
    assert requests and launches, monitor[-5000:]
    assert requests[0][0] < launches[0][0] and [n for _, n in launches] == [1], (requests, launches)
    # (≥ 2 CPUs, not == 2: the driver asks for the policy's unclamped ``wanted``, beyond
    # max_actors — see the report; max_workers=1 bounds the cluster at 2 CPUs here.)
    asked = max(n for _, n in requests)
    assert asked == 2, requests  # max_actors, not the raw wish
    new_nodes = set(result["nodes_after"]) - set(result["nodes_before"])
    assert len(new_nodes) == 1 and tl["node_joined"] <= tl["rescaled"], (result["nodes_after"], tl)
    # 3. Scaled 1 → 2 by the autoscaler while one actor still lagged; the new actor on the new
    # node; the request withdrawn once no longer capped by CPUs.
    rescale = result["rescale"]
    assert rescale["by"] == "autoscaler" and "lag" in rescale["reason"], rescale
    assert result["ingested_at_rescale"] < ROWS, result["ingested_at_rescale"]
    assert result["members_after"][0] == result["nodes_before"][0]
    assert result["members_after"][1] in new_nodes, (result["members_after"], new_nodes)
    assert [tuple(r) for r in result["rescales"]] == [(1, 2)], result["rescales"]
    assert result["asked_after"] is None, "the CPU request was not withdrawn"
    assert result["errors"] == 0, result["last_error"]
    # 4. Exactly-once across the rescale: the output equals the embedded engine's.
    got = json.loads(windows_file.read_text())
    assert len(got) == len(expected) and got == expected, (len(got), len(expected))
