"""Start and stop the Raft voters of one machine as background processes (``cluster up|down``).

Entry points: :func:`start_voters` (``laminardb cluster up``), :func:`stop_voters`
(``laminardb cluster down``), :func:`read_cluster_file` (``cluster status --data-dir``).

Everything lives in one data directory ``D`` (created mode 0700)::

    D/cluster.json   voter ids, Raft and RPC addresses, secret file — what ``status`` reads
    D/secret         the cluster secret, generated (0600) when no other secret was given
    D/v1/ …          each voter's own data dir (journal, dump, lock)
    D/v1.pid …       pid of each running voter (removed by ``down``)
    D/v1.log …       each voter's stdout/stderr (appended across restarts)

Voter ``i`` (1-based) listens for Raft on ``host:base_port+i`` and for the control RPC on
``host:base_port+100+i`` — with the default base port 7100 that is 7101.. and 7201.., the
addresses of ``docs/control_plane.md``. ``host`` must be loopback unless ``allow_remote``;
``cluster.json`` then records the *advertised* addresses (``advertise_host``, by default
``host`` or, for a wildcard ``host``, this machine's primary address — never 0.0.0.0).
Voters are detached (own session, stdin from /dev/null) so they outlive the shell or
``ray up`` ssh session that started them.

``start_voters`` is idempotent: voters whose pid file names a live ``raft-node`` process are
left alone, the others are (re)started with the addresses recorded in ``cluster.json``; it then
waits, bounded, until a leader with a quorum answers. The secret is handed to the voters as
``--secret-file`` (or, when it came from ``$LAMINARDB_RAFT_SECRET``, through their environment)
— never on a command line.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from laminardb.errors import ConfigError
from laminardb.raft._policy import (
    check_secret,
    is_loopback,
    is_unspecified,
    join_addr,
    split_addr,
)
from laminardb.raft.exceptions import InsecureConfigError

__all__ = [
    "CLUSTER_FILE",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "LaunchResult",
    "VoterProcess",
    "plan_voters",
    "primary_address",
    "read_cluster_file",
    "running_voters",
    "start_voters",
    "stop_voters",
    "wait_for_leader",
]

CLUSTER_FILE = "cluster.json"
SECRET_FILE = "secret"
DEFAULT_DATA_DIR = "~/.laminardb/raft"
DEFAULT_BASE_PORT = 7100
_RPC_OFFSET = 100
_SECRET_ENV = "LAMINARDB_RAFT_SECRET"
# Cold start of a voter (imports, key derivation) plus the first election; generous for 2 cores.
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class VoterProcess:
    """One voter of the local set: its addresses and files.

    ``raft``/``rpc`` are the addresses peers and clients use; ``raft_bind``/``rpc_bind`` what
    the voter listens on when that differs (a wildcard bind), else empty.
    """

    node_id: str
    raft: str
    rpc: str
    data_dir: str
    pid_file: str
    log_file: str
    raft_bind: str = ""
    rpc_bind: str = ""


@dataclass
class LaunchResult:
    """What :func:`start_voters` did."""

    voters: list[VoterProcess]
    started: list[str]          # ids started by this call
    already_running: list[str]  # ids that were running before
    leader: str | None          # Raft address of the leader
    secret_file: str | None
    data_dir: str

    @property
    def rpc_addresses(self) -> list[str]:
        return [v.rpc for v in self.voters]


def _data_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(os.path.expanduser(str(data_dir))).resolve()


def primary_address() -> str:
    """This machine's primary (routable) IP address: the source address of its default route.

    A UDP ``connect`` sends nothing; it only asks the kernel which interface would be used.
    Falls back to the address the host name resolves to.
    """
    # Documentation addresses (TEST-NET-1, 2001:db8::/32): routed like any other, never used.
    probes = ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9)))
    for family, probe in probes:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(probe)
                addr = s.getsockname()[0]
            if not is_loopback(addr) and not is_unspecified(addr):
                return addr
        except OSError:
            continue
    try:
        addr = socket.gethostbyname(socket.gethostname())
    except OSError:
        addr = ""
    if not addr or is_loopback(addr):
        raise ConfigError("could not find a routable address of this machine: pass "
                          "--advertise-host with the address peers and clients should use",
                          code="LDB-9020")
    return addr


def _check_host(host: str, *, allow_remote: bool, advertise_host: str | None) -> str:
    """The address to advertise for voters bound to ``host`` (refusing what is not allowed)."""
    if not is_loopback(host) and not allow_remote:
        raise InsecureConfigError(
            f"--host {host} is not loopback: the voters' Raft and RPC ports would be reachable "
            "from the network. Pass --allow-remote to mean it (and admit those ports only from "
            "the cluster's machines), or keep the default 127.0.0.1")
    if advertise_host is not None:
        if is_unspecified(advertise_host):
            raise InsecureConfigError(f"--advertise-host {advertise_host} is a wildcard; give "
                                      "the address peers and clients reach the voters at")
        if not is_loopback(advertise_host) and not allow_remote:
            raise InsecureConfigError(f"--advertise-host {advertise_host} is not loopback: "
                                      "pass --allow-remote")
        return advertise_host
    return primary_address() if is_unspecified(host) else host


def plan_voters(data_dir: str | os.PathLike[str], n: int, *, host: str = "127.0.0.1",
                base_port: int = DEFAULT_BASE_PORT,
                advertise_host: str | None = None) -> list[VoterProcess]:
    """The ``n`` voters of a local set: ids ``v1..vn``, consecutive ports from ``base_port``.

    ``advertise_host`` (default ``host``) names them in ``raft``/``rpc``; when it differs from
    ``host``, ``raft_bind``/``rpc_bind`` keep the interface they listen on.
    """
    if n < 1:
        raise ConfigError(f"--voters {n}: need at least 1 voter (3 or 5 for fault tolerance)",
                          code="LDB-9020")
    if not (0 < base_port and base_port + _RPC_OFFSET + n <= 65535):
        raise ConfigError(f"--base-port {base_port}: voter ports would exceed 65535",
                          code="LDB-9020")
    d = _data_dir(data_dir)
    adv = advertise_host or host
    bound = adv != host
    return [
        VoterProcess(
            node_id=f"v{i}",
            raft=join_addr(adv, base_port + i),
            rpc=join_addr(adv, base_port + _RPC_OFFSET + i),
            data_dir=str(d / f"v{i}"),
            pid_file=str(d / f"v{i}.pid"),
            log_file=str(d / f"v{i}.log"),
            raft_bind=join_addr(host, base_port + i) if bound else "",
            rpc_bind=join_addr(host, base_port + _RPC_OFFSET + i) if bound else "",
        )
        for i in range(1, n + 1)
    ]


def read_cluster_file(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``D/cluster.json`` as written by :func:`start_voters` (voters, secret file, host)."""
    path = _data_dir(data_dir) / CLUSTER_FILE
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"no {path}: start the voters with `laminardb cluster up --data-dir "
                          f"{data_dir}` or give --voters", code="LDB-9020") from None
    info["voters"] = [VoterProcess(**v) for v in info["voters"]]
    return info


def _write_cluster_file(d: Path, voters: list[VoterProcess], secret_file: str | None,
                        host: str, base_port: int, advertise_host: str) -> None:
    body = {"version": 1, "host": host, "advertise_host": advertise_host, "base_port": base_port,
            "secret_file": secret_file, "voters": [asdict(v) for v in voters]}
    tmp = d / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, d / CLUSTER_FILE)


# -- processes ---------------------------------------------------------------------------------


def _read_pid(pid_file: str) -> int | None:
    try:
        return int(Path(pid_file).read_text(encoding="ascii").strip())
    except (FileNotFoundError, ValueError):
        return None


def _is_voter_process(pid: int, voter: VoterProcess) -> bool:
    """``pid`` is alive (not a zombie) and is the ``raft-node`` of this voter's data dir.

    The command-line check guards against a recycled pid after a reboot or a crash.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except PermissionError:  # another user's process: not ours
        return False
    return b"raft-node" in argv and voter.data_dir.encode() in argv


def running_voters(voters: list[VoterProcess]) -> dict[str, int]:
    """Voter id → pid for the voters whose pid file names their live process."""
    out: dict[str, int] = {}
    for v in voters:
        pid = _read_pid(v.pid_file)
        if pid is not None and _is_voter_process(pid, v):
            out[v.node_id] = pid
    return out


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (a test calling start/stop in-process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _spawn(v: VoterProcess, peers: list[str], *, secret_file: str | None,
           env: dict[str, str], python: str, extra_args: tuple[str, ...]) -> int:
    Path(v.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    cmd = [python, "-m", "laminardb.raft.cli", "raft-node", "--id", v.node_id,
           "--bind", v.raft_bind or v.raft, "--peers", ",".join(peers), "--data-dir", v.data_dir,
           "--rpc-bind", v.rpc_bind or v.rpc, *extra_args]
    if v.raft_bind:
        cmd += ["--advertise-host", split_addr(v.raft)[0]]
    if any(not is_loopback(split_addr(a)[0]) for a in (v.raft, v.rpc, v.raft_bind or v.raft,
                                                         *peers)):
        cmd += ["--allow-remote"]
    if secret_file:
        cmd += ["--secret-file", secret_file]
    fd = os.open(v.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                                start_new_session=True, close_fds=True, cwd="/")
    finally:
        os.close(fd)
    Path(v.pid_file).write_text(f"{proc.pid}\n", encoding="ascii")
    return proc.pid


def _resolve_secret(d: Path, secret_file: str | None) -> tuple[str | None, str, bool]:
    """(secret file for the voters or None, the secret, generated?)."""
    if secret_file:
        path = Path(os.path.expanduser(secret_file)).resolve()
        if not path.exists():
            _generate_secret(path)
            return str(path), path.read_text(encoding="utf-8").strip(), True
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            raise ConfigError(f"secret file {path} is empty", code="LDB-9020")
        check_secret(text)
        return str(path), text, False
    env_secret = os.environ.get(_SECRET_ENV, "")
    if env_secret:
        check_secret(env_secret)
        return None, env_secret, False
    path = d / SECRET_FILE
    generated = not path.exists()
    if generated:
        _generate_secret(path)
    return str(path), path.read_text(encoding="utf-8").strip(), generated


def _generate_secret(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")


def _log_tails(voters: list[VoterProcess], n: int = 1500) -> str:
    out = []
    for v in voters:
        try:
            text = Path(v.log_file).read_text(encoding="utf-8", errors="replace")[-n:]
        except FileNotFoundError:
            text = "(no log)"
        out.append(f"--- {v.node_id} ({v.log_file})\n{text}")
    return "\n".join(out)


def wait_for_leader(rpc_addresses: list[str], secret: str, *, timeout: float,
                    voters: list[VoterProcess] | None = None) -> dict[str, Any]:
    """Poll ``status`` until a leader with a quorum answers; the status, or ``TimeoutError``."""
    from laminardb.raft.client import RaftClient

    end = time.monotonic() + timeout
    last: BaseException | str | None = None
    while True:
        try:
            with RaftClient(rpc_addresses, secret=secret, deadline=2.0) as client:
                status = client.status()
            raft = status["raft"]
            if raft.get("leader") and raft.get("has_quorum"):
                return status
            last = f"no leader yet: {raft}"
        except Exception as exc:  # noqa: BLE001 - polled, reported on timeout
            last = exc
        if voters is not None and not running_voters(voters):
            raise RuntimeError(f"every voter exited during start; last error {last!r}\n"
                               f"{_log_tails(voters)}")
        if time.monotonic() >= end:
            msg = f"no Raft leader after {timeout:.0f} s; last error {last!r}"
            if voters is not None:
                msg += "\n" + _log_tails(voters)
            raise TimeoutError(msg)
        time.sleep(0.2)


def start_voters(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *, voters: int = 3,
                 host: str = "127.0.0.1", base_port: int = DEFAULT_BASE_PORT,
                 secret_file: str | None = None, timeout: float = DEFAULT_START_TIMEOUT_S,
                 python: str | None = None, extra_args: tuple[str, ...] = (),
                 allow_remote: bool = False, advertise_host: str | None = None) -> LaunchResult:
    """Start (or complete) the local voter set in ``data_dir`` and wait for a leader.

    Voters already running are kept. A set recorded in ``cluster.json`` with other settings
    (count, host, base port) while any of it runs is an error: ``cluster down`` first.
    If no leader appears within ``timeout``, the voters this call started are stopped and
    ``TimeoutError`` carries their log tails.

    Raises:
        InsecureConfigError: a non-loopback ``host``/``advertise_host`` without
            ``allow_remote``, or a wildcard ``advertise_host``.
        WeakSecretError: the given secret is shorter than 16 bytes.
    """
    adv = _check_host(host, allow_remote=allow_remote, advertise_host=advertise_host)
    if not is_loopback(host):
        print(f"warning: the voters listen on {host} (advertised as {adv}): their Raft and RPC "
              f"ports ({base_port + 1}..{base_port + voters}, {base_port + _RPC_OFFSET + 1}.."
              f"{base_port + _RPC_OFFSET + voters}) are reachable from the network; admit "
              "them only from the cluster's machines", file=sys.stderr)
    d = _data_dir(data_dir)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    planned = plan_voters(d, voters, host=host, base_port=base_port, advertise_host=adv)
    if (d / CLUSTER_FILE).exists():
        recorded = read_cluster_file(d)
        alive = running_voters(recorded["voters"])
        if alive and [asdict(v) for v in recorded["voters"]] != [asdict(v) for v in planned]:
            raise ConfigError(
                f"voters {sorted(alive)} already run from {d} with other settings "
                f"({len(recorded['voters'])} voters on {recorded['voters'][0].raft}..): "
                f"run `laminardb cluster down --data-dir {d}` first", code="LDB-9020")
    sfile, secret, generated = _resolve_secret(d, secret_file)
    if generated:
        print(f"generated a new cluster secret in {sfile} (mode 0600)", file=sys.stderr)
    _write_cluster_file(d, planned, sfile, host, base_port, adv)

    alive = running_voters(planned)
    env = dict(os.environ)
    if sfile is None:
        env[_SECRET_ENV] = secret
    else:
        env.pop(_SECRET_ENV, None)
    peers = [v.raft for v in planned]
    started: list[str] = []
    for v in planned:
        if v.node_id not in alive:
            _spawn(v, peers, secret_file=sfile, env=env, python=python or sys.executable,
                   extra_args=tuple(extra_args))
            started.append(v.node_id)
    try:
        status = wait_for_leader([v.rpc for v in planned], secret, timeout=timeout,
                                 voters=planned)
    except BaseException:
        _stop([v for v in planned if v.node_id in started], DEFAULT_STOP_GRACE_S)
        raise
    return LaunchResult(voters=planned, started=started, already_running=sorted(alive),
                        leader=status["raft"]["leader"], secret_file=sfile, data_dir=str(d))


def _stop(voters: list[VoterProcess], grace: float) -> dict[str, str]:
    """SIGTERM the live voters, SIGKILL whatever is left after ``grace`` s; remove pid files."""
    alive = running_voters(voters)
    result = {v.node_id: "not running" for v in voters if v.node_id not in alive}
    by_id = {v.node_id: v for v in voters}
    for pid in alive.values():
        try:
            os.kill(pid, signal.SIGCONT)  # a SIGSTOPped voter would never handle SIGTERM
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace
    pending = dict(alive)
    while pending and time.monotonic() < end:
        for nid, pid in list(pending.items()):
            _reap(pid)
            if not _is_voter_process(pid, by_id[nid]):
                result[nid] = "stopped"
                del pending[nid]
        if pending:
            time.sleep(0.05)
    for nid, pid in pending.items():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_end = time.monotonic() + grace
        while _is_voter_process(pid, by_id[nid]) and time.monotonic() < kill_end:
            _reap(pid)
            time.sleep(0.05)
        result[nid] = "killed"
    for v in voters:
        Path(v.pid_file).unlink(missing_ok=True)
    return result


def stop_voters(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *,
                grace: float = DEFAULT_STOP_GRACE_S) -> dict[str, str]:
    """Stop the voters recorded in ``data_dir``: id → ``stopped|killed|not running``.

    The journals, ``cluster.json`` and the secret stay, so ``cluster up`` resumes the same
    replicated state. Without a ``cluster.json`` there is nothing to stop (empty result).
    """
    d = _data_dir(data_dir)
    if not (d / CLUSTER_FILE).exists():
        return {}
    return _stop(read_cluster_file(d)["voters"], grace)
