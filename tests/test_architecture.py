"""The house rules: dependencies point one way between the layers and no module imports itself
back through others (lazy imports inside functions included; ``if TYPE_CHECKING`` too)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "solvers", "data_gen", "learners", "evaluation", "serving")  # each imports only those before it


def _modules() -> dict[str, Path]:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    mods = {}
    for f in files.stdout.split():
        parts = Path(f).with_suffix("").parts
        if parts[0] in LAYERS:
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ROOT / f
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the repository modules it imports anywhere in its body (AST, not executed)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        package = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
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
                while t and t not in mods:
                    t = t.rpartition(".")[0]
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


def test_no_import_cycles():
    graph = import_graph()
    assert "learners.base" in graph and graph["learners.registry"]
    assert cycles(graph) == []


def test_layers_point_one_way():
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() for t in targets
                    if rank[t.split(".")[0]] > rank[m.split(".")[0]])
    assert upward == []
