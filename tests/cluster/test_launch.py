"""``laminardb cluster up|down`` (laminardb/raft/launch.py) with real voter processes: ports,
secrets (generated, from a file or the environment, too short), binding rules (loopback unless
``--allow-remote``; a wildcard bind advertises a routable address)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laminardb.errors import ConfigError
from laminardb.raft.launch import (
    VoterProcess,
    plan_voters,
    primary_address,
    read_cluster_file,
    running_voters,
    stop_voters,
)
from tests._services.procs import free_port, port_busy, process_alive, repo_env, wait_until
from tests._services.raft import TEST_SECRET as _SECRET

pytestmark = pytest.mark.integration


def _base_port(n: int = 3) -> int:
    """A base port whose voter ports (base+1.., base+101..) are all free now."""
    for _ in range(200):
        base = free_port()
        if base + 100 + n < 65535 and not any(
                port_busy(base + off + i) for off in (0, 100) for i in range(1, n + 1)):
            return base
    raise RuntimeError("no free port range")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminardb.raft.cli", "cluster", *args],
                          capture_output=True, text=True, timeout=120,
                          env=env or repo_env(LAMINARDB_RAFT_SECRET=""), stdin=subprocess.DEVNULL)


def _pids(d: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in sorted(d.glob("v*.pid"))}


def test_plan_voters_ports_and_files(tmp_path: Path) -> None:
    vs = plan_voters(tmp_path / "d", 3, host="127.0.0.1", base_port=7100)
    assert [(v.node_id, v.raft, v.rpc) for v in vs] == [
        ("v1", "127.0.0.1:7101", "127.0.0.1:7201"),
        ("v2", "127.0.0.1:7102", "127.0.0.1:7202"),
        ("v3", "127.0.0.1:7103", "127.0.0.1:7203"),
    ]
    assert vs[0].pid_file == str((tmp_path / "d" / "v1.pid").resolve())
    with pytest.raises(ConfigError):
        plan_voters(tmp_path, 0)
    with pytest.raises(ConfigError):
        plan_voters(tmp_path, 3, base_port=65500)
    with pytest.raises(ConfigError, match="cluster up"):
        read_cluster_file(tmp_path / "nothing")


def test_up_status_restart_down(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    base = _base_port()
    try:
        t = time.monotonic()
        up = _cli("up", "--data-dir", str(d), "--base-port", str(base))
        first_up_s = time.monotonic() - t
        assert up.returncode == 0, up.stderr
        assert "generated a new cluster secret" in up.stderr
        assert up.stdout.count(" started ") == 3 and up.stdout.count(" leader") == 1, up.stdout
        assert f"voters: 127.0.0.1:{base + 101},127.0.0.1:{base + 102},127.0.0.1:{base + 103}" \
            in up.stdout
        assert (d / "secret").stat().st_mode & 0o777 == 0o600
        assert d.stat().st_mode & 0o777 == 0o700
        info = json.loads((d / "cluster.json").read_text())
        assert info["secret_file"] == str((d / "secret").resolve())
        pids = _pids(d)
        assert sorted(pids) == ["v1", "v2", "v3"] and all(process_alive(p) for p in pids.values())
        # Detached: each voter leads its own session (survives the ssh session of `ray up`).
        assert all(os.getsid(p) == p for p in pids.values())
        # The secret never appears on a command line.
        secret = (d / "secret").read_text().strip()
        for p in pids.values():
            assert secret.encode() not in Path(f"/proc/{p}/cmdline").read_bytes()

        # status/plan find the voters and the secret through --data-dir.
        status = _cli("status", "--data-dir", str(d))
        assert status.returncode == 0, status.stderr
        assert "quorum yes" in status.stdout and "raft: leader v" in status.stdout
        from laminardb.raft.client import RaftClient

        with RaftClient([v["rpc"] for v in info["voters"]], secret=secret) as c:
            c.register_node("worker-a", address="10.0.0.1:1", cores=2)
        plan = _cli("plan", "--data-dir", str(d), "--source", "s", "--vnodes", "8", "--json")
        assert plan.returncode == 0, plan.stderr
        assert json.loads(plan.stdout)["load"] == {"worker-a": 8}

        # Idempotent: a second `up` keeps every running voter.
        again = _cli("up", "--data-dir", str(d), "--base-port", str(base))
        assert again.returncode == 0, again.stderr
        assert again.stdout.count(" running ") == 3 and _pids(d) == pids

        # A dead voter is restarted, the others kept.
        os.kill(pids["v2"], signal.SIGKILL)
        wait_until(lambda: not process_alive(pids["v2"]), timeout=10, what="v2 to die")
        again = _cli("up", "--data-dir", str(d), "--base-port", str(base))
        assert again.returncode == 0, again.stderr
        new = _pids(d)
        assert new["v1"] == pids["v1"] and new["v3"] == pids["v3"] and new["v2"] != pids["v2"]
        assert "v2   raft" in again.stdout and " started " in again.stdout

        # Other settings while running: refused, nothing touched.
        other = _cli("up", "--data-dir", str(d), "--base-port", str(base), "--voters", "5")
        assert other.returncode == 2 and "LDB-9020" in other.stderr and "cluster down" in other.stderr
        assert _pids(d) == new

        down = _cli("down", "--data-dir", str(d))
        assert down.returncode == 0, down.stderr
        assert down.stdout.split() == ["v1", "stopped", "v2", "stopped", "v3", "stopped"]
        assert not list(d.glob("*.pid"))
        wait_until(lambda: not any(process_alive(p) for p in new.values()), timeout=10,
                   what="voters to exit")
        assert "not running" in _cli("down", "--data-dir", str(d)).stdout

        # Up again from the same data dir: the replicated state survived (journal on disk).
        up2 = _cli("up", "--data-dir", str(d), "--base-port", str(base))
        assert up2.returncode == 0, up2.stderr
        assert "generated" not in up2.stderr
        status = _cli("status", "--data-dir", str(d))
        assert "worker-a" in status.stdout, status.stdout
        print(f"first cluster up: {first_up_s:.1f} s")
    finally:
        stop_voters(d, grace=3.0)


def test_explicit_secret_file_and_env_secret(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    secret_file = tmp_path / "keys" / "raft-secret"
    base = _base_port()
    try:
        up = _cli("up", "--data-dir", str(d), "--base-port", str(base),
                  "--secret-file", str(secret_file))
        assert up.returncode == 0, up.stderr
        assert secret_file.stat().st_mode & 0o777 == 0o600 and not (d / "secret").exists()
        assert _cli("status", "--data-dir", str(d)).returncode == 0
        # An explicit wrong secret wins over the data dir's and fails authentication.
        bad = _cli("status", "--data-dir", str(d),
                   env=repo_env(LAMINARDB_RAFT_SECRET="not-the-cluster-secret-0123456789"))
        assert bad.returncode == 2 and "LDB-6004" in bad.stderr
    finally:
        stop_voters(d, grace=3.0)

    # A secret from the environment is handed to the voters through theirs, not written down.
    d2 = tmp_path / "raft2"
    env = repo_env(LAMINARDB_RAFT_SECRET="from-the-environment")
    try:
        up = _cli("up", "--data-dir", str(d2), "--base-port", str(_base_port()), env=env)
        assert up.returncode == 0, up.stderr
        assert not (d2 / "secret").exists()
        assert json.loads((d2 / "cluster.json").read_text())["secret_file"] is None
        assert _cli("status", "--data-dir", str(d2), env=env).returncode == 0
    finally:
        stop_voters(d2, grace=3.0)


def test_down_ignores_foreign_pids_and_kills_stuck_voters(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    voters = plan_voters(d, 2, base_port=7100)
    d.mkdir()
    (d / "cluster.json").write_text(json.dumps({"voters": [vars(v) for v in voters]}))
    # v1's pid file names an unrelated process (a recycled pid): never signalled.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # v2 is "a voter" that ignores SIGTERM: SIGKILL after the grace period.
    stuck = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                              "print('ready', flush=True); time.sleep(60)",
                              "raft-node", voters[1].data_dir], stdout=subprocess.PIPE, text=True)
    try:
        assert stuck.stdout.readline().strip() == "ready"
        Path(voters[0].pid_file).write_text(f"{bystander.pid}\n")
        Path(voters[1].pid_file).write_text(f"{stuck.pid}\n")
        assert running_voters(voters) == {"v2": stuck.pid}
        t = time.monotonic()
        assert stop_voters(d, grace=0.5) == {"v1": "not running", "v2": "killed"}
        assert time.monotonic() - t < 5
        assert stuck.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None
        assert not Path(voters[0].pid_file).exists() and not Path(voters[1].pid_file).exists()
    finally:
        for p in (bystander, stuck):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)


def test_voter_process_identity(tmp_path: Path) -> None:
    v = VoterProcess("v1", "127.0.0.1:1", "127.0.0.1:2", str(tmp_path / "v1"),
                     str(tmp_path / "v1.pid"), str(tmp_path / "v1.log"))
    assert running_voters([v]) == {}
    Path(v.pid_file).write_text("not a pid\n")
    assert running_voters([v]) == {}
    Path(v.pid_file).write_text(f"{os.getpid()}\n")
    assert running_voters([v]) == {}


def test_short_secret_refused_with_a_way_to_make_one(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    for env in (repo_env(LAMINARDB_RAFT_SECRET="hunter2"), None):
        if env is None:  # the same from a secret file
            (tmp_path / "short").write_text("hunter2\n")
            out = _cli("up", "--data-dir", str(d), "--base-port", str(_base_port()),
                       "--secret-file", str(tmp_path / "short"))
        else:
            out = _cli("up", "--data-dir", str(d), "--base-port", str(_base_port()), env=env)
        assert out.returncode == 2 and "LDB-9030" in out.stderr, out.stderr
        assert "secrets.token_urlsafe(32)" in out.stderr and "7 bytes" in out.stderr
        assert not list(d.glob("*.pid"))
    # The voter command itself refuses it too (before listening).
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "laminardb.raft.cli", "raft-node", "--id", "x", "--bind",
         f"127.0.0.1:{port}", "--rpc-bind", f"127.0.0.1:{free_port()}", "--data-dir",
         str(tmp_path / "x")], capture_output=True, text=True, timeout=60,
        env=repo_env(LAMINARDB_RAFT_SECRET="hunter2"), stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "LDB-9030" in out.stderr
    assert not port_busy(port)


def test_non_loopback_bind_needs_allow_remote(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    base = _base_port()
    for host in ("0.0.0.0", primary_address()):
        out = _cli("up", "--data-dir", str(d), "--base-port", str(base), "--host", host)
        assert out.returncode == 2 and "LDB-6005" in out.stderr, out.stderr
        assert "--allow-remote" in out.stderr
        assert not list(d.glob("*.pid")) and not port_busy(base + 1)
    # raft-node: the same rule, and a wildcard bind needs the address to advertise.
    for extra in ([], ["--allow-remote"]):
        out = subprocess.run(
            [sys.executable, "-m", "laminardb.raft.cli", "raft-node", "--id", "x", "--bind",
             f"0.0.0.0:{base + 1}", "--rpc-bind", f"127.0.0.1:{base + 101}", "--data-dir",
             str(tmp_path / "x"), *extra], capture_output=True, text=True, timeout=60,
            env=repo_env(LAMINARDB_RAFT_SECRET=_SECRET), stdin=subprocess.DEVNULL)
        assert out.returncode == 2 and "LDB-6005" in out.stderr, out.stderr
        assert ("--allow-remote" if not extra else "--advertise-host") in out.stderr


def test_allow_remote_advertises_a_routable_address(tmp_path: Path) -> None:
    d = tmp_path / "raft"
    base = _base_port()
    primary = primary_address()
    assert primary != "0.0.0.0" and not primary.startswith("127.")
    try:
        up = _cli("up", "--data-dir", str(d), "--base-port", str(base), "--host", "0.0.0.0",
                  "--allow-remote")
        assert up.returncode == 0, up.stderr
        assert "warning: the voters listen on 0.0.0.0" in up.stderr
        info = json.loads((d / "cluster.json").read_text())
        assert info["host"] == "0.0.0.0" and info["advertise_host"] == primary
        for i, v in enumerate(info["voters"], start=1):
            assert v["raft"] == f"{primary}:{base + i}" and v["rpc"] == f"{primary}:{base + 100 + i}"
            assert v["raft_bind"] == f"0.0.0.0:{base + i}"
        assert "0.0.0.0" not in json.dumps([(v["raft"], v["rpc"]) for v in info["voters"]])
        # The voters listen on every interface and reach each other at the advertised address.
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True,
                                   timeout=30).stdout
        assert f"0.0.0.0:{base + 1} " in listening and f"0.0.0.0:{base + 101} " in listening
        status = _cli("status", "--data-dir", str(d), "--json")
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert st["quorum"] and st["leader"]["raft"].startswith(f"{primary}:")
        assert {v["liveness"] for v in st["voters"]} == {"up"}
    finally:
        stop_voters(d, grace=3.0)

    # --advertise-host wins over the guess (here: loopback, reachable through the wildcard).
    d2 = tmp_path / "raft2"
    base = _base_port()
    try:
        up = _cli("up", "--data-dir", str(d2), "--base-port", str(base), "--host", "0.0.0.0",
                  "--allow-remote", "--advertise-host", "127.0.0.1")
        assert up.returncode == 0, up.stderr
        info = json.loads((d2 / "cluster.json").read_text())
        assert info["voters"][0]["rpc"] == f"127.0.0.1:{base + 101}"
        assert _cli("status", "--data-dir", str(d2)).returncode == 0
    finally:
        stop_voters(d2, grace=3.0)
