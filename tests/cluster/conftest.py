"""Fixtures for the cluster-launch tests: a throwaway SSH server for ``ray up`` (``local_sshd``).

How ``ray up`` reaches "this machine": the local provider sshes to ``head_ip`` (127.0.0.1) as
``auth.ssh_user`` with ``auth.ssh_private_key`` and has no port setting, so instead of taking
over port 22 (or touching ``/etc/ssh``, ``/root/.ssh``) the fixture gives Ray an
``auth.ssh_proxy_command`` that runs a real OpenSSH server in inetd mode, ``sshd -i -f CFG``,
on the ssh client's stdin/stdout. Every Ray ssh/rsync connection gets its own sshd that does
the full protocol (host key, public-key auth of the throwaway client key, session, login
shell) and exits with the connection. Nothing listens on any port, nothing is left running
once Ray's ssh ControlMaster (``ControlPersist 10s``) closes.

``CFG`` points everything into the fixture's directory: host key, ``AuthorizedKeysFile``
(holding only the generated client key), no password/keyboard auth, no PAM, and
``SetEnv HOME=<dir>/home`` whose ``.profile``/``.bashrc`` put this test run's Python
environment first on ``PATH`` — `ray up` runs its commands in a login shell, which is how
``ray`` and ``laminardb`` are found there (and how a user activates a venv for ``ray up``).
Ray also copies its bootstrap files to ``~`` = that throwaway home, not ``/root``.

sshd is installed with apt-get when missing (needs root; the test fails with the reason if it
cannot be).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Make ``tests._services`` importable however pytest was started (no tests/__init__.py).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._services.procs import pids_with_arg  # noqa: E402

_SSHD = "/usr/sbin/sshd"
_INSTALL_TIMEOUT_S = 300.0


@dataclass
class LocalSshd:
    """What ``ray up`` needs to ssh into this machine, and a way to check it by hand."""

    user: str
    private_key: Path
    proxy_command: str
    home: Path           # HOME of the ssh sessions
    config: Path         # sshd_config (its path also marks this fixture's sshd processes)

    def ssh(self, command: str, *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in a login shell through the fixture's sshd (as ray up does)."""
        return subprocess.run(
            ["ssh", "-i", str(self.private_key), "-o", "IdentitiesOnly=yes",
             "-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={os.devnull}",
             "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
             "-o", f"ProxyCommand={self.proxy_command}", f"{self.user}@127.0.0.1",
             f"bash --login -c {_quote(command)}"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def _ensure_ssh_tools() -> None:
    missing = [t for t, p in (("sshd", _SSHD), ("ssh", shutil.which("ssh")),
                              ("ssh-keygen", shutil.which("ssh-keygen")),
                              ("rsync", shutil.which("rsync"))) if not p or not os.path.exists(p)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(f"ray up needs {', '.join(missing)} (OpenSSH server/client and rsync) and "
                    "this test cannot install them (not root or no apt-get): "
                    "install openssh-server, openssh-client and rsync", pytrace=False)
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends",
           "openssh-server", "openssh-client", "rsync"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S, env=env)
    if out.returncode != 0:  # stale package lists: update once and retry
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True,
                       timeout=_INSTALL_TIMEOUT_S, env=env)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S,
                             env=env)
    if out.returncode != 0 or not os.path.exists(_SSHD):
        pytest.fail(f"could not install openssh-server/rsync:\n{out.stdout[-2000:]}\n"
                    f"{out.stderr[-2000:]}", pytrace=False)


@pytest.fixture
def local_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    """A throwaway OpenSSH server for ``ray up`` (see the module docstring)."""
    _ensure_ssh_tools()
    if os.geteuid() == 0:
        # sshd's privilege-separation directory; the package creates it only at service start.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(d / "host_ed25519")], check=True, timeout=30)
    subprocess.run([*keygen, "-f", str(d / "laminardb_local"), "-C", "laminardb-test"],
                   check=True, timeout=30)
    (d / "authorized_keys").write_text((d / "laminardb_local.pub").read_text())
    home = d / "home"
    home.mkdir(mode=0o700)
    bin_dir = os.path.dirname(sys.executable)
    profile = (f'export PATH="{bin_dir}:$PATH"\n'
               f'export PYTHONPATH="{_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
               "export RAY_USAGE_STATS_ENABLED=0\n")
    (home / ".profile").write_text(profile)
    (home / ".bashrc").write_text(profile)
    config = d / "sshd_config"
    config.write_text("\n".join([
        f"HostKey {d / 'host_ed25519'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",          # the key files live under /tmp (world-writable parent)
        "PidFile none",
        f"AllowUsers {getpass.getuser()}",
        f"SetEnv HOME={home}",
        "LogLevel ERROR",
        "",
    ]))
    check = subprocess.run([_SSHD, "-t", "-f", str(config)], capture_output=True, text=True,
                           timeout=30)
    if check.returncode != 0:
        pytest.fail(f"sshd rejects the test config: {check.stderr}", pytrace=False)
    sshd = LocalSshd(user=getpass.getuser(), private_key=d / "laminardb_local",
                     proxy_command=f"{_SSHD} -i -f {config}", home=home, config=config)
    probe = sshd.ssh("command -v ray && command -v laminardb && echo HOME=$HOME")
    if probe.returncode != 0 or f"HOME={home}" not in probe.stdout:
        pytest.fail(f"ssh to 127.0.0.1 through sshd -i failed (rc {probe.returncode}):\n"
                    f"{probe.stdout}\n{probe.stderr}", pytrace=False)
    yield sshd
    # Stragglers: sshd processes of this config still serving a lingering ssh ControlMaster.
    for pid in pids_with_arg(str(config)):
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass


