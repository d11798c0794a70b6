"""The process the file-fault tests kill: ``run(CONFIG.json, LOG)`` in a child forked by the
tests' forkserver (which imported this module, so a child starts without seconds of imports),
or ``python _fault_child.py CONFIG.json``.

It opens (or recovers) a durable database, inserts the deterministic rows of
``_crash_child.row`` from where ``offset()`` says the database stopped, checkpoints every
``ckpt_every`` batches (explicitly: the test decides how many checkpoints and WAL segments
exist), and prints ``acked N`` after each insert returns, so the parent knows which rows were
acknowledged. Up to ``rows`` it then either finishes (``"finish": true``) or waits for the
parent's SIGKILL. A LaminarError on open is printed as ``REFUSED <code> <message>`` (exit 3):
the parent then does what the message says and starts it again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminardb  # noqa: E402
import laminardb.engine.insert_batch  # noqa: E402,F401 - preloaded by the tests' forkserver (pyarrow, pandas)
import laminardb.operators._kernels  # noqa: E402,F401 - numba, its kernels from the disk cache
from tests.checkpoint._crash_child import row  # noqa: E402


def run(cfg_path: str, log_path: str | None = None) -> None:
    """Run the child; with ``log_path``, stdout and stderr go there and the process exits
    (os._exit: a forked child must not run the parent's exit handlers)."""
    if log_path is None:
        main(cfg_path)
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # the parent's sys.stdout may not write to fd 1 (pytest's capture): write to the log
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
    code = 0
    try:
        main(cfg_path)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the log the parent reads
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(cfg_path: str) -> None:
    cfg = json.loads(open(cfg_path).read())
    try:
        db = laminardb.open(cfg["db"], config={"checkpoint_interval": "off", "vars": {"OUT": cfg["out"]}})
    except laminardb.LaminarError as exc:
        print(f"REFUSED {exc.code} {exc}", flush=True)
        sys.exit(3)
    db.execute(open(cfg["sql"]).read())
    total, batch, every = cfg["rows"], cfg["batch"], cfg["ckpt_every"]
    i = db.offset("ev")
    ckpts = db.metrics()["checkpoints"]
    rec = dict(ckpts["recovery"] or {}, set_aside_count=ckpts["recovery_wal_segments_set_aside"])
    print("RECOVERY-REPORT " + json.dumps({k: rec.get(k) for k in ("epoch", "skipped_checkpoints",
                                                         "wal_segments_set_aside", "set_aside_count")}),
          flush=True)
    print(f"resume at {i}", flush=True)
    n_batches = 0
    while i < total:
        n = min(batch, total - i)
        db.insert("ev", [row(j) for j in range(i, i + n)])
        i += n
        print(f"acked {i}", flush=True)
        n_batches += 1
        if n_batches % every == 0:
            db.checkpoint()
    if not cfg.get("finish"):
        print("idle", flush=True)
        time.sleep(3600)  # wait for the parent's SIGKILL
    db.finish()
    db.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
