"""Your data: two tables the project does not ship, each family of fitted models in a Pipeline (issue 54 item 6).

    python benchmarks/your_data.py                    # every cell below, 30 agents, 300 training labels
    python benchmarks/your_data.py --cells wage/xgb,default/lr --agents 20 --labels 150
    python benchmarks/your_data.py --force            # recompute the cells (MACE labels stay cached)

Tables (ISLP's CSVs, ``pip install --no-deps ISLP``):

- **default** (ISLP ``Default``, 10,000 rows): target ``default``, favourable ``"No"``; ``student``
  immutable, ``balance`` decrease-only (paying a card down is an action; borrowing more to look safer is
  not one we would recommend, even where a tree's steps would reward it), ``income`` free;
- **wage** (ISLP ``Wage``, 3,000 rows): target ``high_wage = wage > 100`` (55% of rows), favourable
  True; ``wage`` and ``logwage`` dropped (they are the target), ``region`` dropped (one value);
  ``year``, ``race``, ``maritl`` and ``health`` immutable, ``age`` increase-only, ``education`` an
  ordinal (its five levels in order) that only increases, ``jobclass`` and ``health_ins`` free.

Models (seeded, fitted here on the 80% training split, the split ``build_user_world`` makes):
``Pipeline(ColumnTransformer([OneHotEncoder, OrdinalEncoder (education), StandardScaler]), model)`` with
LogisticRegression, RandomForest (50 trees, depth 8), HistGradientBoosting (100 iterations, depth 5),
XGBoost and LightGBM (100 trees, depth 5), an MLP (16, 8) (ReLU); and the boosted-at-deployment-size
point, XGBoost and LightGBM with 200 trees of depth 6 (``default/xgb200``, ``default/lgbm200``). Every
model is fitted on 0/1 labels (1 = favourable). Education is ordinal-encoded: a one-hot group cannot be
one-way, and the world says so when a model one-hot encodes an increase-only feature.

Per cell, on ``--agents`` held-out rejected agents (rejected rows of the test split, seeded sample):

- the route (white box or black box), its report and the agreement check of ``build_user_world``;
- **MACE** (MILP, l1, rel_tol 1e-3, 60 s per agent), solved in this process one agent after another
  after an untimed warm-up: certified share (an optimum within rel_tol, or a proof of no recourse),
  seconds per explanation (median, p95), every answer checked by the user's own model (the oracle);
- **generators** (``change_value``, ``nearest_cfe``) trained on MACE's answers (rel_tol 1e-2, 10 s) for
  ``--labels`` training agents: the rejected training rows, then agents drawn around them
  (``data_gen.perturbed_agents``), labelled on ``--jobs`` processes in resumable chunks under
  ``data_cache/your_data/``; share within 1% of MACE, µs per agent batched (warmed up first, best of
  several runs), every answer checked by the oracle;
- **DiCE** (``dice-ml``, method random, its defaults, ``total_CFs=1``) on the same Pipeline
  (``dice_ml.Model(model=pipeline, backend="sklearn")``) and agents, immutable features left out of
  ``features_to_vary`` and one-way features given per-agent ``permitted_range``: validity by the
  pipeline (and the constraints), distance ratio to MACE (MACE's normalised l1, via the world's
  encoding), seconds per agent (30 s timeout per agent).

Writes ``benchmarks/results/your_data.{md,json}``; each finished cell is kept under
``data_cache/your_data/cells/`` and reused unless ``--force``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

if __name__ == "__main__":  # DiCE's progress bars, off in a run of the script
    os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample, save  # noqa: E402
from benchmarks.tabular_generators import TRAIN_MACE, best_of, training_labels  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from benchmarks.your_data_report import report  # noqa: E402
from data_gen.mace_labels import label_tabular  # noqa: E402
from data_gen.perturbed_agents import PerturbParams  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import WorldGeometry, build_tabular_generator  # noqa: E402
from solvers.mace import MACE  # noqa: E402

TABLES = ("default", "wage")
FAMILIES = ("lr", "rf", "hgb", "xgb", "lgbm", "mlp")
DEPLOYMENT = ("xgb200", "lgbm200")  # the boosted-at-deployment-size point
CELLS = [f"{t}/{f}" for t in TABLES for f in FAMILIES] + [f"default/{f}" for f in DEPLOYMENT]
KNOWN = [f"{t}/{f}" for t in TABLES for f in FAMILIES + DEPLOYMENT]
TEST_MACE = {"backend": "milp", "norm": "one", "rel_tol": 1e-3, "time_limit": 60.0}
GENERATORS = ("change_value", "nearest_cfe")
RESULTS = Path("benchmarks/results")
WAGE_EDUCATION = ["1. < HS Grad", "2. HS Grad", "3. Some College", "4. College Grad", "5. Advanced Degree"]


# ------------------------------------------------------------------------------------------ tables

@dataclass
class Table:
    """A table as a user brings it: the frame, its target, the spec they wrote, how their model encodes it."""

    name: str
    frame: pd.DataFrame  # features and the target
    target: str
    favourable: Any
    spec: dict[str, Any]  # merged over the inferred one (data_gen.spec.load_spec)
    onehot: list[str]
    ordinal: dict[str, list] = field(default_factory=dict)  # column -> levels, low to high
    numeric: list[str] = field(default_factory=list)

    @property
    def features(self) -> list[str]:
        return [c for c in self.frame.columns if c != self.target]

    def y01(self) -> np.ndarray:
        return (self.frame[self.target] == self.favourable).to_numpy(np.int64)


def islp_dir() -> Path:
    spec = importlib.util.find_spec("ISLP")
    if spec is None:
        raise SystemExit("ISLP is not installed: pip install --no-deps ISLP (its CSVs are all this needs)")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def islp_table(name: str) -> Table:
    """The ISLP table ``name`` (default, wage) with the spec this benchmark uses (see the docstring)."""
    if name == "default":
        df = pd.read_csv(islp_dir() / "Default.csv")
        spec = {"features": {"student": {"mutability": "immutable"}, "balance": {"mutability": "decrease"},
                             "income": {"mutability": "free"}}}
        return Table("default", df, "default", "No", spec, ["student"], {}, ["balance", "income"])
    if name == "wage":
        df = pd.read_csv(islp_dir() / "Wage.csv")
        df = df.assign(high_wage=df.wage > 100).drop(columns=["wage", "logwage", "region"])
        spec = {"features": {
            "year": {"mutability": "immutable"}, "age": {"mutability": "increase"},
            "maritl": {"mutability": "immutable"}, "race": {"mutability": "immutable"},
            "education": {"kind": "ordinal", "levels": WAGE_EDUCATION, "mutability": "increase"},
            "jobclass": {"mutability": "free"}, "health": {"mutability": "immutable"},
            "health_ins": {"mutability": "free"}}}
        return Table("wage", df, "high_wage", True, spec, ["maritl", "race", "jobclass", "health", "health_ins"],
                     {"education": WAGE_EDUCATION}, ["year", "age"])
    raise SystemExit(f"unknown table {name!r} (known: {', '.join(TABLES)})")


def estimator(family: str, seed: int) -> Any:
    from lightgbm import LGBMClassifier
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from xgboost import XGBClassifier

    return {
        "lr": lambda: LogisticRegression(max_iter=2000),
        "rf": lambda: RandomForestClassifier(n_estimators=50, max_depth=8, random_state=seed, n_jobs=1),
        "hgb": lambda: HistGradientBoostingClassifier(max_iter=100, max_depth=5, random_state=seed),
        "xgb": lambda: XGBClassifier(n_estimators=100, max_depth=5, random_state=seed, n_jobs=1),
        "lgbm": lambda: LGBMClassifier(n_estimators=100, max_depth=5, random_state=seed, n_jobs=1, verbose=-1),
        "mlp": lambda: MLPClassifier((16, 8), max_iter=1000, random_state=seed),
        "xgb200": lambda: XGBClassifier(n_estimators=200, max_depth=6, random_state=seed, n_jobs=1),
        "lgbm200": lambda: LGBMClassifier(n_estimators=200, max_depth=6, num_leaves=63, random_state=seed, n_jobs=1,
                                          verbose=-1),
    }[family]()


def make_pipeline(table: Table, family: str, seed: int) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    steps = [("cat", OneHotEncoder(sparse_output=False, handle_unknown="ignore"), table.onehot)]
    if table.ordinal:
        steps.append(("ord", OrdinalEncoder(categories=list(table.ordinal.values())), list(table.ordinal)))
    steps.append(("num", StandardScaler(), table.numeric))
    return Pipeline([("prep", ColumnTransformer(steps)), ("model", estimator(family, seed))])


def split_rows(y01: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The 80/20 split ``data_gen.user_world`` makes (same call, same seed): the model never sees the test rows."""
    from sklearn.model_selection import train_test_split

    return train_test_split(np.arange(len(y01)), test_size=0.2, stratify=y01, random_state=seed)


def _key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------- a cell

@dataclass
class Fitted:
    """A cell's table, fitted Pipeline, world and bundle."""

    table: Table
    pipe: Any
    world: Any
    bundle: Any
    train: np.ndarray
    test: np.ndarray
    seconds: dict[str, float]


def fit_cell(cell: str, seed: int) -> Fitted:
    """Fit the cell's Pipeline on the training split and build its world (translation + agreement check)."""
    from data_gen.user_world import build_user_world

    name, family = cell.split("/")
    table = islp_table(name)
    y = table.y01()
    train, test = split_rows(y, seed)
    pipe = make_pipeline(table, family, seed)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an MLP's convergence warning
        pipe.fit(table.frame.iloc[train][table.features], y[train])
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    world, bundle = build_user_world(table.frame, spec=table.spec, target=table.target, favourable=table.favourable,
                                     model=pipe, seed=seed, name=cell)
    build_s = time.perf_counter() - t
    enc = bundle.encoder
    if not np.array_equal(bundle.data.X_test, enc.encode(table.frame.iloc[test][bundle.spec.names])):
        raise RuntimeError(f"{cell}: the world's test split is not the rows held out from the model")
    return Fitted(table, pipe, world, bundle, train, test, {"fit": fit_s, "build_user_world": build_s})


def mace_summary(labels: Any, oracle: Any) -> dict[str, Any]:
    ok = labels.ok
    gap_ok = labels.distance - labels.delta_min <= TEST_MACE["rel_tol"] * labels.distance + 1e-7
    certified = (ok & gap_ok) | (labels.status == "no_recourse")
    rt = labels.runtime
    accepted = oracle(labels.cf[ok]) if ok.any() else np.zeros(0, bool)
    return {"agents": int(len(labels)), "solved": int(ok.sum()), "no_recourse": int((labels.status == "no_recourse").sum()),
            "unknown": int((labels.status == "unknown").sum()), "certified": int(certified.sum()),
            "certified_share": float(certified.mean()) if len(labels) else None,
            "s_median": float(np.median(rt)), "s_p95": float(np.quantile(rt, 0.95)), "s_mean": float(rt.mean()),
            "s_max": float(rt.max()), "oracle_accepted": int(accepted.sum()), "oracle_checked": int(ok.sum())}


def evaluate_generator(gen: Any, world: Any, X: np.ndarray, mace_d: np.ndarray, mace_ok: np.ndarray,
                       repeats: int = 5, min_seconds: float = 0.25) -> dict[str, Any]:
    """The batch answered after a warm-up, timed as the best of at least ``repeats`` runs and ``min_seconds``
    (the garbage collector off, as ``benchmarks/tabular_generators.py`` times it), scored against MACE; then
    each agent alone (a server's single request), where a failure is counted with its agent, not fatal."""
    with warming_up(f"{gen.method} on {len(X)} agents and on one"):
        gen.recommend(world, X)
        gen.recommend(world, X[:1])
    best, rec = best_of(lambda: gen.recommend(world, X), repeats, min_seconds)
    m = score_answers(world, X, rec.CF, rec.found, mace_d, mace_ok, "one")
    single, failed = [], {}
    for i, x in enumerate(X):
        t = time.perf_counter()
        try:
            gen.recommend(world, x[None])
        except Exception as err:  # noqa: BLE001 (a generator's bug on one agent: counted, named)
            failed[i] = f"{type(err).__name__}: {str(err)[:160]}"
            continue
        single.append(time.perf_counter() - t)
    m["us_per_agent_batched"] = 1e6 * best / len(X)
    m["ms_single_p50"] = 1e3 * float(np.median(single)) if single else None
    m["single_failures"] = {str(k): v for k, v in failed.items()}
    return m


def run_generators(f: Fitted, agents: np.ndarray, test_labels: Any, args: argparse.Namespace, cache: Path,
                   log: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    world, data, oracle = f.world, f.bundle.data, f.bundle.oracle
    t = time.perf_counter()
    train, pool, n_real = training_labels(world, data.X_train, args.labels, args.seed, PerturbParams(), cache,
                                          jobs=args.jobs, progress=not args.quiet)
    ok = np.flatnonzero(train.ok)
    info = {"agents": int(len(pool)), "real_rejected_rows": int(n_real), "solved": int(len(ok)),
            "seconds_this_run": time.perf_counter() - t, "mace_cpu_seconds": float(train.runtime.sum()),
            "mace": TRAIN_MACE}
    log(f"training labels: {len(pool)} agents ({n_real} real rejected rows), {len(ok)} solved, "
        f"{info['mace_cpu_seconds']:.0f} MACE CPU s")
    from learners.tabular import TabularLabels

    labels = TabularLabels(train.X[ok], train.cf[ok], train.distance[ok])
    out = {}
    for method in args.generators:
        t = time.perf_counter()
        params = {"max_epochs": args.epochs} if args.epochs and method != "nearest_cfe" else {}
        gen = build_tabular_generator(method, params).fit(world, labels, seed=args.seed)
        fit_s = time.perf_counter() - t
        m = evaluate_generator(gen, world, agents, test_labels.distance, test_labels.ok)
        rec = gen.recommend(world, agents)  # the same answers again, for the user's own model
        rows = np.flatnonzero(rec.found)
        broken = WorldGeometry.of(world, "one").violations(agents[rows], rec.CF[rows]) if len(rows) else []
        ok = rows[~np.asarray(broken, bool)]  # a row that is no record (a one-hot group at 0.5) cannot be decoded
        acc = oracle(rec.CF[ok]) if len(ok) else np.zeros(0, bool)
        d = WorldGeometry.of(world, "one").distance(agents[ok], rec.CF[ok]) if len(ok) else np.zeros(0)
        mace_ok, mace_d = test_labels.ok, test_labels.distance
        near = mace_ok[ok] & (d <= mace_d[ok] * 1.01 + 1e-12) & world.accepts(rec.CF[ok]) & acc if len(ok) else d > 0
        # score_answers needs the answer valid in the world; the user's own model must accept it too
        m["valid_optimal_share"] = float(near.sum() / max(1, mace_ok.sum()))
        m["oracle_rejected_rows"] = [int(i) for i in ok[~acc]]
        m.update(fit_seconds=fit_s, answered=int(len(rows)), broke_constraints=int(len(rows) - len(ok)),
                 broken_rows=[int(i) for i in rows[np.asarray(broken, bool)]] if len(rows) else [],
                 oracle_accepted=int(acc.sum()))
        out[method] = m
        log(f"{method}: valid and within 1% of MACE {m['valid_optimal_share']:.3f}, answered {m['answered']}, "
            f"{m['broke_constraints']} breaking a constraint, oracle accepts {m['oracle_accepted']}/{len(ok)} of the "
            f"others, {m['us_per_agent_batched']:.0f} µs/agent batched")
    return out, info


def dice_permitted(table: Table, spec: Any, record: pd.Series) -> dict[str, list]:
    """Per-agent ranges of the one-way features: numbers between the agent and the bound, ordinal levels upward."""
    out: dict[str, list] = {}
    for feat in spec.features:
        if feat.mutability not in ("increase", "decrease"):
            continue
        v = record[feat.name]
        if feat.kind == "ordinal":
            i = list(feat.levels).index(v)
            levels = feat.levels[i:] if feat.mutability == "increase" else feat.levels[: i + 1]
            out[feat.name] = [str(x) for x in levels]
        else:
            lo, hi = (table.frame[feat.name].min(), table.frame[feat.name].max())
            lo, hi = (feat.lower if feat.lower is not None else lo), (feat.upper if feat.upper is not None else hi)
            out[feat.name] = [float(v), float(hi)] if feat.mutability == "increase" else [float(lo), float(v)]
    return out


def run_dice(f: Fitted, agents: np.ndarray, test_labels: Any, seed: int, timeout: float, log: Any) -> dict[str, Any]:
    """DiCE random (its defaults, total_CFs = 1) on the Pipeline itself, the agents as raw records."""
    import dice_ml

    table, spec, world, pipe = f.table, f.bundle.spec, f.world, f.pipe
    names = spec.names
    frame = table.frame.iloc[f.train][names].copy()
    frame["favourable"] = table.y01()[f.train]
    cont = [n for n in names if spec.feature(n).kind in ("real", "integer")]
    explainer = dice_ml.Dice(dice_ml.Data(dataframe=frame, continuous_features=cont, outcome_name="favourable"),
                             dice_ml.Model(model=pipe, backend="sklearn"), method="random")
    vary = [n for n in names if spec.feature(n).mutability != "immutable"]
    records = f.bundle.oracle.frame(agents)[names]  # the agents as raw records, the table's dtypes
    geo = WorldGeometry.of(world, "one")
    CF = np.full(agents.shape, np.nan)
    secs, errors, pipe_valid, answered = [], {}, np.zeros(len(agents), bool), np.zeros(len(agents), bool)

    def expired(*_: Any) -> None:
        raise TimeoutError(f"no answer within {timeout:g} s")

    def solve(i: int) -> pd.DataFrame | None:
        old = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = explainer.generate_counterfactuals(
                    records.iloc[[i]], total_CFs=1, desired_class="opposite", features_to_vary=vary,
                    permitted_range=dice_permitted(table, spec, records.iloc[i]) or None, random_seed=seed)
            cf = res.cf_examples_list[0].final_cfs_df
            return cf if cf is not None and len(cf) else None
        except Exception as err:  # noqa: BLE001 (DiCE raises bare Exceptions when it finds nothing)
            errors[i] = f"{type(err).__name__}: {str(err)[:160]}"
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    with warming_up("DiCE random on one agent"):
        solve(0)
    errors.clear()
    for i in range(len(agents)):
        t = time.perf_counter()
        cf = solve(i)
        secs.append(time.perf_counter() - t)
        if cf is None:
            continue
        answered[i] = True
        raw = cf[names].astype({n: table.frame[n].dtype for n in names}, errors="ignore")
        pipe_valid[i] = bool(pipe.predict(raw)[0] == 1)
        try:
            CF[i] = world.encoder.encode(raw)[0]
        except ValueError as err:  # a value the world cannot hold (outside the spec's bounds, say)
            errors[i] = f"encode: {err}"
    found = ~np.isnan(CF).any(1)
    violates = np.zeros(len(agents), bool)
    violates[found] = geo.violations(agents[found], CF[found])
    valid = pipe_valid & found & ~violates
    both = valid & test_labels.ok
    d = np.full(len(agents), np.nan)
    d[found] = geo.distance(agents[found], CF[found])
    ratio = d[both] / np.maximum(test_labels.distance[both], 1e-12)
    out = {"agents": int(len(agents)), "answered": int(answered.sum()),
           "accepted_by_pipeline": int(pipe_valid.sum()), "violations": int(violates.sum()), "valid": int(valid.sum()),
           "valid_share": float(valid.mean()), "ratio_median": float(np.median(ratio)) if len(ratio) else None,
           "ratio_p90": float(np.quantile(ratio, 0.9)) if len(ratio) else None,
           "within_1pct": float(np.mean(ratio <= 1.01 + 1e-12)) if len(ratio) else None,
           "s_mean": float(np.mean(secs)), "s_median": float(np.median(secs)), "errors": len(errors),
           "first_error": next(iter(errors.values()), None)}
    log(f"DiCE random: valid {out['valid']}/{len(agents)}, ratio median {out['ratio_median']}, "
        f"{out['s_median']:.2f} s/agent median")
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    def log(*a: Any) -> None:
        print(f"[{cell}]", *a, flush=True)

    t0 = time.perf_counter()
    f = fit_cell(cell, args.seed)
    b, world = f.bundle, f.world
    ag = b.agreement
    test_acc = float(np.mean(f.pipe.predict(f.table.frame.iloc[f.test][f.table.features]) == f.table.y01()[f.test]))
    out: dict[str, Any] = {
        "cell": cell, "seed": args.seed, "rows": int(len(f.table.frame)), "test_accuracy": test_acc,
        "route": b.report.route, "report": str(b.report), "notes": list(b.report.notes),
        "agreement": {"rows": ag.rows, "boundary": ag.boundary, "max_proba_gap": ag.max_proba_gap,
                      "accuracy": ag.accuracy},
        "seconds": dict(f.seconds), "encoded_columns": len(world.schema)}
    log(f"{b.report}; agreement on {ag.rows} rows ({ag.boundary} at the boundary, largest P gap "
        f"{ag.max_proba_gap:.2g}); test accuracy {test_acc:.3f}; fit {f.seconds['fit']:.1f} s, "
        f"build_user_world {f.seconds['build_user_world']:.1f} s")
    if b.white_box is None:
        out["skipped"] = "black-box route: MACE needs a white box"
        return out
    agents = sample(world, b.data.X_test, args.agents, args.seed)
    out["rejected_test_rows"] = int((~world.accepts(b.data.X_test)).sum())
    out["agents"] = int(len(agents))
    cache = Path(args.cache) / (f"{cell.replace('/', '-')}-" + _key(
        seed=args.seed, labels=args.labels, agents=args.agents, test_mace=TEST_MACE, train_mace=TRAIN_MACE,
        world=world.model.to_dict()))
    with warming_up("MACE on one agent"):
        MACE(**TEST_MACE).solve(world, agents[0])
    test = label_tabular(world, agents, MACE(**TEST_MACE), cache / "test", n_jobs=1, chunk_size=5,
                         progress=not args.quiet)  # one process: the times are one explanation each
    out["mace"] = mace_summary(test, b.oracle)
    m = out["mace"]
    log(f"MACE: certified {m['certified']}/{m['agents']}, {m['s_median']:.2f} s median, {m['s_p95']:.2f} s p95; "
        f"oracle accepts {m['oracle_accepted']}/{m['oracle_checked']}")
    out["generators"], out["training_labels"] = run_generators(f, agents, test, args, cache, log)
    if not args.no_dice:
        out["dice_random"] = run_dice(f, agents, test, args.seed, args.dice_timeout, log)
    out["seconds"]["cell"] = time.perf_counter() - t0
    out["load_average"] = list(os.getloadavg())
    out["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out["code"] = CODE  # the commit this process imported (plus whatever the working tree changed)
    return out


def _head() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


CODE = _head()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated table/model cells (known: {KNOWN})")
    p.add_argument("--agents", type=int, default=30, help="held-out rejected agents per cell")
    p.add_argument("--labels", type=int, default=300, help="MACE-labelled training agents of the generators")
    p.add_argument("--generators", default=",".join(GENERATORS), help="learners/tabular methods")
    p.add_argument("--epochs", type=int, default=0, help="training epochs of the learned generators (0: defaults)")
    p.add_argument("--jobs", type=int, default=2, help="processes labelling the training agents")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dice-timeout", type=float, default=30.0, help="seconds per DiCE call")
    p.add_argument("--no-dice", action="store_true")
    p.add_argument("--cache", default="data_cache/your_data", help="label chunks and finished cells (resumable)")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--force", action="store_true", help="recompute finished cells (labels stay cached)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    args.generators = [g for g in args.generators.split(",") if g]
    cells = args.cells.split(",")
    for c in cells:
        if c not in KNOWN:
            raise SystemExit(f"--cells: unknown cell {c!r}; known: {', '.join(KNOWN)}")
    done_dir = Path(args.cache) / "cells"
    done_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for c in cells:
        path = done_dir / (f"{c.replace('/', '-')}-" + _key(agents=args.agents, labels=args.labels, seed=args.seed,
                                                            generators=args.generators, epochs=args.epochs,
                                                            dice=not args.no_dice) + ".json")
        if path.exists() and not args.force:
            print(f"[{c}] finished earlier: {path}", flush=True)
            done = json.loads(path.read_text())
            done.setdefault("finished_at", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime)))
            results.append(done)
            continue
        results.append(save(run_cell(c, args), path))
    command = "python benchmarks/your_data.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "your_data.json").write_text(json.dumps({"command": command, "cells": results}, indent=1, default=float))
    text = report(results, command)
    (out / "your_data.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
