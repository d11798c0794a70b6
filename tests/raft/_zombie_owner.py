"""A vnode owner process for the zombie-fencing test (run as a script, not collected).

It registers, acquires its vnodes, then forever "writes": each attempt runs the fence check
(with a Raft read barrier) for every token it holds and, only if all pass, appends to the sink
file. Every attempt is logged as one JSON line with its start time (``time.monotonic``, which
is system-wide on Linux, so the test can compare it with its SIGCONT time). It never refreshes
its tokens: after losing the vnodes it keeps trying with the old ones, like a zombie would.

Usage: _zombie_owner.py VOTERS SOURCE OWNER VNODES LOG SINK MAX_SECONDS
"""

from __future__ import annotations

import json
import os
import sys
import time

from laminardb.errors import ControlPlaneError
from laminardb.raft import Fence, RaftClient, StaleEpochError


def main() -> int:
    voters, source, owner, vnodes, log_path, sink_path, max_s = sys.argv[1:8]
    client = RaftClient(voters.split(","), secret=os.environ["LAMINARDB_RAFT_SECRET"],
                        deadline=5.0)
    client.register_node(owner, address=f"pid:{os.getpid()}")
    tokens = client.acquire(source, [int(v) for v in vnodes.split(",")], owner=owner,
                            vnode_count=16)
    fence = Fence(client)
    end = time.monotonic() + float(max_s)
    with open(log_path, "a", buffering=1) as log, open(sink_path, "a", buffering=1) as sink:
        log.write(json.dumps({"ready": True, "tokens": [t.to_wire() for t in tokens]}) + "\n")
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                for tok in tokens:
                    fence.check(tok, barrier=True)
                sink.write(json.dumps({"t": t0, "epochs": [t.epoch for t in tokens]}) + "\n")
                rec = {"t": t0, "ok": True}
            except StaleEpochError as exc:
                rec = {"t": t0, "ok": False, "code": exc.code}
            except ControlPlaneError as exc:
                rec = {"t": t0, "ok": False, "code": exc.code, "transient": True}
            log.write(json.dumps(rec) + "\n")
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
