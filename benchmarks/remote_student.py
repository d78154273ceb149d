"""The learned generators of the issue's table against a remote model (issue 56): the forests' with the student
of their corners, the MLPs' with a surrogate of the model. End-to-end p50 / p99 ms per answer, one agent a request,
the model behind a fixed latency per call (20 ms), 2 x 256; beside them in the same run the proposer alone, the
same search without the network and GeCo.

    # the saved fits this script times, seed 0 (the fits with the student and self-labels, then the others)
    python benchmarks/self_labels.py --cells credit/forest --student-use both --student-threshold 0.1 \\
        --student-near-picks 128 --seeds 0
    python benchmarks/self_labels.py --cells adult/forest --student-use both --seeds 0
    python benchmarks/blackbox_generators.py --cells credit/forest,adult/forest --spread-seeds 0,1,2,3
    python benchmarks/blackbox_generators.py --cells german/forest --spread-seeds 0,1,2,3 \\
        --spread-methods proposer,search_no_net,proposer_student_round_two
    python benchmarks/blackbox_generators.py --cells german/mlp --spread-seeds 0,1,2,3 \\
        --spread-methods proposer,proposer_surrogate,search_no_net
    python benchmarks/blackbox_generators.py --cells credit/mlp --spread-seeds 0,1,2,3 \\
        --spread-methods proposer,proposer_surrogate,search_no_net,proposer_surrogates
    python benchmarks/remote_student.py               # the five cells, fit seed 0
    python benchmarks/remote_student.py --cells credit/forest --agents 50

The generators are the saved spread fits (``data_cache/blackbox_generators/<cell>/spread/seed<fit>``, written by
``benchmarks/blackbox_generators.py --spread-seeds`` and ``benchmarks/self_labels.py``) answering at each cell's
documented setting (``SETTINGS``: Credit forest's from ``configs/self_labels_credit_forest.yaml``; Credit MLP's is
three surrogates averaged, the variant that holds .90 on every fit). Every generator is warmed on one agent first
(compiling is paid once, not timed), and the generators are timed in turn, twice over (``--repeats``), the median
of the repeats' p50 reported: the machine's noise shows as their spread. Writes
``benchmarks/results/remote_student.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox_generators import (  # noqa: E402
    SPREAD,
    add_label_arguments,
    cell_labels,
    geco_ms,
    request_ms,
    spread_dir,
    with_cell_defaults,
)
from envs.black_box import Budget  # noqa: E402
from learners.tabular.base import TabularGenerator  # noqa: E402

OUT = Path("benchmarks/results")
# per cell: the saved fit of the table (the student's or the surrogate's) and the setting it answers at
SETTINGS = {
    "credit/forest": ("proposer_student_self-both-t0.1-near128-values",
                      {"student_use": "both", "student_threshold": 0.1, "student_near_picks": 128,
                       "self_label_values": True}),
    "adult/forest": ("proposer_student_self-both-values", {"student_use": "both", "self_label_values": True}),
    "german/forest": ("proposer_student_round_two", {"student_use": "round_two"}),
    "german/mlp": ("proposer_surrogate", {}),
    "credit/mlp": ("proposer_surrogates", {}),
}
BASELINES = ("proposer", "search_no_net")  # beside it: the proposer alone, and the search without the network
SPREAD_SEEDS = "0,1,2,3"  # the fit seeds of the committed tables' spread


def fit_command(cell: str, saved: str, fit: int, generators: str) -> str:
    """The committed command that writes ``cell``'s saved fit ``saved`` with fit seed ``fit`` under ``generators``:
    ``self_labels.py`` at the cell's setting for the student with self-labels, else the spread of
    ``blackbox_generators.py`` (the committed tables' seeds, so their spread stays whole)."""
    if saved.startswith("proposer_student_self"):
        flags = "".join(f" --{k.replace('_', '-')}" + ("" if v is True else f" {v}")  # a flag on: its name alone
                        for k, v in SETTINGS[cell][1].items())
        return f"python benchmarks/self_labels.py --cells {cell}{flags} --seeds {fit} --generators {generators}"
    seeds = SPREAD_SEEDS if str(fit) in SPREAD_SEEDS.split(",") else str(fit)
    methods = "" if saved in SPREAD else f" --spread-methods {','.join((*SPREAD, saved))}"
    return f"python benchmarks/blackbox_generators.py --cells {cell} --spread-seeds {seeds}{methods} --generators {generators}"


def table_generators(cell: str, generators: str, fit: int) -> dict[str, TabularGenerator]:
    """``cell``'s saved table generator at its setting (``SETTINGS``), then ``BASELINES``, of fit seed ``fit``; a
    missing fit stops the run at once (before any labelling), naming the command that writes it."""
    root = spread_dir(generators, cell, fit)
    name, setting = SETTINGS[cell]
    for saved in (name, *BASELINES):
        if not (root / saved).exists():
            raise SystemExit(f"{root / saved} is missing: fit it first with\n    "
                             + fit_command(cell, saved, fit, generators))
    gens = {saved: TabularGenerator.load(root / saved) for saved in (name, *BASELINES)}
    gens[name].params = dataclasses.replace(gens[name].params, **setting)
    return gens


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    name, setting = SETTINGS[cell]
    gens = table_generators(cell, args.generators, args.fit)
    c, _, _ = cell_labels(cell, args)
    world, X = c.build.world, c.test[: args.agents]
    budget, latency = Budget(2, 256), args.latency_ms / 1e3
    t0 = time.perf_counter()
    for gen in gens.values():
        gen.recommend_within(world, X[:1], budget)  # warm: compiling is paid here, once
    warm_s = time.perf_counter() - t0
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in (*gens, "geco")}
    for _ in range(int(args.repeats)):
        for k, gen in gens.items():
            ms = request_ms(gen, world, X, budget, latency)
            runs[k].append({"p50_ms": float(np.median(ms)), "p99_ms": float(np.quantile(ms, 0.99))})
    ms = geco_ms(world, c.build.data.X_train, X, latency)
    runs["geco"].append({"p50_ms": float(np.median(ms)), "p99_ms": float(np.quantile(ms, 0.99))})
    out = {"cell": cell, "fit": args.fit, "agents": len(X), "latency_ms": args.latency_ms, "warm_s": warm_s,
           "generator": {"name": name, **setting}, "load_average": os.getloadavg()[0], "methods": {}}
    for k, reps in runs.items():
        p50 = [r["p50_ms"] for r in reps]
        out["methods"][k] = {"p50_ms": float(np.median(p50)), "p50_runs": p50,
                             "p99_ms": float(np.median([r["p99_ms"] for r in reps]))}
        print(f"[{cell}] {k}: p50 {out['methods'][k]['p50_ms']:.1f} ms (runs {', '.join(f'{v:.1f}' for v in p50)}), "
              f"p99 {out['methods'][k]['p99_ms']:.1f} ms", flush=True)
    return out


def report(results: list[dict[str, Any]]) -> str:
    lines = ["# The learned generators against a remote model (issue 56)", "",
             "`python benchmarks/remote_student.py`: one agent a request, 2 x 256, the model behind a fixed latency "
             "per call; p50 the median of the repeats' p50 (each repeat's in brackets), p99 the median of theirs. "
             "Compiling and warm-up paid first, not timed.", "",
             "| cell | generator | setting | p50 ms | p99 ms |", "|---|---|---|---|---|"]
    for r in results:
        setting = ", ".join(f"{k} {v}" for k, v in r["generator"].items() if k != "name")
        for k, m in r["methods"].items():
            runs = ", ".join(f"{v:.1f}" for v in m["p50_runs"])
            label = f"{k} (the table's)" if k == r["generator"]["name"] else k
            lines.append(f"| {r['cell']} | {label} | {setting if k == r['generator']['name'] else ''} | "
                         f"{m['p50_ms']:.1f} ({runs}) | {m['p99_ms']:.1f} |")
    lines += ["", f"{results[0]['agents']} held-out agents a cell, fit seed {results[0]['fit']}, "
              f"{results[0]['latency_ms']:.0f} ms a call; load average at the end "
              + ", ".join(f"{r['load_average']:.2f}" for r in results) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default=",".join(SETTINGS), help="comma-separated cells (of SETTINGS)")
    p.add_argument("--fit", type=int, default=0, help="the spread fit seed whose saved generators are timed")
    p.add_argument("--agents", type=int, default=100, help="held-out agents timed per cell")
    p.add_argument("--latency-ms", type=float, default=20.0, help="the remote model's fixed latency per call")
    p.add_argument("--repeats", type=int, default=2, help="times each generator answers every agent")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="where the saved fits are")
    p.add_argument("--out", default=str(OUT / "remote_student"), help="results path without its suffix")
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    args = with_cell_defaults(p.parse_args(argv))
    for cell in args.cells.split(","):
        if cell not in SETTINGS:
            raise SystemExit(f"--cells: {cell!r} has no setting here; one of {', '.join(SETTINGS)}")
    results = [run_cell(cell, args) for cell in args.cells.split(",")]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(results, indent=1))
    Path(args.out + ".md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
