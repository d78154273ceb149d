"""alibi's CounterfactualRL at its own budget, with its learning curve (issue 56).

    python benchmarks/cfrl_budget.py --cells german/forest,german/mlp --steps 100000 \\
        [--checkpoints 2000,10000,25000,50000] [--agents 50] [--seed 0]

Per cell: the agents, model, constraints and alibi venv of ``benchmarks/peers.py`` (the same seeded
sample of rejected test rows; CFRL in its own venv with a scikit-learn model retrained there and
checked against ours), trained for ``--steps`` steps (alibi's default is 100,000; its tabular
example 300,000) with every agent explained at each checkpoint. Each point is scored like every other
method: **valid** (the real model accepts it, no constraint of the schema broken: ``CounterfactualScorer``),
the median ratio of its distance to MACE's certified one (l1, MACE with rel_tol 1e-4) over the agents
it answered validly, the share within 1% of MACE, and the model calls per answer (one forward pass:
one call). The training's seconds and model calls are reported at each checkpoint.

Writes ``benchmarks/results/cfrl_budget.{md,json}`` and ``benchmarks/results/cfrl_budget/curve.png``;
each cell's JSON under ``benchmarks/results/cfrl_budget/`` as it finishes (a rerun skips it), the
venv's progress in ``benchmarks/results/cfrl_budget/<cell>.log``.

On a machine that has alibi but not the project (the lent GPU machine): ``--prepare DIR --deadline S``
writes one work folder per cell, ``bash benchmarks/peers/cfrl_many.sh DIR`` runs them there at once,
and ``--collect DIR --machine "..." [--tag T]`` scores them here into ``<cell>-<T>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample, save  # noqa: E402
from benchmarks.peers import HERE, RawSpace, alibi_python, read_cfrl_answers, run_cfrl, write_cfrl_inputs  # noqa: E402
from data_gen.classifiers import build  # noqa: E402
from evaluation.counterfactual_metrics import CounterfactualScorer  # noqa: E402
from solvers.geco import Plaf  # noqa: E402
from solvers.mace import MACE  # noqa: E402
from solvers.mace.distance import distance  # noqa: E402

OUT = Path("benchmarks/results")


def score(world: Any, scorer: CounterfactualScorer, agents: np.ndarray, CF: np.ndarray, mace_d: np.ndarray
          ) -> dict[str, Any]:
    """Validity, distance ratio to MACE and the share within 1% of a batch of CFRL answers."""
    CF = np.asarray(CF, float)
    ok = np.isfinite(CF).all(1)
    valid = np.zeros(len(agents), bool)
    for i in np.flatnonzero(ok):  # the scorer checks one agent's rows at a time (50 agents)
        valid[i] = bool(world.accepts(CF[i][None])[0]) and not bool(scorer.violations(agents[i], CF[i][None])[0])
    d = np.array([float(distance(world.schema, x, c[None], "one")[0]) if v else np.inf
                  for x, c, v in zip(agents, np.nan_to_num(CF), valid, strict=True)])
    both = valid & np.isfinite(mace_d) & (mace_d > 0)
    ratio = d[both] / mace_d[both]
    return {"valid": float(valid.mean()), "answered": int(ok.sum()),
            "ratio_median": float(np.median(ratio)) if len(ratio) else None,
            "within_1pct": float((ratio <= 1.01).sum() / max(1, np.isfinite(mace_d).sum()))}


def cell_setup(cell: str, seed: int, n_agents: int) -> tuple[Any, Any, str, np.ndarray, RawSpace]:
    """The world, data, model kind, the seeded sample of rejected test agents and alibi's raw space of a cell."""
    dataset, model = cell.split("/")
    b = build(dataset, model, seed=seed)
    return b.world, b.data, model, sample(b.world, b.data.X_test, n_agents, seed), RawSpace(b.world)


def score_run(cell: str, world: Any, data: Any, agents: np.ndarray, res: dict[str, Any], steps: int
              ) -> dict[str, Any]:
    """Every checkpoint of a CFRL run scored against MACE's certified optimum (the cell's JSON)."""
    scorer = CounterfactualScorer(n_diverse=1, plaf=Plaf()).fit(world, data.X_train)
    mace = MACE(norm="one", rel_tol=1e-4, epsilon=1e-7)
    mace_d = np.array([r.cost if r.found and r.optimal else np.inf for r in (mace.solve(world, x)[0] for x in agents)])
    curve = []
    for point in [*res.get("curve", []), {"steps": res["steps"], "train_seconds": res["rl_seconds"],
                                          "train_model_calls": res["train_model_calls"], "CF": res["CF"]}]:
        m = score(world, scorer, agents, np.array(point["CF"], float), mace_d)
        curve.append({"steps": point["steps"], "train_seconds": point["train_seconds"],
                      "train_model_calls": point["train_model_calls"], **m})
        print(f"[{cell}] {point['steps']:,} steps: valid {m['valid']:.2f}, ratio {m['ratio_median']}, "
              f"within 1% {m['within_1pct']:.2f}", flush=True)
    return {"cell": cell, "agents": int(len(agents)), "mace_certified": int(np.isfinite(mace_d).sum()),
            "steps": steps, "curve": curve, "seconds_per_answer": float(np.median(res["seconds"])),
            "calls_per_answer": float(np.median(res["model_calls"])), "disagreements": res["disagreements"],
            "versions": res.get("versions"), "device": res.get("device", "cpu"),
            "machine": res.get("machine", "this machine (2 cores)"), "load_average": os.getloadavg()[0]}


def run_cell(cell: str, args: argparse.Namespace, py: Path) -> dict[str, Any]:
    world, data, model, agents, space = cell_setup(cell, args.seed, args.agents)
    marks = tuple(int(c) for c in args.checkpoints.split(",") if c)
    t = time.perf_counter()
    log = Path(args.out) / "cfrl_budget" / f"{cell.replace('/', '_')}.log"
    res = run_cfrl(py, world, space, data, model, args.seed, agents, args.steps, marks, log=log,
                   num_workers=args.workers)
    if "error" in res:
        raise SystemExit(f"[{cell}] CFRL failed: {res['error']}")
    return {**score_run(cell, world, data, agents, res, args.steps), "wall_seconds": time.perf_counter() - t}


def prepare(args: argparse.Namespace) -> None:
    """One work folder per cell under ``--prepare`` for a machine that has alibi but not the project."""
    root = Path(args.prepare)
    marks = tuple(int(c) for c in args.checkpoints.split(",") if c)
    for cell in args.cells.split(","):
        world, data, model, agents, space = cell_setup(cell, args.seed, args.agents)
        extra = {"threads": args.threads, "num_workers": args.workers} | ({"deadline_seconds": args.deadline} if args.deadline else {})
        write_cfrl_inputs(root / cell.replace("/", "_"), world, space, data, model, args.seed, agents, args.steps,
                          marks, **extra)
        print(f"[{cell}] {len(agents)} agents -> {root / cell.replace('/', '_')}", flush=True)


def collect(args: argparse.Namespace) -> None:
    """Score the answers of the work folders under ``--collect`` (run elsewhere) into ``<cell>-<tag>.json``."""
    root = Path(args.collect)
    for cell in args.cells.split(","):
        work = root / cell.replace("/", "_")
        if not (work / "answers.json").exists():
            print(f"[{cell}] no answers in {work}", flush=True)
            continue
        world, data, model, agents, space = cell_setup(cell, args.seed, args.agents)
        res = read_cfrl_answers(work, space) | {"machine": args.machine}
        save(score_run(cell, world, data, agents, res, res["steps"]),
             Path(args.out) / "cfrl_budget" / f"{cell.replace('/', '_')}-{args.tag}.json")


def report(cells: list[dict[str, Any]]) -> str:
    lines = ["# CFRL at its own budget (`benchmarks/cfrl_budget.py`)", "",
             "alibi's CounterfactualRLTabular, the agents, model and constraints of `benchmarks/peers.py`; every agent "
             "explained at each checkpoint. valid: accepted by the real model, no constraint broken; ratio: median "
             "distance / MACE's certified l1 optimum over the validly answered agents; within 1%: share of the "
             "MACE-certified agents answered within 1% of it. One forward pass per answer: 1 model call.", "",
             "| data | model | machine | agents | steps | train s | train model calls | valid | ratio to MACE | within 1% |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        d, m = c["cell"].split("/")
        where = f"{c.get('machine') or 'this machine (2 cores)'}, torch on {c.get('device', 'cpu')}"
        for p in c["curve"]:
            r = "-" if p["ratio_median"] is None else f"{p['ratio_median']:.2f}"
            lines.append(f"| {d} | {m} | {where} | {c['agents']} | {p['steps']:,} | {p['train_seconds']:.0f} | "
                         f"{p['train_model_calls']:,} | {p['valid']:.2f} | {r} | {p['within_1pct']:.2f} |")
    return "\n".join(lines) + "\n"


def run_label(c: dict[str, Any]) -> str:
    """A short name for one run of a cell in the plot's legend: where it ran and how far it got."""
    machine = c.get("machine") or ""
    where = ("GPU machine, " + ("its GPU" if c.get("device", "cpu") != "cpu" else "its CPUs")) if "lent" in machine \
        else "2 cores"
    return f"{where}, {c['curve'][-1]['steps']:,} steps"


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    """One pair of panels per cell (valid above, distance ratio to MACE below), every run of it a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    names = sorted({c["cell"] for c in cells})
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(3.2 * cols, 4.4 * rows), squeeze=False)
    for k, name in enumerate(names):
        top, bottom = axes[2 * (k // cols)][k % cols], axes[2 * (k // cols) + 1][k % cols]
        for c in (c for c in cells if c["cell"] == name):
            s = [p["steps"] for p in c["curve"]]
            top.plot(s, [p["valid"] for p in c["curve"]], marker="o", ms=3, label=run_label(c))
            bottom.plot(s, [p["ratio_median"] or np.nan for p in c["curve"]], marker="o", ms=3)
        top.set_title(name, fontsize=9)
        top.set_ylim(-0.05, 1.05)
        top.legend(fontsize=6)
        for ax, label in ((top, "valid"), (bottom, "distance / MACE")):
            ax.set_xscale("log")
            ax.set_xlim(1500, 1.4e5)  # every cell on the same steps axis, alibi's default (1e5) inside it
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_ylabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
        ratios = [p["ratio_median"] for c in cells if c["cell"] == name for p in c["curve"] if p["ratio_median"]]
        if ratios:
            bottom.set_yscale("log")
            bottom.yaxis.set_major_formatter(plain)
            bottom.yaxis.set_minor_formatter(plain)
        else:  # never valid: no distance to plot
            bottom.text(0.5, 0.5, "no valid answer", ha="center", va="center", transform=bottom.transAxes, fontsize=8)
        bottom.set_xlabel("CFRL training steps", fontsize=8)
    for k in range(len(names), rows * cols):
        axes[2 * (k // cols)][k % cols].axis("off")
        axes[2 * (k // cols) + 1][k % cols].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default="german/forest,german/mlp", help="comma-separated dataset/model cells")
    p.add_argument("--steps", type=int, default=100_000, help="CFRL training steps (alibi's default: 100,000)")
    p.add_argument("--checkpoints", default="2000,10000,25000,50000", help="steps at which every agent is explained")
    p.add_argument("--agents", type=int, default=50, help="rejected test agents per cell")
    p.add_argument("--seed", type=int, default=0, help="world and sample seed")
    p.add_argument("--alibi-venv", default=str(HERE / "peers" / ".alibi-venv"), help="the venv with alibi")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--prepare", default="", help="only write one work folder per cell here (to run elsewhere)")
    p.add_argument("--collect", default="", help="only score the answers in these work folders (run elsewhere)")
    p.add_argument("--machine", default="", help="with --collect: the machine the work folders ran on")
    p.add_argument("--tag", default="device", help="with --collect: the result files' suffix (<cell>-<tag>.json)")
    p.add_argument("--threads", type=int, default=1, help="with --prepare: torch threads per cell")
    p.add_argument("--workers", type=int, default=4, help="alibi's data-loader workers per cell (alibi's default: 4)")
    p.add_argument("--deadline", type=float, default=0.0, help="with --prepare: stop training after these seconds")
    args = p.parse_args(argv)
    out = Path(args.out)
    (out / "cfrl_budget").mkdir(parents=True, exist_ok=True)
    if args.prepare:
        return prepare(args)
    if args.collect:
        collect(args)
    else:
        py = alibi_python(Path(args.alibi_venv), make=True)
        for cell in args.cells.split(","):
            path = out / "cfrl_budget" / f"{cell.replace('/', '_')}-{args.steps}.json"
            if not path.exists():
                save(run_cell(cell, args, py), path)
    cells = [json.loads(f.read_text()) for f in sorted((out / "cfrl_budget").glob("*.json"))]
    (out / "cfrl_budget.md").write_text(report(cells))
    (out / "cfrl_budget.json").write_text(json.dumps(cells, indent=1, default=float))
    plot(cells, out / "cfrl_budget" / "curve.png")
    print(report(cells))


if __name__ == "__main__":
    main()
