"""Start real PostgreSQL and MariaDB servers on loopback, each with its own data directory.

Entry points: :func:`start_postgres` → :class:`Postgres` and :func:`start_mariadb` →
:class:`MariaDB`, both with ``.dsn`` / connection parameters and ``.stop()``. The session
fixtures ``postgres_server`` and ``mariadb_server`` (``fixtures.py``) wrap them.

The servers come from Debian's packages (``postgresql``, ``mariadb-server``; ``.ci/run``
installs them). PostgreSQL refuses to run as root, so as root its ``initdb`` and ``postgres``
run as the package's ``postgres`` user (``runuser``). Both servers are configured for change
data capture: PostgreSQL with ``wal_level = logical``, MariaDB with a row-based binlog and GTIDs.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests._services.procs import free_port, kill_proc, process_alive, wait_until

__all__ = ["MariaDB", "Postgres", "mariadb_available", "postgres_available", "start_mariadb",
           "start_postgres"]

_START_TIMEOUT_S = 60.0


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def postgres_available() -> bool:
    return bool(_pg_bin("initdb") and _pg_bin("postgres"))


def mariadb_available() -> bool:
    return bool(shutil.which("mariadbd") or shutil.which("mysqld")) and bool(
        shutil.which("mariadb-install-db") or shutil.which("mysql_install_db"))


def _as_user(user: str) -> list[str]:
    """The command prefix that runs a server as ``user`` when we are root (else nothing)."""
    if os.geteuid() != 0:
        return []
    pwd.getpwnam(user)  # KeyError: the package's user is missing
    return ["runuser", "-u", user, "--"]


def _owned_tempdir(prefix: str, user: str) -> Path:
    """A fresh directory under /tmp that ``user`` owns (a root-owned pytest tmp dir is not
    traversable by a server running as another user)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o700)
    return path


def _create_database(server, prefix: str, quote: str) -> str:
    """``CREATE DATABASE`` under a name no other test of this session uses; its name."""
    name = f"{prefix}_{len(server._made)}_{os.getpid()}_{int(time.time() * 1000) % 1_000_000}"
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {quote}{name}{quote}")
    finally:
        conn.close()
    server._made.append(name)
    return name


@dataclass
class Postgres:
    """A running PostgreSQL server: superuser ``postgres``, trust auth on loopback."""

    host: str
    port: int
    proc: subprocess.Popen
    data_dir: Path
    user: str = "postgres"
    dbname: str = "postgres"
    _made: list[str] = field(default_factory=list)

    @property
    def dsn(self) -> str:
        """A libpq connection string for the superuser."""
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    def connect(self, dbname: str | None = None):
        """A psycopg2 connection in autocommit mode."""
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                dbname=dbname or self.dbname, connect_timeout=10)
        conn.autocommit = True
        return conn

    def create_database(self, prefix: str = "ldb") -> str:
        """A fresh database; its name. Tests use one each so they never see each other's tables."""
        return _create_database(self, prefix, '"')

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def log(self) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL if it lingers; the data directory is removed.

        The signals go to the server's process group: as root the server runs under
        ``runuser``, which does not pass SIGINT on, and killing only ``runuser`` would leave
        the server running."""
        server = self._postmaster_pid()

        def gone() -> bool:
            return not process_alive(server) if server else self.proc.poll() is not None

        for sig in (signal.SIGINT, signal.SIGKILL):
            if gone():
                break
            try:
                os.killpg(self.proc.pid, sig)  # runuser and the server share the group
            except ProcessLookupError:
                break
            try:
                wait_until(gone, timeout=15, interval=0.05, what="PostgreSQL to stop")
                break
            except TimeoutError:
                continue
        if self.proc.poll() is None:
            kill_proc(self.proc, hard=True)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_postgres() -> Postgres:
    """initdb a fresh cluster and start it on a free loopback port, ready for logical replication."""
    initdb, postgres = _pg_bin("initdb"), _pg_bin("postgres")
    if not (initdb and postgres):
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")
    base = _owned_tempdir("ldb-pg-", "postgres")
    data = base / "data"
    prefix = _as_user("postgres")
    subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync", "-E", "UTF8", "--locale=C"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    port = free_port()
    log = open(base / "server.log", "wb")  # noqa: SIM115 - the server writes it while it runs
    proc = subprocess.Popen(
        [*prefix, postgres, "-D", str(data), "-p", str(port), "-k", str(base),
         "-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical",
         "-c", "max_replication_slots=50", "-c", "max_wal_senders=50", "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
         "-c", "shared_buffers=64MB"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    server = Postgres(host="127.0.0.1", port=port, proc=proc, data_dir=base)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited: {server.log()}")
        server.connect().close()
        return True

    try:
        wait_until(ready, timeout=_START_TIMEOUT_S, interval=0.1, what="PostgreSQL to accept connections")
    except Exception:
        server.stop()
        raise
    return server


@dataclass
class MariaDB:
    """A running MariaDB server with a row-based binlog; user ``ldb`` / ``ldb`` has every
    privilege, replication included."""

    host: str
    port: int
    proc: subprocess.Popen
    base_dir: Path
    user: str = "ldb"
    password: str = "ldb"
    _made: list[str] = field(default_factory=list)

    def connect(self, database: str | None = None):
        """A PyMySQL connection in autocommit mode."""
        import pymysql

        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               database=database, autocommit=True, connect_timeout=10)

    def create_database(self, prefix: str = "ldb") -> str:
        """A fresh database; its name (as ``Postgres.create_database``)."""
        return _create_database(self, prefix, "`")

    def log(self) -> str:
        path = self.base_dir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        kill_proc(self.proc)
        shutil.rmtree(self.base_dir, ignore_errors=True)


def start_mariadb() -> MariaDB:
    """Install a fresh data directory and start MariaDB on a free loopback port."""
    server_bin = shutil.which("mariadbd") or shutil.which("mysqld")
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if not (server_bin and install):
        raise RuntimeError("MariaDB is not installed: apt-get install mariadb-server (.ci/run does)")
    base = _owned_tempdir("ldb-mariadb-", "mysql")
    data, sock = base / "data", base / "mysqld.sock"
    run_as = ["--user=mysql"] if os.geteuid() == 0 else []
    subprocess.run([install, "--no-defaults", f"--datadir={data}", *run_as,
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)
    port = free_port()
    log = open(base / "server.log", "wb")  # noqa: SIM115 - the server writes it while it runs
    proc = subprocess.Popen(
        [server_bin, "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
         "--bind-address=127.0.0.1", *run_as, f"--pid-file={base / 'mysqld.pid'}",
         f"--log-bin={base / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
         "--server-id=1", "--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0",
         "--innodb-buffer-pool-size=64M", "--skip-name-resolve", "--max-connections=200"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    server = MariaDB(host="127.0.0.1", port=port, proc=proc, base_dir=base)

    def grant() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"mariadbd exited: {server.log()}")
        import pymysql

        root = pymysql.connect(unix_socket=str(sock), user="root", autocommit=True, connect_timeout=5)
        try:
            with root.cursor() as cur:
                cur.execute("CREATE USER IF NOT EXISTS 'ldb'@'%' IDENTIFIED BY 'ldb'")
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'ldb'@'%' WITH GRANT OPTION")
        finally:
            root.close()
        server.connect().close()
        return True

    try:
        wait_until(grant, timeout=_START_TIMEOUT_S, interval=0.2, what="MariaDB to accept connections")
    except Exception:
        server.stop()
        raise
    return server
