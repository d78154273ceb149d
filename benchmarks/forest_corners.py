"""How far a black-box search must look on a forest: the labels' vocabulary corners (issue 56).

    python benchmarks/forest_corners.py [--cells adult/forest,german/forest,credit/forest,compas/forest]
                                        [--surrogate-agents 2000]

Per forest cell (the labels and held-out agents of ``benchmarks/blackbox_generators.py``: 500 labels,
100 agents, MACE's certified optimum):

- **optimum a corner**: the share of agents whose optimum changes only numeric columns, each to a
  value of the labels' vocabulary (``budget_search.value_vocabulary``);
- **rank in its own set**: among the corners that change exactly the optimum's columns, how many are
  nearer than the optimum (each one a row a search that knew the changed set would score, and see
  refused, first);
- **enumeration**: the nearest corners scored in order (``corners.nearest_corners``), the first
  accepted taken, at 256 and 2,000 rows: the share within 1% of MACE;
- **additive-vote-ranked** (``--additive-corners`` > 0): the model's probability of the agent and of each
  single-feature change its nearest corners use (the *probes*), then its corners whose additive estimate
  p(agent) + sum over changed features (p(that change alone) - p(agent)) is at least 0.5, nearest first:
  the share within 1% at the probes + 64 and + 256 ranked rows, against the plain enumeration at the same
  rows per agent (a forest's probability is a vote share; a black box still returns it);
- **surrogate-ranked** (``--surrogate-agents`` > 0): a gradient-boosted classifier of the model's
  answers on 200 corners of each of that many rejected training rows, then per agent the nearest corners
  it accepts scored, at 64 and 256 rows (``--surrogate-drawn``: corners of that many agents drawn around
  them instead; ``--surrogate-model lgb``: a larger LightGBM classifier);

Writes ``benchmarks/results/forest_corners.{md,json}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.tabular_generators import Cell  # noqa: E402
from learners.tabular.budget_search import value_vocabulary  # noqa: E402
from learners.tabular.corners import nearest_corners  # noqa: E402
from learners.tabular.geometry import WorldGeometry  # noqa: E402

OUT = Path("benchmarks/results")


def accepts(world: Any, R: np.ndarray) -> np.ndarray:
    return np.asarray(world.accepts(R), bool)


def first_accepted(world: Any, R: np.ndarray, d: np.ndarray, use: np.ndarray) -> np.ndarray:
    """(N,) per agent the distance of its first accepted row among the rows ``use`` marks (inf: none)."""
    ok = np.zeros(use.shape, bool)
    ok[use] = accepts(world, R[use])
    first = np.argmax(ok, 1)
    return np.where(ok.any(1), d[np.arange(len(d)), first], np.inf)


def own_set_ranks(geo: WorldGeometry, X: np.ndarray, opt: np.ndarray, dist: np.ndarray, vocab: list[np.ndarray]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per agent, whether its optimum is a corner, and how many corners of its changed set are nearer."""
    lo, hi = geo.box(X)
    corner, ranks = np.zeros(len(X), bool), np.full(len(X), -1)
    for i in range(len(X)):  # one agent at a time: a diagnostic, not a hot path
        changed = np.flatnonzero(np.abs(opt[i] - X[i]) > 1e-9)
        if not all(geo.numeric[c] and np.isclose(vocab[c], opt[i, c]).any() for c in changed):
            continue
        corner[i] = True
        values = [v[(v >= lo[i, c]) & (v <= hi[i, c]) & ~np.isclose(v, X[i, c])] for c, v in
                  ((c, vocab[c]) for c in changed)]
        combos = np.array(list(itertools.product(*values))).reshape(-1, len(changed))
        R = np.repeat(opt[i][None], len(combos), 0)
        R[:, changed] = combos
        ranks[i] = int((geo.distance(X[i][None], R) < dist[i] * (1 - 1e-9)).sum())
    return corner, ranks


def probability(world: Any, R: np.ndarray) -> np.ndarray:
    """(n,) the model's probability of acceptance of the rows ``R`` (what a black box returns)."""
    p = np.asarray(world.model.predict_proba(np.atleast_2d(R)), float)
    return p[:, 1] if p.ndim == 2 else p


def additive_shares(world: Any, geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], mace_d: np.ndarray,
                    ok: np.ndarray, k: int, ranked: tuple[int, ...] = (64, 256)) -> dict[str, Any]:
    """The corners ranked by the agent's own single-feature probabilities (an additive vote model), against
    the plain enumeration at the same rows per agent (the probes included)."""
    cols_of = geo.raw_columns()
    hits = {r: [] for r in ranked}
    plain = {r: [] for r in ranked}
    probes = []
    for i in np.flatnonzero(ok):  # one agent at a time: a diagnostic, not a hot path
        x = X[i]
        R, d = nearest_corners(geo, x[None], vocab, k)
        live = np.isfinite(d[0])
        R, d = R[0][live], d[0][live]
        accepted = probability(world, R) > 0.5
        p0 = float(probability(world, x[None])[0])
        estimate, asked = np.full(len(R), p0), 1  # the agent itself is asked once
        for j in range(geo.n_raw):
            cols = cols_of[j][cols_of[j] >= 0]
            changed = ~np.isclose(R[:, cols], x[cols]).all(1)
            if not changed.any():
                continue
            values, inverse = np.unique(R[changed][:, cols], axis=0, return_inverse=True)
            single = np.repeat(x[None], len(values), 0)
            single[:, cols] = values
            estimate[changed] += probability(world, single)[inverse.ravel()] - p0
            asked += len(values)
        probes.append(asked)
        order = np.flatnonzero(estimate >= 0.5)
        for r in ranked:
            first = order[:r][accepted[order[:r]]]
            hits[r].append(bool(len(first)) and d[first[0]] <= 1.01 * mace_d[i])
            same = np.flatnonzero(accepted[:asked + r])  # the enumeration at the same rows
            plain[r].append(bool(len(same)) and d[same[0]] <= 1.01 * mace_d[i])
    return {"probes_median": float(np.median(probes)), "corners": k,
            **{f"optimal_{r}": float(np.mean(hits[r])) for r in ranked},
            **{f"enumeration_same_rows_{r}": float(np.mean(plain[r])) for r in ranked}}


def surrogate_shares(world: Any, geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], agents: int,
                     mace_d: np.ndarray, ok: np.ndarray, train_X: np.ndarray, seed: int, drawn: int = 0,
                     model: str = "hgb") -> dict[str, float]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(seed)
    rejected = train_X[~accepts(world, train_X)]
    A = rejected[rng.permutation(len(rejected))[:agents]]
    if drawn:  # agents drawn around the rejected rows instead: as many as asked, the held-out ones excluded
        from data_gen.perturbed_agents import perturb_agents

        A = perturb_agents(world, rejected, drawn, seed=seed + 3, allow_fewer=True, exclude=X)
    R, _ = nearest_corners(geo, A, vocab, 1000)
    pick = np.concatenate([np.arange(60), np.sort(rng.choice(np.arange(60, 1000), 140, replace=False))])
    S = R[:, pick].reshape(-1, R.shape[-1])
    S = S[~np.isnan(S).any(1)]
    if model == "lgb":  # more capacity and 4,095 bins a column (the vocabulary's values apart)
        import lightgbm as lgb

        clf = lgb.LGBMClassifier(n_estimators=1500, num_leaves=255, max_bin=4095, learning_rate=0.05, verbose=-1,
                                 n_jobs=2, random_state=seed).fit(S, accepts(world, S))
    else:
        clf = HistGradientBoostingClassifier(max_iter=400, max_leaf_nodes=63, random_state=seed).fit(S, accepts(world, S))
    Rt, dt = nearest_corners(geo, X, vocab, 3000)
    live = np.isfinite(dt)
    p = np.zeros(dt.shape)
    p[live] = clf.predict_proba(Rt[live])[:, 1]
    truth = np.zeros(dt.shape, bool)
    truth[live] = accepts(world, Rt[live])
    out = {"train_rows": int(len(S)), "accuracy": float(np.mean((p[live] > 0.5) == truth[live])),
           "recall": float(np.mean(p[live][truth[live]] > 0.5))}
    for rows in (64, 256):
        chosen = live & (p > 0.15)
        chosen &= np.cumsum(chosen, 1) <= rows
        d = first_accepted(world, Rt, dt, chosen)
        out[f"optimal_{rows}"] = float(np.mean(d[ok] <= 1.01 * mace_d[ok]))
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    cargs = argparse.Namespace(sizes="500", sizes_for=[], numeric_scale=0.05, resample_prob=0.15, seed=args.seed,
                               rules=False, cache="data_cache/tabular_generators", test_agents=100, jobs=2, quiet=True)
    c = Cell.of(cell, cargs)
    world, X = c.build.world, c.test
    tl = c.test_labels(cargs)
    train, _, _ = c.train_labels(cargs, progress=False)
    rows = np.flatnonzero(train.ok[:500])
    geo = WorldGeometry.of(world, "one")
    vocab = value_vocabulary(geo, train.X[rows], train.cf[rows])
    ok = np.asarray(tl.ok, bool)
    corner, ranks = own_set_ranks(geo, X[ok], tl.cf[ok], tl.distance[ok], vocab)
    r = ranks[corner]
    out: dict[str, Any] = {"cell": cell, "agents": int(ok.sum()), "optimum_a_corner": float(corner.mean()),
                           "own_set_rank": {"median": float(np.median(r)), "p75": float(np.percentile(r, 75)),
                                            "p90": float(np.percentile(r, 90))}}
    R, d = nearest_corners(geo, X, vocab, 2000)
    for rows_ in (256, 2000):
        use = np.isfinite(d) & (np.arange(d.shape[1]) < rows_)[None, :]
        first = first_accepted(world, R, d, use)
        out[f"enumeration_{rows_}"] = float(np.mean(first[ok] <= 1.01 * tl.distance[ok]))
    if args.additive_corners:
        out["additive"] = additive_shares(world, geo, X, vocab, tl.distance, ok, args.additive_corners)
    if args.surrogate_agents:
        out["surrogate"] = surrogate_shares(world, geo, X, vocab, args.surrogate_agents, tl.distance, ok,
                                            c.build.data.X_train, args.seed, args.surrogate_drawn, args.surrogate_model)
    print(json.dumps(out), flush=True)
    return out


def report(cells: list[dict[str, Any]]) -> str:
    lines = ["# The labels' vocabulary corners on the forests (`benchmarks/forest_corners.py`)", "",
             "Held-out agents with MACE's certified optimum; within 1% of it counts as optimal.", "",
             "| cell | agents | optimum a corner | nearer corners of its own set: median / p75 / p90 | "
             "enumeration 256 rows | 2,000 rows | surrogate-ranked 64 rows | 256 rows | surrogate accuracy / recall | "
             "probes (median) | additive-ranked probes + 64 / + 256 | enumeration at the same rows |",
             "|---|---:|---:|---|---:|---:|---:|---:|---|---:|---|---|"]
    for c in cells:
        s = c.get("surrogate") or {}
        r = c["own_set_rank"]
        sur = (f"{s['optimal_64']:.2f} | {s['optimal_256']:.2f} | {s['accuracy']:.3f} / {s['recall']:.2f}" if s
               else "- | - | -")
        a = c.get("additive") or {}
        add = (f"{a['probes_median']:.0f} | {a['optimal_64']:.2f} / {a['optimal_256']:.2f} | "
               f"{a['enumeration_same_rows_64']:.2f} / {a['enumeration_same_rows_256']:.2f}" if a else "- | - | -")
        lines.append(f"| {c['cell']} | {c['agents']} | {c['optimum_a_corner']:.2f} | {r['median']:.0f} / {r['p75']:.0f} / "
                     f"{r['p90']:.0f} | {c['enumeration_256']:.2f} | {c['enumeration_2000']:.2f} | {sur} | {add} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default="adult/forest,german/forest,credit/forest,compas/forest", help="forest cells")
    p.add_argument("--surrogate-agents", type=int, default=2000, help="rejected training rows for the surrogate (0: none)")
    p.add_argument("--surrogate-drawn", type=int, default=0,
                   help="train the surrogate on corners of this many agents drawn around those rows instead (0: the rows)")
    p.add_argument("--surrogate-model", choices=("hgb", "lgb"), default="hgb",
                   help="hgb: scikit-learn's histogram boosting (400 trees); lgb: LightGBM, 1,500 trees of 255 leaves")
    p.add_argument("--additive-corners", type=int, default=5000,
                   help="nearest corners per agent ranked by the additive vote estimate (0: none)")
    p.add_argument("--seed", type=int, default=0, help="world and sample seed")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = p.parse_args(argv)
    cells = [run_cell(cell, args) for cell in args.cells.split(",")]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "forest_corners.json").write_text(json.dumps(cells, indent=1))
    (Path(args.out) / "forest_corners.md").write_text(report(cells))
    print(report(cells))


if __name__ == "__main__":
    main()
