"""``ray up cluster_configs/local.yaml`` for real: Ray head + Raft voters, then a Delta client.

The one test here (keep it alone in this module: ``ray up`` and ``ray down`` run ``ray stop``,
which stops *every* Ray process on the machine):

1. renders ``cluster_configs/local.yaml`` to a tmp copy — only what isolates a test run
   changes: a unique cluster name, the throwaway ssh key and ``ssh_proxy_command`` of the
   ``local_sshd`` fixture (conftest.py), a tmp Raft data dir and free ports, a Ray temp dir of
   its own (so no other process's ``ray.init()`` finds this cluster through
   ``/tmp/ray/ray_current_cluster``);
2. ``ray up -y`` (bounded); the head setup starts 3 voters with ``laminardb cluster up``;
3. in a *subprocess* (this process never calls ``ray.init``): the README example through
   ``laminardb.connect("ray://auto", actors=2)`` with ``RAY_ADDRESS=127.0.0.1:<gcs port>``,
   through ``laminardb.connect("ray://127.0.0.1:<client port>")`` (Ray Client) — both with
   Ray's token (``RAY_AUTH_MODE=token``, the token file the YAML created in the ssh session's
   home) — and through ``laminardb.open()``: same rows;
4. ``laminardb cluster status --data-dir …`` shows a leader with a quorum, and every Ray
   process of this run listens on loopback only;
5. ``ray exec … laminardb cluster down`` and ``ray down -y``; a ``finally`` also stops the
   voters by their pid files and any Ray process of this run's temp dir, whatever failed.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests._services.procs import (
    REPO_ROOT,
    free_port,
    is_loopback_address,
    listening_sockets,
    pids_with_arg,
    port_busy,
)

pytestmark = pytest.mark.integration

LOCAL_YAML = REPO_ROOT / "cluster_configs" / "local.yaml"
BIN = Path(sys.executable).parent
_RAY_UP_TIMEOUT_S = 240.0
_CLIENT_TIMEOUT_S = 180.0
_DOWN_TIMEOUT_S = 90.0
_FOREIGN_RAY_WAIT_S = 60.0
_RAY_PROCESS_NAMES = (b"gcs_server", b"raylet")

# The README example, with three symbols so both actors own some of the keys.
CLIENT = r'''
import json, sys
from datetime import datetime, timedelta
import laminardb

mode = sys.argv[1]
db = laminardb.open() if mode == "embedded" else laminardb.connect(mode, actors=2)
with db:
    db.execute("""
        CREATE SOURCE trades (
            ts TIMESTAMP(3) NOT NULL, symbol VARCHAR, price DOUBLE, qty BIGINT,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
        );
        CREATE STREAM bars AS
            SELECT symbol, window_start, first_value(price) AS open, max(price) AS high,
                   min(price) AS low, last_value(price) AS close, sum(qty) AS volume
            FROM trades GROUP BY symbol, tumble(ts, INTERVAL '1' SECOND);
    """)
    bars = db.subscribe_stream("bars")
    t0 = datetime(2024, 1, 2, 9, 30)
    rows = [{"ts": t0 + timedelta(milliseconds=137 * i), "symbol": ("ACME", "GLOBX", "INITECH")[i % 3],
             "price": 10.0 + (i * 7 % 13) / 10, "qty": 10 + i % 50} for i in range(60)]
    for start in range(0, len(rows), 20):
        db.insert("trades", rows[start:start + 20])
    db.finish()
    out = [row for batch in bars for row in batch.to_pylist()]
    info = db.metrics().get("cluster") if mode != "embedded" else None
    if mode != "embedded":
        db.drop_database()  # the database lives in the cluster until dropped
print(json.dumps({"rows": out, "cluster": info}, default=str, sort_keys=True))
'''


def _ray_pids(exclude: str | None = None) -> list[int]:
    """Ray core processes on this machine (``exclude``: not those whose args contain it)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if os.path.basename(argv0) in _RAY_PROCESS_NAMES and not (
                exclude and exclude.encode() in _cmdline(int(entry))):
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _wait_no_foreign_ray(exclude: str | None = None) -> list[int]:
    """``ray up``/``ray down`` run ``ray stop``: never kill a Ray instance we did not start.

    Waits (bounded) until no other Ray instance runs; returns the pids still running.
    """
    end = time.monotonic() + _FOREIGN_RAY_WAIT_S
    while (pids := _ray_pids(exclude)) and time.monotonic() < end:
        time.sleep(1.0)
    return pids


def _render(path: Path, sshd, *, data_dir: Path, base_port: int, ray_port: int,
            client_port: int, ray_temp: str, name: str, spark_ports: tuple[int, int]) -> dict:
    cfg = yaml.safe_load(LOCAL_YAML.read_text())
    cfg["cluster_name"] = name
    cfg["auth"] = {"ssh_user": sshd.user, "ssh_private_key": str(sshd.private_key),
                   "ssh_proxy_command": sshd.proxy_command}

    def fix(cmd: str) -> str:
        new = (cmd.replace("/tmp/laminardb-raft", str(data_dir))
               .replace("--base-port 7100", f"--base-port {base_port}")
               .replace("--port=6379", f"--port={ray_port} --temp-dir={ray_temp}")
               .replace("--ray-client-server-port=10001",
                        f"--ray-client-server-port={client_port}")
               .replace("laminardb spark up",
                        f"laminardb spark up --port {spark_ports[0]} --webui-port {spark_ports[1]}"))
        return new

    for key in ("head_setup_commands", "head_start_ray_commands"):
        before = cfg[key]
        cfg[key] = [fix(c) for c in before]
    joined = " ".join(cfg["head_setup_commands"] + cfg["head_start_ray_commands"])
    # The template must still contain what we rewrite (fail loudly if the YAML changes shape).
    assert str(data_dir) in joined and f"--base-port {base_port}" in joined, joined
    assert f"--port={ray_port}" in joined, joined
    assert f"--ray-client-server-port={client_port}" in joined, joined
    assert f"spark up --port {spark_ports[0]}" in joined, joined
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def _run(cmd: list[str], *, timeout: float, log: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env=env, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired as exc:
        text = f"{exc.stdout or ''}\n{exc.stderr or ''}"
        if log is not None:
            log.write_text(text if isinstance(text, str) else str(text))
        pytest.fail(f"{' '.join(cmd[:3])} … timed out after {timeout:.0f} s:\n{str(text)[-4000:]}",
                    pytrace=False)
    if log is not None:
        log.write_text(f"$ {' '.join(cmd)}\n{out.stdout}\n--- stderr\n{out.stderr}")
    return out


def _env(**extra: str) -> dict[str, str]:
    # Ray settings left in this process's environment by an earlier in-process ray.init()
    # (RAY_AUTH_MODE=token, PYTHONBREAKPOINT, …) must not leak into the launched cluster's
    # clients: a client with token auth cannot start actors on a cluster started without it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONBREAKPOINT"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


def _normalize(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["symbol"], r["window_start"]))


def _children(pids: set[int]) -> set[int]:
    """``pids`` and all their descendants."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, grew = set(pids), True
    while grew:
        new = {p for p, pp in parent.items() if pp in out and p not in out}
        out |= new
        grew = bool(new)
    return out


def _our_ray_processes(ray_temp: str, ray_port: int) -> list[int]:
    """This run's Ray: args naming our temp dir, or a Ray process given our GCS port (the Ray
    Client server), and their descendants."""
    suffix = f":{ray_port}".encode()
    marks = set(pids_with_arg(ray_temp))
    for pid in pids_with_arg(f":{ray_port}"):
        argv = _cmdline(pid).split(b"\0")
        if any(a.endswith(suffix) for a in argv) and any(b"ray" in a for a in argv[:3]):
            marks.add(pid)
    return sorted(_children(marks))


def _terminate(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is left after ``grace`` s (gcs_server/raylet may ignore TERM)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        while time.monotonic() < end and any(Path(f"/proc/{p}").exists() and
                                             _cmdline(p) for p in pids):
            time.sleep(0.1)


def _cleanup(cfg_path: Path, data_dir: Path, ray_temp: str, ray_port: int, name: str,
             logs: Path) -> list[str]:
    """Stop everything this test started, whatever state it is in; what needed force."""
    from laminardb.raft.launch import stop_voters

    notes = []
    foreign = _wait_no_foreign_ray(exclude=ray_temp)
    if foreign:
        notes.append(f"another Ray instance started during the test (pids {foreign}): not running "
                     "`ray down`, whose `ray stop` would kill it; stopped this run's Ray by pid")
    elif cfg_path.exists():
        down = _run([str(BIN / "ray"), "down", "-y", str(cfg_path)], timeout=_DOWN_TIMEOUT_S,
                    log=logs / "ray_down.log", env=_env())
        if down.returncode != 0:
            notes.append(f"ray down rc {down.returncode}: {down.stderr[-1500:]}")
    stopped = stop_voters(data_dir, grace=3.0)
    if any(v in ("stopped", "killed") for v in stopped.values()):
        notes.append(f"voters still running after ray down, stopped by pid file: {stopped}")
    # Ray processes of *this* run only: command lines with our temp dir or GCS port, and
    # their children (the agents rename themselves to ray::…).
    leftovers = _our_ray_processes(ray_temp, ray_port)
    if leftovers:
        _terminate(leftovers)
        notes.append(f"stopped {len(leftovers)} leftover Ray processes of {ray_temp} by pid")
    # Ray's ssh ControlMaster for this cluster (ControlPersist 10 s) and its sshd -i.
    user_hash = hashlib.sha256(getpass.getuser().encode()).hexdigest()[:10]
    control_dir = Path(f"/tmp/ray_ssh_{user_hash}") / hashlib.sha256(name.encode()).hexdigest()[:10]
    if control_dir.is_dir():
        for sock in control_dir.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"],
                           capture_output=True, timeout=10)
        subprocess.run(["rm", "-rf", str(control_dir)], timeout=10)
    for suffix in ("state", "lock"):  # the local provider's node table and its lock
        (Path(tempfile.gettempdir()) / "ray" / f"cluster-{name}.{suffix}").unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", ray_temp], timeout=30)
    return notes


def test_ray_up_local_yaml_then_connect(tmp_path: Path, local_sshd) -> None:
    started = time.monotonic()
    if pids := _wait_no_foreign_ray():
        pytest.fail(f"another Ray instance runs on this machine (pids {pids}); `ray up`/`ray down` "
                    "run `ray stop`, which would kill it — run this test alone", pytrace=False)
    logs = tmp_path / "logs"
    logs.mkdir()
    data_dir = tmp_path / "raft"
    # Unix socket paths under the Ray temp dir must stay short (< 108 bytes).
    ray_temp = tempfile.mkdtemp(prefix="ldbray-", dir="/tmp")
    name = f"laminardb-test-{secrets.token_hex(4)}"
    base_port = free_port()
    while base_port > 65000 or any(port_busy(base_port + o) for o in (1, 2, 3, 101, 102, 103)):
        base_port = free_port()
    ray_port, client_port = free_port(), free_port()
    cfg_path = tmp_path / "local.yaml"
    spark_dir = local_sshd.home / ".laminardb" / "spark"  # `spark up`'s default, in the ssh HOME
    _render(cfg_path, local_sshd, data_dir=data_dir, base_port=base_port, ray_port=ray_port,
            client_port=client_port, ray_temp=ray_temp, name=name,
            spark_ports=(free_port(), free_port()))
    # Ray's token, created by the YAML in the ssh session's home; what a client on the head
    # sets (docs/cluster.md, "Connect").
    token_env = {"RAY_AUTH_MODE": "token",
                 "RAY_AUTH_TOKEN_PATH": str(local_sshd.home / ".ray" / "auth_token")}
    timings: dict[str, float] = {}
    notes: list[str] = []
    try:
        t = time.monotonic()
        up = _run([str(BIN / "ray"), "up", "-y", "--no-config-cache", str(cfg_path)],
                  timeout=_RAY_UP_TIMEOUT_S, log=logs / "ray_up.log", env=_env())
        timings["ray up"] = time.monotonic() - t
        assert up.returncode == 0, f"ray up failed:\n{up.stdout[-5000:]}\n{up.stderr[-3000:]}"

        # The voters the head setup started: pid files, cluster file, a leader.
        info = json.loads((data_dir / "cluster.json").read_text())
        assert [v["node_id"] for v in info["voters"]] == ["v1", "v2", "v3"]
        assert all((data_dir / f"{v}.pid").exists() for v in ("v1", "v2", "v3"))
        assert oct((data_dir / "secret").stat().st_mode & 0o777) == "0o600"

        t = time.monotonic()
        status = _run([str(BIN / "laminardb"), "cluster", "status", "--data-dir", str(data_dir)],
                      timeout=60, env=_env())
        timings["cluster status"] = time.monotonic() - t
        assert status.returncode == 0, status.stderr
        assert "quorum yes" in status.stdout and "raft: leader v" in status.stdout, status.stdout
        for v in info["voters"]:
            assert v["rpc"] in status.stdout
        spark = _run([str(BIN / "laminardb"), "spark", "status", "--data-dir", str(spark_dir), "--json"],
                     timeout=60, env=_env())
        assert spark.returncode == 0, f"{spark.stdout}\n{spark.stderr}"
        assert [w["state"] for w in json.loads(spark.stdout)["workers"]] == ["ALIVE"], spark.stdout
        token_file = local_sshd.home / ".ray" / "auth_token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.read_text().strip() not in (logs / "ray_up.log").read_text()

        # The Delta client, in a subprocess, against the cluster ray up started.
        script = tmp_path / "client.py"
        script.write_text(CLIENT)
        t = time.monotonic()
        ray_run = _run([sys.executable, str(script), "ray://auto"], timeout=_CLIENT_TIMEOUT_S,
                       log=logs / "client_ray.log",
                       env=_env(RAY_ADDRESS=f"127.0.0.1:{ray_port}",
                                RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **token_env))
        timings["connect(ray://auto) client"] = time.monotonic() - t
        assert ray_run.returncode == 0, f"{ray_run.stdout[-3000:]}\n{ray_run.stderr[-5000:]}"
        t = time.monotonic()
        client_run = _run([sys.executable, str(script), f"ray://127.0.0.1:{client_port}"],
                          timeout=_CLIENT_TIMEOUT_S, log=logs / "client_ray_client.log",
                          env=_env(**token_env))
        timings["connect(ray://host:port) client"] = time.monotonic() - t
        assert client_run.returncode == 0, \
            f"{client_run.stdout[-3000:]}\n{client_run.stderr[-5000:]}"
        # Every listener of this run's Ray (the Ray Client server and its per-client servers
        # included, now that both clients ran) is on loopback.
        listening = [a for a, _ in listening_sockets(set(_our_ray_processes(ray_temp, ray_port)))]
        assert {ray_port, client_port} <= {int(a.rsplit(":", 1)[1]) for a in listening}, listening
        exposed = [a for a in listening if not is_loopback_address(a)]
        assert not exposed, f"Ray of local.yaml listens beyond loopback: {exposed}"
        t = time.monotonic()
        local_run = _run([sys.executable, str(script), "embedded"], timeout=_CLIENT_TIMEOUT_S,
                         log=logs / "client_embedded.log", env=_env())
        timings["open() client"] = time.monotonic() - t
        assert local_run.returncode == 0, local_run.stderr[-5000:]
        embedded = json.loads(local_run.stdout.strip().splitlines()[-1])
        assert embedded["rows"], "the embedded run produced no bars"
        for run in (ray_run, client_run):
            distributed = json.loads(run.stdout.strip().splitlines()[-1])
            assert _normalize(distributed["rows"]) == _normalize(embedded["rows"])
            cluster = distributed["cluster"]
            assert cluster["actors"] == 2 and not cluster["dead"], cluster
            assert all(n > 0 for n in cluster["rows_per_actor"]), cluster

        t = time.monotonic()
        _kafka_pipeline_survives(tmp_path, logs, env=_env(RAY_ADDRESS=f"127.0.0.1:{ray_port}",
                                                          RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **token_env))
        timings["kafka pipeline + actor kill"] = time.monotonic() - t
        # its exactly-once sink's epochs ran on the standalone Spark cluster ray up started
        spark = _run([str(BIN / "laminardb"), "spark", "status", "--data-dir", str(spark_dir), "--json"],
                     timeout=60, env=_env())
        apps = json.loads(spark.stdout)["applications"]
        assert [a["name"] for a in apps] == ["laminardb-coordinator"], spark.stdout

        t = time.monotonic()
        down = _run([str(BIN / "ray"), "exec", str(cfg_path),
                     f"laminardb cluster down --data-dir {data_dir}"],
                    timeout=_DOWN_TIMEOUT_S, log=logs / "cluster_down.log", env=_env())
        timings["cluster down (ray exec)"] = time.monotonic() - t
        assert down.returncode == 0, f"{down.stdout[-3000:]}\n{down.stderr[-3000:]}"
        assert not any((data_dir / f"{v}.pid").exists() for v in ("v1", "v2", "v3"))
        down = _run([str(BIN / "ray"), "exec", str(cfg_path), "laminardb spark down"],
                    timeout=_DOWN_TIMEOUT_S, log=logs / "spark_down.log", env=_env())
        assert down.returncode == 0, f"{down.stdout[-3000:]}\n{down.stderr[-3000:]}"
        assert not (spark_dir / "master.pid").exists() and not (spark_dir / "worker.pid").exists()
    finally:
        t = time.monotonic()
        notes = _cleanup(cfg_path, data_dir, ray_temp, ray_port, name, logs)
        from laminardb.spark.standalone import stop_spark_daemons

        if spark_left := stop_spark_daemons(spark_dir, grace=5.0):
            notes.append(f"Spark daemons still running after `spark down`, stopped: {spark_left}")
        timings["ray down + cleanup"] = time.monotonic() - t
        timings["total"] = time.monotonic() - started
        print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
        if notes:
            print("cleanup notes: " + "; ".join(notes))
    assert not notes, notes
    assert not _our_ray_processes(ray_temp, ray_port), "Ray processes of this run survived"


PIPELINE = r'''
import json, sys
import laminardb

db = laminardb.connect("ray://auto", database="kafka-pipe", actors=2, config={"checkpoint_interval": "1s"})
db.execute(sys.argv[1])
db.start()
print(json.dumps({"pids": [m["pid"] for m in db.metrics()["cluster"]["members"]]}))
'''  # exits at once: the pipeline keeps running in the cluster


def _kafka_pipeline_survives(tmp_path: Path, logs: Path, *, env: dict[str, str]) -> None:
    """Issue 9's promise on the `ray up` cluster: a script starts a Kafka→Kafka pipeline and
    exits; an actor is SIGKILLed mid-stream; the sink topic, read committed, holds every
    result exactly once (compared with the embedded engine over the same rows)."""
    import signal

    from kafka.admin import KafkaAdminClient, NewTopic

    from tests._services.kafka import start_kafka_broker
    from tests.delta.workload import (
        KAFKA_DDL,
        KAFKA_ROWS,
        SENTINEL_TS,
        expected_windows,
        kafka_rows,
        produce,
        settled_windows,
    )

    broker = start_kafka_broker()
    try:
        bootstrap = broker.bootstrap
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("in", 2, 1), NewTopic("out", 1, 1)])
        admin.close()
        script = tmp_path / "pipeline.py"
        script.write_text(PIPELINE)
        run = _run([sys.executable, str(script), KAFKA_DDL.format(brokers=bootstrap, src="in", dst="out")],
                   timeout=_CLIENT_TIMEOUT_S, log=logs / "pipeline.log", env=env)
        assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
        pids = json.loads(run.stdout.strip().splitlines()[-1])["pids"]
        produce(bootstrap, "in", kafka_rows(0, KAFKA_ROWS // 2))
        time.sleep(3)  # read, and covered by a checkpoint or two
        os.kill(pids[1], signal.SIGKILL)
        produce(bootstrap, "in", kafka_rows(KAFKA_ROWS // 2, KAFKA_ROWS))
        produce(bootstrap, "in", [{"k": p, "seq": -1, "v": 0, "ts": SENTINEL_TS} for p in range(2)])
        expected = expected_windows()

        assert settled_windows(bootstrap, "out", expected, timeout=180) == expected
    finally:
        broker.stop()
