"""GeCo against MACE under the world's rules (issue 55): ``python benchmarks/mace.py --rules --geco``.

GeCo (its defaults, PLAF = the schema's mutability plus the world's rules, which ``GeCo.fit`` adds)
against MACE's certified l1 optimum under the same rules (``benchmarks/mace_rules.py: RULES``), on the
same seeded sample of rejected test agents: the share of agents MACE certified where GeCo's nearest
valid answer (the refitted model accepts it and the shared checker passes it) is within 1% of MACE's
distance (the rules' cost weights in both), per data set x model (target >= 95%); GeCo's answers that
break a rule (must be 0) and its seconds per agent. ``benchmarks/results/mace/geco_rules.{md,json}``;
cells in ``geco_rules/cells/`` (a rerun resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.mace_common import fmt, sample
from benchmarks.mace_rules import RULES
from benchmarks.warmup import warming_up
from envs.rules import RuleSet
from solvers.mace import MACE


def geco_rules_cell(job: tuple) -> dict:
    """GeCo against MACE's certified l1 optimum on the world with ``RULES`` (same agents)."""
    dataset, model, args, path = job
    import warnings

    from benchmarks.blackbox import save
    from solvers.geco import GeCo, Plaf
    from solvers.mace.distance import distance
    warnings.filterwarnings("ignore")
    b, X, oracle = sample(dataset, model, args)
    world = replace(b.world, rules=RuleSet.from_dict(RULES[dataset]))
    checker = world.compiled_rules()
    geco = GeCo(plaf=Plaf()).fit(world, b.data.X_train)
    mace = MACE(norm="one", oracle=oracle, time_limit=args.milp_timeout)
    with warming_up(f"GeCo under the rules on one agent ({dataset}/{model})"):
        geco.solve(world, X[0])
    records = []
    for x in X:
        r = mace.solve(world, x)[0]
        t = time.perf_counter()
        g = geco.solve(world, x)
        sec = time.perf_counter() - t
        pts = np.array([q.final_state for q in g if q.found and q.final_state is not None]).reshape(-1, len(x))
        ok = pts[oracle(pts) & checker.holds(x, pts)] if len(pts) else pts
        dg = float(distance(world.schema, x, ok, "one", cost=checker.cost).min()) if len(ok) else None
        records.append({"mace_status": r.status, "mace_optimal": bool(r.optimal), "mace_distance": r.extra.get("distance"),
                        "geco_distance": dg, "geco_seconds": sec, "geco_status": g[0].status,
                        "geco_breaks_rules": int(len(pts) - int(checker.holds(x, pts).sum())) if len(pts) else 0})
    cert = [r for r in records if r["mace_optimal"] and r["mace_distance"] and r["mace_distance"] > 0]
    within = [r for r in cert if r["geco_distance"] is not None and r["geco_distance"] <= 1.01 * r["mace_distance"]]
    ratios = [r["geco_distance"] / r["mace_distance"] for r in cert if r["geco_distance"] is not None]
    cell = {"dataset": dataset, "model": model, "agents": len(X), "certified": len(cert), "within_1pct": len(within),
            "share": len(within) / len(cert) if cert else None, "worst_ratio": max(ratios) if ratios else None,
            "geco_missing": sum(r["geco_distance"] is None for r in cert),
            "geco_breaks_rules": sum(r["geco_breaks_rules"] for r in records),
            "checked_only": list(geco.checked_only_), "rules": list(checker.names),
            "geco_seconds_mean": float(np.mean([r["geco_seconds"] for r in records])),
            "geco_seconds_max": float(np.max([r["geco_seconds"] for r in records])),
            "records": records, "load_average": os.getloadavg()[0],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    save(cell, path)
    print(f"geco under rules {dataset}/{model}: {cell['within_1pct']}/{cell['certified']} within 1%, worst "
          f"{fmt(cell['worst_ratio'], '.4f')}, {cell['geco_seconds_mean']:.3f}s", flush=True)
    return cell


def geco_rules_table(cells: list[dict]) -> str:
    lines = ["# GeCo against MACE's certified l1 optimum under the rules (issue 55)", "",
             "The world with benchmarks/mace_rules.py: RULES (GeCo's Appendix A.1 program, a link, step bounds, "
             "forbidden transitions, cost weights); GeCo with its defaults (PLAF = the schema's mutability plus the "
             "world's rules); MACE (MILP, l1 with the cost weights, the refitted sklearn model as oracle) gives the "
             "certified distance. Within 1%: GeCo's nearest valid answer (accepted by the real model, every rule "
             "kept) <= 1.01 x MACE's, over the agents MACE certified. Target: >= 95% per cell. Breaks rules: GeCo "
             "answers the shared checker rejects (must be 0).", "",
             "| data | model | agents | MACE certified | GeCo within 1% | share | worst GeCo / MACE | GeCo none "
             "| breaks rules | GeCo s (mean / max) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        share = "-" if c["share"] is None else f"{100 * c['share']:.1f}%"
        lines.append(f"| {c['dataset']} | {c['model']} | {c['agents']} | {c['certified']} | {c['within_1pct']} | {share} "
                     f"| {fmt(c['worst_ratio'], '.4f')} | {c['geco_missing']} | {c['geco_breaks_rules']} | "
                     f"{c['geco_seconds_mean']:.3f} / {c['geco_seconds_max']:.3f} |")
    n, w = sum(c["certified"] for c in cells), sum(c["within_1pct"] for c in cells)
    lines += ["", f"Overall: {w}/{n} within 1% ({100 * w / max(n, 1):.1f}%); load average "
                  f"{fmt(np.mean([c['load_average'] for c in cells]))}."]
    return "\n".join(lines) + "\n"


def run_rules_geco(args: argparse.Namespace) -> None:
    from multiprocessing import Pool

    out = Path(args.out) / "geco_rules"
    (out / "cells").mkdir(parents=True, exist_ok=True)
    tag = f"a{args.agents}-s{args.seed}-{args.tag}"
    jobs = [(d, m, args, out / "cells" / f"{d}-{m}-{tag}.json") for d in args.datasets for m in args.models]
    todo = [j for j in jobs if not j[3].exists()]
    if todo:
        with Pool(max(1, args.jobs)) as pool:
            for _ in pool.imap_unordered(geco_rules_cell, todo):
                pass
    cells = [json.loads(j[3].read_text()) for j in jobs]
    md = geco_rules_table(cells)
    suffix = "" if args.tag == "current" else f"_{args.tag}"
    (Path(args.out) / f"geco_rules{suffix}.md").write_text(md)
    (Path(args.out) / f"geco_rules{suffix}.json").write_text(json.dumps(
        [{k: v for k, v in c.items() if k != "records"} for c in cells], indent=1, default=float))
    print(md)
