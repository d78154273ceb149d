"""The proposer with and without a student of the forest's corners, at 2 x 256 (or ``--budget``), on held-out,
validation and fresh real agents (issue 56).

    python benchmarks/student_forests.py                                  # German, Credit, Adult forest, 4 fits
    python benchmarks/student_forests.py --cells credit/forest --seeds 0,1
    python benchmarks/student_forests.py --budget 1x128 --student-pools 1000 --out benchmarks/results/student_forests_1x128

Per cell: the same search without the network (``proposals: averages``) and the proposer, each fitted on the
cell's 500 MACE labels (``benchmarks/blackbox_generators.py``'s labels and held-out rejected test agents) with fit
seeds ``--seeds``, the proposer without a student and with one (``ProposerParams.student_agents``,
``learners/tabular/student.py``). The student is fitted once per cell, inside the seed-0 fit (its cost:
``--student-agents`` agents drawn around the labels' agents, 200 corners each asked of the model, 2,000,000 rows at
the default, 5-8 min on 2 cores; its answers kept under ``--cache``/student_memory, so a rerun asks none again);
the other seeds' networks use that student, so the spread over seeds is the networks'. Each is answered through a
black box at ``--budget`` on the held-out test agents, on ``--val-agents`` validation agents (the training pool's
next agents, MACE labels: ``benchmarks/spread_validation.py``) and on ``--fresh-agents`` fresh real agents
(rejected test rows outside the held-out sample, ``tabular_generators.fresh_labels``), and scored within 1% of MACE.
Beside them the student scoring only the first pool's corners it tells apart (``student_distinct``: per numeric
feature one value between two of its splits). The student's picks are timed one agent at a time. Writes ``benchmarks/results/student_forests/<cell>.json`` and
the report of every cell run, ``benchmarks/results/student_forests.md``.
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
    add_label_arguments,
    answers_within,
    cell_labels,
    with_cell_defaults,
)
from benchmarks.spread_validation import agent_set, validation_labels  # noqa: E402
from benchmarks.tabular_generators import fresh_labels  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import WorldGeometry, build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results")


def shares(gen: Any, world: Any, sets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], budget: Budget
           ) -> dict[str, float]:
    """The optimal share (within 1% of MACE) and the median rows on each agent set."""
    out = {}
    for name, (X, dist, ok) in sets.items():
        rec = answers_within(gen, world, X, budget)
        m = score_answers(world, X, rec.CF, rec.found, dist, ok, "one")
        out[name] = float(m["optimal_share"])
        out[f"{name}_rows_median"] = float(np.median(rec.rows))
    return out


def pick_ms(gen: Any, world: Any, X: np.ndarray, agents: int = 30) -> float:
    """Median ms of the student's picks for one agent alone (its share of an answer's compute)."""
    geo = WorldGeometry.of(world)
    gen._picks(geo, X[:1])
    ms = []
    for x in X[:agents]:
        t = time.perf_counter()
        gen._picks(geo, x[None])
        ms.append(1e3 * (time.perf_counter() - t))
    return float(np.median(ms))


def labelled_sets(c: Any, tl: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The cell's agent sets as MACE's label sets: its held-out test agents (``tl``), ``--val-agents`` drawn
    validation agents and ``--fresh-agents`` fresh real ones (each where asked for and there are any)."""
    sets = {"test": tl}
    if args.val_agents > 0:
        sets["validation"] = validation_labels(c, args.val_agents, args)
    fresh = fresh_labels(c, args.fresh_agents, args) if args.fresh_agents > 0 else None
    if fresh is not None and len(fresh.X):  # German forest has no rejected test rows past its 36
        sets["fresh"] = fresh
    return sets


def agent_sets(c: Any, tl: Any, args: argparse.Namespace) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``labelled_sets`` as (X, MACE's distance, solved), the held-out agents as the cell holds them."""
    sets = {k: agent_set(v) for k, v in labelled_sets(c, tl, args).items()}
    sets["test"] = (c.test, tl.distance, np.asarray(tl.ok, bool))
    return sets


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    sets = agent_sets(c, tl, args)
    R, N = (int(v) for v in args.budget.split("x"))
    budget = Budget(R, N)
    pools = parse_pools(args.student_pools)
    params = {"student_rows": args.student_rows, "student_pool": pools[0]}
    out: dict[str, Any] = {"cell": cell, "budget": f"{R}x{N}", "test_agents": int(sets["test"][2].sum()),
                           "validation_agents": int(sets["validation"][2].sum()) if "validation" in sets else 0,
                           "fresh_agents": int(sets["fresh"][2].sum()) if "fresh" in sets else 0, "fits": []}
    student = None
    for seed in (int(s) for s in args.seeds.split(",")):
        black = replace(world, model=BlackBoxModel(world.model))
        plain = build_tabular_generator("proposer", params).fit(black, labels, seed=seed)
        no_net = build_tabular_generator("proposer", {"proposals": "averages"}).fit(black, labels, seed=seed)
        row = {"seed": seed, "no_net": shares(no_net, world, sets, budget), "without": shares(plain, world, sets, budget)}
        if student is None:  # the student's fit, once per cell (inside the seed's fit)
            t = time.perf_counter()
            memory = Path(args.cache) / "student_memory" / f"{cell.replace('/', '_')}-{args.seed}"  # a rerun asks nothing again
            gen = build_tabular_generator("proposer", {**params, "student_agents": args.student_agents,
                                                       "student_memory": str(memory)}).fit(
                replace(world, model=BlackBoxModel(world.model)), labels, seed=seed)
            student = gen.student_
            if student is None:
                raise SystemExit(f"{cell}: the model does not answer in steps; no student (a forest cell?)")
            out["student"] = {**gen.fit_info_["student"], "fit_seconds": time.perf_counter() - t}
        else:
            gen = plain
            gen.student_ = student  # the seed-0 fit's student beside this seed's network
        for pool in pools:  # the corners the student scores per agent: answering only, the same fit
            gen.params.student_pool = pool
            row[with_key(pool, pools)] = shares(gen, world, sets, budget)
            if seed == int(args.seeds.split(",")[0]):
                out[with_key(pool, pools).replace("with", "pick_ms")] = pick_ms(gen, world, c.test)
        gen.params.student_pool, gen.params.student_distinct = pools[0], True  # the first pool's distinct corners
        row["with_distinct"] = shares(gen, world, sets, budget)
        if seed == int(args.seeds.split(",")[0]):
            out["pick_ms_distinct"] = pick_ms(gen, world, c.test)
        gen.params.student_distinct = False
        print(f"[{cell}] seed {seed}: test {row['without']['test']:.3f} -> {row['with']['test']:.3f}, "
              f"validation {row['without']['validation']:.3f} -> {row['with']['validation']:.3f}", flush=True)
        out["fits"].append(row)
    return out


def parse_pools(text: str, option: str = "--student-pools") -> list[int]:
    """``option``'s value: comma-separated corner counts, each at least 1."""
    parts = text.split(",")
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise SystemExit(f"{option}: expected comma-separated counts >= 1 such as 1000,10000, got {text!r}")
    return [int(p) for p in parts]


def with_key(pool: int, pools: list[int]) -> str:
    """The fits' key for the proposer with its student scoring ``pool`` corners (the first pool: ``with``)."""
    return "with" if pool == pools[0] else f"with_{pool}"


def report(cells: list[dict[str, Any]], command: str) -> str:
    names = {"test": "held-out test", "validation": "validation (drawn)", "fresh": "fresh real"}
    extra = sorted({int(k[5:]) for c in cells for f in c["fits"] for k in f if k.startswith("with_") and k[5:].isdigit()})
    distinct = any("with_distinct" in f for c in cells for f in c["fits"])
    budgets = " and ".join(sorted({c.get("budget", "2x256").replace("x", " x ") for c in cells}))  # (before it: 2 x 256)
    lines = ["# The proposer with a student of the forest's corners (issue 56)", "", f"`{command}`", "",
             f"Share within 1% of MACE at {budgets} (per fit seed; mean in brackets) on three agent sets: the held-out "
             "test agents of every table, validation agents drawn as the labels' agents are (the training pool's next "
             "ones), and fresh real agents (rejected test rows outside the held-out sample; German forest has none). The "
             "student is fitted once per cell (seed 0) and shared by the fits' networks. It scores each agent's nearest "
             "1,000 vocabulary corners (`student_pool`; the first of `--student-pools`), in the next columns more of them, and in the last "
             "only those of the first pool it tells apart (`student_distinct`: per numeric feature one value between two "
             "of its splits; the same fit: only the answers change).", "",
             "| cell | agents | search without the network | proposer | proposer + student |"
             + "".join(f" + student, {p:,} corners |" for p in extra) + (" + student, distinct corners |" if distinct else ""),
             "|---|---|---|---|---|" + "---|" * (len(extra) + distinct)]

    def col(c: dict[str, Any], side: str, where: str) -> str:
        v = [f[side][where] for f in c["fits"] if where in f.get(side, {})]
        return " ".join(f"{x:.3f}" for x in v) + f" ({np.mean(v):.3f})" if v else "-"

    for c in cells:
        for where in ("test", "validation", "fresh"):
            n = c.get(f"{where}_agents", 0)
            if n:
                lines.append(f"| {c['cell']} | {names[where]} ({n}) | {col(c, 'no_net', where)} | "
                             f"{col(c, 'without', where)} | {col(c, 'with', where)} |"
                             + "".join(f" {col(c, f'with_{p}', where)} |" for p in extra)
                             + (f" {col(c, 'with_distinct', where)} |" if distinct else ""))
    lines += ["", "| cell | rows median (with, test) | student: rows learnt (from memory), rows asked at fit, s | picks ms / agent |"
              + "".join(f" picks ms, {p:,} corners |" for p in extra) + (" picks ms, distinct corners |" if distinct else ""),
              "|---|---:|---|---:|" + "---:|" * (len(extra) + distinct)]
    for c in cells:
        st = c["student"]
        rows = np.median([f["with"]["test_rows_median"] for f in c["fits"]])
        lines.append(f"| {c['cell']} | {rows:.0f} | {st.get('rows', st['rows_asked']):,} "
                     f"({st.get('rows_remembered', 0):,}), {st['rows_asked']:,} in {st['calls']} calls, "
                     f"{st['fit_seconds']:.0f} s | {c['pick_ms']:.1f} |"
                     + "".join(f" {c[f'pick_ms_{p}']:.1f} |" if f"pick_ms_{p}" in c else " - |" for p in extra)
                     + ((f" {c['pick_ms_distinct']:.1f} |" if "pick_ms_distinct" in c else " - |") if distinct else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default="german/forest,credit/forest,adult/forest", help="comma-separated forest cells")
    p.add_argument("--seeds", default="0,1,2,3", help="fit seeds (the student: the first one's)")
    p.add_argument("--val-agents", type=int, default=400, help="validation agents per cell")
    p.add_argument("--fresh-agents", type=int, default=400,
                   help="real rejected test rows outside the held-out sample, MACE-labelled (0: none)")
    p.add_argument("--budget", default="2x256", help="R x N per answer")
    p.add_argument("--student-agents", type=int, default=10000, help="agents drawn for the student at fit time")
    p.add_argument("--student-rows", type=int, default=24, help="round one's rows for the student's picks")
    p.add_argument("--student-pools", default="1000,10000",
                   help="corners the student scores per agent when answering, one column each (the first: `with`)")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = with_cell_defaults(p.parse_args(argv))
    parse_pools(args.student_pools)  # a bad list stops the run before any fit
    out = Path(args.out)
    (out / "student_forests").mkdir(parents=True, exist_ok=True)
    for cell in args.cells.split(","):  # one JSON per cell; the report holds every cell run so far
        (out / "student_forests" / f"{cell.replace('/', '_')}.json").write_text(json.dumps(run_cell(cell, args), indent=2))
    cells = [json.loads(f.read_text()) for f in sorted((out / "student_forests").glob("*.json"))]
    text = report(cells, "python benchmarks/student_forests.py " + " ".join(argv or sys.argv[1:]))
    (out / "student_forests.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
