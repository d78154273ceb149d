"""Sequential recourse on real data, CSCF's protocol: the BRKGA sequencer against the exact reference.

    nice -n 10 python benchmarks/sequential.py [--agents 100] [--configs adult-cscf adult-scf german-scf]
                                               [--variants polish cscf] [--jobs 2] [--generations 150]

For each configuration (Adult with CSCF's discount graph, Adult without it, German Credit, which
has no graph: CSCF's "cscf" and "scf"), a seeded sample of agents the black box rejects (Adult:
test split; German: the test split has only ~37, so test agents first, then training agents) is
labelled on both cores by

- the sequencer with CSCF's settings (population 500, first-front elites, 400 offspring with bias
  0.7, 100 mutants, 150 generations), as ``polish`` (the default: the GA, then the batched local
  search of ``solvers/sequential/polish.py``) and as ``cscf`` (``polish=0``: the GA alone);
- the exact uniform-cost search over the same value grid (sequences of at most 3 actions).

Reported per configuration and variant: success rate (at least one valid sequence), front size,
the length mix of the cheapest sequences, the cheapest cost against the exact reference (share of
the agents the reference solves whose cheapest sequence is within 1% of it, or cheaper; worst
gap), seconds per instance, and the action usage by position over all front members (CSCF Fig. 5,
as stacked bars: ``action_positions.png``). Chunks are resumable under ``--work``; results go
to ``--out``/sequential.{json,md}. Times are per agent inside a worker, two workers on two cores:
CPU seconds (process time) and wall seconds, which grow with whatever else shares the machine (the
load average is recorded).
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

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.sequence_labels import SequenceLabelSet, label_sequences  # noqa: E402
from data_gen.sequential_worlds import build_sequential, rejected_agents  # noqa: E402
from solvers.sequential import BRKGASequencer, ExactSequenceSearch  # noqa: E402

CONFIGS = {"adult-cscf": ("adult", True, "test"), "adult-scf": ("adult", False, "test"),
           "german-scf": ("german", False, "all")}
CSCF_REPORTED = {"adult": {"median_front_size": 7, "seconds": 100}, "german": {"median_front_size": 4, "seconds": 150}}


def compare(seq: SequenceLabelSet, ref: SequenceLabelSet) -> dict[str, Any]:
    """The sequencer's cheapest cost against the exact reference's, on agents the reference solves."""
    both = (ref.status == "ok") & (seq.status == "ok")
    solved = ref.status == "ok"
    ratio = seq.cost[both] / ref.cost[both]
    within = np.zeros(int(solved.sum()), dtype=bool)
    within[np.flatnonzero(both[solved])] = ratio <= 1.01
    return {
        "reference_solved": int(solved.sum()),
        "reference_no_recourse": int((ref.status == "no_recourse").sum()),
        "reference_unknown": int((ref.status == "unknown").sum()),
        "within_1pct": float(within.mean()) if len(within) else None,
        "cheaper_than_reference": float((ratio < 1 - 1e-9).mean()) if len(ratio) else None,
        "worst_gap": float(ratio.max() - 1) if len(ratio) else None,
        "mean_gap": float(ratio.mean() - 1) if len(ratio) else None,
        "missed_where_reference_solved": int((solved & (seq.status != "ok")).sum()),
    }


def positions(labels: SequenceLabelSet) -> np.ndarray:
    """(A, A) counts: how often action a is at position t over every front member (CSCF Fig. 5)."""
    A = len(labels.action_names)
    out = np.zeros((A, A), dtype=np.int64)
    for t in range(A):
        col = labels.front_actions[:, t]
        np.add.at(out[:, t], col[col >= 0], 1)
    return out


def summarize(labels: SequenceLabelSet) -> dict[str, Any]:
    ok = labels.ok
    rt = labels.runtime
    return {
        "success_rate": float(ok.mean()),
        "median_front_size": float(np.median(labels.front_size[ok])) if ok.any() else None,
        "mean_front_size": float(labels.front_size[ok].mean()) if ok.any() else None,
        "length_mix_cheapest": {int(k): int(v) for k, v in zip(*np.unique(labels.length[ok], return_counts=True),
                                                                 strict=True)},
        "length_mix_front": {int(k): int(v) for k, v in zip(*np.unique((labels.front_actions >= 0).sum(1),
                                                                        return_counts=True), strict=True)},
        "seconds_mean": float(rt.mean()), "seconds_median": float(np.median(rt)),
        "seconds_p95": float(np.percentile(rt, 95)), "seconds_max": float(rt.max()),
        "cpu_seconds_mean": float(labels.cpu_runtime.mean()), "cpu_seconds_p95": float(np.percentile(labels.cpu_runtime, 95)),
        "cpu_seconds_max": float(labels.cpu_runtime.max()),
    }


def plot_positions(results: dict[str, Any], path: Path) -> None:
    """Stacked bars per position: the share of front members using each action there (blank: the
    sequence stopped); one row per configuration, one column per sequencer variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(results)
    variants = list(results[configs[0]]["variants"])
    fig, axes = plt.subplots(len(configs), len(variants), figsize=(4.6 * len(variants) + 2.2, 3.0 * len(configs)),
                             squeeze=False)
    colors = plt.get_cmap("tab10")
    for row, c in enumerate(configs):
        names = results[c]["action_names"]
        for col, v in enumerate(variants):
            ax = axes[row][col]
            counts = np.asarray(results[c]["variants"][v]["positions"], float)
            share = counts / max(results[c]["variants"][v]["front_members"], 1)
            bottom = np.zeros(counts.shape[1])
            for a, name in enumerate(names):
                ax.bar(np.arange(1, counts.shape[1] + 1), share[a], bottom=bottom, color=colors(a), label=name, width=0.7)
                bottom += share[a]
            ax.set_title(f"{c}, sequencer: {v}", fontsize=9)
            ax.set_ylim(0, 1)
            ax.set_xticks(np.arange(1, counts.shape[1] + 1))
            if row == len(configs) - 1:
                ax.set_xlabel("position t in the sequence")
            if col == 0:
                ax.set_ylabel("share of front members")
        axes[row][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
    fig.suptitle("Action usage by position over all Pareto-front members (blank: the sequence ended)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(results: dict[str, Any], agents: int) -> str:
    lines = [f"Sequential recourse, CSCF protocol ({agents} rejected agents per configuration; "
             "`python benchmarks/sequential.py`)", "",
             "| config | black box (test acc) | sequencer | success | front size (median / mean) | cheapest length 1/2/3/4+ "
             "| within 1% of exact | worst gap | CPU s / instance (mean / p95 / max) | wall s (mean) "
             "| exact CPU s (mean / max) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c, r in results.items():
        ex = r["exact"]
        for v, s in r["variants"].items():
            mix = s["length_mix_cheapest"]
            lens = "/".join(str(mix.get(k, 0)) for k in (1, 2, 3)) + f"/{sum(n for k, n in mix.items() if k >= 4)}"
            cmp_ = s["vs_exact"]
            lines.append(
                f"| {c} | MLP {r['black_box']} ({r['test_accuracy']:.3f}) | {v} | {s['success_rate']:.0%} "
                f"| {s['median_front_size']:g} / {s['mean_front_size']:.1f} | {lens} "
                f"| {cmp_['within_1pct']:.0%} of {cmp_['reference_solved']} | {cmp_['worst_gap']:+.1%} "
                f"| {s['cpu_seconds_mean']:.2f} / {s['cpu_seconds_p95']:.2f} / {s['cpu_seconds_max']:.2f} "
                f"| {s['seconds_mean']:.2f} | {ex['cpu_seconds_mean']:.2f} / {ex['cpu_seconds_max']:.2f} |")
    lines += ["", "CSCF (paper): median front size 7 (Adult) and 4 (German); about 100 s (Adult) and 150 s (German) "
              "per instance. Gap = sequencer's cheapest / exact - 1 (negative: the sequencer found a cheaper, "
              "longer sequence; the reference searches at most 3 actions on the same value grid). CPU s: process "
              "time of one agent (two agents run at once, one per core); wall s is inflated by whatever else shares "
              "the machine (load average in sequential.json)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--variants", nargs="+", default=["polish", "cscf"], choices=["polish", "cscf"])
    ap.add_argument("--generations", type=int, default=150)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/sequential")
    ap.add_argument("--work", default="data_cache/sequential_bench", help="resumable chunks (not committed)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    t_start = time.perf_counter()
    for c in args.configs:
        name, discounts, split = CONFIGS[c]
        built = build_sequential(name, discounts=discounts)
        world = built.world
        X = rejected_agents(built, args.agents, seed=args.seed, split=split)
        work = Path(args.work) / f"{c}-{len(X)}-s{args.seed}"
        # in this process before the workers are forked from it: they start with everything imported and compiled
        with warming_up(f"the exact search and the sequencer ({', '.join(args.variants)}) on one agent ({c})"):
            ExactSequenceSearch(max_length=3).solve(world, X[0])
            for v in args.variants:
                BRKGASequencer(n_generations=args.generations, polish=10 if v == "polish" else 0,
                               seed=args.seed).solve(world, X[0])
        ref = label_sequences(world, X, work / "exact", ExactSequenceSearch(max_length=3), n_jobs=args.jobs,
                              chunk_size=5)
        r: dict[str, Any] = {"agents": len(X), "agents_from": split, "black_box": "x".join(
            str(h) for h in built.metrics["params"]["hidden_layer_sizes"]), "test_accuracy": built.metrics["test_accuracy"],
            "world_fingerprint": world.fingerprint(), "action_names": world.action_names,
            "exact": {"seconds_mean": float(ref.runtime.mean()), "seconds_max": float(ref.runtime.max()),
                      "cpu_seconds_mean": float(ref.cpu_runtime.mean()), "cpu_seconds_max": float(ref.cpu_runtime.max()),
                      "solved": int(ref.ok.sum())}, "variants": {}}
        for v in args.variants:
            solver = BRKGASequencer(n_generations=args.generations, polish=10 if v == "polish" else 0, seed=args.seed)
            seq = label_sequences(world, X, work / f"brkga-{v}-g{args.generations}", solver, n_jobs=args.jobs,
                                  chunk_size=5)
            s = summarize(seq)
            s["vs_exact"] = compare(seq, ref)
            s["positions"] = positions(seq).tolist()
            s["front_members"] = int(len(seq.front_agent))
            r["variants"][v] = s
        results[c] = r
        print(json.dumps({c: {k: v for k, v in r.items() if k != "action_names"}}, default=str), flush=True)
    meta = {"agents": args.agents, "generations": args.generations, "jobs": args.jobs, "seed": args.seed,
            "wall_seconds": time.perf_counter() - t_start, "load_average": os.getloadavg(),
            "cscf_reported": CSCF_REPORTED}
    (out / "sequential.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    (out / "sequential.md").write_text(table(results, args.agents))
    plot_positions(results, out / "action_positions.png")
    print(table(results, args.agents))


if __name__ == "__main__":
    main()
