"""The certificate audit of issue 34 (``python benchmarks/mace.py --audit``): per agent and MILP seed,
MACE (HiGHS, with its proof re-solve, the real sklearn model as oracle); then GeCo (k = 5, the norm's
weights), MD-PSO and a local search around MACE's answer look for valid points (accepted by the real
sklearn model, within every constraint) below delta_min. Unsound: flagged optimal with such a point.
Results in ``benchmarks/results/mace/audit.{md,json}``; each cell resumes from its own file."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import save  # noqa: E402
from benchmarks.mace_common import NORM_INDEX, _load_revision, fmt, sample  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from solvers.mace import MACE  # noqa: E402

AUDIT_DATASETS = ["adult", "german", "compas", "credit"]
GECO_WEIGHTS = {"zero": (1.0, 0.0, 0.0), "one": (0.0, 1.0, 0.0), "infty": (0.0, 0.0, 1.0)}


def _valid_rows(inst, oracle, X: np.ndarray) -> np.ndarray:
    """Per row: a true counterfactual (the real sklearn model accepts it, every constraint holds)."""
    X = np.atleast_2d(X)
    lo, hi = inst.schema.bounds()
    ok = np.all((X >= lo) & (X <= hi), axis=1) & np.all(~inst.integral | (X == np.round(X)), axis=1)
    ok &= np.all((X >= inst.lower) & (X <= inst.upper), axis=1)  # immutable / monotone (the plausibility box)
    for r in inst.raws:
        if r.kind == "group":
            cols = list(r.columns)
            ok &= (X[:, cols].sum(axis=1) == 1) & np.all(np.isin(X[:, cols], (0.0, 1.0)), axis=1)
    ok &= ~inst.schema.mutability_violations(inst.x_hat, X, tol=0.0)
    if ok.any():
        ok[ok] = np.asarray(oracle(X[ok]), bool).reshape(-1)
    return ok


def local_search(inst, oracle, cf: np.ndarray, rng: np.random.Generator, n_random: int = 400) -> np.ndarray:
    """Candidate points around MACE's answer: each changed feature on a grid toward the agent (one and two
    at a time), categorical changes undone, and random shrinks x^ + t (cf - x^) with small noise."""
    xh = inst.x_hat
    changed = [r for r in inst.raws if not np.array_equal(cf[list(r.columns)], xh[list(r.columns)])]
    cands = []
    grid = np.linspace(0.0, 1.0, 65)
    for r in changed:
        cols = list(r.columns)
        if r.kind == "numeric":
            C = np.repeat(cf[None], len(grid), axis=0)
            C[:, cols[0]] = xh[cols[0]] + grid * (cf[cols[0]] - xh[cols[0]])
        else:
            C = cf[None].copy()
            C[0, cols] = xh[cols]
        cands.append(C)
    num = [r.columns[0] for r in changed if r.kind == "numeric"]
    for i, a in enumerate(num):
        for b in num[i + 1:]:
            g = np.linspace(0.9, 1.0, 11)
            A, B = np.meshgrid(g, g)
            C = np.repeat(cf[None], A.size, axis=0)
            C[:, a] = xh[a] + A.ravel() * (cf[a] - xh[a])
            C[:, b] = xh[b] + B.ravel() * (cf[b] - xh[b])
            cands.append(C)
    t = rng.uniform(0.95, 1.0, (n_random, 1))
    span = np.array([inst.scale(c) for c in range(len(cf))])
    noise = rng.normal(0, 1e-3, (n_random, len(cf))) * span * (cf != xh)
    C = xh + t * (cf - xh) + noise
    cands.append(C)
    C = np.concatenate(cands)
    C = np.where(inst.integral, np.round(C), C)
    return np.clip(C, inst.lower, inst.upper)


def _best_valid(inst, oracle, X: np.ndarray) -> tuple[float | None, np.ndarray | None]:
    if not len(X):
        return None, None
    ok = _valid_rows(inst, oracle, np.asarray(X, float))
    if not ok.any():
        return None, None
    d = inst.distance(np.asarray(X, float)[ok])
    k = int(np.argmin(d))
    return float(d[k]), np.asarray(X, float)[ok][k]


def audit_cell(job: tuple) -> dict:
    """One data set x model x norm: MACE per seed, then GeCo, MD-PSO and a local search look below delta_min."""
    dataset, model, norm, args, path = job
    import warnings

    from solvers.geco import GeCo, Plaf
    from solvers.pso import MDPSO
    warnings.filterwarnings("ignore")
    b, X, oracle = sample(dataset, model, args)
    world = b.world
    geco = GeCo(plaf=Plaf(), n_diverse=5, **dict(zip(("alpha", "beta", "gamma"), GECO_WEIGHTS[norm], strict=True)))
    geco.fit(world, b.data.X_train)
    pso = MDPSO().fit(world, b.data.X_train)
    Mace = _load_revision(args.mace_rev) if args.mace_rev else MACE
    rng = np.random.default_rng(args.seed)
    records = []
    with warming_up(f"GeCo and MACE on one agent ({dataset}/{model}/{norm})"):
        geco.solve(world, X[0])
        Mace(norm=norm, oracle=oracle, seed=args.seeds[0], time_limit=args.milp_timeout).solve(world, X[0])
    for i, x in enumerate(X):
        found = {}
        t = time.perf_counter()
        points = {"geco": [r.final_state for r in geco.solve(world, x) if r.found and r.final_state is not None]}
        t_geco = time.perf_counter() - t
        points["md_pso"] = [r.final_state for r in pso.solve(world, x) if r.found and r.final_state is not None]
        for seed in args.seeds:
            solver = Mace(norm=norm, oracle=oracle, seed=seed, time_limit=args.milp_timeout)
            t = time.perf_counter()
            r = solver.solve(world, x)[0]
            sec = time.perf_counter() - t
            inst = solver._instance(world, x)
            rec = {"agent": i, "seed": seed, "seconds": sec, "status": r.status, "optimal": bool(r.optimal),
                   "distance": r.extra.get("distance"), "delta_min": r.extra.get("delta_min"),
                   "proof": r.extra.get("proof"), "reason": r.extra.get("reason")}
            if r.status == "ok":
                cf = np.asarray(r.extra["counterfactual"], float)
                rec["mace_valid"] = bool(_valid_rows(inst, oracle, cf)[0])
                pts = dict(points)
                pts["local"] = list(local_search(inst, oracle, cf, rng))
                for name, P in pts.items():
                    d, _ = _best_valid(inst, oracle, np.array(P)) if len(P) else (None, None)
                    found[name] = d
                    rec[f"{name}_best"] = d
                below = {n: d for n, d in found.items() if d is not None and d < rec["delta_min"] - 1e-12}
                rec["below_delta_min"] = sorted(below)
                rec["unsound"] = bool(r.optimal and below)
                rec["closer_than_mace"] = sorted(n for n, d in found.items() if d is not None and d < rec["distance"] - 1e-12)
            rec["geco_seconds"] = t_geco
            records.append(rec)
    ok = [r for r in records if r["status"] == "ok"]
    cell = {"dataset": dataset, "model": model, "norm": norm, "seeds": list(args.seeds), "agents": len(X),
            "answers": len(records), "solved": len(ok), "flagged": sum(r["optimal"] for r in ok),
            "unsound": sum(r["unsound"] for r in ok), "below_delta_min_unflagged": sum(
                bool(r["below_delta_min"]) and not r["optimal"] for r in ok),
            "mace_invalid": sum(not r.get("mace_valid", True) for r in ok),
            "not_proven": sum(not r["optimal"] for r in ok),
            "seconds_mean": float(np.mean([r["seconds"] for r in records])) if records else None,
            "records": records, "load_average": os.getloadavg()[0],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    save(cell, path)
    print(f"audit {dataset}/{model}/{norm}: {cell['answers']} answers, flagged {cell['flagged']}, unsound "
          f"{cell['unsound']}, {cell['seconds_mean']:.2f}s", flush=True)
    return cell


def audit_table(cells: list[dict]) -> str:
    lines = ["# MACE certificate audit (issue 34)", "",
             "Per agent and MILP seed: MACE (HiGHS, with the proof re-solve, real sklearn model as oracle); then "
             "GeCo (k = 5, the norm's weights), MD-PSO (defaults) and a local search around MACE's answer (grids "
             "toward the agent per changed feature and pairs, categorical changes undone, 400 random shrinks) "
             "look for valid points (accepted by the real sklearn model, within every constraint) below "
             "delta_min. Unsound: flagged optimal with such a point (target 0).", "",
             "| data | model | norm | agents | answers (agents x seeds) | flagged optimal | unsound | "
             "not proven | valid below delta_min (unflagged) | MACE invalid | MACE s (mean) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(f"| {c['dataset']} | {c['model']} | {c['norm']} | {c['agents']} | {c['answers']} | {c['flagged']} "
                     f"| {c['unsound']} | {c['not_proven']} | {c['below_delta_min_unflagged']} | {c['mace_invalid']} "
                     f"| {fmt(c['seconds_mean'])} |")
    tot = {k: sum(c[k] for c in cells) for k in ("agents", "answers", "flagged", "unsound", "not_proven", "mace_invalid")}
    lines += ["", f"Total: {len(cells)} cells, {tot['agents']} agents, {tot['answers']} answers, {tot['flagged']} flagged "
              f"optimal, {tot['unsound']} unsound, {tot['not_proven']} not proven, {tot['mace_invalid']} invalid."]
    return "\n".join(lines) + "\n"


def run_audit(args: argparse.Namespace) -> None:
    from multiprocessing import Pool

    name = "audit" if not args.mace_rev else f"audit_{args.mace_rev[:8]}"
    out = Path(args.out) / name
    (out / "cells").mkdir(parents=True, exist_ok=True)
    jobs = []
    for norm in args.norms:  # norms outermost: a partial run covers every data set and model
        for dataset in args.datasets:
            for model in args.models:
                seeds = "-".join(map(str, args.seeds))
                path = out / "cells" / f"{dataset}-{model}-{norm}-a{args.agents}-s{seeds}.json"
                if not path.exists():
                    jobs.append((dataset, model, norm, args, path))
    if jobs:
        with Pool(max(1, args.jobs)) as pool:
            for _ in pool.imap_unordered(audit_cell, jobs):
                pass
    seeds = "-".join(map(str, args.seeds))
    cells = [json.loads(f.read_text()) for f in sorted((out / "cells").glob(f"*-a{args.agents}-s{seeds}.json"))]
    cells = [c for c in cells if c["dataset"] in args.datasets and c["model"] in args.models and c["norm"] in args.norms]
    order = {d: i for i, d in enumerate(AUDIT_DATASETS)}
    cells.sort(key=lambda c: (order.get(c["dataset"], 9), ["tree", "forest", "lr", "mlp"].index(c["model"]),
                              NORM_INDEX[c["norm"]]))
    md = audit_table(cells)
    if args.mace_rev:
        md = md.replace("(issue 34)", f"(issue 34), MACE at revision {args.mace_rev}", 1)
    (Path(args.out) / f"{name}.md").write_text(md)
    (Path(args.out) / f"{name}.json").write_text(json.dumps(cells, indent=1, default=float))
    print(md)


# ------------------------------------------------------------------------------------------- GeCo vs MACE (issue 34)

