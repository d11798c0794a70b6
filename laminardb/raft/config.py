"""Configuration of one Raft voter: :class:`RaftNodeConfig`, and the security rules it enforces.

Entry points: ``RaftNodeConfig(...)`` / ``RaftNodeConfig.dev(...)``, ``validate()``, and
``sync_obj_conf()`` which builds pysyncobj's ``SyncObjConf``.

Security: pysyncobj's wire format is pickle. With a ``password`` pysyncobj encrypts and
authenticates every frame (Fernet) and drops frames that fail, so a stranger's pickle is never
loaded. A voter therefore refuses to start without one, unless ``insecure_dev`` is set *and*
every address it binds to or talks to is loopback.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from pysyncobj import SyncObjConf

from laminardb.raft.exceptions import InsecureConfigError

__all__ = ["RaftNodeConfig", "split_addr", "is_loopback"]

# Failover budget is < 2 s. Heartbeats every 20 ms and elections after 150-350 ms of silence
# give a new leader in ~0.2-0.5 s after a kill -9; Raft needs min timeout > 3 heartbeats.
_APPEND_ENTRIES_PERIOD_S = 0.02
_RAFT_MIN_TIMEOUT_S = 0.15
_RAFT_MAX_TIMEOUT_S = 0.35
# pysyncobj's default is 5 s between reconnect attempts, which would dominate a restart; a
# restarted voter should rejoin within a few heartbeats.
_CONNECTION_RETRY_S = 0.2
# Must be >= the max election timeout (pysyncobj asserts it); 1 s detects dead TCP peers fast.
_CONNECTION_TIMEOUT_S = 1.0
# A leader that cannot reach a majority steps down after this long (default 30 s); acting on
# ownership never trusts leadership anyway, this only shortens misleading status output.
_LEADER_FALLBACK_S = 2.0
# pysyncobj defaults: snapshot after 5000 entries or 300 s. Kept, but configurable so tests
# can force compaction and prove the dump file restores state.
_COMPACTION_MIN_ENTRIES = 5000
_COMPACTION_MIN_TIME_S = 300.0
# How long a voter waits for one command to commit before telling the client to retry.
_COMMIT_TIMEOUT_S = 3.0


def split_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:port``)."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        msg = f"address {addr!r} is not host:port"
        raise ValueError(msg)
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RaftNodeConfig:
    """Everything one voter needs. Immutable; build a new one to change anything.

    Attributes:
        node_id: human-readable voter id (shown by ``cluster status``).
        bind: ``host:port`` of this voter's Raft port (also its Raft identity).
        peers: Raft addresses of the other voters (``bind`` itself is ignored if listed).
        data_dir: directory for the journal, the full dump and the lock file.
        rpc_bind: ``host:port`` of the authenticated control RPC.
        secret: cluster secret: RPC HMAC key and, unless ``raft_password`` is set, pysyncobj's
            password.
        raft_password: pysyncobj password if different from ``secret``.
        insecure_dev: no pysyncobj password; allowed only when every address is loopback.
        batch_append_entries: let pysyncobj batch commands per heartbeat (higher throughput
            under many concurrent clients, ~20 ms more latency per command).
    """

    node_id: str
    bind: str
    peers: tuple[str, ...]
    data_dir: str
    rpc_bind: str
    secret: str = field(repr=False)
    raft_password: str | None = field(default=None, repr=False)
    insecure_dev: bool = False
    batch_append_entries: bool = False
    append_entries_period: float = _APPEND_ENTRIES_PERIOD_S
    raft_min_timeout: float = _RAFT_MIN_TIMEOUT_S
    raft_max_timeout: float = _RAFT_MAX_TIMEOUT_S
    compaction_min_entries: int = _COMPACTION_MIN_ENTRIES
    compaction_min_time: float = _COMPACTION_MIN_TIME_S
    commit_timeout: float = _COMMIT_TIMEOUT_S

    @classmethod
    def dev(cls, *, node_id: str, bind: str, peers: tuple[str, ...], data_dir: str,
            rpc_bind: str, secret: str) -> RaftNodeConfig:
        """Loopback-only development voter without pysyncobj encryption."""
        return cls(node_id=node_id, bind=bind, peers=peers, data_dir=data_dir,
                   rpc_bind=rpc_bind, secret=secret, insecure_dev=True)

    @property
    def other_peers(self) -> tuple[str, ...]:
        """Peers without this voter's own address."""
        return tuple(p for p in self.peers if p != self.bind)

    @property
    def journal_file(self) -> str:
        """Path of pysyncobj's journal."""
        return os.path.join(self.data_dir, "raft.journal")

    @property
    def dump_file(self) -> str:
        """Path of pysyncobj's full dump (log compaction snapshot)."""
        return os.path.join(self.data_dir, "raft.dump")

    def validate(self) -> None:
        """Refuse configurations that would expose an unauthenticated pickle port.

        Raises:
            InsecureConfigError: no secret, or ``insecure_dev`` with a non-loopback address.
            ValueError: malformed addresses.
        """
        if not self.secret:
            msg = (
                "a voter needs the cluster secret (LAMINARDB_RAFT_SECRET or --secret-file): it "
                "authenticates the control RPC and encrypts the Raft port"
            )
            raise InsecureConfigError(msg)
        addrs = (self.bind, self.rpc_bind, *self.other_peers)
        hosts = [split_addr(a)[0] for a in addrs]
        if self.insecure_dev:
            exposed = [a for a, h in zip(addrs, hosts, strict=True) if not is_loopback(h)]
            if exposed:
                msg = (
                    f"--insecure-dev leaves the pickle-based Raft port unauthenticated, so it "
                    f"is only allowed on loopback; {exposed} are not loopback. Drop "
                    "--insecure-dev to use the secret as Raft password"
                )
                raise InsecureConfigError(msg)

    def sync_obj_conf(self) -> SyncObjConf:
        """pysyncobj configuration for this voter (journal + dump on disk, no fork)."""
        password = None if self.insecure_dev else (self.raft_password or self.secret)
        return SyncObjConf(
            password=password,
            journalFile=self.journal_file,
            fullDumpFile=self.dump_file,
            useFork=False,
            # Without bindAddress pysyncobj listens on 0.0.0.0: always bind where configured.
            bindAddress=self.bind,
            appendEntriesPeriod=self.append_entries_period,
            raftMinTimeout=self.raft_min_timeout,
            raftMaxTimeout=self.raft_max_timeout,
            appendEntriesUseBatch=self.batch_append_entries,
            connectionRetryTime=_CONNECTION_RETRY_S,
            connectionTimeout=max(_CONNECTION_TIMEOUT_S, self.raft_max_timeout),
            leaderFallbackTimeout=_LEADER_FALLBACK_S,
            logCompactionMinEntries=self.compaction_min_entries,
            logCompactionMinTime=self.compaction_min_time,
            dynamicMembershipChange=False,
        )
