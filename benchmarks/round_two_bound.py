"""How much of a 2 x 256 miss is round one's, and how much round two's cut (issue 56).

    python benchmarks/round_two_bound.py                                   # the three forests that miss .90
    python benchmarks/round_two_bound.py --cells credit/forest --wide 512,2000

At 2 x 256 the proposer's search asks 128 rows in round one (the proposals) and 128 in round two (moves
that shorten the accepted rows, cut to the nearest-first spread). Here round one stays at 128 rows
(``ProposerParams.first_share`` = 128 / (128 + W)) and round two may ask up to W rows: with W large
round two asks every move it builds, so the optimal share it reaches is the most any choice of round
two's 128 rows could reach after that round one. Where that bound is near the 2 x 256 figure, round one
(the proposals) is the limit; where it is far above, the cut is. The generators are the ones
``benchmarks/blackbox_generators.py`` saved under ``--generators`` where there, else fitted here (seed 0).

Writes ``benchmarks/results/round_two_bound.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import (  # noqa: E402
    METHODS,
    add_label_arguments,
    answers_within,
    cell_labels,
    with_cell_defaults,
)
from benchmarks.tabular_generators import CELLS  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import TabularGenerator, build_tabular_generator  # noqa: E402

ROUND_ONE = 128  # round one's rows at 2 x 256


def generator(cell: str, method: str, args: argparse.Namespace, c, labels) -> tuple[TabularGenerator, str]:
    """The saved generator of ``blackbox_generators.py`` where there is one, else one fitted here."""
    path = Path(args.generators) / cell.replace("/", "_") / method
    if path.exists():
        return TabularGenerator.load(path), "saved"
    world = c.build.world
    gen = build_tabular_generator("proposer", METHODS[method]).fit(replace(world, model=BlackBoxModel(world.model)),
                                                                    labels, seed=args.seed)
    return gen, "fitted here"


def bound_cell(cell: str, args: argparse.Namespace) -> dict:
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    out = {"cell": cell, "test_agents": int(len(c.test)), "methods": {}}
    for method in args.methods.split(","):
        gen, source = generator(cell, method, args, c, labels)
        base = gen.params
        rows = []
        for wide in [ROUND_ONE] + [int(w) for w in args.wide.split(",")]:
            gen.params = replace(base, first_share=ROUND_ONE / (ROUND_ONE + wide))
            rec = answers_within(gen, world, c.test, Budget(2, ROUND_ONE + wide))
            m = score_answers(world, c.test, rec.CF, rec.found, tl.distance, tl.ok, "one")
            rows.append({"round_two_rows": wide, "optimal_share": m["optimal_share"],
                         "rows_median": float(np.median(rec.rows)), "rows_max": int(np.max(rec.rows))})
            print(f"[{cell}] {method} round two up to {wide}: optimal {m['optimal_share']:.3f}, "
                  f"rows median {np.median(rec.rows):.0f}", flush=True)
        gen.params = base
        out["methods"][method] = {"generator": source, "budgets": rows}
    return out


def report(cells: list[dict], command: str) -> str:
    widths = [b["round_two_rows"] for b in next(iter(cells[0]["methods"].values()))["budgets"]]
    lines = ["# Round one at 128 rows, round two up to W rows (issue 56)", "", f"`{command}`", "",
             "| cell | method | 2 x 256 (W = 128) | " + "".join(f"W = {w} | " for w in widths[1:])
             + "rows median at the widest |", "|---|---|" + "---:|" * (len(widths) + 1)]
    for cell in cells:
        for method, r in cell["methods"].items():
            b = r["budgets"]
            lines.append(f"| {cell['cell']} ({cell['test_agents']}) | {method} | " + " | ".join(
                f"{x['optimal_share']:.3f}" for x in b) + f" | {b[-1]['rows_median']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default="german/forest,credit/forest,adult/forest", help="comma-separated cells")
    p.add_argument("--methods", default="proposer,search_no_net", help=f"of {', '.join(METHODS)}")
    p.add_argument("--wide", default="2000", help="round two's rows W beyond the 2 x 256 run's 128")
    add_label_arguments(p)
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="blackbox_generators.py's saved fits")
    p.add_argument("--out", default="benchmarks/results", help="results directory")
    args = p.parse_args(argv)
    for cell in args.cells.split(","):
        if cell not in CELLS:
            raise SystemExit(f"--cells: unknown cell {cell!r}; known: {', '.join(CELLS)}")
    if not set(args.methods.split(",")) <= set(METHODS):
        raise SystemExit(f"--methods: expected some of {', '.join(METHODS)}, got {args.methods!r}")
    with_cell_defaults(args)
    cells = [bound_cell(cell, args) for cell in args.cells.split(",")]
    command = "python benchmarks/round_two_bound.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "round_two_bound.md").write_text(report(cells, command))
    (out / "round_two_bound.json").write_text(json.dumps(cells, indent=1, default=float))
    print(report(cells, command))


if __name__ == "__main__":
    main()
