"""Configuration of one Raft voter: :class:`RaftNodeConfig`, and the security rules it enforces.

Entry points: ``RaftNodeConfig(...)`` / ``RaftNodeConfig.dev(...)``, ``validate()``, and
``sync_obj_conf()`` which builds pysyncobj's ``SyncObjConf``; :func:`check_secret` (the
secret rules, shared with the client and ``cluster up``).

Security rules (``docs/operations.md``, "Security model"):

* pysyncobj's wire format is pickle. With a ``password`` pysyncobj encrypts and authenticates
  every frame (Fernet) and drops frames that fail, so a stranger's pickle is never loaded. A
  voter therefore refuses to start without one, unless ``insecure_dev`` is set *and* every
  address it binds to or talks to is loopback.
* The secret must have at least ``MIN_SECRET_BYTES`` bytes (``WeakSecretError``, LDB-9030).
* Every address must be loopback unless ``allow_remote`` is set; a wildcard bind (0.0.0.0,
  ::) also needs ``advertise_host``, the address peers and clients use — never 0.0.0.0.
* Frames over ``max_frame_bytes`` are refused before they are buffered (``_transport.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pysyncobj import SyncObjConf

from laminardb.raft._policy import (
    DEFAULT_MAX_FRAME_BYTES,
    GENERATE_SECRET_HINT,
    MIN_SECRET_BYTES,
    check_secret,
    is_loopback,
    is_unspecified,
    join_addr,
    split_addr,
)
from laminardb.raft.exceptions import InsecureConfigError

__all__ = ["RaftNodeConfig", "split_addr", "is_loopback", "is_unspecified", "check_secret",
           "MIN_SECRET_BYTES", "GENERATE_SECRET_HINT"]

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


@dataclass(frozen=True)
class RaftNodeConfig:
    """Everything one voter needs. Immutable; build a new one to change anything.

    Attributes:
        node_id: human-readable voter id (shown by ``cluster status``).
        bind: ``host:port`` this voter's Raft port listens on (also its Raft identity
            unless ``advertise_host`` is set).
        peers: Raft addresses of the other voters (``bind`` itself is ignored if listed).
        data_dir: directory for the journal, the full dump and the lock file.
        rpc_bind: ``host:port`` of the authenticated control RPC.
        secret: cluster secret: RPC HMAC key and, unless ``raft_password`` is set, pysyncobj's
            password.
        raft_password: pysyncobj password if different from ``secret``.
        insecure_dev: no pysyncobj password; allowed only when every address is loopback.
        batch_append_entries: let pysyncobj batch commands per heartbeat (higher throughput
            under many concurrent clients, ~20 ms more latency per command).
        allow_remote: permit non-loopback addresses (bind, RPC bind, peers, advertise host).
        advertise_host: host peers and clients use for this voter (its Raft identity is
            ``advertise_host:<bind port>``, its announced RPC address
            ``advertise_host:<rpc port>``); required when ``bind`` is a wildcard.
        max_frame_bytes: a Raft frame declaring more is refused before it is buffered.
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
    allow_remote: bool = False
    advertise_host: str | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES

    @classmethod
    def dev(cls, *, node_id: str, bind: str, peers: tuple[str, ...], data_dir: str,
            rpc_bind: str, secret: str) -> RaftNodeConfig:
        """Loopback-only development voter without pysyncobj encryption."""
        return cls(node_id=node_id, bind=bind, peers=peers, data_dir=data_dir,
                   rpc_bind=rpc_bind, secret=secret, insecure_dev=True)

    @property
    def raft_address(self) -> str:
        """This voter's Raft identity: the address its peers list (never a wildcard)."""
        if self.advertise_host:
            return join_addr(self.advertise_host, split_addr(self.bind)[1])
        return self.bind

    @property
    def rpc_address(self) -> str:
        """The RPC address announced to clients (leader hints)."""
        if self.advertise_host:
            return join_addr(self.advertise_host, split_addr(self.rpc_bind)[1])
        return self.rpc_bind

    @property
    def other_peers(self) -> tuple[str, ...]:
        """Peers without this voter's own address."""
        return tuple(p for p in self.peers if p not in (self.bind, self.raft_address))

    @property
    def journal_file(self) -> str:
        """Path of pysyncobj's journal."""
        return os.path.join(self.data_dir, "raft.journal")

    @property
    def dump_file(self) -> str:
        """Path of pysyncobj's full dump (log compaction snapshot)."""
        return os.path.join(self.data_dir, "raft.dump")

    def validate(self) -> None:
        """Refuse configurations that would expose a voter more than asked for.

        Raises:
            InsecureConfigError: no secret; ``insecure_dev`` with a non-loopback address; a
                non-loopback address without ``allow_remote``; a wildcard bind without an
                advertised host.
            WeakSecretError: a secret shorter than ``MIN_SECRET_BYTES``.
            ValueError: malformed addresses.
        """
        if not self.secret:
            msg = (
                "a voter needs the cluster secret (LAMINARDB_RAFT_SECRET or --secret-file): it "
                "authenticates the control RPC and encrypts the Raft port; "
                + GENERATE_SECRET_HINT
            )
            raise InsecureConfigError(msg)
        addrs = [self.bind, self.rpc_bind, *self.other_peers]
        if self.advertise_host:
            addrs.append(join_addr(self.advertise_host, 0))
        exposed = [a for a in addrs if not is_loopback(split_addr(a)[0])]
        if self.insecure_dev and exposed:
            msg = (
                f"--insecure-dev leaves the pickle-based Raft port unauthenticated, so it "
                f"is only allowed on loopback; {exposed} are not loopback. Drop "
                "--insecure-dev to use the secret as Raft password"
            )
            raise InsecureConfigError(msg)
        if exposed and not self.allow_remote:
            msg = (
                f"{exposed} are not loopback: the voter would be reachable from the network. "
                "Pass --allow-remote to mean it, and admit the Raft and RPC ports only from "
                "the cluster's machines (firewall / security group)"
            )
            raise InsecureConfigError(msg)
        if self.advertise_host is not None and is_unspecified(self.advertise_host):
            msg = (f"--advertise-host {self.advertise_host!r} is a wildcard; give the address "
                   "peers and clients reach this voter at")
            raise InsecureConfigError(msg)
        for name, addr in (("--bind", self.bind), ("--rpc-bind", self.rpc_bind)):
            if is_unspecified(split_addr(addr)[0]) and not self.advertise_host:
                msg = (f"{name} {addr} listens on every interface, so it cannot be this "
                       "voter's address: pass --advertise-host with the address peers and "
                       "clients use")
                raise InsecureConfigError(msg)
        if self.max_frame_bytes < 1024 * 1024:
            msg = f"max frame of {self.max_frame_bytes} bytes is below 1 MiB; Raft needs more"
            raise InsecureConfigError(msg)
        check_secret(self.secret)
        if self.raft_password is not None:
            check_secret(self.raft_password)

    def sync_obj_conf(self, **callbacks: object) -> SyncObjConf:
        """pysyncobj configuration for this voter (journal + dump on disk, no fork).

        ``callbacks``: pysyncobj callbacks such as ``onStateChanged``.
        """
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
            **callbacks,
        )

