"""The house rules: dependencies point one way between the layers, no module imports itself back
through others (lazy imports inside functions included; ``if TYPE_CHECKING`` too) and no Python file
is over ``MAX_LINES`` lines. The import graph covers the six packages, ``benchmarks/``, ``tests/`` and
the scripts ``train.py``, ``evaluate.py``, ``serve.py``: those sit above every layer (they may import
any package, no package imports them) and must not import each other in a circle either."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "solvers", "data_gen", "learners", "evaluation", "serving")  # each imports only those before it
TOP = ("benchmarks", "tests")  # folders of scripts and tests (no __init__.py) above every layer
SCRIPTS = ("train.py", "evaluate.py", "serve.py")  # the thin scripts, above every layer too
MAX_LINES = 600  # no tracked Python file is longer


def _python_files() -> list[str]:
    """Every tracked Python file that is in the working tree (``git ls-files '*.py'``)."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in files.stdout.splitlines() if (ROOT / f).is_file()]


def _modules() -> dict[str, Path]:
    mods = {}
    for f in _python_files():
        parts = Path(f).with_suffix("").parts
        if parts[0] in LAYERS + TOP or f in SCRIPTS:
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ROOT / f
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str:
    """The repository module ``name`` imports (its longest prefix that is one; "" if none)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def import_graph() -> dict[str, set[str]]:
    """Module -> the repository modules it imports anywhere in its body (AST, not executed). In a
    folder without ``__init__.py`` (``tests/``, ``benchmarks/``) a plain ``import worlds`` is the
    sibling ``tests/worlds.py`` where there is one, as the folder on ``sys.path`` makes it (but
    ``import serving`` is the package, not ``benchmarks/serving.py``: the scripts put the root first)."""
    mods = _modules()
    roots = {m.split(".")[0] for m in mods}  # a plain import of these is the repository's (ROOT first on sys.path)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        package = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        folder = "" if (path.parent / "__init__.py").exists() else ".".join(m.split(".")[:-1])
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                plain = folder and not getattr(node, "level", 0) and t.split(".")[0] not in roots
                sibling = _resolve(f"{folder}.{t}", mods) if plain else ""
                t = sibling if sibling and sibling != folder else _resolve(t, mods)
                if t and t != m:
                    graph[m].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_covers_benchmarks_tests_and_scripts():
    graph = import_graph()
    assert "benchmarks.server_harness" in graph["benchmarks.serving_load"]  # from benchmarks.x import ...
    assert "tests.blackbox_worlds" in graph["tests.test_geco"]  # from blackbox_worlds import ... (tests/ on sys.path)
    assert "tests.worlds" in graph["tests.test_policies"]
    assert "serving.records" in graph["benchmarks.serving_load"] and "benchmarks.serving" not in graph["benchmarks.serving_load"]
    assert {"train", "evaluate", "serve"} <= set(graph) and graph["serve"]


def test_no_import_cycles():
    graph = import_graph()
    assert "learners.base" in graph and graph["learners.registry"]
    assert cycles(graph) == []


def _rank(module: str) -> int:
    """A module's layer; benchmarks, tests and the scripts above them all."""
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS)


def test_layers_point_one_way():
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() for t in targets if _rank(t) > _rank(m))
    assert upward == []


def test_no_python_file_is_over_max_lines():
    long = sorted((n, f) for f in _python_files()
                  if (n := len((ROOT / f).read_text("utf-8").splitlines())) > MAX_LINES)
    assert not long, f"over {MAX_LINES} lines: " + ", ".join(f"{f} ({n})" for n, f in reversed(long))
