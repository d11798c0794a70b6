"""Exactly-once under SIGKILL, the way Flink's exactly-once ITCases prove it.

A child process (``_crash_child.py``) runs a durable pipeline — Python inserts and a Kafka
source (real Tansu broker), into FILE, Kafka (transactional) and Delta Lake sinks — and is
SIGKILLed at random moments, and at the two dangerous steps of a checkpoint (after the sinks
pre-committed, after the manifest), then restarted from the same directory. A last run
finishes. The committed output must equal the unbroken answer: per-key sequence numbers
gap-free and duplicate-free, every window aggregate exact (DuckDB over the same rows).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tests._services.crash_child import spawn_child, wait_for_more  # noqa: E402
from tests._services.fixtures import kafka_broker  # noqa: E402,F401
from tests.checkpoint._crash_child import KEYS, row  # noqa: E402

ROWS = 4000  # Python-inserted rows
KAFKA_ROWS = 3000  # rows on the input topic
_CHILD_TIMEOUT_S = 120


def _spawn(cfg_path: Path, log: Path, crash_at: str = "") -> subprocess.Popen:
    return spawn_child(HERE / "_crash_child.py", cfg_path, log, crash_at)


def _produce_input(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(KAFKA_ROWS):
        p.send(topic, json.dumps(row(i)).encode())
    p.flush()
    p.close()


def _jsonl(path: Path) -> list[dict]:
    out = []
    for f in sorted(path.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def _check_sequences(got: list[dict], n_rows: int, what: str) -> None:
    per_key: dict[str, list[int]] = {}
    for r in got:
        per_key.setdefault(r["k"], []).append(r["seq"])
    for k in range(KEYS):
        want = list(range(len(range(k, n_rows, KEYS))))
        seqs = sorted(per_key.get(f"k{k}", []))
        dups = len(seqs) - len(set(seqs))
        missing = sorted(set(want) - set(seqs))
        assert not dups and not missing and seqs == want, (
            f"{what} key k{k}: {dups} duplicates, missing {missing[:10]}")


def _window_oracle(n_rows: int) -> list[tuple]:
    t = pa.Table.from_pylist([row(i) for i in range(n_rows)])  # noqa: F841 - read by DuckDB
    return duckdb.sql("SELECT k, (ts // 1000) * 1000 AS window_start, count(*) AS n, sum(v) AS s "
                      "FROM t GROUP BY ALL ORDER BY ALL").fetchall()


def _read_kafka_committed(bootstrap: str, topic: str) -> list[dict]:
    import laminardb

    with laminardb.open() as db:
        db.execute(f"""CREATE SOURCE o (k VARCHAR, window_start BIGINT, n BIGINT, s BIGINT)
            FROM KAFKA (brokers = '{bootstrap}', topic = '{topic}', format = 'json',
                        offset_reset = 'earliest', isolation.level = 'read_committed')""")
        sub = db.subscribe("o")
        db.start()
        db.flush(timeout_s=30)
        db.finish()
        return sub.to_arrow().to_pylist()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_sigkill_loop_gives_the_unbroken_answer_in_every_sink(tmp_path, kafka_broker):  # noqa: F811
    seed = int(os.environ.get("LAMINARDB_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    in_topic, out_topic = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _produce_input(kafka_broker.bootstrap, in_topic)
    out = tmp_path / "out"
    cfg = {"db": str(tmp_path / "db"), "out": str(out), "brokers": kafka_broker.bootstrap,
           "in_topic": in_topic, "out_topic": out_topic, "sql": str(HERE / "crash_pipeline.sql"),
           "rows": ROWS, "batch": 40, "pause": 0.01, "interval": "150ms"}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    log = tmp_path / "child.log"
    log.touch()

    kills = 0
    # the two dangerous steps of a checkpoint, then random moments
    for crash_at in ("after_pre_commit", "after_manifest"):
        p = _spawn(cfg_path, log, crash_at)
        p.wait(_CHILD_TIMEOUT_S)
        assert p.returncode == -9, f"child should have died at {crash_at}: {log.read_text()[-2000:]}"
        kills += 1
    for _ in range(6):
        before = log.read_text(errors="replace").count("resume at")
        p = _spawn(cfg_path, log)
        started = wait_for_more(log, "resume at", before, p, _CHILD_TIMEOUT_S)
        assert started, f"seed {seed}: child did not start: {log.read_text()[-3000:]}"
        time.sleep(rng.uniform(0.0, 1.5))
        p.kill()
        p.wait(30)
        kills += 1
    cfg["finish"] = True
    cfg_path.write_text(json.dumps(cfg))
    p = _spawn(cfg_path, log)
    p.wait(_CHILD_TIMEOUT_S)
    assert p.returncode == 0, f"seed {seed}: final run failed: {log.read_text()[-4000:]}"
    assert log.read_text().count("resume at") >= kills - 1

    _check_sequences(_jsonl(out / "ev_seq"), ROWS, f"seed {seed}: FILE sink of inserts")
    _check_sequences(_jsonl(out / "kev_seq"), KAFKA_ROWS, f"seed {seed}: FILE sink of the Kafka source")
    files = sorted(str(f) for f in (out / "ev_win").glob("*.parquet"))
    got = duckdb.sql(f"SELECT k, window_start, n, s FROM read_parquet({files!r}) ORDER BY ALL").fetchall()
    assert got == _window_oracle(ROWS), f"seed {seed}: Parquet window sink"
    kafka_rows = _read_kafka_committed(kafka_broker.bootstrap, out_topic)
    got = sorted((r["k"], r["window_start"], r["n"], r["s"]) for r in kafka_rows)
    assert got == _window_oracle(ROWS), f"seed {seed}: Kafka exactly-once sink"
    import polars as pl  # DeltaTable.to_pyarrow_table() can abort the interpreter at exit (delta-rs #2184)

    t = pl.read_delta(str(out / "kev_win_delta"))
    got = sorted((r["k"], int(r["window_start"]), r["n"], r["s"]) for r in t.to_dicts())
    assert got == _window_oracle(KAFKA_ROWS), f"seed {seed}: Delta Lake sink"
