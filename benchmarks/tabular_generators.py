"""Learned generators against not learning on real data with MACE labels (issue 35).

    python benchmarks/tabular_generators.py                      # the 8 cells, labels 500 / 2,000, 150 held-out agents
    python benchmarks/tabular_generators.py --cells german/forest --sizes 250,1000 --test-agents 100
    # the published run: labels first (--labels-only, here or on a machine with more cores: the chunks
    # carry their agents and the cache key the model's weights), then the generators
    python benchmarks/tabular_generators.py --sizes 250,1000,2000 --fresh-agents 60 --labels-only --jobs 16
    python benchmarks/tabular_generators.py --sizes 250,1000,2000 --fresh-agents 60
    # a further point on some cells only (their 2,000 labels are reused; the others keep --sizes):
    python benchmarks/tabular_generators.py --sizes 250,1000,2000 --fresh-agents 60 --keep-online --sizes-for german/forest=250,1000,2000,8000
    # under the default rules of Adult and German (issue 55): labels, generators, GeCo and scores under them
    python benchmarks/tabular_generators.py --rules --cells adult/forest,adult/mlp,german/forest,german/mlp

Per cell (data set x model, seed 0):

- **held-out agents**: rejected rows of the data set's *test split* (never generated agents),
  labelled by MACE with a certificate (MILP, l1, rel_tol 1e-3);
- **training agents**: the rejected rows of the training split, then agents drawn around them
  (``data_gen.perturbed_agents.perturb_agents``) up to the largest size, labelled by MACE (rel_tol 1e-2)
  on ``--jobs`` processes in chunks under ``data_cache/tabular_generators/<cell>-<hash>/``: an
  interrupted run resumes, and a change of any setting that shapes the labels changes the hash;
- **past 2,000 agents** (``BASE_POOL``) the pool grows by tiers (``pool_tiers``): the pool of 2,000
  (one draw, as before), then the real rows not in it, then blocks of 2,000 drawn with seeds derived
  from the seed, each excluding every agent before it (the first block that comes back short ends the
  pool: COMPAS). A larger budget's pool starts with a smaller one's, and its cache is the 2,000-label
  one (the hash takes the largest size only up to 2,000): ``train/`` keeps those labels, ``train-more/``
  gets the agents past them; a budget of 8,000 labels only the 6,000 new agents;
- **per-cell budgets**: ``--sizes-for CELL=SIZES`` (repeatable) gives one cell its own curve, the
  others keep ``--sizes``; a cell whose JSON holds other sizes is recomputed (``--keep-online`` keeps its
  GeCo / MD-PSO results), and the report and the plot take each cell's curve as it is;
- for each label budget n (the learning curve) the first n training labels train the k-NN
  baseline (``nearest_cfe``, no learning), the named-CFE classifier (``named_cfe``) and the
  change-and-value network (``change_value``); each answers every held-out agent batched (time)
  and one at a time through a counted model (model calls per answer);
- GeCo and MD-PSO (online searches, no labels) answer the same agents, with their model calls.

Metrics: validity by the real model and the constraints; **optimal** = share of MACE-solved agents
answered within 1% of MACE's certified distance; distance ratio; µs per agent (batched) and the
speed-up over MACE's seconds per agent; model calls per answer (median, p95). The labelling cost is
MACE's CPU seconds summed over the n labels. Writes ``benchmarks/results/tabular_generators.{md,json}``
(one JSON per cell under ``benchmarks/results/tabular_generators/``, reused unless ``--force``) and
``benchmarks/results/tabular_generators/learning_curve.png``. The report and the plots are
``benchmarks/tabular_generators_report.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample, save  # noqa: E402
from benchmarks.tabular_generators_report import FRESH_METHODS, METHODS, ONLINE, plot, plot_frontier, report  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.classifiers import build, negatives  # noqa: E402
from data_gen.default_rules import DEFAULT_RULES  # noqa: E402
from data_gen.mace_labels import MaceLabelSet, label_tabular  # noqa: E402
from data_gen.perturbed_agents import PerturbParams, perturb_agents  # noqa: E402
from envs.rules import RuleSet  # noqa: E402
from envs.tabular import TabularWorld  # noqa: E402
from evaluation.counterfactual_metrics import Counted  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import TabularLabels, build_tabular_generator  # noqa: E402
from solvers.mace import MACE  # noqa: E402

CELLS = [f"{d}/{m}" for d in ("adult", "german", "compas", "credit") for m in ("forest", "mlp")]
VARIANTS = {"change_value_fast": ("change_value", {"scan_subsets": 0, "scan_features": 0, "scan_discrete": False,
                                                   "grid_subsets": 4}),
            # the same search with the network's per-agent predictions replaced by the labels' averages
            "change_value_no_net": ("change_value", {"use_network": False})}  # a method with other parameters
RESULTS = Path("benchmarks/results")
TRAIN_MACE = {"backend": "milp", "norm": "one", "rel_tol": 1e-2, "time_limit": 10.0}
TEST_MACE = {"backend": "milp", "norm": "one", "rel_tol": 1e-3, "time_limit": 30.0}
BASE_POOL = 2000  # training agents drawn at once; larger budgets add blocks past them (``pool_tiers``)
POOL_BLOCK = 2000  # agents per block past BASE_POOL
LABEL_CHUNK = 25  # agents per label chunk (label_tabular's default)


def _key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _first_pool(world: TabularWorld, X_train: np.ndarray, n: int, seed: int, perturb: PerturbParams
                ) -> tuple[np.ndarray, int, np.ndarray]:
    """One draw of ``n`` agents (the pool up to ``BASE_POOL``), how many are real, and the real rows (seeded order)."""
    real = negatives(world, X_train)
    real = real[np.random.default_rng(seed).permutation(len(real))]
    if n <= len(real):
        return real[:n], n, real
    extra = perturb_agents(world, real, n - len(real), seed=seed, params=perturb, allow_fewer=True)
    return np.concatenate([real, extra]), len(real), real


def _block_seed(seed: int, k: int) -> int:
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


def pool_tiers(world: TabularWorld, X_train: np.ndarray, n: int, seed: int, perturb: PerturbParams,
               base: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """The training pool of budget ``n`` in two tiers: ``first``, one draw of ``min(n, base)`` agents
    (``base`` 0: ``BASE_POOL``), and ``more``, the agents past it (empty for ``n <= base``): the real rows
    not in ``first`` (seeded order), then blocks of ``POOL_BLOCK`` agents drawn around the real rows,
    block k with a seed derived from (``seed``, k), excluding every agent before it. The first block
    that comes back short (the draws find no more new rejected rows) ends the pool. Each block depends
    only on the ones before, so ``more`` of a larger ``n`` extends ``more`` of a smaller one.
    Returns (first, more, how many agents of first + more are real)."""
    base = base or BASE_POOL
    first, n_real, real = _first_pool(world, X_train, min(n, base), seed, perturb)
    if n <= base:
        return first, first[:0], n_real
    need = n - len(first)
    rest = real[len(first):] if n_real == len(first) else real[:0]  # first holds generated rows: all real ones are in it
    parts = [rest[:need]]
    got, k = len(parts[0]), 0
    while got < need:
        k += 1
        block = perturb_agents(world, real, POOL_BLOCK, seed=_block_seed(seed, k), params=perturb, allow_fewer=True,
                               exclude=np.concatenate([first, *parts]))
        parts.append(block)
        got += len(block)
        if len(block) < POOL_BLOCK:
            break
    return first, np.concatenate(parts)[:need], n_real + len(parts[0])


def training_pool(world: TabularWorld, X_train: np.ndarray, n: int, seed: int, perturb: PerturbParams,
                  base: int = 0) -> tuple[np.ndarray, int]:
    """The first ``n`` training agents: the real rejected rows (seeded order), then generated ones
    (fewer where the draws find no more new rejected rows: COMPAS's few discrete values).
    Returns the agents and how many of them are real.

    Up to ``base`` (``BASE_POOL``, 2,000) agents this is one draw of ``n`` agents (the generated part
    of a smaller budget is another draw); beyond, the pool of ``base`` agents followed by further
    blocks (``pool_tiers``), so ``training_pool(n)[:m]`` equals ``training_pool(m)`` for ``base <= m <= n``
    and a larger budget only adds labels to those cached."""
    first, more, n_real = pool_tiers(world, X_train, n, seed, perturb, base)
    return (np.concatenate([first, more]) if len(more) else first), n_real


def _cat_labels(a: MaceLabelSet, b: MaceLabelSet, n: int) -> MaceLabelSet:
    return MaceLabelSet(*(np.concatenate([getattr(a, k), getattr(b, k)])[:n]
                          for k in ("X", "cf", "distance", "delta_min", "status", "runtime")),
                        a.feature_names, a.column_feature)


def training_labels(world: TabularWorld, X_train: np.ndarray, n: int, seed: int, perturb: PerturbParams, cache: Path,
                    *, jobs: int, progress: bool, base: int = 0) -> tuple[MaceLabelSet, np.ndarray, int]:
    """MACE labels of ``training_pool(n)`` (resumable), with the pool and its real rows' count.

    The first tier (up to ``base`` agents) is labelled in ``cache/train``, as it always was; the agents
    past it in ``cache/train-more``, in whole chunks of ``LABEL_CHUNK`` counted from the tier's start
    (up to 24 labels more than ``n``), so a larger budget resumes every chunk of a smaller one."""
    base = base or BASE_POOL
    if n <= base:
        pool, n_real = training_pool(world, X_train, n, seed, perturb, base)
        return label_tabular(world, pool, MACE(**TRAIN_MACE), cache / "train", n_jobs=jobs, chunk_size=LABEL_CHUNK,
                             progress=progress), pool, n_real
    first, more, n_real = pool_tiers(world, X_train, n + LABEL_CHUNK, seed, perturb, base)  # a prefix is pool(n)'s
    need = n - len(first)
    pool = np.concatenate([first, more[:need]])
    n_real = min(n_real, len(pool))  # the real rows come first
    a = label_tabular(world, first, MACE(**TRAIN_MACE), cache / "train", n_jobs=jobs, chunk_size=LABEL_CHUNK,
                      progress=progress)
    more = more[: -(-need // LABEL_CHUNK) * LABEL_CHUNK]
    if not len(more):
        return a, pool, n_real
    b = label_tabular(world, more, MACE(**TRAIN_MACE), cache / "train-more", n_jobs=jobs, chunk_size=LABEL_CHUNK,
                      progress=progress)
    return _cat_labels(a, b, len(pool)), pool, n_real


def _counted_world(world: TabularWorld) -> tuple[TabularWorld, Counted]:
    counted = Counted(world.model)
    return replace(world, model=counted), counted  # the same world (rules included) behind a counted model


def _quantiles(calls: list[int]) -> dict[str, float]:
    a = np.asarray(calls, float)
    return {"calls_median": float(np.median(a)), "calls_p95": float(np.quantile(a, 0.95)),
            "calls_mean": float(a.mean())}


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The garbage collector off while a time is taken, as ``timeit`` does: a full collection of this
    process's heap (torch, the data, every fitted model) takes a few hundred ms, and landing in one
    12 ms batch it made a run 1.5x slower. MACE's time is taken the same way."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def best_of(fn: Any, repeats: int = 5, min_seconds: float = 0.25) -> tuple[float, Any]:
    """(the best wall seconds of ``fn()``, its last result) over at least ``repeats`` runs and ``min_seconds``
    of runs, the garbage collector off: timeit's convention on a shared machine."""
    best, out, runs, spent = np.inf, None, 0, 0.0
    with _no_gc():
        while runs < repeats or spent < min_seconds:
            t = time.perf_counter()
            out = fn()
            took = time.perf_counter() - t
            best, runs, spent = min(best, took), runs + 1, spent + took
    return best, out


def evaluate_generator(gen: Any, world: TabularWorld, X: np.ndarray, mace_d: np.ndarray, mace_ok: np.ndarray,
                       repeats: int = 5, min_seconds: float = 0.25) -> dict[str, Any]:
    """Batched time (the best of at least ``repeats`` runs and ``min_seconds`` of runs, timeit's
    convention on a shared machine), answers scored against MACE, and model calls per answer (each
    agent answered alone through a counted model, as a server answers a request)."""
    cworld, counted = _counted_world(world)
    with warming_up(f"{getattr(gen, 'method', type(gen).__name__)} on {len(X)} agents and on one"):
        gen.recommend(world, X)  # every compiled path this batch takes
        gen.recommend(cworld, X[:1])  # and one agent alone through the counted model, as timed below
    best, rec = best_of(lambda: gen.recommend(world, X), repeats, min_seconds)
    m = score_answers(world, X, rec.CF, rec.found, mace_d, mace_ok, "one")
    calls, single = [], []
    for x in X:
        c0 = counted.calls
        t = time.perf_counter()
        gen.recommend(cworld, x[None])
        single.append(time.perf_counter() - t)
        calls.append(counted.calls - c0)
    m.update(_quantiles(calls))
    m["us_per_agent_batched"] = 1e6 * best / len(X)
    m["ms_single_p50"] = 1e3 * float(np.median(single))
    m["ms_single_p99"] = 1e3 * float(np.quantile(single, 0.99))
    return m


def time_mace(world: TabularWorld, X: np.ndarray, n: int) -> dict[str, float]:
    """MACE's seconds per agent on the first ``n`` held-out agents, re-solved here, in this process
    and this run (the labels' own times came from worker processes on another day)."""
    solver = MACE(**TEST_MACE)
    with warming_up("MACE on one agent"):
        solver.solve(world, X[0])
    secs = []
    with _no_gc():
        for x in X[:n]:
            t = time.perf_counter()
            solver.solve(world, x)
            secs.append(time.perf_counter() - t)
    return {"agents": len(secs), "s_per_agent_mean": float(np.mean(secs)), "s_per_agent_median": float(np.median(secs))}


def evaluate_online(name: str, world: TabularWorld, domain: np.ndarray, X: np.ndarray, mace_d: np.ndarray,
                    mace_ok: np.ndarray, seed: int) -> dict[str, Any]:
    """GeCo or MD-PSO, one agent at a time, with the model calls each reports."""
    from solvers.geco import GeCo, Plaf
    from solvers.pso import MDPSO

    # their defaults (k = 5 diverse answers: the search GeCo's and MD-PSO's results were measured with),
    # GeCo with the schema's constraints only (Plaf()), as MACE and the generators have them; the nearest
    # valid answer is the answer
    solver = GeCo(plaf=Plaf()).fit(world, domain) if name == "geco" else MDPSO(seed=seed).fit(world, domain)
    CF = np.full(X.shape, np.nan)
    with warming_up(f"{name} on one agent"):
        solver.solve(world, X[0])
    secs, calls = [], []
    for i, x in enumerate(X):
        t = time.perf_counter()
        found = solver.solve(world, x)
        secs.append(time.perf_counter() - t)
        calls.append(int(found[0].extra.get("model_calls", 0)))
        ok = [r for r in found if r.status == "ok" and r.valid]
        if ok:
            best = min(ok, key=lambda r: float(r.extra.get("distance", np.inf)))
            CF[i] = np.asarray(best.extra["counterfactual"], float)
    m = score_answers(world, X, CF, ~np.isnan(CF).any(1), mace_d, mace_ok, "one")
    m.update(_quantiles(calls))
    m["us_per_agent_batched"] = 1e6 * float(np.mean(secs))  # one agent per call: no batching
    m["ms_single_p50"] = 1e3 * float(np.median(secs))
    m["ms_single_p99"] = 1e3 * float(np.quantile(secs, 0.99))
    return m


@dataclass
class Cell:
    """One data set x model: its world, held-out agents and where its labels are cached."""

    name: str
    build: Any  # data_gen.classifiers.TabularBuild
    sizes: list[int]
    perturb: PerturbParams
    cache: Path
    test: np.ndarray

    @classmethod
    def of(cls, cell: str, args: argparse.Namespace) -> Cell:
        dataset, model = cell.split("/")
        sizes = cell_sizes(cell, args)
        perturb = PerturbParams(args.numeric_scale, args.resample_prob)
        b = build(dataset, model, seed=args.seed)
        rules = None
        if getattr(args, "rules", False):  # the data set's default rules (issue 55): the labels, the generators and the scores under them
            if dataset not in DEFAULT_RULES:
                raise SystemExit(f"--rules: {dataset!r} has no default rules (have {sorted(DEFAULT_RULES)})")
            rules = DEFAULT_RULES[dataset]
            b = replace(b, world=replace(b.world, rules=RuleSet.from_dict(rules)))
        cache = Path(args.cache) / (f"{dataset}-{model}-" + _key(**({"rules": rules} if rules else {}),
            # past BASE_POOL the labels of the pool of BASE_POOL agents are extended in place (``training_labels``)
            seed=args.seed, max_n=min(sizes[-1], BASE_POOL), perturb=perturb, train_mace=TRAIN_MACE, test_mace=TEST_MACE,
            test_agents=args.test_agents, world=b.world.model.to_dict()))
        return cls(cell, b, sizes, perturb, cache, sample(b.world, b.data.X_test, args.test_agents, args.seed))

    def test_labels(self, args: argparse.Namespace) -> Any:
        return label_tabular(self.build.world, self.test, MACE(**TEST_MACE), self.cache / "test", n_jobs=args.jobs,
                             progress=not args.quiet)

    def train_labels(self, args: argparse.Namespace, progress: bool = True) -> tuple[MaceLabelSet, np.ndarray, int]:
        """MACE labels of the training pool of the largest budget, the pool, and how many of it are real rows."""
        return training_labels(self.build.world, self.build.data.X_train, self.sizes[-1], args.seed, self.perturb,
                               self.cache, jobs=args.jobs, progress=progress and not args.quiet)


def cell_sizes(cell: str, args: argparse.Namespace) -> list[int]:
    """The cell's label budgets: its ``--sizes-for CELL=SIZES`` where given, else ``--sizes``."""
    sizes = args.sizes
    for item in getattr(args, "sizes_for", None) or []:
        name, sep, value = item.partition("=")
        if not sep or name not in CELLS:
            raise SystemExit(f"--sizes-for: expected CELL=SIZES with a known cell, got {item!r}")
        if name == cell:
            sizes = value
    return sorted(int(s) for s in sizes.split(","))


def label_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """Only the cell's MACE labels (held-out, training, and fresh agents with ``--fresh-agents``),
    into the resumable cache: ``--labels-only`` runs this on a larger machine, and the benchmark
    then reads the chunks (the cache key holds the model's weights, so labels never meet another model)."""
    c = Cell.of(cell, args)
    t0 = time.perf_counter()
    test = c.test_labels(args)
    fresh_n = 0
    if args.fresh_agents > 0:
        fresh_n = len(fresh_labels(c, args.fresh_agents, args).X)
    train, _, _ = c.train_labels(args)
    out = {"cell": cell, "cache": str(c.cache), "sizes": c.sizes, "test": int(len(test.X)), "fresh": fresh_n,
           "train": int(len(train.X)),
           "train_cpu_hours": float(train.runtime.sum() / 3600), "seconds": time.perf_counter() - t0}
    print(f"[{cell}] labels: {out}", flush=True)
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c = Cell.of(cell, args)
    dataset, model = cell.split("/")
    sizes, perturb, b, test = c.sizes, c.perturb, c.build, c.test
    world = b.world

    def log(*a: Any) -> None:
        print(f"[{cell}]", *a, flush=True)

    t0 = time.perf_counter()
    test_labels = c.test_labels(args)
    train_labels, pool, n_real = c.train_labels(args)
    log(f"test accuracy {b.metrics['test_accuracy']:.3f}; {len(test)} held-out rejected test rows; "
        f"{len(pool)} training agents ({n_real} real rejected rows, {len(pool) - n_real} generated)")
    log(f"labels ready in {time.perf_counter() - t0:.0f} s (resumed chunks count 0 s)")
    mace_d, mace_ok = test_labels.distance, test_labels.ok
    timing = time_mace(world, test, args.mace_timing) if args.mace_timing > 0 else None
    if timing:
        log(f"MACE re-timed on {timing['agents']} agents: {timing['s_per_agent_mean']:.3f} s per agent")
    out: dict[str, Any] = {
        "dataset": dataset, "model": model, "seed": args.seed, "test_accuracy": b.metrics["test_accuracy"],
        "test_agents": int(len(test)), "test_mace_solved": int(mace_ok.sum()),
        "real_training_rows": int(n_real), "perturb": {"numeric_scale": perturb.numeric_scale, "resample_prob": perturb.resample_prob}, "sizes": sizes,
        # the speed-ups divide by MACE's time in this run where it was re-timed, else the labels' times
        "mace": {"s_per_agent_mean": timing["s_per_agent_mean"] if timing else float(test_labels.runtime.mean()),
                 "s_per_agent_median": timing["s_per_agent_median"] if timing else float(np.median(test_labels.runtime)),
                 "timed_in_run": timing, "labels_s_per_agent_mean": float(test_labels.runtime.mean()),
                 "no_recourse": int((test_labels.status == "no_recourse").sum()),
                 "unknown": int((test_labels.status == "unknown").sum())},
        "curve": [], "online": {},
    }
    for n in sizes:
        rows = np.flatnonzero(train_labels.ok[:n])
        labels = TabularLabels(train_labels.X[rows], train_labels.cf[rows], train_labels.distance[rows])
        point: dict[str, Any] = {"labels": n, "agents": int(min(n, len(pool))), "solved": int(len(rows)),
                                 "label_cpu_hours": float(train_labels.runtime[:n].sum() / 3600), "methods": {}}
        for method in METHODS:
            t = time.perf_counter()
            name, params = VARIANTS.get(method, (method, {}))
            if args.epochs and name != "nearest_cfe":
                params = {**params, "max_epochs": args.epochs}
            gen = build_tabular_generator(name, params).fit(world, labels, seed=args.seed)
            fit_s = time.perf_counter() - t
            m = evaluate_generator(gen, world, test, mace_d, mace_ok)
            m["fit_seconds"] = fit_s
            m["speedup_vs_mace"] = out["mace"]["s_per_agent_mean"] / (m["us_per_agent_batched"] / 1e6)
            point["methods"][method] = m
            log(f"n={n} {method}: optimal {m['optimal_share']:.3f}, validity {m['validity']}, "
                f"{m['us_per_agent_batched']:.0f} µs/agent, calls median {m['calls_median']:.0f}")
        out["curve"].append(point)
    if not args.no_online:
        out["online"] = online_methods(cell, args, out["mace"]["s_per_agent_mean"])
    if args.fresh_agents > 0:
        out["fresh"] = {**fresh_check(cell, args), "requested": args.fresh_agents}
    return out


def fresh_agents(c: Cell, n: int, seed: int) -> np.ndarray:
    """Up to ``n`` rejected test rows outside the held-out sample (seeded order)."""
    neg = negatives(c.build.world, c.build.data.X_test)
    seen = {r.tobytes() for r in c.test}
    fresh = neg[[r.tobytes() not in seen for r in neg]]
    return fresh[np.random.default_rng(seed + 1).permutation(len(fresh))[:n]]


def fresh_labels(c: Cell, n: int, args: argparse.Namespace) -> MaceLabelSet:
    """MACE labels (as the held-out agents': ``TEST_MACE``) of ``fresh_agents``: real rejected test rows outside the
    held-out sample, none of them looked at while a method was built (cached, resumable, under ``fresh-<n>``)."""
    return label_tabular(c.build.world, fresh_agents(c, n, args.seed), MACE(**TEST_MACE), c.cache / f"fresh-{n}",
                         n_jobs=args.jobs, progress=not args.quiet)


def fresh_check(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """The generators at the largest label budget on up to ``--fresh-agents`` rejected test rows
    outside the held-out sample: agents no parameter of the generators was ever chosen on (the
    sample's agents were looked at while the search was built). MACE labels them first (cached)."""
    c = Cell.of(cell, args)
    world = c.build.world
    labels = fresh_labels(c, args.fresh_agents, args)
    fresh = labels.X
    out: dict[str, Any] = {"agents": int(len(fresh)), "methods": {}}
    if not len(fresh):
        return out
    train, _, _ = c.train_labels(args, progress=False)
    rows = np.flatnonzero(train.ok[: c.sizes[-1]])
    tl = TabularLabels(train.X[rows], train.cf[rows], train.distance[rows])
    out["mace_solved"] = int(labels.ok.sum())
    for method in FRESH_METHODS:
        name, params = VARIANTS.get(method, (method, {}))
        if args.epochs and name != "nearest_cfe":
            params = {**params, "max_epochs": args.epochs}
        gen = build_tabular_generator(name, params).fit(world, tl, seed=args.seed)
        rec = gen.recommend(world, fresh)
        m = score_answers(world, fresh, rec.CF, rec.found, labels.distance, labels.ok, "one")
        out["methods"][method] = {k: m[k] for k in ("optimal_share", "validity", "coverage", "distance_ratio_p90")}
        print(f"[{cell}] fresh agents ({len(fresh)}): {method} optimal {m['optimal_share']:.3f}", flush=True)
    return out


def online_methods(cell: str, args: argparse.Namespace, mace_s: float | None = None) -> dict[str, Any]:
    """GeCo and MD-PSO on the cell's held-out agents (their MACE labels read from the cache)."""
    c = Cell.of(cell, args)
    world, data, test = c.build.world, c.build.data, c.test
    labels = c.test_labels(args)
    mace_s = float(labels.runtime.mean()) if mace_s is None else mace_s
    out = {}
    for name in ONLINE:
        m = evaluate_online(name, world, data.X_train, test, labels.distance, labels.ok, args.seed)
        m["speedup_vs_mace"] = mace_s / (m["us_per_agent_batched"] / 1e6)
        out[name] = m
        print(f"[{cell}] {name}: optimal {m['optimal_share']:.3f}, {m['ms_single_p50']:.0f} ms, "
              f"calls {m['calls_median']:.0f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated dataset/model cells")
    p.add_argument("--sizes", default="500,2000", help="training label budgets of the learning curve")
    p.add_argument("--sizes-for", action="append", default=[], metavar="CELL=SIZES",
                   help="another curve for one cell, e.g. german/forest=250,1000,2000,8000 (repeatable; the others keep --sizes)")
    p.add_argument("--test-agents", type=int, default=150, help="held-out rejected test rows per cell (at most)")
    p.add_argument("--seed", type=int, default=0, help="world, split, sample and training seed")
    p.add_argument("--jobs", type=int, default=2, help="MACE labelling worker processes")
    p.add_argument("--numeric-scale", type=float, default=0.05, help="generated agents: numeric noise / span")
    p.add_argument("--resample-prob", type=float, default=0.15, help="generated agents: discrete resample chance")
    p.add_argument("--epochs", type=int, default=0, help="training epochs of the learned generators (0: their defaults)")
    p.add_argument("--mace-timing", type=int, default=20,
                   help="held-out agents MACE re-solves in this run for the speed-ups (0: the labels' own times)")
    p.add_argument("--fresh-agents", type=int, default=0,
                   help="also score the generators on up to this many rejected test rows outside the sample (also on finished cells)")
    p.add_argument("--no-online", action="store_true", help="skip GeCo and MD-PSO")
    p.add_argument("--redo-online", action="store_true", help="rerun GeCo and MD-PSO on finished cells (labels cached)")
    p.add_argument("--cache", default="data_cache/tabular_generators", help="label chunks (resumable)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--force", action="store_true", help="recompute cells whose JSON exists")
    p.add_argument("--keep-online", action="store_true", help="with --force: keep the GeCo / MD-PSO results of the cell")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--rules", action="store_true",
                   help="the worlds with their default rules (Adult, German; issue 55): tabular_generators_rules.{md,json}")
    p.add_argument("--labels-only", action="store_true",
                   help="only compute the cells' MACE labels into --cache (e.g. on a machine with more cores)")
    args = p.parse_args(argv)
    if args.labels_only:
        for cell in args.cells.split(","):
            if cell not in CELLS:
                raise SystemExit(f"--cells: unknown cell {cell!r}; known: {', '.join(CELLS)}")
        for cell in args.cells.split(","):
            label_cell(cell, args)
        return
    out = Path(args.out)
    stem = "tabular_generators_rules" if args.rules else "tabular_generators"
    cell_dir = out / stem
    cell_dir.mkdir(parents=True, exist_ok=True)
    cells = []
    for cell in args.cells.split(","):
        if cell not in CELLS:
            raise SystemExit(f"--cells: unknown cell {cell!r}; known: {', '.join(CELLS)}")
        path = cell_dir / f"{cell.replace('/', '_')}.json"
        if path.exists() and not args.force:
            done = json.loads(path.read_text())
            if done.get("sizes") == cell_sizes(cell, args):
                if args.redo_online:
                    done["online"] = online_methods(cell, args, done["mace"]["s_per_agent_mean"])
                    save(done, path)
                if args.fresh_agents > 0 and done.get("fresh", {}).get("requested") != args.fresh_agents:
                    done["fresh"] = {**fresh_check(cell, args), "requested": args.fresh_agents}
                    save(done, path)
                cells.append(done)
                continue
        old = json.loads(path.read_text()).get("online") if path.exists() and args.keep_online else None
        if old:
            args.no_online, was = True, args.no_online
            result = run_cell(cell, args)
            args.no_online = was
            result["online"] = old  # the online searches do not depend on the generators' code
        else:
            result = run_cell(cell, args)
        cells.append(save(result, path))
    command = "python benchmarks/tabular_generators.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    (out / f"{stem}.md").write_text(report(cells, command))
    (out / f"{stem}.json").write_text(json.dumps(cells, indent=1, default=float))
    plot(cells, cell_dir / "learning_curve.png")
    plot_frontier(cells, cell_dir / "frontier.png")
    print(report(cells, command))


if __name__ == "__main__":
    main()
