"""Voter logs that explain: elections, terms, leaders, peers, refused frames — read from the real
log files of real voter processes, in JSON (``--log-format json`` / ``$LAMINARDB_LOG_FORMAT``)
and in text."""

from __future__ import annotations

import json
import signal
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from laminardb.raft import RaftClient, RpcAuthError
from tests._services.procs import wait_until
from tests._services.raft import RaftCluster

pytestmark = pytest.mark.integration


def _events(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSON voter log, parsed (a line that is not JSON fails the test)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _named(path: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in _events(path) if e["event"] == name]


def test_json_logs_tell_elections_failover_and_refusals(
    raft_cluster: Callable[..., RaftCluster]
) -> None:
    cluster = raft_cluster(3, extra_args=("--log-format", "json"))
    client = cluster.client()
    leader_i = cluster.leader_index(client)
    leader = cluster.voters[leader_i]

    logs = [v.log_path for v in cluster.voters]
    for v, path in zip(cluster.voters, logs, strict=True):
        up = _named(path, "voter.up")
        assert len(up) == 1 and up[0]["voter"] == v.node_id and up[0]["raft"] == v.raft
        assert up[0]["level"] == "INFO" and up[0]["logger"] == "laminardb.raft"
        assert up[0]["encrypted"] is True and up[0]["max_frame_bytes"] == 64 << 20
        # Every voter learned who leads, and in which term.
        wait_until(lambda p=path: any(e["leader"] == leader.raft
                                      for e in _named(p, "raft.leader")),
                   timeout=5, what=f"{v.node_id} to log the leader")
        assert _named(path, "raft.term")
    won = [e for e in _named(leader.log_path, "raft.state") if e["state"] == "leader"]
    assert won and won[-1]["msg"].startswith(f"election won: {leader.node_id} leads term")
    first_term = won[-1]["term"]

    # Refused traffic: garbage frames on a Raft port (fail decryption), one over the limit,
    # and an RPC client with another secret. Logged once per kind (rate-limited), counted.
    target_i = (leader_i + 1) % 3
    target = cluster.voters[target_i]
    host, port = target.raft.rsplit(":", 1)
    for _ in range(5):
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(struct.pack("i", 100) + b"\x07" * 100)
            s.settimeout(2)
            assert s.recv(10) == b""
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(struct.pack("i", 2**31 - 1))
        s.settimeout(2)
        assert s.recv(10) == b""
    with RaftClient([target.rpc], secret="some-other-cluster-secret-000", deadline=2) as bad:
        with pytest.raises(RpcAuthError):
            bad.ping()
    wait_until(lambda: _named(target.log_path, "rpc.auth_failed"), timeout=5,
               what="rpc.auth_failed")
    auth = _named(target.log_path, "raft.auth_failed")
    assert len(auth) == 1 and auth[0]["level"] == "WARNING" and auth[0]["total"] == 1
    # the voter logs the refusal after it closed the socket: wait for the line, bounded
    refused = wait_until(lambda: _named(target.log_path, "raft.frame_refused"), timeout=5,
                         what="raft.frame_refused")
    assert len(refused) == 1 and refused[0]["declared_bytes"] == 2**31 - 1
    assert _named(target.log_path, "rpc.auth_failed")[0]["peer"].startswith("127.0.0.1:")
    with RaftClient([target.rpc], secret=cluster.secret) as only_target:
        counters = only_target.status()["voter"]["security"]
    assert counters == {"raft": {"frames_refused": 1, "auth_failures": 5},
                        "rpc": {"frames_refused": 0, "auth_failures": 1}}

    # kill -9 the leader: the others log the lost peer, an election and the new leader.
    cluster.signal(leader_i, signal.SIGKILL)
    survivors = [i for i in range(3) if i != leader_i]

    def new_leader() -> str | None:
        for i in survivors:
            for e in _named(cluster.voters[i].log_path, "raft.state"):
                if e["state"] == "leader" and e["term"] > first_term:
                    return cluster.voters[i].raft
        return None

    new = wait_until(new_leader, timeout=10, what="a survivor to log winning an election")
    for i in survivors:
        path = cluster.voters[i].log_path
        wait_until(lambda p=path: any(e["leader"] == new for e in _named(p, "raft.leader")),
                   timeout=5, what="the new leader in every survivor's log")
        down = [e for e in _named(path, "raft.peer") if e["peer"] == leader.raft]
        assert down and down[-1]["connected"] is False and down[-1]["level"] == "WARNING"
        lost = [e for e in _named(path, "raft.leader") if e["previous"] == leader.raft]
        assert lost, f"{cluster.voters[i].node_id} did not log losing {leader.raft}"
    assert any(e["state"] == "candidate" for i in survivors
               for e in _named(cluster.voters[i].log_path, "raft.state"))

    # A clean stop is logged too.
    stopped = cluster.voters[survivors[0]]
    cluster.signal(survivors[0], signal.SIGTERM)
    assert stopped.proc is not None
    stopped.proc.wait(timeout=10)
    down = _named(stopped.log_path, "voter.down")
    assert len(down) == 1 and down[0]["reason"] == "SIGTERM"


def test_log_format_from_the_environment_and_text_by_default(
    raft_cluster: Callable[..., RaftCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMINARDB_LOG_FORMAT", "json")
    as_json = raft_cluster(1)
    up = _named(as_json.voters[0].log_path, "voter.up")
    assert up and up[0]["voter"] == "v1"
    monkeypatch.delenv("LAMINARDB_LOG_FORMAT")
    as_text = raft_cluster(1)
    time.sleep(0.2)
    text = as_text.voters[0].log_path.read_text()
    line = next(ln for ln in text.splitlines() if "[voter.up " in ln)
    assert " INFO laminardb.raft raft voter v1 up: " in line and "encrypted=true" in line
    assert "[raft.state voter=v1 previous=candidate state=leader" in text
