"""``laminardb spark up | down | status``: this node's Spark daemons (``standalone.py``).

``ray up`` runs ``spark up`` on the head (master and worker) and ``spark up --master
spark://HEAD:7077`` on the other nodes (``cluster_configs/``)."""

from __future__ import annotations

import argparse
import json
import sys

from laminardb.spark.standalone import (
    DEFAULT_DATA_DIR,
    DEFAULT_MASTER_PORT,
    DEFAULT_WEBUI_PORT,
    spark_status,
    start_spark,
    stop_spark_daemons,
)


def _cmd_up(args: argparse.Namespace) -> int:
    doc = start_spark(args.data_dir, host=args.host, master=args.master, master_port=args.port,
                      webui_port=args.webui_port, cores=args.cores, memory_mb=args.memory_mb,
                      secret_file=args.secret_file, allow_remote=args.allow_remote)
    w = doc["worker"]
    print(f"spark master {doc['master']}, worker {w['cores']} core(s) {w['memory_mb']} MB, "
          f"data dir {args.data_dir}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    done = stop_spark_daemons(args.data_dir)
    print(", ".join(f"{k} {v}" for k, v in done.items()) or f"no Spark daemons recorded in {args.data_dir}")
    return 0


def format_spark(st: dict | None) -> str:
    if st is None:
        return "spark: none (the coordinator runs Spark in its own process, local[*])"
    if "error" in st:
        return f"spark: {st['master']}: {st['error']}"
    lines = [f"spark: {st['master']} {st['status']}, {st['cores_used']}/{st['cores']} cores in use"]
    lines += [f"  worker {w['host']} {w['state']}: {w['cores_used']}/{w['cores']} cores, "
              f"{w['memory_used_mb']}/{w['memory_mb']} MB" for w in st["workers"]]
    lines += [f"  application {a['name']} {a['state']}: executors with {a['cores']} core(s), "
              f"{a['memory_per_executor_mb']} MB each" for a in st["applications"]]
    return "\n".join(lines)


def _cmd_status(args: argparse.Namespace) -> int:
    st = spark_status(args.data_dir)
    print(json.dumps(st, indent=2, sort_keys=True) if args.json else format_spark(st))
    return 0 if st is not None and "error" not in st else 1


def register(sub: argparse._SubParsersAction) -> None:
    spark = sub.add_parser("spark", help="this node's Spark standalone daemons (ray up starts them)")
    ssub = spark.add_subparsers(dest="spark_command", required=True)
    up = ssub.add_parser("up", help="start the Spark master (head) and this node's worker")
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help=f"default {DEFAULT_DATA_DIR}")
    up.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    up.add_argument("--master", default=None, metavar="spark://HOST:PORT",
                    help="the head's master: start only a worker here (other nodes)")
    up.add_argument("--port", type=int, default=DEFAULT_MASTER_PORT, help="master port")
    up.add_argument("--webui-port", type=int, default=DEFAULT_WEBUI_PORT, help="master web UI port")
    up.add_argument("--cores", type=int, default=None, help="worker cores (default 1; take them "
                                                            "out of ray start --num-cpus)")
    up.add_argument("--memory-mb", type=int, default=None, help="worker memory (default: a quarter of RAM)")
    up.add_argument("--secret-file", default=None, help="shared secret (default DATA_DIR/secret, created)")
    up.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    up.set_defaults(func=_cmd_up)
    down = ssub.add_parser("down", help="stop the daemons `spark up` started on this node")
    down.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    down.set_defaults(func=_cmd_down)
    status = ssub.add_parser("status", help="workers, cores and applications, as the master sees them")
    status.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_cmd_status)


def main() -> int:  # pragma: no cover - `python -m laminardb.spark.cli`
    parser = argparse.ArgumentParser(prog="laminardb")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args()
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
