"""The package's shape, checked on every test run (``make lint`` runs the same tools):

* both connections (embedded ``Connection``, cluster ``RemoteConnection``) satisfy
  ``laminardb.api.ConnectionAPI`` — mypy over ``tests/typing_checks`` (``[tool.mypy]``);
* the layering contracts of ``.importlinter`` hold (``lint-imports``);
* no module import cycle: the module graph's strongly connected components are all single
  modules (imports under ``TYPE_CHECKING`` do not count: they never run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
_TOOL_TIMEOUT_S = 600  # a cold mypy cache analyses every module the connections import


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)


def test_both_connections_satisfy_the_connection_protocol():
    pytest.importorskip("mypy")
    proc = _run([sys.executable, "-m", "mypy"])  # what to check: [tool.mypy] files
    assert proc.returncode == 0, f"mypy:\n{proc.stdout}{proc.stderr}"


def test_import_contracts_hold():
    lint = BIN / "lint-imports"
    if not lint.exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    proc = _run([str(lint)])
    assert proc.returncode == 0, f"lint-imports:\n{proc.stdout}{proc.stderr}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a deep import chain must not hit the recursion limit):
    every strongly connected component of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (len(c), c))


def test_strongly_connected_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert strongly_connected(graph) == [["d", "e"], ["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_module_import_cycle():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("laminardb", include_external_packages=False, exclude_type_checking_imports=True)
    modules = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = strongly_connected(modules)
    listed = "\n".join(f"  {len(c)} modules: {' '.join(m.removeprefix('laminardb.') for m in c)}" for c in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s) (strongly connected components):\n{listed}"
