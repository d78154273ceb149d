"""What round one of the black-box search finds on the forests, and what the answer then is (issue 56).

    python benchmarks/forest_round_one.py [--cells german/forest,credit/forest,adult/forest] [--seed 0]

Per forest cell (the labels and held-out agents of ``benchmarks/blackbox_generators.py``: 500 MACE labels,
100 agents, MACE's certified optimum), the proposer is fitted (``--seed``) and each agent answered alone at
2 round trips x 256 rows, every row the model is asked recorded:

- **set accepted in round one**: whether a row that changes exactly MACE's raw features was asked in the
  first call and accepted, and of those agents and the others, how many end within 1% of MACE;
- **sets asked in round one**: distinct changed sets among the first call's rows (median, min, max);
- **the labels' sets**: how many distinct changed sets the training labels have, and the share of held-out
  agents whose optimum's set is among the k most frequent (k = 4, 8, 16): how few sets would cover them;
- **past the optimum**: the share of agents whose MACE answer, its numeric changes scaled by 1.1 to 3 (its
  categories as MACE set them, clipped to the columns' bounds), the forest still accepts: whether a row of
  the right set that goes too far is a safe first guess for round two to shrink;
- **MACE's set given** (an oracle of the changed set, not of the values): the same fitted proposer, its
  named sets replaced by the ``ORACLE_K`` nearest training agents whose label changes exactly MACE's raw
  features, their new values set (*values*) or their changes added (*changes*): what the same search at
  2 x 256 reaches if the set were named right every time. Beside it, how often the named sets, and all the
  proposals, hold that set.

Writes ``benchmarks/results/forest_round_one.{md,json}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import METHODS, cell_labels  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from learners.tabular import WorldGeometry, build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results")
CELLS = ("german/forest", "credit/forest", "adult/forest")
TOP = (4, 8, 16)
PAST = (1.1, 1.25, 1.5, 2.0, 3.0)  # MACE's own numeric changes scaled past the optimum
ORACLE_K = 8  # training agents with MACE's set whose answers lead round one in the set oracle


class Recorded:
    """The model, with every ``predict_proba`` call's rows and probabilities kept."""

    def __init__(self, model: Any) -> None:
        self.model, self.log = model, []
        self.n_features = model.n_features  # the world checks it against its schema

    def predict_proba(self, R: np.ndarray) -> np.ndarray:
        p = np.asarray(self.model.predict_proba(R))
        self.log.append((np.array(R), p))
        return p


def changed_sets(geo: WorldGeometry, x: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(n, raw features) bool: which raw features each row of ``R`` changes from ``x`` (one agent's row, or
    a row per row of ``R``)."""
    moved = np.abs(np.atleast_2d(R) - x) > 1e-9
    return np.stack([moved[:, c[c >= 0]].any(1) for c in geo.raw_columns()], 1)


def past_the_optimum(world: Any, geo: WorldGeometry, X: np.ndarray, CF: np.ndarray) -> dict[str, float]:
    """{scale: share of agents} whose answer ``CF`` with its numeric changes scaled by each of ``PAST`` (the
    other columns as in ``CF``; projected onto the schema's bounds) the model still accepts."""
    scale = np.asarray(PAST)[None, :, None]
    R = np.repeat(CF[:, None, :], len(PAST), axis=1)  # (N, scales, D), one model call for all of them
    R[..., geo.numeric] = X[:, None, geo.numeric] + scale * (CF - X)[:, None, geo.numeric]
    R = geo.project(X, R)
    ok = np.asarray(world.model.predict_proba(R.reshape(-1, X.shape[1]))).reshape(len(X), len(PAST)) >= 0.5
    return {str(s): float(ok[:, k].mean()) for k, s in enumerate(PAST)}


def set_oracle(gen: Any, world: Any, geo: WorldGeometry, X: np.ndarray, tl: Any, labels: Any) -> dict[str, Any]:
    """The optimal share at 2 x 256 with MACE's set given in place of the named sets (the proposer's
    ``set_donor_rows`` of MACE's set, as values and as changes), and the share of agents whose set the named
    sets, and all the proposals, hold."""
    ok = np.flatnonzero(tl.ok)
    A, CF = X[ok], tl.cf[ok]
    keys = gen.set_namer_.keys_  # the labels' changed sets; MACE's set among them (-1: no label has it)
    mace = changed_sets(geo, A, CF)
    match = (mace[:, None, :] == keys[None, :, :]).all(-1)  # (N, S): at most one set each
    sets = np.where(match.any(1), match.argmax(1), -1)[:, None]
    named = gen.set_namer_.rank(gen._scaled(A), int(gen.params.set_names))
    P = gen.candidates(world, A)
    held = np.array([(changed_sets(geo, A[i], P[i]) == mace[i]).all(1).any() for i in range(len(A))])
    out = {"named_sets_hold_it": float((named == sets).any(1).mean()), "proposals_hold_it": float(held.mean())}
    budget = Budget(2, 256)
    for name, values in (("values", True), ("changes", False)):
        first = gen.set_donor_rows(A, sets, ORACLE_K, values=values)
        oracle = copy.copy(gen)  # the same network, MACE's set in place of the named sets
        oracle.params = replace(gen.params, set_names=0)
        own = oracle.candidates
        oracle.candidates = lambda w, B, first=first, own=own: np.concatenate([first, own(w, B)], axis=1)
        bb = BlackBoxModel(world.model)
        with bb.budget(budget, agents=len(A)):
            r = oracle.recommend_within(replace(world, model=bb), A, budget)
        d = geo.distance(A, np.nan_to_num(r.CF))
        out[name] = float(np.mean(r.found & (d <= 1.01 * tl.distance[ok])))
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c, tl, labels = cell_labels(cell, args)
    world, X = c.build.world, c.test
    gen = build_tabular_generator("proposer", METHODS["proposer"]).fit(
        replace(world, model=BlackBoxModel(world.model)), labels, seed=args.fit_seed)
    geo = WorldGeometry.of(world)
    budget = Budget(2, 256)
    rows = []
    for i in np.flatnonzero(tl.ok):  # one agent at a time: its calls are its own (a diagnostic, not a hot path)
        rec = Recorded(world.model)
        bb = BlackBoxModel(rec)
        with bb.budget(budget, agents=1):
            r = gen.recommend_within(replace(world, model=bb), X[i:i + 1], budget)
        mace_set = changed_sets(geo, X[i], tl.cf[i])[0]
        first, proba = rec.log[0]
        asked = changed_sets(geo, X[i], first)
        same = (asked == mace_set).all(1)
        d = geo.distance(X[i:i + 1], np.nan_to_num(r.CF))[0]
        rows.append({"accepted_in_round_one": bool((same & (proba >= 0.5)).any()), "asked_in_round_one": bool(same.any()),
                     "sets_in_round_one": int(len(np.unique(asked, axis=0))),
                     "optimal": bool(r.found[0] and d <= 1.01 * tl.distance[i])})
    keys, counts = np.unique(changed_sets(geo, labels.X, labels.CF), axis=0, return_counts=True)
    order = keys[np.argsort(-counts, kind="stable")]
    held = changed_sets(geo, X[tl.ok], tl.cf[tl.ok])
    cover = {str(k): float(np.mean([(order[:k] == h).all(1).any() for h in held])) for k in TOP}
    past = past_the_optimum(world, geo, X[tl.ok], tl.cf[tl.ok])
    acc = np.array([r["accepted_in_round_one"] for r in rows])
    opt = np.array([r["optimal"] for r in rows])
    sets = np.array([r["sets_in_round_one"] for r in rows])
    out = {"cell": cell, "seed": args.fit_seed, "agents": len(rows), "optimal": int(opt.sum()),
           "accepted": int(acc.sum()), "accepted_then_optimal": int((acc & opt).sum()),
           "not_accepted": int((~acc).sum()), "not_accepted_then_optimal": int((~acc & opt).sum()),
           "not_asked": int((~np.array([r["asked_in_round_one"] for r in rows])).sum()),
           "sets_in_round_one": {"median": float(np.median(sets)), "min": int(sets.min()), "max": int(sets.max())},
           "label_sets": int(len(keys)), "most_frequent_cover": cover, "past_the_optimum": past,
           "set_oracle": set_oracle(gen, world, geo, X, tl, labels)}
    print(json.dumps(out), flush=True)
    return out


def report(cells: list[dict[str, Any]], command: str) -> str:
    lines = ["# Round one of the black-box search on the forests (`benchmarks/forest_round_one.py`)", "",
             f"Command: `{command}`. The proposer (500 MACE labels) answers each held-out agent alone at 2 x 256; "
             "*MACE's set* is the raw features MACE's certified optimum changes; *optimal*: within 1% of it.", "",
             "| cell | agents | optimal | MACE's set accepted in round one | then optimal | not accepted | then optimal | "
             "never asked | sets asked in round one (median, min-max) | the labels' sets | "
             + " | ".join(f"top {k} most frequent hold it" for k in TOP) + " |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|" + "---:|" * len(TOP)]
    for c in cells:
        s = c["sets_in_round_one"]
        lines.append(f"| {c['cell']} | {c['agents']} | {c['optimal']} | {c['accepted']} | {c['accepted_then_optimal']} | "
                     f"{c['not_accepted']} | {c['not_accepted_then_optimal']} | {c['not_asked']} | "
                     f"{s['median']:.0f} ({s['min']}-{s['max']}) | {c['label_sets']} | "
                     + " | ".join(f"{c['most_frequent_cover'][str(k)]:.2f}" for k in TOP) + " |")
    lines += ["", "MACE's answer with its numeric changes scaled past the optimum: share of agents the forest still "
              "accepts (a forest need not be monotone: a row of the right set that goes too far is often refused).", "",
              "| cell | " + " | ".join(f"x {s:g}" for s in PAST) + " |", "|---|" + "---:|" * len(PAST)]
    for c in cells:
        if "past_the_optimum" in c:
            lines.append(f"| {c['cell']} | " + " | ".join(f"{c['past_the_optimum'][str(s)]:.2f}" for s in PAST) + " |")
    lines += ["", f"MACE's set given: the same proposer, its named sets replaced by the {ORACLE_K} nearest training "
              "agents whose label changes exactly MACE's raw features (their values set, or their changes added); "
              "optimal share at 2 x 256 beside the proposer's own, and how often its named sets and all its "
              "proposals hold that set.", "",
              "| cell | proposer | set given, neighbours' values | set given, neighbours' changes | "
              "the named sets hold it | the proposals hold it |", "|---|---:|---:|---:|---:|---:|"]
    for c in cells:
        if "set_oracle" in c:
            o = c["set_oracle"]
            lines.append(f"| {c['cell']} | {c['optimal'] / c['agents']:.2f} | {o['values']:.2f} | {o['changes']:.2f} | "
                         f"{o['named_sets_hold_it']:.2f} | {o['proposals_hold_it']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated forest cells")
    p.add_argument("--seed", type=int, default=0, help="the proposer's fit seed (the world and agents: seed 0)")
    p.add_argument("--jobs", type=int, default=2, help="MACE labelling processes (labels missing from the cache)")
    p.add_argument("--cache", default="data_cache/tabular_generators", help="label chunks (resumable)")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = p.parse_args(argv)
    for cell in args.cells.split(","):
        if cell not in CELLS:
            raise SystemExit(f"--cells: expected some of {', '.join(CELLS)}, got {cell!r}")
    # the cells of blackbox_generators.py: 500 labels, 100 held-out agents, world seed 0; --seed is the fit's
    args.fit_seed, args.seed = args.seed, 0
    args.sizes, args.test_agents, args.sizes_for = "500", 100, []
    args.numeric_scale, args.resample_prob, args.rules, args.quiet = 0.05, 0.15, False, True
    cells = [run_cell(cell, args) for cell in args.cells.split(",")]
    command = "python benchmarks/forest_round_one.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    (out / "forest_round_one.md").write_text(report(cells, command))
    (out / "forest_round_one.json").write_text(json.dumps(cells, indent=1))
    print(report(cells, command))


if __name__ == "__main__":
    main()
