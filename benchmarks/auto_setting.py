"""The proposer's setting chosen by the fit from the model's answers (``ProposerParams(setting="auto")``,
``learners/tabular/setting.py``; issue 56), against each cell's table generator (the setting documented per
model in docs/generators.md) and the same search without the network, on the same held-out agents.

A user who holds a model behind a scoring API does not know whether it is smooth or answers in steps; with
``setting="auto"`` the fit probes it (one call) and takes the surrogate, or the student of its corners in both
rounds with self-labels, or in round two only. This script fits that generator on every cell from the model's
answers alone, as a user would (the rejected training rows MACE did not label handed over as unlabelled rows),
and answers the held-out agents at each budget of ``--budgets``.

    python benchmarks/auto_setting.py                                  # the 8 cells, fit seed 0, 2 x 256
    python benchmarks/auto_setting.py --cells german/forest --budgets 2x256,8x2000

Each cell's fit is saved (``<generators>/<cell>/spread/seed<fit>/proposer_auto``) and its results written as the
cell ends (``<out>/<cell>.json``); a rerun with the same settings skips the cells already there and loads a saved
fit instead of fitting again (``--force``: both again). The model's answers for a student and the self-labels are
kept under ``--cache`` (``student_memory``, ``self_label_memory``), so an interrupted fit asks only what it lacks.
Writes ``<out>.md`` and ``<out>.json``.
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
    kept_cell,
    parse_budgets,
    request_ms,
    run_budget,
    spread_dir,
    with_cell_defaults,
)
from benchmarks.misses import agent_sets  # noqa: E402
from benchmarks.remote_student import SETTINGS, fit_command  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from evaluation.tabular_experiment import _unlabelled  # noqa: E402
from learners.tabular import TabularGenerator, build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results/auto_setting")
CELLS = "adult/forest,credit/forest,german/forest,compas/forest,adult/mlp,credit/mlp,german/mlp,compas/mlp"
SAVED = "proposer_auto"
NO_NET = "search_no_net"


def table_generator(cell: str, generators: str, fit: int) -> tuple[str, dict[str, Any], dict[str, TabularGenerator]]:
    """The cell's table generator (``remote_student.SETTINGS``; the proposer alone on the cells the table answers
    with it) and the search without the network, saved with fit seed ``fit``; a missing one names its command."""
    name, setting = SETTINGS.get(cell, ("proposer", {}))
    root = spread_dir(generators, cell, fit)
    for saved in (name, NO_NET):
        if not (root / saved).exists():
            raise SystemExit(f"{root / saved} is missing: fit it first with\n    " + fit_command(cell, saved, fit, generators))
    gens = {saved: TabularGenerator.load(root / saved) for saved in (name, NO_NET)}
    gens[name].params = replace(gens[name].params, **setting)
    return name, setting, gens


def fit_auto(cell: str, c: Any, labels: Any, args: argparse.Namespace) -> tuple[TabularGenerator, dict[str, Any]]:
    """The cell's proposer at ``setting="auto"``, fitted through the black box (or loaded where saved), and its
    fit record: what was chosen and why, the model calls and rows asked, the seconds. ``c`` and ``labels`` are
    the cell and its training labels (``cell_labels``)."""
    path = spread_dir(args.generators, cell, args.fit) / SAVED
    if path.exists() and not args.force:
        gen = TabularGenerator.load(path)
        first = json.loads((path / "fit.json").read_text())  # the first fit's seconds and unlabelled rows
        return gen, {"seconds": first["seconds"], "unlabelled": first["unlabelled"], **fit_rows(gen.fit_info_)}
    world = c.build.world
    U = _unlabelled(world, c.build.data.X_train, labels.X)  # the rejected training rows MACE did not label
    tag = f"{cell.replace('/', '_')}-{args.fit}"
    params = {"setting": "auto", "student_memory": str(Path(args.cache) / "student_memory" / tag),
              "self_label_memory": str(Path(args.cache) / "self_label_memory" / f"auto-{tag}"),
              "self_label_workers": args.workers}
    t = time.perf_counter()
    gen = build_tabular_generator("proposer", params).fit(replace(world, model=BlackBoxModel(world.model)),
                                                          replace(labels, unlabelled=U),
                                                          seed=args.fit, progress=not args.quiet)
    record = {"seconds": time.perf_counter() - t, "unlabelled": int(len(U)), **fit_rows(gen.fit_info_)}
    gen.save(path)
    (path / "fit.json").write_text(json.dumps(record, indent=2))
    return gen, record


def fit_rows(info: dict[str, Any]) -> dict[str, Any]:
    """What a fit chose and the model rows it needs, by part (``fit_info_``): the probe, the student's corners,
    the surrogate's queries, the self-labels' searches (asked once: a kept memory answers them on a rerun)."""
    parts = {"probe": info.get("steps", {}).get("rows", 0), "student": info.get("student", {}).get("rows", 0),
             "surrogate": info.get("surrogate", {}).get("rows", 0), "self_labels": info.get("self_labels", {}).get("rows", 0)}
    return {**info["setting"], "steps_share": float(info.get("steps", {}).get("share", 0.0)),
            "surrogate_used": bool(info.get("surrogate", {}).get("used", False)),
            "rows": int(sum(parts.values())), "rows_by_part": {k: int(v) for k, v in parts.items()}}


def asked(args: argparse.Namespace) -> dict[str, Any]:
    """The settings a cell's results answer (a rerun keeps a cell only for the same)."""
    return {"fit": args.fit, "budgets": args.budgets, "fresh_agents": args.fresh_agents, "latency_ms": args.latency_ms,
            "timed_agents": args.timed_agents, "repeats": args.repeats}


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """``cell``'s auto-set proposer, its table generator and the search without the network at every budget."""
    name, setting, gens = table_generator(cell, args.generators, args.fit)
    c, tl, labels = cell_labels(cell, args)
    auto, record = fit_auto(cell, c, labels, args)
    world, X = c.build.world, c.test
    out: dict[str, Any] = {"cell": cell, **asked(args), "agents": int(tl.ok.sum()),
                           "table": {"name": name, **setting}, "auto": record, "runs": {}}
    methods = (("auto", auto), ("table", gens[name]), (NO_NET, gens[NO_NET]))
    for key, gen in methods:
        out["runs"][key] = [run_budget(gen, world, X, b, tl.distance, tl.ok) for b in parse_budgets(args.budgets)]
    fresh = agent_sets(c, tl, argparse.Namespace(**{**vars(args), "val_agents": 0})).get("fresh") if args.fresh_agents > 0 else None
    if fresh is not None:  # real rejected test rows past the held-out ones (never self-labelled: not training rows)
        F, _, d, ok = fresh
        out["fresh"] = {"agents": int(ok.sum()), "runs": {key: [run_budget(gen, world, F, b, d, ok)
                                                                for b in parse_budgets(args.budgets)]
                                                          for key, gen in methods}}
    if args.latency_ms > 0:  # one request at a time against the remote model, the two settings interleaved
        timed = {"auto": [], "table": []}
        for _ in range(int(args.repeats)):
            for key, gen in (("auto", auto), ("table", gens[name])):
                timed[key] += request_ms(gen, world, X[: args.timed_agents], Budget(2, 256), args.latency_ms / 1e3)
        out["p50_ms"] = {k: float(np.median(v)) for k, v in timed.items()}
    return out


def chosen_words(record: dict[str, Any]) -> str:
    """The chosen options in a few words."""
    ch = record["chosen"]
    if ch["surrogate"]:
        return "surrogate" + ("" if record["surrogate_used"] else " (fitted, not used: its error was over the bar)")
    words = f"student ({ch['student_agents']:,} agents), {ch['student_use'].replace('_', ' ')}"
    return words + (f", {ch['self_labels']:,} self-labels" if ch["self_labels"] else "")


def p50(r: dict[str, Any]) -> str:
    """The two settings' p50s against the remote model, or a dash where they were not timed."""
    t = r.get("p50_ms")
    return f"{t['auto']:.1f} / {t['table']:.1f}" if t else "-"


def fresh(r: dict[str, Any]) -> str:
    """The three shares on the fresh agents at the first budget (their count first), or a dash."""
    f = r.get("fresh")
    if not f:
        return "-"
    return f"{f['agents']}: " + " / ".join(f"{f['runs'][k][0]['optimal_share']:.4f}" for k in ("auto", "table", NO_NET))


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    budgets = parse_budgets(args.budgets)
    lines = ["# The setting chosen from the model's answers (issue 56)", "",
             f"`python benchmarks/auto_setting.py --cells {args.cells} --budgets {args.budgets} --fit {args.fit}`", "",
             "Each cell's proposer fitted with `setting=\"auto\"` through the black box (the model seen only through "
             "`predict_proba`; the rejected training rows MACE did not label handed over as unlabelled rows): the fit "
             "probes whether the model answers in steps (one call) and chooses the surrogate, or the student of its "
             "corners in both rounds with self-labels, or in round two only (`learners/tabular/setting.py`). Beside it, "
             "the cell's table generator (its saved fit at the setting docs/generators.md gives for that model) and "
             "the same search without the network, on the same held-out agents. Share: answers within 1% of MACE's "
             "certified optimum.", "",
             "| cell | agents | steps share | chosen | fit: model rows | fit: min | table generator | "
             + " | ".join(f"auto {b.calls}x{b.rows} | table {b.calls}x{b.rows} | no network {b.calls}x{b.rows}"
                          for b in budgets) + f" | fresh agents {budgets[0].calls}x{budgets[0].rows}: auto / table / "
             "no network | p50 ms, auto / table |",
             "|---|---:|---:|---|---:|---:|---|" + "---:|---:|---:|" * len(budgets) + "---|---:|"]
    for r in results:
        rec = r["auto"]
        cells = [f"{r['runs'][k][i]['optimal_share']:.3f}" for i in range(len(budgets)) for k in ("auto", "table", NO_NET)]
        lines.append(f"| {r['cell']} | {r['agents']} | {rec['steps_share']:.2f} | {chosen_words(rec)} | {rec['rows']:,} | "
                     f"{rec['seconds'] / 60:.1f} | {r['table']['name']} | " + " | ".join(cells) + f" | {fresh(r)} | {p50(r)} |")
    lines += ["", "*fit: model rows*: every row the fit needs the model to answer (the probe, the student's corners, the "
              "surrogate's queries, the self-labels' searches), at fit time, once. *fit: min*: this machine's minutes "
              "for the whole fit, where a student's answers kept by an earlier run (`--cache`) were not asked again. "
              "Why each was chosen:", ""]
    lines += [f"- {r['cell']}: {r['auto']['why']}" for r in results]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_label_arguments(p)
    p.add_argument("--cells", default=CELLS, help="comma-separated cells")
    p.add_argument("--budgets", default="2x256", help="comma-separated R x N budgets")
    p.add_argument("--fit", type=int, default=0, help="fit seed (the table generators' saved fits of that seed)")
    p.add_argument("--fresh-agents", type=int, default=0,
                   help="also answer this many fresh real rejected test rows (their MACE labels cached or made)")
    p.add_argument("--latency-ms", type=float, default=20.0, help="remote model: ms per call for the p50s (0: not timed)")
    p.add_argument("--timed-agents", type=int, default=100, help="held-out agents answered one request at a time")
    p.add_argument("--repeats", type=int, default=2, help="times each of the two settings answers them (interleaved)")
    p.add_argument("--workers", type=int, default=2, help="processes answering the self-labels")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="where the saved fits live")
    p.add_argument("--out", default=str(OUT), help="results path (without extension)")
    p.add_argument("--force", action="store_true", help="fit and answer every cell again")
    args = with_cell_defaults(p.parse_args(argv))
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    unknown = sorted(set(cells) - set(CELLS.split(",")))
    if unknown:
        p.error(f"--cells: unknown {', '.join(unknown)}; known: {CELLS}")
    parse_budgets(args.budgets)  # a bad budget stops here, before any fit
    for flag in ("fresh_agents", "timed_agents", "repeats"):
        if getattr(args, flag) < (0 if flag == "fresh_agents" else 1):
            p.error(f"--{flag.replace('_', '-')}: must be >= {0 if flag == 'fresh_agents' else 1}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for cell in cells:
        path = out / f"{cell.replace('/', '_')}.json"
        prev = kept_cell(path, asked(args), args.force)
        if prev is not None:
            print(f"[{cell}] kept from {path}", flush=True)
            results.append(prev)
            continue
        t = time.perf_counter()
        r = run_cell(cell, args)
        path.write_text(json.dumps(r, indent=2))
        print(f"[{cell}] {chosen_words(r['auto'])}: auto {r['runs']['auto'][0]['optimal_share']:.3f}, table "
              f"{r['runs']['table'][0]['optimal_share']:.3f}, no network {r['runs'][NO_NET][0]['optimal_share']:.3f} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        results.append(r)
    Path(f"{out}.json").write_text(json.dumps(results, indent=2))
    Path(f"{out}.md").write_text(report(results, args))
    print(f"wrote {out}.md", flush=True)


if __name__ == "__main__":
    main()
