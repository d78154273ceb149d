"""Does an answer depend on the rest of its batch? (issue 56)

    python benchmarks/batch_alone.py [--cells adult/forest,credit/mlp] [--methods proposer,proposer_surrogate] \\
        [--budgets 2x256,8x2000]

A served request is one agent; the benchmark tables answer 100 agents in one batch. Each saved generator of
``benchmarks/blackbox_generators.py`` (``data_cache/blackbox_generators/<cell>/<method>``: the table's fits)
answers the cell's held-out agents in one batch and then one agent at a time (each its own black box and
budget), at each of ``--budgets`` (2 round trips x 256 rows by default); it reports the agents whose answers
differ in any bit, and the optimal share (within 1% of MACE) both ways. Everything should read "none". Writes
``benchmarks/results/batch_alone.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import REMOTE, answers_within, cell_labels, parse_budgets  # noqa: E402
from benchmarks.tabular_generators import CELLS  # noqa: E402
from envs.black_box import Budget  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import TabularGenerator  # noqa: E402


def check(cell: str, method: str, args: argparse.Namespace, budget: Budget) -> dict[str, Any] | None:
    """One saved generator answered in a batch and alone: differing agents and both optimal shares."""
    path = Path(args.generators) / cell.replace("/", "_") / method
    if not path.exists():
        print(f"[{cell}] {method}: no saved generator at {path} (run blackbox_generators first); skipped")
        return None
    c, tl, _ = cell_labels(cell, args)
    world, X = c.build.world, c.test  # as the table: every held-out agent, scored where MACE certified one
    gen = TabularGenerator.load(path)
    batch = answers_within(gen, world, X, budget)
    alone = [answers_within(gen, world, X[i:i + 1], budget) for i in range(len(X))]
    CF = np.concatenate([a.CF for a in alone])
    found = np.concatenate([a.found for a in alone])
    rows = np.concatenate([np.atleast_1d(a.rows) for a in alone])
    differ = [i for i in range(len(X)) if not (np.array_equal(CF[i], batch.CF[i], equal_nan=True)
                                               and rows[i] == batch.rows[i])]
    share = {}
    for name, (cf, ok) in {"batch": (batch.CF, batch.found), "alone": (CF, found)}.items():
        share[name] = score_answers(world, X, cf, ok, tl.distance, tl.ok, "one")["optimal_share"]
    print(f"[{cell}] {method} {budget.calls}x{budget.rows}: {len(differ)} of {len(X)} answers differ alone "
          f"{differ[:10]}; optimal share batch {share['batch']:.3f}, alone {share['alone']:.3f}", flush=True)
    return {"cell": cell, "method": method, "budget": {"calls": budget.calls, "rows": budget.rows},
            "agents": int(len(X)), "differ": differ, "optimal_batch": share["batch"], "optimal_alone": share["alone"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated dataset/model cells")
    p.add_argument("--methods", default=",".join(REMOTE), help="comma-separated saved generators")
    p.add_argument("--budgets", default="2x256", help="comma-separated R x N budgets per answer")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="the saved generators")
    p.add_argument("--out", default="benchmarks/results", help="results directory")
    args = p.parse_args(argv)
    # what blackbox_generators' cells read (its defaults: 500 labels, 100 held-out agents, seed 0)
    args.sizes, args.test_agents, args.seed, args.jobs = "500", 100, 0, 1
    args.cache, args.quiet, args.rules, args.numeric_scale, args.resample_prob = \
        "data_cache/tabular_generators", True, False, 0.05, 0.15
    args.sizes_for = []
    out = [r for cell in args.cells.split(",") for m in args.methods.split(",") for budget in parse_budgets(args.budgets)
           if (r := check(cell, m, args, budget)) is not None]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "batch_alone.json").write_text(json.dumps(out, indent=1, default=float))
    lines = ["# Answers in a batch against one agent at a time", "",
             f"`python benchmarks/batch_alone.py{''.join(' ' + a for a in (sys.argv[1:] if argv is None else argv))}`",
             "", "| cell | method | budget | agents | differ alone | optimal, batch | optimal, alone |",
             "|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['cell']} | {r['method']} | {r['budget']['calls']} x {r['budget']['rows']} | {r['agents']} | "
              f"{len(r['differ']) or 'none'} | {r['optimal_batch']:.3f} | {r['optimal_alone']:.3f} |" for r in out]
    (Path(args.out) / "batch_alone.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
