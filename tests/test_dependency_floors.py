"""The declared dependency floors are real: the engine's tests pass on the lowest versions
pyproject.toml allows.

``make test`` runs everything else on uv.lock's versions, so nothing else would notice a floor
that is too low (``sqlglot>=25`` once did not even import, ``pyarrow>=18`` lacked
``concat_batches``). This test installs the floors of the core dependencies and of the
``pandas``/``polars`` extras into a throwaway venv with ``uv pip install --resolution
lowest-direct`` (the test tools at the versions running now), checks they are the floors, and runs
a slice of the suite there: expressions, windows against DuckDB, joins, Top-N, durability, SQL
gaps. The extras that need services (cluster, kafka, delta) have their floors at uv.lock's
versions, which the whole suite tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("pandas", "polars")
# The slice run at the floors: every core dependency on its main paths, about a minute of tests.
SLICE = ["tests/engine/test_api.py", "tests/engine/test_expressions.py", "tests/engine/test_oracle_windows.py",
         "tests/joins/test_joins.py", "tests/over/test_topn.py", "tests/checkpoint/test_durable.py", "tests/sql"]
# ... run as two pytest processes side by side, one per core (the rest of the suite waits on this
# test): the DuckDB window oracle (~35 s alone) but its slowest test, and everything else (~20 s)
# with that test (~8 s). Every test of SLICE runs, once (a renamed test fails the second part).
_MOVED = "tests/engine/test_oracle_windows.py::test_tumble_emit_changes_consolidates_to_duckdb"
PARTS = (["tests/engine/test_oracle_windows.py", f"--deselect={_MOVED}"],
         [path for path in SLICE if path != "tests/engine/test_oracle_windows.py"] + [_MOVED])
TEST_TOOLS = ("pytest", "pytest-timeout", "duckdb", "hypothesis", "packaging")


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found and (ROOT / ".tools/bin/uv").exists():
        found = str(ROOT / ".tools/bin/uv")
    if not found:
        pytest.fail("uv is not found: run the tests with `make test`, which installs it into .tools/")
    return found


def _declared_floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    floors = {}
    for text in reqs:
        req = Requirement(text)
        lows = [s.version for s in req.specifier if s.operator == ">="]
        assert lows, f"{text!r} in pyproject.toml has no floor (>=): every dependency needs one"
        floors[canonicalize_name(req.name)] = Version(lows[0])
    return floors


@pytest.mark.timeout(1500)
def test_engine_tests_pass_on_the_declared_floors(tmp_path):
    uv = _uv()
    venv = tmp_path / "floors"
    run = dict(capture_output=True, text=True, timeout=600, cwd=ROOT)
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, **run)
    python = str(venv / "bin" / "python")
    extras = [a for e in EXTRAS for a in ("--extra", e)]
    tools = [f"{name}=={metadata.version(name)}" for name in TEST_TOOLS]
    for args in (["--resolution", "lowest-direct", "-r", "pyproject.toml", *extras], tools):
        done = subprocess.run([uv, "pip", "install", "--quiet", "--python", python, *args], **run)
        assert done.returncode == 0, f"uv pip install {' '.join(args)} failed:\n{done.stderr[-3000:]}"

    listed = subprocess.run([python, "-c", "import importlib.metadata as m, json; print(json.dumps("
                             "{d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                            check=True, **run)
    installed = {canonicalize_name(n): Version(v) for n, v in json.loads(listed.stdout).items()}
    floors = _declared_floors()
    assert {n: installed.get(n) for n in floors} == floors, "the venv does not hold the declared floors"

    paths = [p.split("::")[0] for part in PARTS for p in part if not p.startswith("-")]
    assert sorted(set(paths)) == sorted(SLICE)  # the whole slice (one test moved, not dropped)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    procs = []
    for i, part in enumerate(PARTS):
        log = open(tmp_path / f"slice{i}.log", "w+")  # noqa: SIM115 - closed below
        part_env = dict(env, NUMBA_CACHE_DIR=str(tmp_path / f"numba{i}"))  # keep the main suite's kernels
        procs.append((subprocess.Popen([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *part],
                                       stdout=log, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                       env=part_env), log))
    deadline = time.monotonic() + 1200
    failed = []
    try:
        for proc, log in procs:
            try:
                rc = proc.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                rc = "timed out after 1200 s"
            log.seek(0)
            if rc != 0:
                failed.append(f"{proc.args[7:]} (rc {rc}):\n" + "\n".join(log.read().splitlines()[-30:]))
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            log.close()
    tail = "\n\n".join(failed)
    assert not failed, f"the engine's tests fail on the declared floors {floors}:\n{tail}"
