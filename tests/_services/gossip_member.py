"""A gossip member process for tests and the bench (run as ``python -m tests._services.gossip_member``).

Writes one JSON line per membership event and one whenever its member list changes, each with
``time.monotonic()`` (system-wide on Linux, so the parent can compare times):

    {"t": ..., "ev": "join"|"leave"|"suspect"|"alive", "id": member}
    {"t": ..., "members": [ids...]}

Args: ``NODE_ID BIND SEEDS(comma) LOG [SUSPICION_TIMEOUT]``; the key comes from
``LAMINARDB_GOSSIP_KEY``. Runs until SIGTERM (graceful leave) or SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from laminardb.discovery import GossipConfig, GossipDiscovery, MemberEvent


def main() -> int:
    node_id, bind, seeds, log_path = sys.argv[1:5]
    suspicion = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
    cfg = GossipConfig(node_id=node_id, bind=bind, key=os.environ["LAMINARDB_GOSSIP_KEY"],
                       seeds=tuple(s for s in seeds.split(",") if s),
                       metadata={"pid": os.getpid()}, suspicion_timeout=suspicion)
    disc = GossipDiscovery(cfg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(log_path, "a", buffering=1) as log:
        lock = threading.Lock()

        def write(obj: dict) -> None:
            with lock:
                log.write(json.dumps({"t": time.monotonic(), **obj}) + "\n")

        def on_event(ev: MemberEvent) -> None:
            write({"ev": ev.kind.value, "id": ev.member.id})

        disc.subscribe(on_event)
        disc.start()
        last: list[str] = []
        while not stop.wait(0.05):
            ids = [m.id for m in disc.members()]
            if ids != last:
                write({"members": ids})
                last = ids
        disc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
