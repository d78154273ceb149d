"""How far a student of a forest's corners could go if it never erred: the cap its pool sets (issue 56).

    python benchmarks/corner_pool_cap.py                     # Credit forest, 400 validation and 400 fresh agents
    python benchmarks/corner_pool_cap.py --cells german/forest,credit/forest,adult/forest --pools 1000,10000
    python benchmarks/corner_pool_cap.py --distinct --pools 256,1000,3000,10000   # and of distinct corners

The student (``learners/tabular/student.py``) scores an agent's nearest ``student_pool`` vocabulary corners and
its likeliest accepted ones lead round one. Here the forest itself judges them (a white box: an oracle, not a
method): per agent the nearest corner it accepts among the nearest k is the answer. The share of agents whose
answer is within 1% of MACE is what a perfect student's first pick would give at that pool, and the share with
any accepted corner how often the pool holds one at all. Agents: the held-out test agents, ``--val-agents``
validation agents and ``--fresh-agents`` fresh real ones (as ``benchmarks/student_forests.py`` scores them);
the vocabulary is the cell's 500 labels' (``budget_search.value_vocabulary``, as the proposer's). Writes
``benchmarks/results/corner_pool_cap.{md,json}``.
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

from benchmarks.blackbox_generators import add_label_arguments, cell_labels, with_cell_defaults  # noqa: E402
from benchmarks.student_forests import agent_sets, parse_pools  # noqa: E402
from learners.tabular.budget_search import value_vocabulary  # noqa: E402
from learners.tabular.corners import nearest_corners, split_cuts  # noqa: E402
from learners.tabular.geometry import WorldGeometry  # noqa: E402

OUT = Path("benchmarks/results")
BLOCK = 25  # agents whose pools are listed and judged at a time (memory: BLOCK x largest pool x D)


def pool_caps(world: Any, geo: WorldGeometry, X: np.ndarray, mace_d: np.ndarray, ok: np.ndarray,
              vocab: list[np.ndarray], pools: list[int], cuts: list[np.ndarray] | None = None
              ) -> dict[str, dict[str, float]]:
    """Per pool: the share of agents (MACE solved) whose nearest accepted corner is within 1% of MACE, and the
    share with any accepted corner among their nearest ``pool`` (with ``cuts``: distinct corners only)."""
    first = {p: [] for p in pools}
    for lo in range(0, len(X), BLOCK):
        R, d = nearest_corners(geo, X[lo:lo + BLOCK], vocab, max(pools), cuts=cuts)
        live = np.isfinite(d)
        yes = np.zeros(d.shape, bool)
        yes[live] = np.asarray(world.accepts(R[live]), bool)
        for p in pools:
            hit = yes[:, :p]
            at = np.argmax(hit, 1)
            first[p].append(np.where(hit.any(1), d[np.arange(len(d)), at], np.inf))
    out = {}
    for p in pools:
        f = np.concatenate(first[p])[ok]
        out[str(p)] = {"within_1pct": float(np.mean(f <= 1.01 * mace_d[ok])), "any": float(np.mean(np.isfinite(f)))}
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    sets = agent_sets(c, tl, args)
    pools = parse_pools(args.pools, "--pools")
    out: dict[str, Any] = {"cell": cell, "pools": pools, "sets": {}}
    kinds = {"every": None, "distinct": split_cuts(world.model, len(geo.lower))} if args.distinct else {"every": None}
    for name, (X, dist, ok) in sets.items():
        for kind, cuts in kinds.items():
            key = name if kind == "every" else f"{name}, distinct"
            out["sets"][key] = {"agents": int(ok.sum()), **pool_caps(world, geo, np.asarray(X, float),
                                                                     np.asarray(dist, float), ok, vocab, pools, cuts)}
            print(f"[{cell}] {key}: " + ", ".join(f"{p} {out['sets'][key][str(p)]['within_1pct']:.3f}" for p in pools),
                  flush=True)
    return out


def report(cells: list[dict[str, Any]], command: str) -> str:
    pools = sorted({p for c in cells for p in c["pools"]})
    lines = ["# The cap a corner pool sets on a student's first pick (issue 56)", "", f"`{command}`", "",
             "Per agent, the nearest corner the forest itself accepts (white box: an oracle) among its nearest k "
             "vocabulary corners; the share within 1% of MACE, and in brackets the share with any accepted corner. Rows "
             "marked *distinct*: only corners the forest tells apart (per numeric feature, the nearest value between two "
             "of its splits, `corners.distinct_values`; a student uses its own splits).", "",
             "| cell | agents |" + "".join(f" {p:,} corners |" for p in pools), "|---|---|" + "---:|" * len(pools)]
    for c in cells:
        for name, s in c["sets"].items():
            lines.append(f"| {c['cell']} | {name} ({s['agents']}) |" + "".join(
                f" {s[str(p)]['within_1pct']:.3f} ({s[str(p)]['any']:.3f}) |" if str(p) in s else " - |" for p in pools))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default="credit/forest", help="comma-separated forest cells")
    p.add_argument("--pools", default="256,1000,3000,10000,20000", help="corners per agent, one column each")
    p.add_argument("--val-agents", type=int, default=400, help="validation agents per cell (0: none)")
    p.add_argument("--fresh-agents", type=int, default=400, help="fresh real agents per cell (0: none)")
    p.add_argument("--distinct", action="store_true", help="also the caps of distinct corners (the forest's own splits)")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = with_cell_defaults(p.parse_args(argv))
    parse_pools(args.pools, "--pools")  # a bad list stops the run before any work
    cells = [run_cell(cell, args) for cell in args.cells.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = report(cells, "python benchmarks/corner_pool_cap.py " + " ".join(argv or sys.argv[1:]))
    (out / "corner_pool_cap.json").write_text(json.dumps(cells, indent=1))
    (out / "corner_pool_cap.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
