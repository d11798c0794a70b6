"""``cluster status``: ask every voter at once, with a short bound, and say who answered.

Entry points: :func:`cluster_status` (a dict — what ``--json`` prints) and
:func:`format_status` (the same content as text). Each voter's RPC address gets its own
connection and ``status`` request in parallel, all bounded by ``timeout``; a voter is

* ``up`` — it answered (its role, term, commit index, refused-frame counters follow);
* ``unreachable`` — the connection was refused or failed: the process is down, or the
  address is wrong;
* ``timeout`` — no answer within ``timeout``: the process is paused (SIGSTOP, a debugger, a
  VM freeze), overloaded or hung — the kernel still accepts its connections, it does not;
* ``auth-failed`` — it refused our secret (``RpcAuthError``);
* ``error`` — anything else (the message says what).

The cluster part (leader, term, members, ownership) comes from the leader's answer, else
from the answering voter that applied the most of the log.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from laminardb.raft import _wire
from laminardb.raft._policy import split_addr
from laminardb.raft.exceptions import NoLeaderError, RpcAuthError, RpcProtocolError
from laminardb.raft.plan import vnode_ranges

__all__ = ["DEFAULT_VOTER_TIMEOUT_S", "cluster_status", "format_status", "probe_voter"]

# Long enough for a loaded 2-core machine to answer (a status is ~1 ms of work), short enough
# that a paused voter costs the operator one short wait, not 5 s each.
DEFAULT_VOTER_TIMEOUT_S = 1.5
_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


def probe_voter(rpc: str, key: bytes, *, timeout: float) -> dict[str, Any]:
    """One voter's answer to ``status`` within ``timeout`` s, as a row of the voter table."""
    row: dict[str, Any] = {"rpc": rpc, "liveness": "error", "error": None}
    start = time.monotonic()
    deadline = start + timeout
    try:
        host, port = split_addr(rpc)
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        row.update(liveness="timeout", error=f"connect not accepted within {timeout:g} s")
        return row
    except OSError as exc:  # refused, no route, unknown host: nothing runs there
        row.update(liveness="unreachable", error=exc.strerror or str(exc) or type(exc).__name__)
        return row
    except ValueError as exc:  # malformed address
        row.update(error=str(exc))
        return row
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        _wire.send_frame(sock, key, {"id": 1, "ts": time.time(), "m": "status", "a": {}})
        resp = _wire.read_frame(sock, key)
    except RpcAuthError as exc:
        row.update(liveness="auth-failed", error=exc.message)
        return row
    except TimeoutError:
        row.update(liveness="timeout", error=f"connected, but no answer within {timeout:g} s: "
                                             "paused (SIGSTOP), overloaded or hung")
        return row
    except RpcProtocolError as exc:
        row.update(error=exc.message)
        return row
    except OSError as exc:  # reset or closed while we waited
        row.update(error=f"connection lost: {exc.strerror or exc or type(exc).__name__}")
        return row
    finally:
        sock.close()
    row["latency_ms"] = round((time.monotonic() - start) * 1000, 1)
    if not isinstance(resp, dict) or not resp.get("ok"):
        code = resp.get("code") if isinstance(resp, dict) else None
        message = resp.get("message") if isinstance(resp, dict) else repr(resp)
        row.update(liveness="auth-failed" if code == "LDB-6004" else "error",
                   error=f"[{code}] {message}")
        return row
    result = resp["result"]
    raft, voter = result["raft"], result.get("voter", {})
    row.update(liveness="up", id=voter.get("id", resp.get("voter")), raft=raft["self"],
               role=_ROLES.get(raft["state"], "?"), term=raft["term"],
               commit_idx=raft["commit_idx"], last_applied=raft["last_applied"],
               leader=raft["leader"], has_quorum=raft["has_quorum"],
               peers_connected=raft["partners_connected"],
               uptime_s=voter.get("uptime_s"), security=voter.get("security"))
    row["_state"] = result["state"]
    return row


def cluster_status(rpc_addresses: Sequence[str], *, secret: str | bytes,
                   timeout: float = DEFAULT_VOTER_TIMEOUT_S) -> dict[str, Any]:
    """Ask every voter in parallel (each bounded by ``timeout``); the merged status.

    Raises:
        RpcAuthError: every voter that answered refused the secret.
        NoLeaderError: no voter answered (the message lists each one's liveness).
    """
    key = _wire.derive_key(secret)
    addrs = list(dict.fromkeys(rpc_addresses))
    with ThreadPoolExecutor(max_workers=max(1, len(addrs))) as pool:
        rows = list(pool.map(lambda a: probe_voter(a, key, timeout=timeout), addrs))
    up = [r for r in rows if r["liveness"] == "up"]
    if not up:
        detail = "; ".join(f"{r['rpc']}: {r['liveness']} ({r['error']})" for r in rows)
        if rows and all(r["liveness"] == "auth-failed" for r in rows):
            raise RpcAuthError(f"every voter refused the secret: {detail}")
        raise NoLeaderError(f"no voter answered within {timeout:g} s: {detail}")
    leaders = [r for r in up if r["role"] == "leader"]
    best = max(leaders or up, key=lambda r: (r["term"], r["last_applied"]))
    state = best.pop("_state")
    for r in up:
        r.pop("_state", None)
    voters = state.get("voters", {})
    by_rpc = {v["rpc"]: v for v in voters.values()}
    for r in rows:  # names and Raft addresses of the voters that did not answer
        known = by_rpc.get(r["rpc"], {})
        r.setdefault("id", known.get("id"))
        r.setdefault("raft", known.get("raft"))
    leader_addr = best["leader"]
    leader = voters.get(leader_addr, {"id": None, "raft": leader_addr, "rpc": None}) \
        if leader_addr else None
    return {
        "leader": leader,
        "term": best["term"],
        "commit_idx": best["commit_idx"],
        "quorum": bool(best["has_quorum"] and leader_addr),
        "answered_by": best["id"],
        "timeout_s": timeout,
        "voters": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
        "state": state,
    }


def format_status(status: dict[str, Any]) -> str:
    """The text form of :func:`cluster_status`: the same content, for people."""
    leader = status["leader"]
    who = f"{leader['id'] or '?'} ({leader['raft']})" if leader else "none"
    n_up = sum(1 for v in status["voters"] if v["liveness"] == "up")
    lines = [
        f"raft: leader {who} term {status['term']} commit {status['commit_idx']} "
        f"quorum {'yes' if status['quorum'] else 'NO'}",
        f"answered by: {status['answered_by']}  ({n_up}/{len(status['voters'])} voters "
        f"answered within {status['timeout_s']:g} s)",
    ]
    lines.append("voters:")
    for v in status["voters"]:
        head = (f"  {v.get('id') or '?':<6} raft {v.get('raft') or '-':<21} rpc {v['rpc']:<21} "
                f"{v['liveness']:<11}")
        if v["liveness"] == "up":
            sec = v.get("security") or {}
            raft_c, rpc_c = sec.get("raft", {}), sec.get("rpc", {})
            down = sorted(p for p, c in (v.get("peers_connected") or {}).items() if not c)
            head += (f" {v['role']:<9} term {v['term']} commit {v['commit_idx']} applied "
                     f"{v['last_applied']}  {v['latency_ms']} ms  up {v.get('uptime_s')} s  "
                     f"refused raft/rpc {raft_c.get('frames_refused', 0)}/"
                     f"{rpc_c.get('frames_refused', 0)}  auth-failed raft/rpc "
                     f"{raft_c.get('auth_failures', 0)}/{rpc_c.get('auth_failures', 0)}")
            if leader and v.get("leader") != leader["raft"]:
                head += f"  sees leader {v.get('leader') or 'none'}"
            if down:
                head += f"  peers down: {','.join(down)}"
        else:
            head += f" {v['error']}"
        lines.append(head.rstrip())
    state = status["state"]
    lines.append(f"cluster epoch {state['cluster_epoch']}  checkpoint epoch "
                 f"{state['checkpoint_epoch']}  manifest {state['manifest'] or '-'}")
    lines.append(f"members ({len(state['nodes'])}):")
    for nid, n in sorted(state["nodes"].items()):
        lines.append(f"  {nid:<16} {n['address'] or '-':<22} cores {n['cores']}")
    for name, src in sorted(state["sources"].items()):
        lines.append(f"source {name!r}: {src['vnodes']} vnodes")
        per: dict[str, list[tuple[int, int]]] = {}
        for vn, (o, e) in enumerate(zip(src["owner"], src["epoch"], strict=True)):
            per.setdefault(o or "(unowned)", []).append((vn, e))
        for owner, items in sorted(per.items()):
            epochs = [e for _, e in items]
            lines.append(
                f"  {owner:<16} {len(items):>4} vnodes  epochs {min(epochs)}..{max(epochs)}  "
                f"vnodes {vnode_ranges([vn for vn, _ in items])}"
            )
    return "\n".join(lines)

