"""Spark's standalone cluster manager on a Ray cluster: one master on the head node, one worker
per node, started by ``ray up`` (``laminardb spark up``) and used by the checkpoint coordinator.

Entry points: :func:`start_spark` (``laminardb spark up``), :func:`stop_spark_daemons`
(``laminardb spark down``), :func:`read_spark_file` and :func:`spark_status` (``laminardb
spark status`` and ``laminardb cluster status --ray``), :func:`coordinator_conf` (what the
coordinator's SparkSession is built with).

Why standalone and not RayDP: RayDP 1.6.5, its latest release, needs pyspark <= 3.5.7, and
laminardb runs pyspark 4.3 (docs/coordinator.md has the measured comparison). A standalone
worker is a plain JVM that Ray does not schedule, so its cores are taken out of Ray's count
(``ray start --num-cpus``, see ``cluster_configs/``) instead of shared with the actors.

Everything lives in one data directory ``D`` (mode 0700)::

    D/spark.json         master URL, web UI, secret file, this node's worker — what readers use
    D/secret             the shared secret (0600): Spark's RPC authentication, on every daemon
    D/spark.properties   the daemons' properties (0600; holds the secret, never a command line)
    D/master.pid|log     the master (head node only)
    D/worker.pid|log     this node's worker; D/work: its executors' scratch space

Security: the master and the workers authenticate every RPC with the secret
(``spark.authenticate``); the REST submission server and the UI's kill links are off; every
port binds to ``host``, loopback unless ``allow_remote``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from laminardb.errors import ConfigError
from laminardb.raft._policy import is_loopback
from laminardb.raft.launch import _reap
from laminardb.spark.exceptions import SparkDaemonError
from laminardb.spark.resources import worker_cores, worker_memory_mb

__all__ = [
    "DEFAULT_DATA_DIR",
    "coordinator_conf",
    "read_spark_file",
    "spark_status",
    "start_spark",
    "stop_spark_daemons",
]

DEFAULT_DATA_DIR = "~/.laminardb/spark"
SPARK_FILE = "spark.json"
DEFAULT_MASTER_PORT = 7077
DEFAULT_WEBUI_PORT = 8090  # not Spark's 8080: Ray's dashboard agents often sit near it
_START_TIMEOUT_S = 60.0  # a JVM start plus the worker's registration, on 2 busy cores
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def _dir(data_dir: str | os.PathLike[str]) -> Path:
    path = Path(os.path.expanduser(os.fspath(data_dir)))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def spark_home() -> str:
    """The Spark distribution inside the pyspark wheel (its ``bin/spark-class`` and jars)."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _secret(d: Path, secret_file: str | None) -> Path:
    path = Path(secret_file) if secret_file else d / "secret"
    if not path.exists():
        old = os.umask(0o077)
        try:
            path.write_text(secrets.token_hex(32))
        finally:
            os.umask(old)
    if path.stat().st_mode & 0o077:
        raise ConfigError(f"the Spark secret file {path} is readable by others: run chmod 600 {path}")
    return path


def _properties(d: Path, secret: Path, host: str) -> Path:
    """The daemons' properties file: the secret stays off every command line."""
    path = d / "spark.properties"
    lines = ["spark.authenticate true",
             f"spark.authenticate.secret {secret.read_text().strip()}",
             "spark.master.rest.enabled false",
             "spark.ui.killEnabled false",
             f"spark.driver.host {host}",
             "spark.worker.cleanup.enabled true"]
    old = os.umask(0o077)
    try:
        path.write_text("\n".join(lines) + "\n")
    finally:
        os.umask(old)
    return path


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"org.apache.spark.deploy" in cmdline else None


def _spawn(d: Path, name: str, args: list[str], host: str) -> int:
    env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP=host,
               SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(d))
    log = open(d / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    finally:
        log.close()
    (d / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _wait(what: str, ok, d: Path, log: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.3)
    tail = (d / log).read_text(errors="replace")[-2000:] if (d / log).exists() else ""
    raise SparkDaemonError(f"the Spark {what} did not come up within {timeout:.0f} s; "
                           f"its log ({d / log}) ends with:\n{tail}")


def start_spark(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *, host: str = "127.0.0.1",
                master: str | None = None, master_port: int = DEFAULT_MASTER_PORT,
                webui_port: int = DEFAULT_WEBUI_PORT, cores: int | None = None,
                memory_mb: int | None = None, secret_file: str | None = None,
                allow_remote: bool = False, timeout: float = _START_TIMEOUT_S) -> dict[str, Any]:
    """Start this node's Spark daemons (idempotent: running ones are kept) and wait for the
    worker to register. ``master=None``: this is the head node, start the master here; else
    ``spark://host:port`` of the head's master (workers on other nodes).

    Returns what ``spark.json`` records.
    """
    if not is_loopback(host) and not allow_remote:
        raise ConfigError(f"Spark would listen on {host}, not loopback: pass --allow-remote "
                          "(and bind a private interface only)")
    d = _dir(data_dir)
    secret = _secret(d, secret_file)
    props = _properties(d, secret, host)
    url = master or f"spark://{host}:{master_port}"
    if master is None and _pid(d / "master.pid") is None:
        _spawn(d, "master", [_MASTER_CLASS, "--host", host, "--port", str(master_port),
                             "--webui-port", str(webui_port), "--properties-file", str(props)], host)
        _wait("master", lambda: _port_open(host, master_port), d, "master.log", timeout)
    n_cores, mem = cores or worker_cores(), memory_mb or worker_memory_mb()
    if _pid(d / "worker.pid") is None:
        (d / "work").mkdir(mode=0o700, exist_ok=True)
        _spawn(d, "worker", [_WORKER_CLASS, "--host", host, "--cores", str(n_cores),
                             "--memory", f"{mem}m", "--webui-port", "0",
                             "--work-dir", str(d / "work"), "--properties-file", str(props), url], host)
    doc = {"master": url, "webui": f"http://{host}:{webui_port}" if master is None else None,
           "secret_file": str(secret), "host": host,
           "worker": {"cores": n_cores, "memory_mb": mem}}
    old = read_spark_file(d)
    if master is not None and old and old.get("webui"):
        doc["webui"] = old["webui"]
    (d / SPARK_FILE).write_text(json.dumps(doc, indent=2))
    if doc["webui"]:
        _wait("worker", lambda: _alive_workers(doc["webui"]) >= 1, d, "worker.log", timeout)
    return doc


def stop_spark_daemons(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *,
                       grace: float = 10.0) -> dict[str, str]:
    """Stop the daemons this node's ``spark up`` started: name → what happened."""
    d = Path(os.path.expanduser(os.fspath(data_dir)))
    out: dict[str, str] = {}
    for name in ("worker", "master"):
        pid = _pid(d / f"{name}.pid")
        if pid is None:
            continue
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _pid(d / f"{name}.pid") is not None:
            _reap(pid)
            time.sleep(0.2)
        if _pid(d / f"{name}.pid") is not None:
            os.killpg(pid, signal.SIGKILL)
            _reap(pid)
            out[name] = "killed"
        else:
            out[name] = "stopped"
        (d / f"{name}.pid").unlink(missing_ok=True)
    return out


def read_spark_file(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR) -> dict[str, Any] | None:
    path = Path(os.path.expanduser(os.fspath(data_dir))) / SPARK_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _master_json(webui: str, timeout: float = 2.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"{webui}/json/", timeout=timeout) as r:  # noqa: S310 - our own UI
        return json.loads(r.read())


def _alive_workers(webui: str) -> int:
    try:
        return sum(w.get("state") == "ALIVE" for w in _master_json(webui)["workers"])
    except (OSError, ValueError, KeyError):
        return 0


def spark_status(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR) -> dict[str, Any] | None:
    """The standalone cluster as its master sees it: workers (cores, memory, state) and the
    running applications with their executors' cores; None when no ``spark up`` ran here;
    ``{"master": url, "error": …}`` when the master does not answer."""
    doc = read_spark_file(data_dir)
    if doc is None or not doc.get("webui"):
        return None
    try:
        m = _master_json(doc["webui"])
    except (OSError, ValueError) as exc:
        return {"master": doc["master"], "error": f"the Spark master does not answer: {exc}"}
    workers = [{"host": w.get("host"), "state": w.get("state"), "cores": w.get("cores"),
                "cores_used": w.get("coresused"), "memory_mb": w.get("memory"),
                "memory_used_mb": w.get("memoryused")} for w in m.get("workers", [])]
    apps = [{"name": a.get("name"), "cores": a.get("cores"),
             "memory_per_executor_mb": a.get("memoryperexecutor", a.get("memoryperslave")),
             "state": a.get("state")} for a in m.get("activeapps", [])]
    return {"master": doc["master"], "status": m.get("status"), "workers": workers,
            "cores": m.get("cores"), "cores_used": m.get("coresused"), "applications": apps}


def coordinator_conf(data_dir: str | os.PathLike[str] | None = None) -> dict[str, str] | None:
    """SparkSession settings for the standalone cluster ``spark up`` started on this node, or
    None when there is none (or its master does not answer): the caller then runs
    ``local[*]``. The secret goes by file (``spark.authenticate.secret.file``), never in the
    settings themselves, which pyspark puts on the JVM's command line."""
    if data_dir is None:
        data_dir = os.environ.get("LAMINARDB_SPARK_DIR", DEFAULT_DATA_DIR)
    doc = read_spark_file(data_dir)
    if doc is None or not doc.get("webui") or _alive_workers(doc["webui"]) == 0:
        return None
    mem = int(doc.get("worker", {}).get("memory_mb", 1024))
    return {"spark.master": doc["master"], "spark.authenticate": "true",
            "spark.authenticate.secret.file": doc["secret_file"],
            "spark.executor.memory": f"{max(512, mem - 300)}m",
            "spark.driver.host": doc.get("host", "127.0.0.1")}
