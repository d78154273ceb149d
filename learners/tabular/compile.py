"""Compile every numba kernel a tabular run uses, once per machine: the searches' kernels
(``learners/tabular/*_kernels.py``) and a forest's descent (``envs/tree_kernels.py``).

numba compiles a kernel at its first call for the argument types of that call, and saves the machine
code on disk (``cache=True``: ``__pycache__`` beside each module, or ``NUMBA_CACHE_DIR``); a later
process loads it in milliseconds. A first request of a fresh machine would otherwise wait a minute
or more. ``compile_kernels`` pays that once, up front: it runs each tabular generator (``change_value``,
``named_cfe``, ``nearest_cfe``) through fit, a batch, single agents and diverse alternatives on a tiny
synthetic world for each model kind a run may have (a forest as complete trees, a deep forest as linked
trees, a ReLU MLP, a logistic regression, a surrogate's MLP scored in BLAS blocks), so each kernel meets the argument types a run gives it.

    python -m learners.tabular.compile          # progress on stderr, the summary as JSON on stdout

``serve.py`` calls it before a tabular service takes requests. A kernel module's own edit makes numba
compile it again; an edit of ``kernel_helpers.py`` empties the caches of the kernels that inline its
helpers (``kernel_helpers.drop_stale_caches``).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld

KERNEL_MODULES = ("learners.tabular.kernel_helpers", "learners.tabular.scan_kernels", "learners.tabular.trade_kernels",
                  "learners.tabular.polish_kernels", "learners.tabular.geometry_kernels",
                  "learners.tabular.donor_kernels", "learners.tabular.row_kernels", "envs.tree_kernels")
GENERATORS = ("change_value", "named_cfe", "nearest_cfe")
# (model kind, the generators run on it): a deep forest only changes the descent, the cheapest method covers it
# a surrogate's MLP (``SurrogateMLP``: float32 BLAS blocks) only changes how variant rows are scored: its own search covers it
MODELS = (("forest", GENERATORS), ("mlp", GENERATORS), ("lr", GENERATORS), ("deep forest", ("nearest_cfe",)),
          ("surrogate mlp", ("change_value",)))


def kernels() -> list[Any]:
    """Every numba dispatcher defined in ``KERNEL_MODULES`` (imported here)."""
    out = []
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        out += [v for v in vars(module).values()
                if hasattr(v, "py_func") and hasattr(v, "stats") and v.py_func.__module__ == name]
    return out


def is_inline(kernel: Any) -> bool:
    """An ``inline="always"`` helper: compiled into each kernel that calls it, never on its own."""
    return kernel.targetoptions.get("inline", "never") == "always"


def _schema() -> FeatureSchema:
    """Every kind of encoded column a data set gives: integer and real numbers (free, increase- and
    decrease-only), immutable and free binaries, an ordinal code and a one-hot group."""
    return FeatureSchema((
        Feature("age", "numeric", 18.0, 90.0, "increase", integer=True),
        Feature("income", "numeric", 0.0, 100.0),
        Feature("hours", "numeric", 0.0, 60.0, "decrease"),
        Feature("months", "numeric", 0.0, 72.0, integer=True),
        Feature("sex", "binary", 0, 1, "immutable", integer=True),
        Feature("owner", "binary", 0, 1, integer=True),
        Feature("education", "ordinal", 0.0, 4.0, "increase", ("a", "b", "c", "d", "e"), integer=True),
        *(Feature(f"job={j}", "binary", 0, 1, group="job", integer=True) for j in ("a", "b", "c")),
    ))


def _rows(schema: FeatureSchema, n: int, rng: np.random.Generator) -> np.ndarray:
    lo, hi = (np.asarray(b, float) for b in schema.bounds())
    X = lo + rng.random((n, len(lo))) * (hi - lo)
    integral = np.array([f.integer for f in schema.features])
    X[:, integral] = np.round(X[:, integral])
    X[:, 7:] = np.eye(3)[rng.integers(3, size=n)]
    return X


def _world(kind: str, schema: FeatureSchema, X: np.ndarray, rng: np.random.Generator) -> TabularWorld:
    """A white box of ``kind`` trained on ``X`` as ``data_gen.classifiers`` trains one."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    from envs.models import from_sklearn

    s = (X[:, 0] - 18) / 72 + X[:, 1] / 100 - X[:, 2] / 60 + X[:, 6] / 4 + X[:, 7] - X[:, 3] / 72
    y = (s + rng.normal(0, 0.3, len(X)) > 0.45).astype(int)
    if kind == "deep forest":  # random labels: trees far deeper than COMPLETE_DEPTH, the linked layout
        y = rng.integers(0, 2, len(X))
    if kind in ("forest", "deep forest"):
        est = RandomForestClassifier(n_estimators=4, max_depth=6 if kind == "forest" else None, random_state=0)
        return TabularWorld(f"compile/{kind}", schema, from_sklearn(est.fit(X, y)))
    scaler = StandardScaler().fit(X)
    est = MLPClassifier((8, 8), max_iter=300, random_state=0) if "mlp" in kind else LogisticRegression(max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(scaler.transform(X), y)
    model = from_sklearn(est, scaler.mean_, scaler.scale_)
    if kind == "surrogate mlp":  # as ``Surrogate.as_model`` gives it to the search on the surrogate
        from learners.tabular.surrogate import SurrogateMLP

        model = SurrogateMLP(model.weights, model.biases, blocks=True, rowwise=True)
    return TabularWorld(f"compile/{kind}", schema, model)


def _labels(world: TabularWorld, X: np.ndarray) -> tuple[Any, np.ndarray]:
    """MACE-like labels without MACE: each rejected row's first of its 5 nearest accepted rows that
    stays accepted once made reachable; and the rejected rows."""
    from learners.tabular import TabularLabels
    from learners.tabular.geometry import WorldGeometry, accepts

    geo = WorldGeometry.of(world)
    ok = accepts(world, X)
    A, Y = X[~ok], X[ok]
    near = np.argsort(geo.distance(A[:, None, :], Y[None, :, :]), axis=1, kind="stable")[:, :5]
    C = geo.project(A, Y[near])  # (n, 5, D)
    hit = accepts(world, C.reshape(-1, X.shape[1])).reshape(C.shape[:2])
    found = hit.any(1)
    CF = C[np.arange(len(A)), hit.argmax(1)][found]
    return TabularLabels(A[found], CF, geo.distance(A[found], CF)), A


def _bookkeeping(world: TabularWorld, X: np.ndarray) -> None:
    """A budgeted search's row bookkeeping (``rows.fresh``, ``rows.nearest_first``, ``rows.compact``) and the rules' weighted
    distance, called as the search calls them (the proposer, whose search they serve, is not a step above)."""
    from envs.rules import RuleSet
    from learners.tabular.geometry import WorldGeometry
    from learners.tabular.rows import compact, fresh, nearest_first, row_keys

    weighted = replace(world, rules=RuleSet.from_dict({"weights": {"income": {"up": 2.0, "down": 0.5}}}))
    for w in (world, weighted):
        geo = WorldGeometry.of(w)
        A = X[:4]
        C = geo.project(A, A[:, None, :] + np.linspace(-5.0, 5.0, 8)[None, :, None])
        fresh(C, row_keys(C[:, :2]))
        compact(C, 4)  # the screens a large round one takes (no toy world's round one reaches them)
        nearest_first(geo, A, C, 4, np.full(len(A), np.inf))
        nearest_first(geo, A[:1], C[:1], 4, np.full(1, np.inf), np.array([2]))


def _steps() -> Iterator[tuple[str, str]]:
    for kind, methods in MODELS:
        for method in methods:
            yield kind, method


def _cache_dirs(found: list[Any]) -> list[str]:
    """The folders of the kernels' on-disk caches (relative to the working directory where inside it)."""
    root = Path.cwd()
    out = []
    for k in found:
        path = Path(k.stats.cache_path)
        shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        if shown not in out:
            out.append(shown)
    return out


def _where(found: list[Any]) -> str:
    import numba

    return numba.config.CACHE_DIR or ", ".join(_cache_dirs(found))


def _counts(found: list[Any]) -> tuple[int, int]:
    return (sum(sum(k.stats.cache_hits.values()) for k in found),
            sum(sum(k.stats.cache_misses.values()) for k in found))


def compile_kernels(progress: bool = True) -> dict[str, Any]:
    """Compile, or load from numba's on-disk cache, every kernel of a tabular run for the argument
    types a run gives it, by running each generator on tiny synthetic worlds (see the module). Prints
    a progress line per step to stderr with ``progress``. Returns the seconds spent, how many kernels
    and signatures there are, how many were compiled and how many loaded from the cache in this call,
    ``from_cache`` (nothing had to be compiled) and the cache folders."""
    from learners.tabular import build_tabular_generator

    t0 = time.perf_counter()
    found = kernels()
    hits0, misses0 = _counts(found)
    where = _where(found)
    steps = list(_steps())
    rng = np.random.default_rng(0)
    schema = _schema()
    X = _rows(schema, 600, rng)
    worlds: dict[str, tuple[TabularWorld, Any, np.ndarray]] = {}
    for i, (kind, method) in enumerate(steps, 1):
        if progress:
            print(f"compiling search kernels (first use only; cached in {where}) {i}/{len(steps)} {kind}: {method} ...",
                  file=sys.stderr, flush=True)
        if kind not in worlds:
            world = _world(kind, schema, X, rng)
            worlds[kind] = (world, *_labels(world, X))
        world, labels, rejected = worlds[kind]
        params = {"max_epochs": 1} if method != "nearest_cfe" else {}
        gen = build_tabular_generator(method, params).fit(world, labels, seed=0)
        agents = rejected[:24]
        gen.recommend(world, agents)  # a batch
        gen.recommend(world, agents, n_alternatives=2)  # diverse alternatives (the service's)
        for x in agents[:3]:
            gen.recommend(world, x[None])  # one agent, as a request
    _bookkeeping(worlds["forest"][0], X)
    hits, misses = _counts(found)
    out = {"seconds": round(time.perf_counter() - t0, 2), "kernels": len(found),
           "signatures": sum(len(k.signatures) for k in found), "compiled": misses - misses0,
           "loaded": hits - hits0, "from_cache": misses == misses0, "cache": _cache_dirs(found)}
    if progress:
        print(f"compiling search kernels: done in {out['seconds']:.1f} s ({out['compiled']} compiled, "
              f"{out['loaded']} loaded from the cache)", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(compile_kernels(progress=True)))
