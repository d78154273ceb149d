"""MACE with and without the world's rules (issue 55): ``python benchmarks/mace.py --rules``.

The rules are the Adult and German specs' defaults (``data_gen/default_rules.py``): GeCo's Appendix A.1
program in the rule language (Adult; German gets the same kinds: the paper has no German program), with
the language's other kinds beside it: a link (a level of education costs a year of age), step bounds,
forbidden transitions and cost weights per direction.
Per data set x model x norm, MACE explains the same seeded sample of rejected test agents on the
world without rules and on the world with them, alternating per agent (same machine state for
both). Reported: median and mean seconds per explanation of each, their ratio (target <= 1.5x),
the share certified under the rules (an answer flagged optimal, or "no recourse" proven by an
infeasible MILP; target >= 95%), and that every answer keeps every rule (the shared checker) and is
accepted by the refitted scikit-learn model. ``benchmarks/results/mace/rules.{md,json}``.
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
from benchmarks.warmup import warming_up
from data_gen.default_rules import DEFAULT_RULES
from envs.rules import RuleSet
from solvers.mace import MACE

RULES = DEFAULT_RULES  # the bundled Adult/German specs' default rules (data_gen/default_rules.py)


def rules_cell(dataset: str, model: str, norm: str, args: argparse.Namespace) -> dict:
    b, X, oracle = sample(dataset, model, args)
    plain = b.world
    ruled = replace(plain, rules=RuleSet.from_dict(RULES[dataset]))
    checker = ruled.compiled_rules()
    solver = MACE(norm=norm, oracle=oracle, time_limit=args.milp_timeout)
    with warming_up(f"MACE with and without rules on one agent ({dataset}/{model}/{norm})"):
        solver.solve(plain, X[0])
        solver.solve(ruled, X[0])
    records = []
    for x in X:
        rec = {}
        for name, world in (("plain", plain), ("rules", ruled)):
            t = time.perf_counter()
            r = solver.solve(world, x)[0]
            rec[name] = {"seconds": time.perf_counter() - t, "status": r.status, "optimal": bool(r.optimal),
                         "distance": r.extra.get("distance"), "delta_min": r.extra.get("delta_min"),
                         "reason": r.extra.get("reason")}
            if r.status == "ok":
                cf = np.asarray(r.final_state, float)
                rec[name]["keeps_rules"] = checker.violations(x, cf[None])[0] is None
                rec[name]["accepted"] = bool(oracle(cf[None])[0])
        records.append(rec)
    return {"dataset": dataset, "model": model, "norm": norm, "agents": len(X), "records": records,
            "rules": checker.names, "load_average": os.getloadavg()[0],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **summary(records)}


def summary(records: list[dict]) -> dict:
    out = {}
    for name in ("plain", "rules"):
        sec = np.array([r[name]["seconds"] for r in records])
        done = [r[name] for r in records]
        out[name] = {"median_s": float(np.median(sec)), "mean_s": float(sec.mean()), "max_s": float(sec.max()),
                     "ok": sum(d["status"] == "ok" for d in done),
                     "certified": sum(d["optimal"] or d["status"] == "no_recourse" for d in done),
                     "no_recourse": sum(d["status"] == "no_recourse" for d in done),
                     "invalid": sum(d["status"] == "ok" and not (d["accepted"] and (name == "plain" or d["keeps_rules"]))
                                    for d in done)}
    out["ratio_median"] = out["rules"]["median_s"] / out["plain"]["median_s"]
    out["plain_breaks_rules"] = sum(r["plain"]["status"] == "ok" and not r["plain"]["keeps_rules"] for r in records)
    return out


def table(cells: list[dict]) -> str:
    lines = ["# MACE under the rules (issue 55)", "",
             "The same agents on the world without rules and with GeCo's Appendix A.1 program and the language's "
             "other kinds (benchmarks/mace_rules.py: RULES), alternating per agent; MILP, the refitted sklearn "
             "model as oracle. Certified: flagged optimal or proven no recourse. Invalid: an answer the model "
             "rejects or that breaks a rule (must be 0). Plain breaks rules: answers without the rules that the "
             "rules forbid (what MACE's 'optimal' meant before).", "",
             "| data | model | norm | agents | median s plain / rules | ratio | mean s plain / rules | certified plain "
             "| certified rules | no recourse (rules) | invalid | plain breaks rules |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        p, r = c["plain"], c["rules"]
        lines.append(f"| {c['dataset']} | {c['model']} | {c['norm']} | {c['agents']} | {p['median_s']:.3f} / "
                     f"{r['median_s']:.3f} | {c['ratio_median']:.2f}x | {p['mean_s']:.3f} / {r['mean_s']:.3f} | "
                     f"{p['certified']}/{c['agents']} | {r['certified']}/{c['agents']} | {r['no_recourse']} | "
                     f"{p['invalid'] + r['invalid']} | {c['plain_breaks_rules']} |")
    n = sum(c["agents"] for c in cells)
    cert = sum(c["rules"]["certified"] for c in cells)
    plain_all = np.concatenate([[x["plain"]["seconds"] for x in c["records"]] for c in cells])
    rules_all = np.concatenate([[x["rules"]["seconds"] for x in c["records"]] for c in cells])
    lines += ["", f"Overall: median {np.median(plain_all):.3f} s without rules, {np.median(rules_all):.3f} s with "
                  f"them ({np.median(rules_all) / np.median(plain_all):.2f}x); certified under the rules {cert}/{n} "
                  f"({100 * cert / max(n, 1):.1f}%); load average {fmt(np.mean([c['load_average'] for c in cells]))}."]
    return "\n".join(lines) + "\n"


def run_rules(args: argparse.Namespace) -> None:
    out = Path(args.out)
    cells = []
    for dataset in args.datasets:
        for model in args.models:
            for norm in args.norms:
                c = rules_cell(dataset, model, norm, args)
                cells.append(c)
                print(f"{dataset}/{model}/{norm}: median {c['plain']['median_s']:.3f}s -> {c['rules']['median_s']:.3f}s "
                      f"({c['ratio_median']:.2f}x), certified {c['rules']['certified']}/{c['agents']}", flush=True)
    md = table(cells)
    (out / f"rules{args.tag if args.tag != 'current' else ''}.md").write_text(md)
    (out / f"rules{args.tag if args.tag != 'current' else ''}.json").write_text(json.dumps(cells, indent=1))
    print(md)
