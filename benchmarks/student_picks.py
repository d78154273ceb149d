"""What the student's picks cost an answer: its pool looked at in one stage or nearest first in stages (issue 56).

    python benchmarks/student_picks.py                                    # German, Credit, Adult forest
    python benchmarks/student_picks.py --cells credit/forest --pools 1000,10000,20000

The student of a forest's corners (``learners/tabular/student.py``) picks, per agent, the first ``student_rows``
corners of its ``student_pool`` nearest that it accepts. Scored in one stage, every corner of the pool is listed
and scored; in stages (``STAGE_FIRST`` corners, then ``STAGE_GROWTH`` times more up to the pool) an agent stops
once it has its picks. Per cell the seed-0 student is fitted as ``benchmarks/student_forests.py`` fits it (its
fit-time answers read back from the same ``student_memory``, so a cell that benchmark ran asks the model nothing)
and, per pool, both ways are timed one agent at a time, alternated agent by agent (a ratio in the same run), on
the held-out test agents and ``--val-agents`` validation and ``--fresh-agents`` fresh real ones; the picks of the
two ways must be the same, in one batch of every agent (a run that finds one differing stops). Writes
``benchmarks/results/student_picks.{md,json}``.
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

from benchmarks.blackbox_generators import add_label_arguments, cell_labels, with_cell_defaults  # noqa: E402
from benchmarks.student_forests import agent_sets, parse_pools  # noqa: E402
from envs.black_box import BlackBoxModel  # noqa: E402
from learners.tabular import WorldGeometry, build_tabular_generator  # noqa: E402
from learners.tabular import student as student_module  # noqa: E402

OUT = Path("benchmarks/results")
ONE_STAGE = 1 << 62  # a first stage no pool reaches: every corner of the pool in one stage


def picks(gen: Any, geo: WorldGeometry, X: np.ndarray, pool: int, first: int) -> np.ndarray:
    """``gen``'s student picks for ``X`` with its pool looked at from ``first`` corners on."""
    kept = student_module.STAGE_FIRST
    student_module.STAGE_FIRST = first
    try:
        gen.params.student_pool = pool
        return gen._picks(geo, X)
    finally:
        student_module.STAGE_FIRST = kept


def timings(gen: Any, geo: WorldGeometry, X: np.ndarray, pool: int, agents: int) -> dict[str, float]:
    """ms per agent alone, one stage and in stages, alternated agent by agent: p50, p90 and mean of each."""
    ways = {"one_stage": ONE_STAGE, "staged": student_module.STAGE_FIRST}
    for first in ways.values():  # compiled and warm before the clock
        picks(gen, geo, X[:1], pool, first)
    ms: dict[str, list[float]] = {k: [] for k in ways}
    for i, x in enumerate(X[:agents]):
        for name in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
            t = time.perf_counter()
            picks(gen, geo, x[None], pool, ways[name])
            ms[name].append(1e3 * (time.perf_counter() - t))
    out: dict[str, float] = {}
    for name, v in ms.items():
        out.update({f"{name}_p50": float(np.median(v)), f"{name}_p90": float(np.quantile(v, 0.9)),
                    f"{name}_mean": float(np.mean(v))})
    return out


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    memory = Path(args.cache) / "student_memory" / f"{cell.replace('/', '_')}-{args.seed}"  # student_forests.py's
    t = time.perf_counter()
    gen = build_tabular_generator("proposer", {"student_agents": args.student_agents, "student_memory": str(memory)}).fit(
        replace(world, model=BlackBoxModel(world.model)), labels, seed=args.seed)
    if gen.student_ is None:
        raise SystemExit(f"{cell}: the model does not answer in steps; no student (a forest cell?)")
    out: dict[str, Any] = {"cell": cell, "student": {**gen.fit_info_["student"], "fit_seconds": time.perf_counter() - t},
                           "stage_first": student_module.STAGE_FIRST, "stage_growth": student_module.STAGE_GROWTH,
                           "sets": {}}
    geo = WorldGeometry.of(world)
    for name, (X, _, ok) in agent_sets(c, tl, args).items():
        X = np.asarray(X, float)[np.asarray(ok, bool)]
        row: dict[str, Any] = {"agents": int(len(X))}
        for pool in parse_pools(args.pools, "--pools"):
            one, staged = picks(gen, geo, X, pool, ONE_STAGE), picks(gen, geo, X, pool, student_module.STAGE_FIRST)
            if not np.array_equal(np.nan_to_num(one, nan=-1.0), np.nan_to_num(staged, nan=-1.0)):
                raise SystemExit(f"{cell} {name} pool {pool}: the staged picks differ from the one-stage picks")
            row[str(pool)] = {**timings(gen, geo, X, pool, args.timed_agents), "same_picks": True}
            print(f"[{cell}] {name} pool {pool}: one stage p50 {row[str(pool)]['one_stage_p50']:.1f} ms, "
                  f"staged {row[str(pool)]['staged_p50']:.1f} ms", flush=True)
        out["sets"][name] = row
    return out


def report(cells: list[dict[str, Any]], command: str) -> str:
    pools = sorted({int(p) for c in cells for s in c["sets"].values() for p in s if p.isdigit()})
    lines = ["# The student's picks: one stage or nearest first in stages (issue 56)", "", f"`{command}`", "",
             "ms of picks per agent alone (the compute an answer's round one waits for), p50 / p90 / mean, the two ways "
             "alternated agent by agent in one run; the staged picks equal the one-stage picks on every agent "
             f"(checked in one batch). Stages: the nearest {cells[0]['stage_first']:,} corners, then "
             f"{cells[0]['stage_growth']} times more up to the pool.", "",
             "| cell | agents | pool | one stage | in stages | p50 ratio |", "|---|---|---:|---|---|---:|"]
    for c in cells:
        for name, s in c["sets"].items():
            for p in pools:
                r = s.get(str(p))
                if r is None:
                    continue
                one = " / ".join(f"{r[f'one_stage_{q}']:.1f}" for q in ("p50", "p90", "mean"))
                staged = " / ".join(f"{r[f'staged_{q}']:.1f}" for q in ("p50", "p90", "mean"))
                lines.append(f"| {c['cell']} | {name} ({s['agents']}) | {p:,} | {one} | {staged} | "
                             f"{r['one_stage_p50'] / r['staged_p50']:.1f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default="german/forest,credit/forest,adult/forest", help="comma-separated forest cells")
    p.add_argument("--pools", default="1000,10000", help="corners the student scores per agent, one row each")
    p.add_argument("--val-agents", type=int, default=400, help="validation agents per cell (0: none)")
    p.add_argument("--fresh-agents", type=int, default=400, help="fresh real agents per cell (0: none)")
    p.add_argument("--timed-agents", type=int, default=100, help="agents timed one at a time per set and pool")
    p.add_argument("--student-agents", type=int, default=10000, help="agents drawn for the student at fit time")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = with_cell_defaults(p.parse_args(argv))
    parse_pools(args.pools, "--pools")  # a bad list stops the run before any fit
    out = Path(args.out)
    (out / "student_picks").mkdir(parents=True, exist_ok=True)
    for cell in args.cells.split(","):
        (out / "student_picks" / f"{cell.replace('/', '_')}.json").write_text(json.dumps(run_cell(cell, args), indent=2))
    cells = [json.loads(f.read_text()) for f in sorted((out / "student_picks").glob("*.json"))]
    text = report(cells, "python benchmarks/student_picks.py " + " ".join(argv or sys.argv[1:]))
    (out / "student_picks.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
