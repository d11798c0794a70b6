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
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("pandas", "polars")
# The slice run at the floors: every core dependency on its main paths, about a minute.
SLICE = ["tests/engine/test_api.py", "tests/engine/test_expressions.py", "tests/engine/test_oracle_windows.py",
         "tests/joins/test_joins.py", "tests/over/test_topn.py", "tests/checkpoint/test_durable.py", "tests/sql"]
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

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")  # keep the main suite's compiled kernels
    tests = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SLICE],
                           capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)
    tail = "\n".join(tests.stdout.splitlines()[-30:])
    assert tests.returncode == 0, f"the engine's tests fail on the declared floors {floors}:\n{tail}"
