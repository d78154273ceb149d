"""Where learning carries the answer, budget by budget (issue 56): each cell's table generator (its saved fit at its
documented setting, ``remote_student.SETTINGS``) beside the proposer alone and the same search without the network,
on the held-out agents (and, with ``--val-agents`` / ``--fresh-agents``, the other real agent sets) at every budget
of ``--budgets``, the model seen only through ``predict_proba`` (calls and rows counted and capped per agent).
Reports the optimal share (within 1% of MACE's certified optimum, the answer valid) against the rows scored per
answer, and the table generator's lead over the search without the network at each budget.

    python benchmarks/budget_frontier.py                      # the five cells, fit seed 0, held-out agents
    python benchmarks/budget_frontier.py --cells adult/forest --budgets 2x256,4x512 --fresh-agents 400

The saved fits are those ``benchmarks/remote_student.py`` times (its docstring lists the commands that write them;
a missing one stops the run and names its command). Each cell's results are written as the cell ends
(``<out>/<cell>.json``); a rerun with the same settings skips the cells already there (``--force``: answer them
again). Writes ``<out>.md``, ``<out>.json`` and the frontier plot ``<out>.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import (  # noqa: E402
    add_label_arguments,
    cell_labels,
    kept_cell,
    parse_budgets,
    run_budget,
    with_cell_defaults,
)
from benchmarks.misses import agent_sets  # noqa: E402
from benchmarks.remote_student import BASELINES, SETTINGS, table_generators  # noqa: E402

OUT = Path("benchmarks/results/budget_frontier")
BUDGETS = "1x128,2x256,4x512,8x2000"  # one round trip, the 2 x 256, twice that, the 8 x 2,000
TABLE = "table generator"  # the key of each cell's table generator in the results (its saved name beside it)
NO_NET = "search_no_net"
LABELS = {TABLE: "table generator (the cell's setting, named above)", "proposer": "proposer alone (network, imitation)",
          NO_NET: "same search, no network (label averages)"}


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every agent set of ``cell`` answered by its table generator and the baselines at every budget."""
    name, setting = SETTINGS[cell]
    gens = table_generators(cell, args.generators, args.fit)
    c, tl, _ = cell_labels(cell, args)
    world = c.build.world
    out: dict[str, Any] = {"cell": cell, "fit": args.fit, "generator": {"name": name, **setting}, **_asked(args),
                           "sets": {}}
    methods = {TABLE: gens[name], **{b: gens[b] for b in BASELINES}}
    budgets = parse_budgets(args.budgets)
    for set_name, (X, _, mace_d, mace_ok) in agent_sets(c, tl, args).items():
        runs: dict[str, list[dict[str, Any]]] = {}
        for key, gen in methods.items():
            runs[key] = []
            for budget in budgets:
                m = run_budget(gen, world, X, budget, mace_d, mace_ok)
                runs[key].append({k: m[k] for k in ("budget", "optimal_share", "validity", "rows_median", "rows_max",
                                                    "calls", "ms_per_agent")})
                print(f"[{cell} {set_name}] {key} {budget.calls}x{budget.rows}: optimal {m['optimal_share']:.4f}, "
                      f"rows median {m['rows_median']:.0f}, {m['ms_per_agent']:.1f} ms an agent", flush=True)
        out["sets"][set_name] = {"agents": int(len(X)), "mace_solved": int(mace_ok.sum()), "methods": runs}
    return out


def _asked(args: argparse.Namespace) -> dict[str, Any]:
    """What a cell's results answer (a written cell is reused only for the same)."""
    return {"budgets": args.budgets, "val_agents": args.val_agents, "fresh_agents": args.fresh_agents,
            "test_agents": args.test_agents, "sizes": args.sizes, "seed": args.seed}


def leads(cell: dict[str, Any], set_name: str) -> list[float]:
    """The table generator's optimal share minus the search without the network's, budget by budget."""
    m = cell["sets"][set_name]["methods"]
    return [a["optimal_share"] - b["optimal_share"] for a, b in zip(m[TABLE], m[NO_NET], strict=True)]


def report(cells: list[dict[str, Any]], command: str) -> str:
    """The page: per cell and agent set, each method's optimal share (rows scored, median) at each budget, and the
    lead of the table generator over the search without the network."""
    lines = ["# Where learning carries the answer, budget by budget (issue 56)", "",
             f"`{command}`: each cell's table generator (its saved fit at its documented setting) beside the proposer "
             "alone and the same search without the network, the model seen only through `predict_proba`, calls and "
             "rows capped per agent. Each cell: the share of the agents MACE solved answered within 1% of its "
             "certified optimum (the answer valid), the median rows scored per answer in brackets.", ""]
    for c in cells:
        gen = c["generator"]
        setting = ", ".join(f"{k} {v}" for k, v in gen.items() if k != "name")
        lines += [f"## {c['cell']} (fit {c['fit']}; table generator `{gen['name']}`{', ' + setting if setting else ''})", ""]
        for set_name, s in c["sets"].items():
            methods = s["methods"]
            budgets = [f"{r['budget']['calls']} x {r['budget']['rows']:,}" for r in methods[TABLE]]
            lines += [f"{set_name}: {s['agents']} agents, {s['mace_solved']} solved by MACE.", "",
                      "| method | " + " | ".join(budgets) + " |", "|---|" + "---|" * len(budgets)]
            for key, runs in methods.items():
                lines.append(f"| {key} | " + " | ".join(f"{r['optimal_share']:.4f} ({r['rows_median']:,.0f})"
                                                      for r in runs) + " |")
            lines += ["| lead over the search without the network | "
                      + " | ".join(f"{v * 100:+.2f}" for v in leads(c, set_name)) + " |", ""]
    return "\n".join(lines)


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    """A panel per cell (columns) and agent set (rows: held-out, then validation and fresh where answered): the
    optimal share at each budget, one line per method; the table generator's lead is the gap between its line and
    the search without the network's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(k for c in cells for k in c["sets"]))
    if not cells or not sets:
        return
    fig, axes = plt.subplots(len(sets), len(cells), figsize=(3.3 * len(cells), 3.0 * len(sets) + 0.4), squeeze=False)
    for j, c in enumerate(cells):
        for i, set_name in enumerate(sets):
            ax = axes[i, j]
            if set_name not in c["sets"]:
                ax.axis("off")
                continue
            methods = c["sets"][set_name]["methods"]
            for key, runs in methods.items():
                ax.plot(range(len(runs)), [r["optimal_share"] for r in runs], marker="o", label=LABELS.get(key, key))
            ax.set_xticks(range(len(methods[TABLE])),
                          [f"{r['budget']['calls']}x{r['budget']['rows']}" for r in methods[TABLE]])
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{c['cell']}, {set_name}, {c['sets'][set_name]['mace_solved']} agents\n{c['generator']['name']}",
                         fontsize=8)
            ax.set_xlabel("budget per answer (round trips x rows)", fontsize=8)
            ax.set_ylabel("within 1% of MACE", fontsize=8)
    handles, labels = next(ax for ax in axes.flat if ax.has_data()).get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.4 / (3.0 * len(sets) + 0.4), 1, 1))  # room for the legend below the panels
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_label_arguments(p)
    p.add_argument("--cells", default=",".join(SETTINGS), help="comma-separated cells (of remote_student's SETTINGS)")
    p.add_argument("--fit", type=int, default=0, help="the fit seed whose saved generators answer")
    p.add_argument("--budgets", default=BUDGETS, help="comma-separated RxN budgets per answer")
    p.add_argument("--val-agents", type=int, default=0, help="validation agents as well (0: none)")
    p.add_argument("--fresh-agents", type=int, default=0, help="fresh real agents as well (0: none)")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="where the saved fits are")
    p.add_argument("--out", default=str(OUT), help="results path without its suffix (a cell's own under it)")
    p.add_argument("--force", action="store_true", help="answer again the cells already written")
    args = with_cell_defaults(p.parse_args(argv))
    for cell in args.cells.split(","):
        if cell not in SETTINGS:
            p.error(f"--cells: {cell!r} has no table generator here; one of {', '.join(SETTINGS)}")
    try:
        parse_budgets(args.budgets)
    except SystemExit as e:
        p.error(str(e))
    if args.val_agents < 0 or args.fresh_agents < 0:
        p.error("--val-agents / --fresh-agents: expected 0 or more")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells, t0 = [], time.perf_counter()
    for cell in args.cells.split(","):
        path = out / f"{cell.replace('/', '_')}.json"
        done = kept_cell(path, {"fit": args.fit, **_asked(args)}, args.force)  # resumable by cell
        if done is not None:
            print(f"[{cell}] done already ({path}); --force answers it again", flush=True)
            cells.append(done)
            continue
        if path.exists() and not args.force:
            print(f"[{cell}] {path} answers other settings: answered again", flush=True)
        cells.append(run_cell(cell, args))
        path.write_text(json.dumps(cells[-1], indent=1))
    command = "python benchmarks/budget_frontier.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out.with_suffix(".json").write_text(json.dumps(cells, indent=1))
    out.with_suffix(".md").write_text(report(cells, command.strip()) + "\n")
    plot(cells, out.with_suffix(".png"))
    print(report(cells, command.strip()))
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
