"""Process and port utilities shared by the service starters.

Entry points: :func:`free_port`, :func:`repo_env` (environment for child Python processes),
:func:`wait_until` (the bounded wait every test uses), :func:`kill_proc`,
:func:`pids_with_arg`, :func:`descendants` and :func:`port_busy`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]

T = TypeVar("T")

# How long a SIGTERMed child gets to exit before SIGKILL.
_TERM_GRACE_S = 3.0


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A currently free loopback port (TCP by default, ``socket.SOCK_DGRAM`` for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def repo_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


def wait_until(fn: Callable[[], T], *, timeout: float, interval: float = 0.05,
               what: str = "condition") -> T:
    """Poll ``fn`` until it returns a truthy value; raise ``TimeoutError`` after ``timeout`` s.

    Exceptions raised by ``fn`` count as "not yet" and are reported on timeout.
    """
    end = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polled condition, reported on timeout
            last = exc
        if time.monotonic() >= end:
            msg = f"timed out after {timeout:.1f} s waiting for {what}; last error: {last!r}"
            raise TimeoutError(msg)
        time.sleep(interval)


def kill_proc(proc: subprocess.Popen, *, hard: bool = False) -> None:
    """Stop ``proc`` (SIGCONT first, in case it is stopped), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        proc.wait(timeout=_TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=_TERM_GRACE_S)
    except ProcessLookupError:
        pass


def pids_with_arg(*markers: str) -> list[int]:
    """Pids (other than this one) whose command line contains every one of ``markers``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read()
            if all(m.encode() in argv for m in markers):
                out.append(int(entry))
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def process_alive(pid: int) -> bool:
    """Is ``pid`` running (not gone, not a zombie waiting to be reaped)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def port_busy(port: int) -> bool:
    """Whether a TCP port on loopback is taken (bind fails)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def listening_sockets(pids: set[int]) -> list[tuple[str, int]]:
    """(local address, pid) of every listening TCP socket of ``pids`` (from ``ss``)."""
    import re

    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
    return [(line.split()[3], pid) for line in out.splitlines()
            for pid in map(int, re.findall(r"pid=(\d+),", line)) if pid in pids]


def is_loopback_address(addr: str) -> bool:
    """``host:port`` (as ``ss`` prints it) is on a loopback interface."""
    host = addr.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
    return host.startswith("127.") or host == "::1"

