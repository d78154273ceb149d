"""The proposer's labels grown by its own search's answers to real rejected rows MACE never answered (issue 56),
scored at 2 x 256 (or ``--budget``) on held-out, validation and fresh real agents.

    python benchmarks/self_labels.py                                   # Credit and Adult forest, 4 fits
    python benchmarks/self_labels.py --cells credit/forest --seeds 0 --self-labels 1500
    python benchmarks/self_labels.py --cells credit/forest --student-members 2 --student-use both
    python benchmarks/self_labels.py --cells adult/forest --student-use both --self-label-values   # Adult's table setting
    python benchmarks/self_labels.py --cells adult/forest --student-use both --self-label-values --self-labels 6000 \
        --variants with            # 6,000 self-labels, the proposer with the student only (saved with "-n6000")

Per cell and fit seed (the cell's 500 MACE labels, ``benchmarks/blackbox_generators.py``'s): the search without the
network (``proposals: averages``), the proposer, and the proposer with the seed-0 fit's student of the forest's
corners (as ``benchmarks/student_forests.py``), each scored; then the proposer and the proposer with the student
each answer ``--self-labels`` unlabelled agents at 8 x 2,000 through the black box (``add_self_labels``: real
rejected training rows past the fit's labels and past the validation agents, so none is scored) and are scored
again. The self-labels' cost (calls, rows, seconds on ``--workers`` processes) is reported, and their quality:
the share within 1% of MACE on the unlabelled agents the cell's 2,000-label cache has MACE's answer for (labelled
first where missing). Each fit's self-labels are kept under ``--cache``/self_label_memory, so a rerun answers none
again, and each fit's scores in the cell's JSON as it finishes: a rerun of the same setting runs only the fits
it lacks, in the JSON or saved (``--seeds 0,1,2,3`` after ``--seeds 0,1`` runs 2 and 3; ``--force``: all). German forest has no real
rejected training rows past its labels (160 in all), so it is not a cell here.
Each fit with its self-labels is saved under ``--generators`` (``<cell>/spread/seed<fit>/proposer_self`` and
``proposer_student_self``, the student's setting appended where it is not the default: ``saved_name``), which
``remote_student.py`` times. Writes ``benchmarks/results/self_labels/<cell>.json`` and the report of every cell run,
``benchmarks/results/self_labels.md`` (at another ``--budget``, ``<cell>-<budget>.json`` and
``self_labels_<budget>.md``; with another student, ``--student-members`` and ``--student-use``, likewise:
``<cell>-m2-both.json``, ``<cell>-both-t0.1-near128.json``).
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
    cell_labels,
    spread_dir,
    with_cell_defaults,
)
from benchmarks.spread_validation import validation_labels  # noqa: E402
from benchmarks.student_forests import agent_sets, shares  # noqa: E402
from benchmarks.tabular_generators import Cell  # noqa: E402
from data_gen.classifiers import negatives  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from learners.tabular import WorldGeometry, build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results")
VARIANTS = ("without", "with")  # the proposer, and the proposer with the seed-0 student
SELF_LABELS = 1500  # the self-labelled agents of a run whose files carry no count in their names
SAVED = {"without": "proposer_self", "with": "proposer_student_self"}  # each variant's fit, saved under --generators
# the student's settings (the proposer's parameters); a run at others writes files of its own, named by SETTING_TAGS
STUDENT_DEFAULTS = {"student_members": 1, "student_use": "round_one", "student_threshold": 0.3, "student_near_picks": 64,
                    "self_label_values": False}
SETTING_TAGS = {"student_members": "m", "student_use": "", "student_threshold": "t", "student_near_picks": "near",
                "self_label_values": "values"}  # (a flag that is on: its tag alone)


def unlabelled_agents(c: Cell, labels_X: np.ndarray, n: int, args: argparse.Namespace) -> np.ndarray:
    """(n, D) real rejected training rows, in the pool's seeded order, that are neither the fit's labelled agents
    nor the validation agents."""
    real = negatives(c.build.world, c.build.data.X_train)
    real = real[np.random.default_rng(args.seed).permutation(len(real))]
    seen = {row.tobytes() for row in np.asarray(labels_X, float)}
    if args.val_agents > 0:
        seen |= {row.tobytes() for row in np.asarray(validation_labels(c, args.val_agents, args).X, float)}
    return np.asarray([row for row in real if row.tobytes() not in seen][:n], float).reshape(-1, real.shape[1])


def label_quality(cell: str, U: np.ndarray, CF: np.ndarray, found: np.ndarray, args: argparse.Namespace
                  ) -> dict[str, Any]:
    """The self-labels within 1% of MACE, on the unlabelled agents the cell's 2,000-label pool holds MACE's answer
    for (its cache; labelled first where missing)."""
    big = argparse.Namespace(**{**vars(args), "sizes": "2000", "sizes_for": None})
    c2 = Cell.of(cell, big)
    mace, pool, _ = c2.train_labels(big)
    where = {row.tobytes(): i for i, row in enumerate(np.asarray(pool, float))}
    at = np.array([where.get(row.tobytes(), -1) for row in U])
    have = np.flatnonzero(at >= 0)
    solved = mace.ok[at[have]] if len(have) else np.zeros(0, bool)
    if not solved.any():
        return {"agents": 0}
    d = WorldGeometry.of(c2.build.world).distance(U[have], np.where(found[have, None], CF[have], U[have]))
    ratio = np.where(solved & found[have], d / np.maximum(mace.distance[at[have]], 1e-12), np.inf)
    return {"agents": int(solved.sum()), "within_1pct": float(np.mean(ratio[solved] <= 1.01)),
            "found": float(np.mean(found[have][solved]))}


def kept_fits(path: Path | None, out: dict[str, Any], *, force: bool = False) -> dict[int, dict[str, Any]]:
    """The fits, by seed, that ``path`` holds from a run of ``out``'s setting (budget, labels, unlabelled and
    scored agents; none where another setting's, or ``force``); their student's record copied into ``out``."""
    prev = json.loads(path.read_text()) if path is not None and path.exists() and not force else {}
    if not all(prev.get(k) == out[k] for k in ("budget", "labels", "unlabelled", "agents")):
        return {}
    if any(prev.get(k, v) != out.get(k, v) for k, v in STUDENT_DEFAULTS.items()):  # (saved before: the defaults)
        return {}
    if "student" in prev:
        out["student"] = prev["student"]
    return {int(f["seed"]): f for f in prev.get("fits", [])}


def run_cell(cell: str, args: argparse.Namespace, path: Path | None = None) -> dict[str, Any]:
    """The cell's fits, written to ``path`` (JSON) as each finishes; the fits a run of the same setting left
    there are kept, not run again where their saved generators are there too, and stay in it where this run does
    not ask for them (``--force``: all run again)."""
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    sets = agent_sets(c, tl, args)
    budget = Budget(*(int(v) for v in args.budget.split("x")))
    variants = tuple(args.variants.split(","))
    U = unlabelled_agents(c, labels.X, args.self_labels, args)
    params = {"self_label_workers": args.workers}
    out: dict[str, Any] = {"cell": cell, "budget": args.budget, "labels": int(len(labels.X)), "unlabelled": int(len(U)),
                           "agents": {k: int(v[2].sum()) for k, v in sets.items()},
                           **student_setting(args), "fits": []}
    with_student = student_setting(args)
    kept = kept_fits(path, out, force=args.force)
    seeds = [int(s) for s in args.seeds.split(",")]
    first = seeds[0]  # the student's fit seed, and the one whose self-labels are graded
    others = [kept[s] for s in sorted(kept) if s not in seeds]  # kept fits this run does not ask for stay too
    student = None
    for seed in seeds:
        saved = spread_dir(args.generators, cell, seed)
        if seed in kept and all((saved / saved_name(v, args)).exists() for v in variants):
            print(f"[{cell}] seed {seed}: kept from {path}", flush=True)  # (its saved fits too; else fitted again)
            out["fits"].append(kept[seed])
            continue
        black = replace(world, model=BlackBoxModel(world.model))
        memory = str(Path(args.cache) / "self_label_memory" / f"{cell.replace('/', '_')}-{args.seed}")
        no_net = build_tabular_generator("proposer", {"proposals": "averages"}).fit(black, labels, seed=seed)
        row: dict[str, Any] = {"seed": seed, "no_net": shares(no_net, world, sets, budget)}
        for variant in variants:
            if variant == "with" and student is None:  # the student's fit, once per cell (its answers kept)
                t = time.perf_counter()
                smem = Path(args.cache) / "student_memory" / f"{cell.replace('/', '_')}-{args.seed}"
                gen = build_tabular_generator("proposer", {**params, **with_student, "student_agents": args.student_agents,
                                                           "student_memory": str(smem)}).fit(black, labels, seed=first)
                student = gen.student_
                out["student"] = {**gen.fit_info_["student"], "fit_seconds": time.perf_counter() - t}
            if not (variant == "with" and seed == first):  # (there: the student's own fit above)
                gen = build_tabular_generator("proposer", {**params, **(with_student if variant == "with" else {})}
                                              ).fit(black, labels, seed=seed)
                gen.student_ = student if variant == "with" else None
            row[variant] = shares(gen, world, sets, budget)
            gen.params.self_label_memory = memory
            gen.add_self_labels(black, U, seed=seed, progress=not args.quiet)
            row[f"{variant}_self"] = shares(gen, world, sets, budget)
            # the fit with its self-labels, for ``remote_student.py`` and ``spread_validation.py`` to time and score
            gen.save(saved / saved_name(variant, args))
            info = gen.fit_info_["self_labels"]
            row[f"{variant}_self_info"] = info
            if seed == first:
                n0 = len(labels.X)
                found = np.zeros(len(U), bool)
                CF = np.full(U.shape, np.nan)
                idx = {r.tobytes(): i for i, r in enumerate(U)}
                for x, cf in zip(gen.X_[n0:], gen.CF_[n0:], strict=True):
                    found[idx[x.tobytes()]], CF[idx[x.tobytes()]] = True, cf
                row[f"{variant}_self_quality"] = label_quality(cell, U, CF, found, args)
            print(f"[{cell}] seed {seed} {variant}: test {row[variant]['test']:.3f} -> {row[f'{variant}_self']['test']:.3f}"
                  + "".join(f", {k} {row[variant][k]:.3f} -> {row[f'{variant}_self'][k]:.3f}" for k in sets if k != "test")
                  + f" ({info['answered']} self-labels, {info['seconds']:.0f} s)", flush=True)
        out["fits"].append(row)
        if path is not None:  # each fit kept as it finishes
            path.write_text(json.dumps({**out, "fits": out["fits"] + others}, indent=2))
    out["fits"] += others
    return out


def report(cells: list[dict[str, Any]], command: str) -> str:
    names = {"test": "held-out test", "validation": "validation (the training pool's next)", "fresh": "fresh real"}
    budget = cells[0]["budget"] if cells else "2x256"
    setting = {k: cells[0].get(k, v) for k, v in STUDENT_DEFAULTS.items()} if cells else dict(STUDENT_DEFAULTS)
    lines = ["# Self-labels: the proposer's labels grown by its own search (issue 56)", "", f"`{command}`", "",
             f"Optimal share (within 1% of MACE) at {budget.replace('x', ' x ')} (round trips x rows), over the fits: "
             "min-max (mean). *+ self* is the same fit after answering the unlabelled real rejected training rows at 8 x 2,000 through the black box and "
             "learning from its accepted answers (`add_self_labels`). The student's settings: "
             + ", ".join(f"`{k}` {v!r}" for k, v in setting.items()) + ".", "",
             "| cell | agents | search without the network | proposer | proposer + self | proposer + student | "
             "proposer + student + self |", "|---|---|---:|---:|---:|---:|---:|"]

    def col(c: dict[str, Any], side: str, where: str) -> str:
        v = [f[side][where] for f in c["fits"] if side in f and where in f[side]]
        if not v:
            return "-"
        return f"{np.mean(v):.3f}" if len(v) == 1 else f"{min(v):.3f}-{max(v):.3f} ({np.mean(v):.3f})"

    for c in cells:
        for where in ("test", "validation", "fresh"):
            if where in c["agents"]:
                lines.append(f"| {c['cell']} | {names[where]} ({c['agents'][where]}) | "
                             + " | ".join(col(c, s, where) for s in ("no_net", "without", "without_self", "with", "with_self"))
                             + " |")
    lines += ["", "| cell | variant | unlabelled agents | answered (mean) | calls, rows per fit (mean of the fits that asked) | s per fit (mean) | "
              "within 1% of MACE (seed 0; agents with MACE's answer) |", "|---|---|---:|---:|---|---:|---|"]
    for c in cells:
        for v, name in (("without", "proposer"), ("with", "proposer + student")):
            infos = [f[f"{v}_self_info"] for f in c["fits"] if f"{v}_self_info" in f]
            if not infos:  # a run of the other variant only (--variants)
                continue
            q = c["fits"][0].get(f"{v}_self_quality", {})
            qs = f"{q['within_1pct']:.3f} of {q['agents']}" if q.get("agents") else "-"
            asked = [i for i in infos if not i.get("kept_blocks")]  # a fit answered from memory asked nothing
            if asked:
                cost = (f"{np.mean([i['calls'] for i in asked]):.0f}, {np.mean([i['rows'] for i in asked]):,.0f} | "
                        f"{np.mean([i['seconds'] for i in asked]):.0f}")
                if len(asked) < len(infos):
                    cost += f" ({len(asked)} of {len(infos)} fits; the others' self-labels kept from an earlier run)"
            else:
                cost = "kept from an earlier run | -"
            lines.append(f"| {c['cell']} | {name} | {c['unlabelled']:,} | {np.mean([i['answered'] for i in infos]):.0f} | "
                         f"{cost} | {qs} |")
    return "\n".join(lines) + "\n"


def student_setting(args: argparse.Namespace) -> dict[str, Any]:
    """The student's settings of a run (``--student-members`` and the like), as the proposer's parameters."""
    return {k: type(v)(getattr(args, k)) for k, v in STUDENT_DEFAULTS.items()}


def saved_name(variant: str, args: argparse.Namespace) -> str:
    """The directory name of a variant's saved fit: its ``SAVED`` name, the student's with its setting where it is
    not the default (its self-labels depend on it), either with the self-labels' count where it is not 1,500:
    ``proposer_student_self-both-t0.1-near128``, ``proposer_student_self-both-values-n6000``."""
    return SAVED[variant] + result_names("2x256", student_setting(args) if variant == "with" else None,
                                         args.self_labels)[0]


def result_names(budget: str, setting: dict[str, Any] | None = None, self_labels: int = SELF_LABELS
                 ) -> tuple[str, str]:
    """(the tail of each cell's JSON stem, the report's file name) at ``budget``, the student's ``setting`` and
    ``self_labels`` agents: the 2 x 256 files of the default student and 1,500 self-labels keep their names,
    another budget, student or count carries it (``credit_forest-8x2000.json``, ``self_labels_8x2000.md``;
    ``credit_forest-m2-both.json``, ``self_labels_m2-both.md``; ``credit_forest-both-t0.1-near128.json``;
    ``adult_forest-both-values-n6000.json``)."""
    setting = {**STUDENT_DEFAULTS, **(setting or {})}
    parts = ([] if budget == "2x256" else [budget]) + [SETTING_TAGS[k] + ("" if isinstance(v, bool) else str(v))
                                                          for k, v in setting.items() if v != STUDENT_DEFAULTS[k]]
    parts += [] if int(self_labels) == SELF_LABELS else [f"n{int(self_labels)}"]
    tail = "-".join(parts)
    return (f"-{tail}", f"self_labels_{tail}.md") if tail else ("", "self_labels.md")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default="credit/forest,adult/forest", help="comma-separated forest cells")
    p.add_argument("--seeds", default="0,1,2,3", help="fit seeds (the student: the first one's)")
    p.add_argument("--self-labels", type=int, default=SELF_LABELS, help="unlabelled real rejected training rows self-labelled")
    p.add_argument("--workers", type=int, default=2, help="processes answering the self-labels")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="which fits self-label: without (the proposer), with (the proposer with the student), or both")
    p.add_argument("--val-agents", type=int, default=400, help="validation agents per cell (never self-labelled)")
    p.add_argument("--fresh-agents", type=int, default=400,
                   help="real rejected test rows outside the held-out sample, MACE-labelled (0: none)")
    p.add_argument("--budget", default="2x256", help="R x N per answer")
    p.add_argument("--student-agents", type=int, default=10000, help="agents drawn for the student at fit time")
    p.add_argument("--student-members", type=int, default=1, help="students on independent draws (the picks: any accepts)")
    p.add_argument("--student-use", default="round_one", help="where the student's picks go: round_one, round_two, both")
    p.add_argument("--student-threshold", type=float, default=0.3, help="the student's P(accept) over which it picks")
    p.add_argument("--student-near-picks", type=int, default=64, help="round two's picks nearer than an answer")
    p.add_argument("--self-label-values", action="store_true",
                   help="the search's vocabulary widened by the self-labels' values (the student keeps MACE's)")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--generators", default="data_cache/blackbox_generators",
                   help="where each fit with its self-labels is saved (<cell>/spread/seed<fit>/proposer_self, "
                        "proposer_student_self, with the student's setting: saved_name)")
    p.add_argument("--force", action="store_true", help="run every fit again (else a cell's fits kept in its JSON stay)")
    args = with_cell_defaults(p.parse_args(argv))
    if not args.variants or not set(args.variants.split(",")) <= set(VARIANTS):
        raise SystemExit(f"--variants: expected some of {', '.join(VARIANTS)}, got {args.variants!r}")
    out = Path(args.out)
    (out / "self_labels").mkdir(parents=True, exist_ok=True)
    tail, report_name = result_names(args.budget, student_setting(args), args.self_labels)
    for cell in args.cells.split(","):  # one JSON per cell; the report holds every cell run so far at this budget
        run_cell(cell, args, out / "self_labels" / f"{cell.replace('/', '_')}{tail}.json")
    runs = [f for f in sorted((out / "self_labels").glob("*.json")) if f.stem.partition("-")[2] == tail[1:]]
    cells = [json.loads(f.read_text()) for f in runs]
    text = report(cells, "python benchmarks/self_labels.py " + " ".join(argv or sys.argv[1:]))
    (out / report_name).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
