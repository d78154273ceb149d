"""The black-box table's generators on fresh real agents beside its held-out ones (issue 56).

    python benchmarks/blackbox_fresh.py                                   # every cell with fresh agents, seed 0
    python benchmarks/blackbox_fresh.py --cells credit/forest,credit/mlp --fresh-agents 200

The tables of ``benchmarks/blackbox_generators.py`` score a seeded sample of each cell's rejected test rows (100
at most), and every piece of the budgeted search was added from that sample's misses. Here each of ``--methods``
(``blackbox_generators.METHODS``; fitted on the same 500 MACE labels with fit seed ``--seed``) answers both that
sample and ``--fresh-agents`` *fresh* ones: real rejected test rows outside it, labelled by MACE as the sample is
(``tabular_generators.fresh_labels``, cached), at each of ``--budgets``, through a black box that holds the budget.
German has no rejected test rows past its 36 and is skipped. Writes ``benchmarks/results/blackbox_fresh/<cell>.json``
(a cell already there is not run again unless ``--force``) and the report of every cell run,
``benchmarks/results/blackbox_fresh.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import (  # noqa: E402
    METHODS,
    add_label_arguments,
    answers_within,
    cell_labels,
    parse_budgets,
    with_cell_defaults,
)
from benchmarks.spread_validation import agent_set  # noqa: E402
from benchmarks.tabular_generators import fresh_labels  # noqa: E402
from envs.black_box import BlackBoxModel  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results")
CELLS = "adult/forest,adult/mlp,compas/forest,compas/mlp,credit/forest,credit/mlp"  # German: no fresh rows
LEARNED = {"credit/mlp": "proposer_surrogates", "german/mlp": "proposer_surrogate"}  # the table's; else the proposer


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every method's optimal share on the held-out sample and the fresh agents, at every budget."""
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    sets = {"held-out": (c.test, tl.distance, np.asarray(tl.ok, bool)),
            "fresh": agent_set(fresh_labels(c, args.fresh_agents, args))}
    out: dict[str, Any] = {"cell": cell, "seed": args.seed, "agents": {k: int(v[2].sum()) for k, v in sets.items()},
                           "methods": {}}
    for name in args.methods.replace("learned", LEARNED.get(cell, "proposer")).split(","):
        t = time.perf_counter()
        gen = build_tabular_generator("proposer", METHODS[name]).fit(replace(world, model=BlackBoxModel(world.model)),
                                                                       labels, seed=args.seed)
        row: dict[str, Any] = {"fit_s": time.perf_counter() - t}
        for budget in args.budget_list:
            b = f"{budget.calls}x{budget.rows}"
            for where, (X, dist, ok) in sets.items():
                rec = answers_within(gen, world, X, budget)
                row[f"{where} {b}"] = float(score_answers(world, X, rec.CF, rec.found, dist, ok, "one")["optimal_share"])
        print(f"[{cell}] {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if k != "fit_s"), flush=True)
        out["methods"][name] = row
    return out


def report(cells: list[dict[str, Any]], budgets: list[str], command: str) -> str:
    """The table of every cell's JSON; the commands that wrote them (a cell kept from an earlier run names its own)."""
    runs = list(dict.fromkeys(c.get("command", "an earlier run (its command not recorded)") for c in cells)) or [command]
    lines = ["# The black-box generators on fresh real agents (issue 56)", "",
             "Written by " + "; ".join(f"`{r}`" if r.startswith("python") else r for r in runs) + ".", "",
             f"Share within 1% of MACE (fit seed {cells[0]['seed'] if cells else 0}): on the held-out sample of every table and on fresh real agents "
             "(rejected test rows outside that sample, which no piece of the search was chosen on).", "",
             "| cell | agents (held-out / fresh) | method | " + " | ".join(f"{b} held-out / fresh" for b in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]
    for c in cells:
        for name, row in c["methods"].items():
            vals = [f"{row.get(f'held-out {b}', float('nan')):.3f} / {row.get(f'fresh {b}', float('nan')):.3f}"
                    for b in budgets]
            lines.append(f"| {c['cell']} | {c['agents']['held-out']} / {c['agents']['fresh']} | {name} | "
                         + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default=CELLS, help="comma-separated cells (German has no fresh agents)")
    p.add_argument("--methods", default="search_no_net,learned",
                   help=f"comma-separated methods (of {', '.join(METHODS)}; learned: the table's learned generator "
                        "of the cell: the proposer with its surrogate on German MLP, with three averaged on Credit MLP, else the proposer)")
    p.add_argument("--budgets", default="2x256,8x2000", help="R x N budgets per answer")
    p.add_argument("--fresh-agents", type=int, default=400, help="fresh real agents per cell")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--force", action="store_true", help="run cells whose JSON exists")
    args = with_cell_defaults(p.parse_args(argv))
    if not set(args.methods.split(",")) <= set(METHODS) | {"learned"}:
        raise SystemExit(f"--methods: expected some of {', '.join(METHODS)}, got {args.methods!r}")
    args.budget_list = parse_budgets(args.budgets)  # a bad budget is named before any labels or fits
    command = "python benchmarks/blackbox_fresh.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out) / "blackbox_fresh"
    out.mkdir(parents=True, exist_ok=True)
    for cell in args.cells.split(","):  # one JSON per cell, written as it ends: an interrupted run keeps its cells
        path = out / f"{cell.replace('/', '_')}.json"
        if args.force or not path.exists():
            path.write_text(json.dumps({**run_cell(cell, args), "command": command}, indent=2))
    cells = [json.loads(f.read_text()) for f in sorted(out.glob("*.json"))]
    text = report(cells, [f"{b.calls}x{b.rows}" for b in args.budget_list], command)
    (Path(args.out) / "blackbox_fresh.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
