"""Command-line entry points of the control plane: ``raft-node`` and ``cluster status|plan|evict|drop|up|down``.

``laminardb/cli/commands.py`` calls :func:`register` to add these to the main parser; until then (and
in tests) run ``python -m laminardb.raft.cli ...`` (:func:`main`). Every command is a thin
layer over importable functions (``run_node``, ``RaftClient``, ``plan_assignment``).

The cluster secret is read from ``--secret-file`` or the ``LAMINARDB_RAFT_SECRET`` environment
variable — never from the command line, where ``ps`` would show it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from laminardb.errors import LaminarError
from laminardb.raft.plan import DEFAULT_VNODES, plan_assignment, vnode_ranges

__all__ = ["register", "main", "SECRET_ENV"]

SECRET_ENV = "LAMINARDB_RAFT_SECRET"
_DEFAULT_BIND = "127.0.0.1:7100"
_DEFAULT_RPC_BIND = "127.0.0.1:7200"


def _read_secret(args: argparse.Namespace) -> str:
    if getattr(args, "secret_file", None):
        with open(args.secret_file, encoding="utf-8") as fh:
            return fh.read().strip()
    return os.environ.get(SECRET_ENV, "")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _add_secret(p: argparse.ArgumentParser) -> None:
    p.add_argument("--secret-file", help=f"file holding the cluster secret (else ${SECRET_ENV})")


def _add_remote(p: argparse.ArgumentParser, *, voter: bool) -> None:
    p.add_argument("--allow-remote", action="store_true",
                   help="allow binding a non-loopback interface (the Raft and RPC ports become "
                        "reachable from the network: firewall them to the cluster)")
    p.add_argument("--advertise-host", default=None,
                   help="address peers and clients use for "
                        + ("this voter (required with a wildcard --bind)" if voter else
                           "the voters (default: --host, or this machine's primary address "
                           "when --host is 0.0.0.0/::)"))


def _add_frame_cap(p: argparse.ArgumentParser) -> None:
    from laminardb.raft._policy import DEFAULT_MAX_FRAME_BYTES

    mb = DEFAULT_MAX_FRAME_BYTES / 1024 / 1024
    p.add_argument("--max-frame-mb", type=float, default=mb,
                   help=f"largest Raft frame accepted from a peer, in MiB (default {mb:g}); "
                        "larger declared frames close the connection before being buffered")


def _add_log_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-format", choices=["text", "json"], default=None,
                   help="voter log format (default $LAMINARDB_LOG_FORMAT, else text)")


def _status_timeout() -> float:
    from laminardb.raft.status import DEFAULT_VOTER_TIMEOUT_S

    return DEFAULT_VOTER_TIMEOUT_S


# -- raft-node ---------------------------------------------------------------------------------


def _cmd_raft_node(args: argparse.Namespace) -> int:
    from laminardb.raft._log import configure
    from laminardb.raft.config import RaftNodeConfig
    from laminardb.raft.node import run_node

    configure(args.log_format, level=getattr(logging, args.log_level.upper()))
    config = RaftNodeConfig(
        node_id=args.id,
        bind=args.bind,
        peers=tuple(_csv(args.peers)),
        data_dir=args.data_dir,
        rpc_bind=args.rpc_bind,
        secret=_read_secret(args),
        insecure_dev=args.insecure_dev,
        batch_append_entries=args.batch_append_entries,
        compaction_min_entries=args.compaction_min_entries,
        allow_remote=args.allow_remote,
        advertise_host=args.advertise_host,
        max_frame_bytes=int(args.max_frame_mb * 1024 * 1024),
    )
    return run_node(config)


# -- cluster status / plan -------------------------------------------------------------------


def _voters_and_secret(args: argparse.Namespace) -> list[str]:
    """Voter RPC addresses: ``--voters``, else the ``cluster.json`` of ``--data-dir`` (which also
    names the secret file unless one is given), else ``$LAMINARDB_RAFT_VOTERS``."""
    voters = args.voters
    if voters is None and args.data_dir:
        # The voters `cluster up --data-dir D` started: addresses (and secret) from D/cluster.json.
        from laminardb.raft.launch import read_cluster_file

        info = read_cluster_file(args.data_dir)
        voters = ",".join(v.rpc for v in info["voters"])
        if not args.secret_file and not os.environ.get(SECRET_ENV) and info.get("secret_file"):
            args.secret_file = info["secret_file"]
    if voters is None:
        voters = os.environ.get("LAMINARDB_RAFT_VOTERS", _DEFAULT_RPC_BIND)
    return _csv(voters)


def _client(args: argparse.Namespace) -> Any:
    from laminardb.raft.client import RaftClient

    voters = _voters_and_secret(args)
    return RaftClient(voters, secret=_read_secret(args), deadline=args.timeout)


def _cmd_status(args: argparse.Namespace) -> int:
    from laminardb.raft.status import cluster_status, format_status

    if args.ray is not None:  # the databases in the Ray cluster (and Raft only if asked for)
        from laminardb.cluster.admin import databases_status, format_databases

        dbs = databases_status(args.ray)
        raft_named = args.voters or args.data_dir or os.environ.get("LAMINARDB_RAFT_VOTERS")
        if not raft_named:
            print(json.dumps(dbs, indent=2, sort_keys=True, default=str) if args.json else format_databases(dbs))
            return 0
        print(json.dumps(dbs, indent=2, sort_keys=True, default=str) if args.json else format_databases(dbs))
    voters = _voters_and_secret(args)
    status = cluster_status(voters, secret=_read_secret(args), timeout=args.voter_timeout)
    print(json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(status))
    # 0: a leader with a quorum answered (the cluster serves); 1: voters answered, but none
    # leads a quorum. (No voter answering raises: exit code 2 from main().)
    return 0 if status["quorum"] else 1


def compute_plan(snapshot: dict[str, Any], *, source: str, members: list[str] | None,
                 vnodes: int | None) -> dict[str, Any]:
    """What ``commit_plan`` would do now: the same pure function the state machine runs."""
    src = snapshot["sources"].get(source)
    count = src["vnodes"] if src else (vnodes or DEFAULT_VNODES)
    current = dict(enumerate(src["owner"])) if src else {}
    nodes = set(snapshot["nodes"])
    live = sorted(nodes if members is None else set(members) & nodes)
    plan = plan_assignment(count, members=live, current=current)
    return {"source": source, "vnodes": count, "exists": src is not None, "members": live,
            "moves": [[m.vnode, m.src, m.dst] for m in plan.moves], "load": plan.load(),
            "cluster_epoch": snapshot["cluster_epoch"]}


def _cmd_plan(args: argparse.Namespace) -> int:
    with _client(args) as client:
        snap = client.ownership(barrier=True)
        plan = compute_plan(snap, source=args.source,
                            members=_csv(args.members) if args.members else None,
                            vnodes=args.vnodes)
        if args.commit:
            plan["committed"] = client.commit_plan(
                args.source, members=plan["members"],
                vnode_count=None if plan["exists"] else plan["vnodes"],
                expected_cluster_epoch=plan["cluster_epoch"])
    if args.json:
        print(json.dumps(plan, indent=2, sort_keys=True))
        return 0
    print(f"source {plan['source']!r} over {len(plan['members'])} members "
          f"(cluster epoch {plan['cluster_epoch']}): {len(plan['moves'])} vnodes move")
    moves: dict[tuple[str, str], list[int]] = {}
    for v, src, dst in plan["moves"]:
        moves.setdefault((src or "(unowned)", dst or "(unowned)"), []).append(v)
    for (src, dst), vs in sorted(moves.items()):
        print(f"  {src:>16} -> {dst:<16} {len(vs):>4} vnodes  {vnode_ranges(vs)}")
    print("target load: " + ", ".join(f"{m}={n}" for m, n in sorted(plan["load"].items())))
    if args.commit:
        print(f"committed at cluster epoch {plan['committed']['cluster_epoch']}")
    return 0


# -- cluster up / down -----------------------------------------------------------------------


def _cmd_drop(args: argparse.Namespace) -> int:
    from laminardb.cluster.admin import drop

    found = drop(args.ray, args.database)
    print(json.dumps({"dropped": args.database, "found": found}) if args.json
          else (f"dropped database {args.database}" if found else f"no database {args.database!r}"))
    return 0 if found else 1


def _cmd_scale(args: argparse.Namespace) -> int:
    from laminardb.cluster.admin import scale

    done = scale(args.ray, args.database, args.actors)
    print(json.dumps(done, sort_keys=True, default=str) if args.json
          else f"database {args.database}: {done['previous']} → {done['actors']} actor(s), "
               f"paused {done['pause_s']} s")
    return 0


def _cmd_evict(args: argparse.Namespace) -> int:
    """Deregister one member through the Raft log (``RaftClient.deregister_node``)."""
    with _client(args) as client:
        released = client.deregister_node(args.member)
    print(json.dumps({"evicted": args.member, "vnodes_released": released}) if args.json
          else f"evicted {args.member}: {released} vnodes released (their epochs rose)")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from laminardb.raft.launch import start_voters

    try:
        result = start_voters(args.data_dir, voters=args.voters, host=args.host,
                              base_port=args.base_port, secret_file=args.secret_file,
                              timeout=args.timeout, allow_remote=args.allow_remote,
                              advertise_host=args.advertise_host,
                              extra_args=_voter_flags(args))
    except (TimeoutError, RuntimeError) as exc:  # no leader: the message carries the logs
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for v in result.voters:
        state = "running" if v.node_id in result.already_running else "started"
        role = "leader" if v.raft == result.leader else "voter"
        print(f"{v.node_id:<4} raft {v.raft:<21} rpc {v.rpc:<21} {state:<8} {role}")
    print(f"voters: {','.join(result.rpc_addresses)}")
    print(f"data dir: {result.data_dir}  (laminardb cluster status --data-dir {result.data_dir})")
    return 0


def _voter_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """Flags of ``cluster up`` passed on to every voter it starts."""
    out: tuple[str, ...] = ("--max-frame-mb", f"{args.max_frame_mb:g}")
    if args.log_format:
        out += ("--log-format", args.log_format)
    return out


def _cmd_down(args: argparse.Namespace) -> int:
    from laminardb.raft.launch import stop_voters

    result = stop_voters(args.data_dir, grace=args.grace)
    if not result:
        print(f"no voters recorded in {args.data_dir}")
    for nid, what in sorted(result.items()):
        print(f"{nid:<4} {what}")
    return 0


# -- registration --------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``raft-node`` and ``cluster {status,plan,up,down}`` to the main parser's subcommands."""
    node = subparsers.add_parser("raft-node", help="run one Raft voter of the control plane")
    node.add_argument("--id", required=True, help="voter id shown in cluster status")
    node.add_argument("--bind", default=_DEFAULT_BIND, help="Raft host:port (default loopback)")
    node.add_argument("--peers", default="", help="comma-separated Raft host:port of all voters")
    node.add_argument("--data-dir", required=True, help="journal, dump and lock file directory")
    node.add_argument("--rpc-bind", default=_DEFAULT_RPC_BIND, help="control RPC host:port")
    node.add_argument("--insecure-dev", action="store_true",
                      help="no Raft password (loopback only; the RPC still needs the secret)")
    node.add_argument("--batch-append-entries", action="store_true",
                      help="batch commands per heartbeat: more throughput, more latency")
    node.add_argument("--compaction-min-entries", type=int, default=5000,
                      help="log entries before a snapshot (pysyncobj logCompactionMinEntries)")
    _add_remote(node, voter=True)
    _add_frame_cap(node)
    _add_log_format(node)
    node.add_argument("--log-level", default="info", choices=["debug", "info", "warning"],
                      help="level of the laminardb.raft logger (default info)")
    _add_secret(node)
    node.set_defaults(func=_cmd_raft_node)

    cluster = subparsers.add_parser("cluster", help="inspect and rebalance the Delta cluster")
    csub = cluster.add_subparsers(dest="cluster_command", required=True)
    for name, fn, help_text in (
        ("status", _cmd_status, "members, Raft leader and term, vnode ownership and epochs"),
        ("plan", _cmd_plan, "what a rebalance would move (--commit to apply it)"),
        ("evict", _cmd_evict, "deregister a member (a crashed client's actor): its vnodes move on, "
                              "their epochs rise so it is fenced"),
    ):
        p = csub.add_parser(name, help=help_text)
        p.add_argument("--voters", default=None,
                       help="comma-separated voter RPC host:port (else the voters of --data-dir, "
                            "else $LAMINARDB_RAFT_VOTERS)")
        p.add_argument("--data-dir", default=None,
                       help="data dir given to `cluster up`: voters and secret from its cluster.json")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "status":
            p.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS",
                           help="also list the databases of this Ray cluster (default address: auto): "
                                "their actors, vnodes, epochs and checkpoints")
            p.add_argument("--voter-timeout", type=float, default=_status_timeout(),
                           help="seconds each voter gets to answer; all are asked at once "
                                f"(default {_status_timeout():g})")
        else:
            p.add_argument("--timeout", type=float, default=10.0,
                           help="seconds before giving up, retries across voters included")
        _add_secret(p)
        p.set_defaults(func=fn)
        if name == "evict":
            p.add_argument("member", help="the member id, as `cluster status` lists it")
        if name == "plan":
            p.add_argument("--source", default="default", help="source whose vnodes to plan")
            p.add_argument("--members", default="", help="live members (default: all registered)")
            p.add_argument("--vnodes", type=int, default=None,
                           help=f"vnode count if the source does not exist yet "
                                f"(default {DEFAULT_VNODES})")
            p.add_argument("--commit", action="store_true", help="commit the plan through Raft")

    scl = csub.add_parser("scale", help="move a database in the Ray cluster to N reactor actors "
                                        "(a checkpoint; state moves by vnode; exactly-once)")
    scl.add_argument("database", help="the database name given to laminardb.connect(database=…)")
    scl.add_argument("actors", type=int, help="the number of reactor actors to run")
    scl.add_argument("--ray", default="auto", metavar="ADDRESS", help="Ray address (default auto)")
    scl.add_argument("--json", action="store_true", help="machine-readable output")
    scl.set_defaults(func=_cmd_scale)

    drop = csub.add_parser("drop", help="stop a database in the Ray cluster: its actors, "
                                        "checkpoints and state are removed")
    drop.add_argument("database", help="the database name given to laminardb.connect(database=…)")
    drop.add_argument("--ray", default="auto", metavar="ADDRESS", help="Ray address (default auto)")
    drop.add_argument("--json", action="store_true", help="machine-readable output")
    drop.set_defaults(func=_cmd_drop)

    from laminardb.raft.launch import DEFAULT_BASE_PORT, DEFAULT_DATA_DIR, DEFAULT_START_TIMEOUT_S

    up = csub.add_parser("up", help="start the Raft voters of this machine in the background")
    up.add_argument("--voters", type=int, default=3, help="number of voters (default 3)")
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                    help=f"journals, pid/log files, cluster.json (default {DEFAULT_DATA_DIR})")
    up.add_argument("--host", default="127.0.0.1",
                    help="interface the voters bind (default loopback; anything else needs "
                         "--allow-remote; bind a private interface only)")
    up.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                    help=f"voter i uses base+i (Raft) and base+100+i (RPC) "
                         f"(default {DEFAULT_BASE_PORT})")
    up.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT_S,
                    help="seconds to wait for a leader")
    up.add_argument("--secret-file",
                    help=f"cluster secret (created, mode 0600, if missing); default "
                         f"${SECRET_ENV}, else DATA_DIR/secret (created if missing)")
    _add_remote(up, voter=False)
    _add_frame_cap(up)
    _add_log_format(up)
    up.set_defaults(func=_cmd_up)

    down = csub.add_parser("down", help="stop the voters started by `cluster up`")
    down.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                      help=f"the data dir given to `cluster up` (default {DEFAULT_DATA_DIR})")
    down.add_argument("--grace", type=float, default=5.0,
                      help="seconds between SIGTERM and SIGKILL")
    down.set_defaults(func=_cmd_down)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m laminardb.raft.cli <command> ...``."""
    parser = argparse.ArgumentParser(prog="laminardb")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register(subparsers)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except LaminarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
