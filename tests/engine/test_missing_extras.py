"""Without an optional dependency (Kafka, the cluster, pandas …), its first use raises
``MissingExtraError`` (LDB-9070) saying which ``pip install 'laminardb[extra]'`` fixes it,
never a bare ``ModuleNotFoundError``. Absence is simulated in a fresh interpreter by a
meta-path finder that refuses the module, as an uninstalled one would: a unit test of our
own logic, nothing is uninstalled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import json, sys, importlib.abc
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
for _m in list(sys.modules):
    if _m.split(".")[0] in {absent!r}:
        del sys.modules[_m]
sys.meta_path.insert(0, _Absent())
import laminardb
def report(fn):
    try:
        fn()
        print(json.dumps({{"error": None}}))
    except Exception as e:
        print(json.dumps({{"error": type(e).__name__, "code": getattr(e, "code", None), "msg": str(e),
                          "is_laminar": isinstance(e, laminardb.LaminarError)}}))
"""


def _run(absent: set[str], body: str, tmp_path: Path) -> dict:
    code = _PRELUDE.format(absent=sorted(absent)) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_hint(out: dict, extra_hint: str) -> None:
    assert out["is_laminar"] and out["code"] == "LDB-9070", out
    assert out["error"] == "MissingExtraError" and extra_hint in out["msg"], out


KAFKA_SOURCE = ("CREATE SOURCE k (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) "
                "FROM KAFKA (brokers = '127.0.0.1:1', topic = 't', format = 'json')")
FLINK_KAFKA = ("CREATE TABLE k (x BIGINT) WITH ('connector' = 'kafka', 'topic' = 't', "
               "'properties.bootstrap.servers' = '127.0.0.1:1', 'format' = 'json')")
KAFKA_SINK = ("CREATE SOURCE s (x BIGINT); CREATE SINK o INTO KAFKA (brokers = '127.0.0.1:1', topic = 't', "
              "format = 'json') AS SELECT x FROM s")


@pytest.mark.parametrize("ddl", [KAFKA_SOURCE, FLINK_KAFKA, KAFKA_SINK])
def test_kafka_ddl_without_the_kafka_extra(tmp_path, ddl):
    out = _run({"kafka"}, f"db = laminardb.open()\nreport(lambda: db.execute({ddl!r}))\n"
                          "assert db.list_streams() == [], 'a refused script leaves nothing behind'\n", tmp_path)
    _assert_hint(out, "pip install 'laminardb[kafka]'")


def test_delta_sink_without_the_delta_extra(tmp_path):
    out = _run({"deltalake"}, f"""
        db = laminardb.open({str(tmp_path / 'db')!r})
        report(lambda: db.execute("CREATE SOURCE s (x BIGINT); CREATE SINK o INTO DELTA_LAKE "
                                  "(path = '{tmp_path / 'table'}') AS SELECT x FROM s"))
        db.close()
    """, tmp_path)
    assert out["is_laminar"] and "pip install 'laminardb[delta]'" in out["msg"], out  # its own LDB-4020


def test_connect_without_the_cluster_extra(tmp_path):
    out = _run({"ray"}, "report(lambda: laminardb.connect('ray://local', actors=1))\n", tmp_path)
    _assert_hint(out, "pip install 'laminardb[cluster]'")


def test_cluster_commands_without_the_cluster_extra(tmp_path):
    out = _run({"pysyncobj"}, """
        from laminardb.cli.commands import main
        import contextlib, io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = main(["cluster", "status"])  # reads only, whatever the code does
        print(json.dumps({"status": status, "stderr": err.getvalue()}))
    """, tmp_path)
    assert out["status"] == 2 and "LDB-9070" in out["stderr"] and "laminardb[cluster]" in out["stderr"], out
    assert not (tmp_path / ".laminardb").exists()  # nothing was started or written


@pytest.mark.parametrize("call", ["db.query('SELECT * FROM v').to_pandas()", "db.execute('SHOW ALL').to_pandas()"])
def test_to_pandas_without_pandas(tmp_path, call):
    out = _run({"pandas"}, f"""
        db = laminardb.open()
        db.execute("CREATE SOURCE s (x BIGINT); CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM s")
        db.insert("s", {{"x": 1}})  # the engine itself needs no pandas
        report(lambda: {call})
    """, tmp_path)
    _assert_hint(out, "pip install 'laminardb[pandas]'")


def test_local_cluster_without_pyspark_is_refused_before_ray_starts(tmp_path):
    # ray is absent too: had the check been skipped, the error would name ray, and no Ray starts
    out = _run({"pyspark", "ray"}, "report(lambda: laminardb.connect('ray://local', actors=1))\n", tmp_path)
    _assert_hint(out, "pip install 'laminardb[cluster]'")
    assert "'pyspark'" in out["msg"], out
