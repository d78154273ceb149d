"""MACE on imported boosted models (issue 54): seconds per explanation and certified share.

    python benchmarks/boosted_mace.py [--agents 20] [--trees 200] [--depth 6] [--time-limit 60]
                                      [--families xgboost lightgbm] [--norm one] [--seed 0]

A synthetic 10-feature table (6 continuous, 2 integer, a binary and a 3-way one-hot group: 12
encoded columns); the model is fitted behind a standard scaler on the numeric columns (the
``InputMap`` a Pipeline would give), ``--trees`` trees of depth ``--depth``, and turned into its
white box (``envs.imported_trees.from_fitted``). MACE (MILP backend) explains ``--agents``
negatively classified rows; every answer is checked against the library's own ``predict``. Prints
a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from envs.imported_trees import from_fitted  # noqa: E402
from envs.input_map import InputColumn, InputMap  # noqa: E402
from envs.schema import Feature, FeatureSchema  # noqa: E402
from envs.tabular import TabularWorld  # noqa: E402
from solvers.mace import MACE  # noqa: E402


def table(n: int, seed: int) -> tuple[FeatureSchema, np.ndarray, np.ndarray]:
    """The synthetic table: (schema, encoded rows, labels)."""
    rng = np.random.default_rng(seed)
    cont = rng.normal(size=(n, 6)) * [20e3, 8e3, 1.5, 30, 5, 0.2] + [50e3, 10e3, 3, 60, 10, 0.5]
    cont = np.clip(cont, [0, 0, 0, 0, 0, 0], [150e3, 50e3, 10, 200, 40, 1])
    ints = np.column_stack([rng.integers(18, 80, n), rng.integers(0, 6, n)])
    flag = rng.integers(0, 2, n)
    job = np.zeros((n, 3))
    job[np.arange(n), rng.integers(0, 3, n)] = 1
    X = np.column_stack([cont, ints, flag, job]).astype(float)
    z = (X[:, 0] / 20e3 - X[:, 1] / 8e3 + 0.6 * X[:, 2] - X[:, 3] / 40 + 0.1 * X[:, 4] + 2 * X[:, 5]
         + 0.02 * X[:, 6] + 0.4 * X[:, 7] - 0.5 * X[:, 8] + 0.8 * X[:, 9] - 0.5 * X[:, 10] - 4.3
         + 0.5 * np.sin(X[:, 3] / 15) * X[:, 2])
    y = (z + rng.normal(0, 0.7, n) > 0).astype(int)
    schema = FeatureSchema((
        Feature("income", "numeric", 0, 150e3, "free"),
        Feature("debt", "numeric", 0, 50e3, "free"),
        Feature("savings_years", "numeric", 0, 10, "increase"),
        Feature("late_days", "numeric", 0, 200, "free"),
        Feature("tenure", "numeric", 0, 40, "increase"),
        Feature("utilization", "numeric", 0, 1, "free"),
        Feature("age", "numeric", 18, 79, "increase", integer=True),
        Feature("education", "ordinal", 0, 5, "increase", integer=True),
        Feature("sex", "binary", 0, 1, "immutable", integer=True),
        *(Feature(f"job={c}", "binary", 0, 1, "free", group="job", integer=True) for c in ("a", "b", "c")),
    ))
    return schema, X, y


def scaler_map(X: np.ndarray, numeric: int = 8) -> InputMap:
    """A StandardScaler on the first ``numeric`` columns, the rest passed through (a ColumnTransformer)."""
    mean, scale = X[:, :numeric].mean(0), X[:, :numeric].std(0)
    cols = [InputColumn(f"num__{j}", j, lambda x, m=m, s=s: (np.asarray(x, np.float64) - m) / s, 1 / s, -m / s)
            for j, (m, s) in enumerate(zip(mean, scale, strict=True))]
    cols += [InputColumn(f"rest__{j}", j) for j in range(numeric, X.shape[1])]
    return InputMap(tuple(cols), X.shape[1])


def fit(family: str, Z: np.ndarray, y: np.ndarray, trees: int, depth: int, seed: int):
    if family == "xgboost":
        from xgboost import XGBClassifier

        return XGBClassifier(n_estimators=trees, max_depth=depth, learning_rate=0.1, n_jobs=1,
                             random_state=seed).fit(Z, y)
    from lightgbm import LGBMClassifier

    return LGBMClassifier(n_estimators=trees, max_depth=depth, num_leaves=2 ** depth, learning_rate=0.1,
                          n_jobs=1, verbose=-1, random_state=seed).fit(Z, y)


def run(family: str, args: argparse.Namespace) -> dict:
    schema, X, y = table(4000, args.seed)
    imap = scaler_map(X)
    est = fit(family, imap.transform(X), y, args.trees, args.depth, args.seed)
    model = from_fitted(est, imap)
    world = TabularWorld(f"synthetic/{family}", schema, model)
    neg = X[~model.predict(X)]
    pick = np.random.default_rng(args.seed).choice(len(neg), args.agents + 1, replace=False)
    agents = neg[pick[1:]]
    mace = MACE(backend="milp", norm=args.norm, time_limit=args.time_limit)
    with warming_up(f"MACE on one {family} agent"):  # the float64 kernels compile on first use
        mace.solve(world, neg[pick[0]])
    secs, certified, found, native_ok = [], 0, 0, 0
    for x in agents:
        t0 = time.perf_counter()
        r = mace.solve(world, x)[0]
        secs.append(time.perf_counter() - t0)
        if r.valid:
            found += 1
            certified += bool(r.optimal)
            native_ok += int(est.predict(imap.transform(np.asarray(r.final_state)[None]))[0] == 1)
    return {"family": family, "trees": args.trees, "depth": args.depth, "agents": len(agents), "found": found,
            "certified": certified, "certified_share": certified / len(agents), "native_accepts": native_ok,
            "median_s": statistics.median(secs), "mean_s": statistics.fmean(secs), "max_s": max(secs),
            "tolerance": model.tolerance}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--families", nargs="+", default=["xgboost", "lightgbm"], choices=["xgboost", "lightgbm"])
    ap.add_argument("--norm", default="one", choices=["zero", "one", "infty"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [run(f, args) for f in args.families]
    print("| family | trees x depth | agents | found | certified | median s | mean s | max s | native accepts |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | {r['trees']} x {r['depth']} | {r['agents']} | {r['found']} | "
              f"{r['certified']} ({100 * r['certified_share']:.0f}%) | {r['median_s']:.2f} | {r['mean_s']:.2f} | "
              f"{r['max_s']:.2f} | {r['native_accepts']} / {r['found']} |")
    print(json.dumps({"benchmark": "boosted_mace", "norm": args.norm, "time_limit": args.time_limit, "rows": rows}))


if __name__ == "__main__":
    main()
