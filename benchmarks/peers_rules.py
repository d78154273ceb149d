"""DiCE under the world's rules, beside MACE and GeCo under them (issue 55).

    python benchmarks/peers_rules.py [--datasets adult german] [--models forest mlp] [--agents 20]
                                     [--dice random genetic kdtree] [--timeout 60] [--seed 0]

The bundled Adult and German worlds with their default rules (``data_gen/default_rules.py``: GeCo's
Appendix A.1 program, a link, step bounds, forbidden transitions, cost weights). MACE and GeCo take
every rule (MACE certifies the optimum of the ruled problem). DiCE (``dice-ml``, its model-agnostic
methods) takes what it can express: the features no rule lets move are left out of
``features_to_vary``, and every rule on one column becomes a per-agent ``permitted_range`` (the box
``envs.rules`` derives for the agent: age at least the agent's, at most 20 more hours, at most 4 more
levels of education, ...). Links, implications, forbidden transitions and cost weights it cannot say.

Per method and cell: **valid** (the model accepts it and it keeps every rule, by the shared checker),
**breaks rules** (answers the checker rejects, and which rules), the weighted l1 distance's ratio to
MACE's certified optimum (median, over agents both answered validly) and seconds per agent. Cells go
to ``benchmarks/results/peers_rules/cells/`` as they finish (a rerun skips them); the report is
``benchmarks/results/peers_rules.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample, save  # noqa: E402
from benchmarks.peers import DicePeer, RawSpace  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.classifiers import build  # noqa: E402
from data_gen.default_rules import DEFAULT_RULES  # noqa: E402
from envs.rules import RuleSet  # noqa: E402
from solvers.geco import GeCo, Plaf  # noqa: E402
from solvers.mace import MACE  # noqa: E402
from solvers.mace.distance import distance  # noqa: E402
from solvers.mace.domain import plausible_box  # noqa: E402

OUT = Path("benchmarks/results")


class RuledDicePeer(DicePeer):
    """DiCE given what it can say of the rules: the per-agent box of the one-column rules."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.box: tuple[np.ndarray, np.ndarray] | None = None

    def permitted(self, r: np.ndarray) -> dict[str, list]:
        lo, hi = self.box
        out: dict[str, list] = {}
        for raw in self.space.raws:
            cols = list(raw.columns)
            if raw.kind == "group":  # the categories the box leaves open
                out[raw.name] = [str(k) for k, c in enumerate(cols) if hi[c] > 0]
            elif raw.kind == "binary":
                out[raw.name] = [str(v) for v in (0, 1) if lo[cols[0]] <= v <= hi[cols[0]]]
            else:
                out[raw.name] = [float(lo[cols[0]]), float(hi[cols[0]])]
        return {n: v for n, v in out.items() if n in self.vary}

    def solve_ruled(self, x: np.ndarray, box: tuple[np.ndarray, np.ndarray], k: int = 1) -> tuple[np.ndarray, dict]:
        """DiCE on agent x with the features the box pins left out and the others' ranges from it."""
        self.box = box
        lo, hi = box
        self.vary = [raw.name for raw in self.space.raws
                     if (sum(hi[c] > 0 for c in raw.columns) > 1 if raw.kind == "group" else lo[raw.columns[0]] < hi[raw.columns[0]])]
        return self.solve(x, k)


def agent_box(world: Any, checker: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The schema's plausible box for x narrowed by every one-column rule (what DiCE can be told)."""
    lo, hi = plausible_box(world.schema, x, True)
    lo, hi, _ = checker.ground(x).box(lo, hi, np.where(hi > lo, hi - lo, 1.0))
    return lo, hi


def run_cell(dataset: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    b = build(dataset, model, seed=args.seed)
    world = replace(b.world, rules=RuleSet.from_dict(DEFAULT_RULES[dataset]))
    checker = world.compiled_rules()
    agents = sample(world, b.data.X_test, args.agents, args.seed)
    space = RawSpace(world)
    mace = MACE(norm="one", time_limit=120.0)
    geco = GeCo(plaf=Plaf(), n_diverse=1).fit(world, b.data.X_train)
    dice = {m: RuledDicePeer(m, world, space, b.data.X_train, args.seed, timeout=args.timeout) for m in args.dice}
    with warming_up(f"MACE and GeCo under the rules on one agent ({dataset}/{model})"):
        mace.solve(world, agents[0])
        geco.solve(world, agents[0])
    records: dict[str, list[dict]] = {m: [] for m in ("mace", "geco", *(f"dice_{m}" for m in args.dice))}
    for i, x in enumerate(agents):
        answers: dict[str, tuple[np.ndarray | None, float, str]] = {}
        for name, solver in (("mace", mace), ("geco", geco)):
            t = time.perf_counter()
            r = solver.solve(world, x)[0]
            answers[name] = (np.asarray(r.final_state, float) if r.found else None, time.perf_counter() - t,
                             r.status)
        box = agent_box(world, checker, x)
        for m, peer in dice.items():
            t = time.perf_counter()
            rows, extra = peer.solve_ruled(x, box)
            answers[f"dice_{m}"] = (rows[0] if len(rows) else None, time.perf_counter() - t, extra.get("error", "ok"))
        for name, (cf, sec, status) in answers.items():
            rec: dict[str, Any] = {"seconds": sec, "status": status, "found": cf is not None}
            if cf is not None:
                broken = checker.broken(x, cf[None])[0]
                rec.update(accepted=bool(world.accepts(cf[None])[0]),
                           broken=[checker.names[k] for k in np.flatnonzero(broken)],
                           distance=float(distance(world.schema, x, cf[None], "one", cost=checker.cost)[0]))
                rec["valid"] = rec["accepted"] and not rec["broken"]
            records[name].append(rec)
        print(f"[{dataset}/{model}] agent {i + 1}/{len(agents)}", flush=True)
    cell = {"dataset": dataset, "model": model, "seed": args.seed, "agents": len(agents), "rules": list(checker.names),
            "methods": {m: summary(recs, records["mace"]) for m, recs in records.items()}, "records": records,
            "load_average": os.getloadavg()[0], "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return cell


def summary(recs: list[dict], mace: list[dict]) -> dict[str, Any]:
    found = [r for r in recs if r["found"]]
    ratios = [r["distance"] / m["distance"] for r, m in zip(recs, mace, strict=True)
              if r.get("valid") and m.get("valid") and m["distance"] > 0]
    by_rule = Counter(name for r in found for name in r["broken"])
    return {"answered": len(found), "valid": sum(bool(r.get("valid")) for r in recs),
            "rejected_by_model": sum(not r["accepted"] for r in found),
            "breaks_rules": sum(bool(r["broken"]) for r in found), "broken_by_rule": dict(by_rule.most_common()),
            "median_ratio": float(np.median(ratios)) if ratios else None,
            "within_1pct": sum(q <= 1.01 for q in ratios),
            "seconds_median": float(np.median([r["seconds"] for r in recs]))}


def table(cells: list[dict]) -> str:
    lines = ["# DiCE under the world's rules, beside MACE and GeCo (issue 55)", "",
             "`python benchmarks/peers_rules.py`. Adult and German with their default rules "
             "(data_gen/default_rules.py). MACE and GeCo take every rule; DiCE takes what it can say: the "
             "features no rule lets move left out of `features_to_vary`, each one-column rule as a per-agent "
             "`permitted_range`. Valid: the model accepts it and the shared checker finds no broken rule. "
             "Distance: weighted l1 (the rules' cost weights), median ratio to MACE's certified optimum over the "
             "agents both answered validly.", "",
             "| data | model | method | agents | answered | valid | breaks rules | model rejects | median d / MACE "
             "| within 1% of MACE | s per agent (median) | rules broken most |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        for m, s in c["methods"].items():
            worst = ", ".join(f"{k} ({v})" for k, v in list(s["broken_by_rule"].items())[:3]) or "-"
            ratio = "-" if s["median_ratio"] is None else f"{s['median_ratio']:.2f}"
            lines.append(f"| {c['dataset']} | {c['model']} | {m} | {c['agents']} | {s['answered']} | {s['valid']} | "
                         f"{s['breaks_rules']} | {s['rejected_by_model']} | {ratio} | {s['within_1pct']} | "
                         f"{s['seconds_median']:.3f} | {worst} |")
    tot = Counter()
    for c in cells:
        for m, s in c["methods"].items():
            tot[(m, "answered")] += s["answered"]
            tot[(m, "breaks")] += s["breaks_rules"]
    methods = list(cells[0]["methods"]) if cells else []
    lines += ["", "Answers that break a rule, all cells: " + "; ".join(
        f"{m} {tot[(m, 'breaks')]}/{tot[(m, 'answered')]}" for m in methods) +
        f". Load average {np.mean([c['load_average'] for c in cells]):.2f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["adult", "german"], help="data sets with default rules")
    p.add_argument("--models", nargs="+", default=["forest", "mlp"], help="model classes")
    p.add_argument("--agents", type=int, default=20, help="rejected test agents per cell")
    p.add_argument("--dice", nargs="+", default=["random", "genetic", "kdtree"], help="DiCE methods")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per DiCE call (then no answer)")
    p.add_argument("--seed", type=int, default=0, help="world and sample seed")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--force", action="store_true", help="recompute finished cells")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    out = Path(args.out)
    (out / "peers_rules" / "cells").mkdir(parents=True, exist_ok=True)
    cells = []
    for d in args.datasets:
        if d not in DEFAULT_RULES:
            p.error(f"--datasets: {d!r} has no default rules (have {sorted(DEFAULT_RULES)})")
        for m in args.models:
            path = out / "peers_rules" / "cells" / f"{d}-{m}-a{args.agents}-s{args.seed}-{'-'.join(args.dice)}.json"
            cells.append(json.loads(path.read_text()) if path.exists() and not args.force
                         else save(run_cell(d, m, args), path))
    md = table(cells)
    (out / "peers_rules.md").write_text(md)
    (out / "peers_rules.json").write_text(json.dumps([{k: v for k, v in c.items() if k != "records"} for c in cells],
                                                     indent=1, default=float))
    print(md)


if __name__ == "__main__":
    main()
