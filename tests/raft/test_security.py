"""Security of the voter ports: no pickle ever loaded from a socket, RPC needs the secret."""

from __future__ import annotations

import pickle
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from laminardb.raft import (
    InsecureConfigError,
    RaftClient,
    RaftNodeConfig,
    RpcAuthError,
    WeakSecretError,
)
from tests._services.procs import free_port, repo_env, wait_until
from tests._services.raft import RaftCluster

_OTHER_SECRET = "another-cluster-secret-0123456789"

pytestmark = pytest.mark.integration


class _Canary:
    """Unpickling this creates ``path`` — proof that someone unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def _payloads(canary: Path) -> list[bytes]:
    raw = pickle.dumps(_Canary(canary), protocol=2)
    # pysyncobj frames: native 4-byte length + zlib(pickle); also a bare pickle and one framed
    # like our RPC (4-byte big-endian length, 32 bytes of fake MAC).
    framed_syncobj = zlib.compress(raw)
    return [
        raw,
        struct.pack("i", len(framed_syncobj)) + framed_syncobj,
        struct.pack(">I", 32 + len(raw)) + b"\0" * 32 + raw,
        struct.pack(">I", len(raw)) + raw,
    ]


def _send(addr: str, data: bytes) -> None:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(data)
        s.settimeout(0.5)
        try:
            s.recv(4096)
        except OSError:
            pass


def test_canary_payload_really_works_when_unpickled(tmp_path: Path) -> None:
    # Control: the payload does create the canary when someone unpickles it, so the absence
    # of the canary below means nobody did.
    canary = tmp_path / "control-canary"
    blob = tmp_path / "blob"
    blob.write_bytes(_payloads(canary)[0])
    subprocess.run([sys.executable, "-c", f"import pickle; pickle.loads(open({str(blob)!r},'rb').read())"],
                   check=True, timeout=30)
    assert canary.exists()


def test_pickle_to_raft_and_rpc_ports_does_nothing(
    raft_cluster: Callable[..., RaftCluster], tmp_path: Path
) -> None:
    cluster = raft_cluster(3)
    canary = tmp_path / "canary"
    for v in cluster.voters:
        for data in _payloads(canary):
            _send(v.raft, data)
            _send(v.rpc, data)
    time.sleep(0.5)
    assert not canary.exists()
    # The voters are still fine.
    c = cluster.client()
    assert c.allocate_checkpoint_epoch() >= 1
    assert not canary.exists()


def test_rpc_without_the_secret_is_refused(raft_cluster: Callable[..., RaftCluster]) -> None:
    cluster = raft_cluster(3)
    with RaftClient(cluster.rpc_addresses, secret=_OTHER_SECRET, deadline=3) as bad:
        with pytest.raises(RpcAuthError) as err:
            bad.register_node("intruder")
        assert err.value.code == "LDB-6004"

    # A well-formed msgpack request with no valid MAC is not applied either.
    body = msgpack.packb({"id": 1, "ts": time.time(), "m": "register_node",
                          "a": {"rid": "x", "node_id": "intruder2", "address": "", "cores": 1,
                                "metadata": {}}})
    for v in cluster.voters:
        _send(v.rpc, struct.pack(">I", 32 + len(body)) + b"\x01" * 32 + body)
    nodes = cluster.client().ownership(barrier=True)["nodes"]
    assert "intruder" not in nodes and "intruder2" not in nodes


def test_voter_refuses_to_run_insecurely(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(InsecureConfigError):
        RaftNodeConfig.dev(node_id="x", bind=f"0.0.0.0:{port}", peers=(), data_dir=str(tmp_path),
                           rpc_bind="127.0.0.1:1", secret=_OTHER_SECRET).validate()
    with pytest.raises(InsecureConfigError):
        RaftNodeConfig(node_id="x", bind=f"127.0.0.1:{port}", peers=(), data_dir=str(tmp_path),
                       rpc_bind="127.0.0.1:1", secret="").validate()
    with pytest.raises(WeakSecretError) as weak:
        RaftNodeConfig(node_id="x", bind=f"127.0.0.1:{port}", peers=(), data_dir=str(tmp_path),
                       rpc_bind="127.0.0.1:1", secret="s").validate()
    assert weak.value.code == "LDB-9030"
    # Dev mode on loopback is allowed (the RPC still needs the secret).
    RaftNodeConfig.dev(node_id="x", bind=f"127.0.0.1:{port}", peers=(f"127.0.0.1:{port + 1}",),
                       data_dir=str(tmp_path), rpc_bind="127.0.0.1:1",
                       secret=_OTHER_SECRET).validate()

    # The real command exits with an error instead of listening.
    env = {k: v for k, v in repo_env().items() if k != "LAMINARDB_RAFT_SECRET"}
    cmds = [
        ["--bind", f"0.0.0.0:{port}", "--insecure-dev"],  # dev mode off loopback
        ["--bind", f"127.0.0.1:{port}"],                  # no secret at all
    ]
    for extra in cmds:
        proc = subprocess.run(
            [sys.executable, "-m", "laminardb.raft.cli", "raft-node", "--id", "x",
             "--data-dir", str(tmp_path / "d"), "--rpc-bind", f"127.0.0.1:{free_port()}", *extra],
            env={**env, **({"LAMINARDB_RAFT_SECRET": _OTHER_SECRET}
                           if "--insecure-dev" in extra else {})},
            capture_output=True, text=True, timeout=30,
        )
        assert proc.returncode == 2, proc.stderr
        assert "LDB-6005" in proc.stderr
    # And nothing is listening on the port it was told to use.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


def test_insecure_dev_mode_does_unpickle_hence_loopback_only(
    raft_cluster: Callable[..., RaftCluster], tmp_path: Path
) -> None:
    # Without a password pysyncobj loads pickles from its port: the same probe that finds
    # nothing above creates the canary here. This is why --insecure-dev requires loopback.
    cluster = raft_cluster(3, extra_args=("--insecure-dev",))
    canary = tmp_path / "dev-canary"
    for data in _payloads(canary):
        _send(cluster.voters[0].raft, data)
    wait_until(canary.exists, timeout=5, what="the canary in insecure dev mode")
