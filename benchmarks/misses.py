"""Where a saved black-box generator misses MACE's optimum, agent by agent, beside the search without the network
(issue 56).

    python benchmarks/misses.py                                   # Adult forest's table generator, fit 0
    python benchmarks/misses.py --cell credit/forest --generator proposer_student_self-both-t0.1-near128 --seeds 0,1

For each fit seed (the saved fits of ``self_labels.py`` or ``blackbox_generators.py --spread-seeds`` under
``--generators``) and each agent set (the held-out sample, ``--val-agents`` validation agents and
``--fresh-agents`` fresh real ones, labelled by MACE as ``spread_validation.py`` labels them, cached), the
generator and ``--baseline`` answer at ``--budget`` (the search without the network is fitted from the cell's labels
with the fit's seed where none is saved, as ``self_labels.py`` fits it). Every agent the generator leaves outside 1%
of MACE is one of three kinds:

- **no answer**: no row it asked was accepted;
- **another set**: its answer changes other raw features than MACE's optimum (the set was not found);
- **the same set**: MACE's features, at values farther from the agent (the values were not found);

listed with its distance ratio, both sets, the rank the generator's set namer gives MACE's set (where it has one;
"unnamed": no label changes that set) and whether the baseline answered it within 1%. Each row also gives the
generator's lead over the baseline in points with a paired 95% interval over its agents (the agents are the sample;
the same agents answer both), and a last table the lead of every set with each agent's outcomes averaged over the
fits (the fits share their agents, so they are not independent samples). Writes
``<out>/misses/<cell>-<generator>.md``: the counts per kind and agent set, the leads, then the agents.
"""

from __future__ import annotations

import argparse
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
    spread_dir,
    with_cell_defaults,
)
from data_gen.mace_labels import raw_feature_index  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from evaluation.tabular_experiment import optimal_answers  # noqa: E402
from learners.tabular import build_tabular_generator  # noqa: E402
from learners.tabular.geometry import WorldGeometry  # noqa: E402

KINDS = ("no answer", "another set", "the same set")
REL = 0.01  # an answer within this share of MACE's distance counts as optimal (``score_answers``)
Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def paired_lead(diff: np.ndarray) -> tuple[float, float, float]:
    """The mean of per-agent differences (generator minus baseline, each in [-1, 1]) in points and its 95% interval
    (normal approximation: the mean of a few hundred bounded differences)."""
    d = np.asarray(diff, float)
    mean = float(d.mean())
    half = Z95 * float(d.std(ddof=1)) / np.sqrt(len(d)) if len(d) > 1 else np.inf
    return 100 * mean, 100 * (mean - half), 100 * (mean + half)


def changed_sets(geo: WorldGeometry, X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(N, J) the raw features each row of ``C`` changes from its agent in ``X`` (False for a NaN row)."""
    ok = ~np.isnan(C).any(1)
    out = np.zeros((len(X), geo.n_raw), bool)
    if ok.any():
        out[ok] = geo.deltas(X[ok], C[ok]) > 1e-12
    return out


def miss_kinds(geo: WorldGeometry, X: np.ndarray, CF: np.ndarray, found: np.ndarray, mace_cf: np.ndarray,
               mace_ok: np.ndarray, good: np.ndarray) -> np.ndarray:
    """(N,) each agent's kind of miss (``KINDS``); "" where the answer is optimal or MACE has none."""
    kinds = np.full(len(X), "", object)
    miss = mace_ok & ~good
    same = (changed_sets(geo, X, np.where(found[:, None], CF, np.nan)) == changed_sets(geo, X, mace_cf)).all(1)
    kinds[miss & ~found] = KINDS[0]
    kinds[miss & found & ~same] = KINDS[1]
    kinds[miss & found & same] = KINDS[2]
    return kinds


def namer_ranks(gen: Any, X: np.ndarray, sets: np.ndarray) -> list[str]:
    """Per agent, the rank (1 = likeliest) the generator's set namer gives the changed set ``sets`` (N, J); "-" for
    a generator without one, "unnamed" where no label changes that set."""
    namer = getattr(gen, "set_namer_", None)
    if namer is None:
        return ["-"] * len(X)
    order = np.argsort(-namer.scores(gen._scaled(X)), axis=1, kind="stable")
    index = {k.tobytes(): i for i, k in enumerate(np.asarray(namer.keys_, bool))}
    out = []
    for i, s in enumerate(sets):
        k = index.get(np.asarray(s, bool).tobytes())
        out.append("unnamed" if k is None else str(int(np.flatnonzero(order[i] == k)[0]) + 1))
    return out


def agent_sets(c: Any, tl: Any, args: argparse.Namespace) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``student_forests.labelled_sets`` as (X, MACE's counterfactuals, distances, solved), "test" named "held-out"."""
    from benchmarks.student_forests import labelled_sets

    return {"held-out" if k == "test" else k: (np.asarray(v.X, float), np.asarray(v.cf, float),
                                                np.asarray(v.distance, float), np.asarray(v.ok, bool))
            for k, v in labelled_sets(c, tl, args).items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both generators on every agent set of every fit seed: the counts and the generator's misses."""
    from learners.tabular.base import TabularGenerator

    c, tl, labels = cell_labels(args.cell, args)
    world = c.build.world
    geo = WorldGeometry.of(world, "one")
    names = raw_feature_index(world.schema)[0]
    budget = Budget(*(int(v) for v in args.budget.split("x")))
    sets = agent_sets(c, tl, args)
    counts, agents = [], []
    diffs: dict[str, list[np.ndarray]] = {k: [] for k in sets}  # per set, each fit's per-agent difference
    for seed in (int(s) for s in args.seeds.split(",")):
        gens = {}
        for role, name in (("generator", args.generator), ("baseline", args.baseline)):
            path = spread_dir(args.generators, args.cell, seed) / name
            if path.exists():
                gens[role] = TabularGenerator.load(path)
            elif role == "baseline" and name == "search_no_net":  # as self_labels.py fits it (it saves none)
                gens[role] = build_tabular_generator("proposer", {"proposals": "averages"}).fit(
                    replace(world, model=BlackBoxModel(world.model)), labels, seed=seed)
            else:
                raise SystemExit(f"--{role}: no saved fit {path} (run self_labels.py or blackbox_generators.py "
                                 f"--spread-seeds {seed} first)")
        for set_name, (X, mace_cf, mace_d, mace_ok) in sets.items():
            t = time.perf_counter()
            good, kinds = {}, None
            for role, gen in gens.items():
                rec = answers_within(gen, world, X, budget)
                good[role] = optimal_answers(world, X, rec.CF, rec.found, mace_d, mace_ok, rel=REL)
                if role == "generator":
                    CF, found = rec.CF, rec.found
                    kinds = miss_kinds(geo, X, CF, found, mace_cf, mace_ok, good[role])
            n = int(mace_ok.sum())
            diff = good["generator"][mace_ok].astype(float) - good["baseline"][mace_ok].astype(float)
            diffs[set_name].append(diff)
            row = {"seed": seed, "set": set_name, "agents": n,
                   "generator": float(good["generator"][mace_ok].mean()), "baseline": float(good["baseline"][mace_ok].mean()),
                   "only_generator": int((good["generator"] & ~good["baseline"]).sum()),
                   "only_baseline": int((good["baseline"] & ~good["generator"]).sum()),
                   "lead": paired_lead(diff), **{k: int((kinds == k).sum()) for k in KINDS},
                   "seconds": time.perf_counter() - t}
            counts.append(row)
            print(f"[{args.cell}] fit {seed} {set_name}: {row['generator']:.4f} against {row['baseline']:.4f}; "
                  + ", ".join(f"{k} {row[k]}" for k in KINDS), flush=True)
            miss = np.flatnonzero(kinds != "")
            mace_sets, own_sets = changed_sets(geo, X, mace_cf), changed_sets(geo, X, np.where(found[:, None], CF, np.nan))
            ranks = namer_ranks(gens["generator"], X[miss], mace_sets[miss])
            for r, i in zip(ranks, miss, strict=True):
                d = float(geo.distance(X[i:i + 1], CF[i:i + 1])[0]) if found[i] else np.inf
                agents.append({"seed": seed, "set": set_name, "agent": int(i), "kind": kinds[i],
                               "ratio": d / max(float(mace_d[i]), 1e-12), "mace": _names(names, mace_sets[i]),
                               "answer": _names(names, own_sets[i]) if found[i] else "-", "rank": r,
                               "baseline": bool(good["baseline"][i])})
    leads = {k: {"agents": len(v[0]), "fits": len(v), "lead": paired_lead(np.mean(v, axis=0))}
             for k, v in diffs.items() if v}
    return {"cell": args.cell, "generator": args.generator, "baseline": args.baseline, "budget": args.budget,
            "counts": counts, "leads": leads, "agents": agents}


def _lead(lead: Any) -> str:
    mean, lo, hi = lead
    return f"{mean:+.2f} ({lo:+.2f} to {hi:+.2f})"


def _names(names: list[str], s: np.ndarray) -> str:
    return ", ".join(names[j] for j in np.flatnonzero(s))


def report(out: dict[str, Any], command: str) -> str:
    """The markdown page: counts per fit and agent set, then every miss."""
    lines = [f"# Misses of `{out['generator']}` on {out['cell']} at {out['budget']}", "",
             f"Written by `{command}`. An agent counts as missed where the generator's answer is not within 1% of "
             f"MACE's certified optimum; `{out['baseline']}` is the same search without the network.", "",
             "| fit | agents | generator | baseline | lead, points (95% interval) | only the generator | "
             "only the baseline | " + " | ".join(KINDS) + " |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["counts"]:
        lines.append(f"| {r['seed']} | {r['set']} ({r['agents']}) | {r['generator']:.4f} | {r['baseline']:.4f} | "
                     f"{_lead(r['lead'])} | {r['only_generator']} | {r['only_baseline']} | "
                     + " | ".join(str(r[k]) for k in KINDS) + " |")
    lines += ["", "The lead over the fits: each agent's outcome averaged over the fits, then the paired interval over the "
              "agents.", "", "| agents | fits | lead, points (95% interval) |", "|---|---|---|"]
    for set_name, v in out.get("leads", {}).items():
        lines.append(f"| {set_name} ({v['agents']}) | {v['fits']} | {_lead(v['lead'])} |")
    lines += ["", "| fit | set | agent | kind | distance / MACE's | MACE's set | the answer's set | "
              "namer's rank of MACE's set | baseline optimal |", "|---|---|---|---|---|---|---|---|---|"]
    for a in out["agents"]:
        ratio = "-" if not np.isfinite(a["ratio"]) else f"{a['ratio']:.3f}"
        lines.append(f"| {a['seed']} | {a['set']} | {a['agent']} | {a['kind']} | {ratio} | {a['mace']} | {a['answer']} "
                     f"| {a['rank']} | {'yes' if a['baseline'] else 'no'} |")
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_label_arguments(p)
    p.add_argument("--cell", default="adult/forest", help="the cell (world/model)")
    p.add_argument("--generator", default="proposer_student_self-both-values", help="the saved fit's name under each seed")
    p.add_argument("--baseline", default="search_no_net", help="the saved search without the network")
    p.add_argument("--seeds", default="0", help="comma-separated fit seeds")
    p.add_argument("--budget", default="2x256", help="R x N per answer")
    p.add_argument("--val-agents", type=int, default=400, help="validation agents (0: none)")
    p.add_argument("--fresh-agents", type=int, default=400, help="fresh real agents (0: none)")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="where the saved fits are")
    p.add_argument("--out", default="benchmarks/results", help="results directory")
    args = with_cell_defaults(p.parse_args(argv))
    parts = args.budget.split("x")
    if len(parts) != 2 or not all(v.isdigit() and int(v) > 0 for v in parts):
        p.error(f"--budget: expected RxN with positive integers, got {args.budget!r}")
    if not all(s.strip().isdigit() for s in args.seeds.split(",")):
        p.error(f"--seeds: expected comma-separated non-negative integers, got {args.seeds!r}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out = run(args)
    path = Path(args.out) / "misses" / f"{args.cell.replace('/', '_')}-{args.generator}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/misses.py " + " ".join(sys.argv[1:] if argv is None else argv)
    path.write_text(report(out, command.strip()))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
