"""Operator views of the databases in a Ray cluster: ``laminardb cluster status --ray`` and
``laminardb cluster drop NAME``. Entry points: ``databases_status(address)``,
``format_databases(status)``, ``drop(address, name)``."""

from __future__ import annotations

from typing import Any

_STATUS_TIMEOUT_S = 10.0


def _ray(address: str):
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False,
                 logging_level="ERROR")
    return ray


def databases_status(address: str = "auto") -> dict[str, Any]:
    """Every database's head: actors (pid, node, state, vnodes, max epoch), checkpoints,
    clients and recoveries; a head that does not answer in time is listed as such."""
    from laminardb.actors.head import NAMESPACE, head_name, list_databases
    from laminardb.actors.remote import raise_remote

    ray = _ray(address)
    out: dict[str, Any] = {}
    for name in list_databases():
        try:
            head = ray.get_actor(head_name(name), namespace=NAMESPACE)
            out[name] = raise_remote(ray.get(head.status.remote(), timeout=_STATUS_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - one sick head must not hide the others
            out[name] = {"database": name, "error": f"{type(exc).__name__}: {exc}"}
    return {"databases": out}


def format_databases(status: dict[str, Any]) -> str:
    dbs = status["databases"]
    if not dbs:
        return "databases: none"
    lines = [f"databases: {len(dbs)}"]
    for name, st in sorted(dbs.items()):
        if "error" in st:
            lines.append(f"  {name}: not answering ({st['error']})")
            continue
        ck = st.get("checkpoints") or {}
        lines.append(f"  {name}: head pid {st['head_pid']}, {st['clients']} client(s), "
                     f"{st['recoveries']} recovery(ies), last checkpoint epoch {ck.get('last_epoch')}, "
                     f"{ck.get('checkpoint_bytes_on_disk', 0)} bytes on disk, dir {st['directory']}")
        for m in (st.get("cluster") or {}).get("members", []):
            lines.append(f"    actor {m['index']} pid {m['pid']} node {m['node_id'][:12]} {m['state']}: "
                         f"{m['vnodes']} vnodes, max epoch {m['max_epoch']}")
    return "\n".join(lines)


def drop(address: str, name: str) -> bool:
    from laminardb.actors.head import drop_database

    _ray(address)
    return drop_database(name)
