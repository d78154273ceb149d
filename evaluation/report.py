"""Markdown report and plots of an evaluated run (the paper's Figures 5, 7a and 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _pct(p: dict[str, float]) -> str:
    return f"{p['value']:.3f} ± {p['ci95']:.3f}" if p["n"] else "-"


def ratio(r: float | None) -> str:
    """A speed ratio as every table prints it: ``0.24×``, ``3.1×``, ``47×``, ``31,550×`` (``-``: not measured)."""
    if r is None or not np.isfinite(r):
        return "-"
    return f"{r:,.0f}×" if r >= 10 else f"{r:.2g}×"


def _seed_mean(r: dict[str, Any], key: str) -> float:
    return float(np.mean([m[key]["value"] for m in r["seeds"] if key in m])) if key in r["seeds"][0] else float("nan")


def accuracy_table(results: dict[str, Any]) -> str:
    lines = ["| model [filter] | test agents | accuracy | unseen x: accuracy (agents) | 1-action | 2-action | "
             "3-action | validity | feasible mistakes | regret | infer µs/agent | × exact B&B | × CVXPY ILP |",
             "|" + "---|" * 13]
    for key, r in results["models"].items():
        single = len(r["seeds"]) == 1
        m = r["seeds"][0]
        acc = _pct(m["accuracy"]) if single else f"{r['accuracy_mean']:.3f} ± {r['accuracy_std_over_seeds']:.3f} (seeds)"
        if "accuracy_unseen" not in m:
            unseen = "-"
        else:
            unseen = (_pct(m["accuracy_unseen"]) if single else f"{_seed_mean(r, 'accuracy_unseen'):.3f}") \
                + f" ({m['accuracy_unseen']['n']})"
        by = m["accuracy_by_length"]
        lines.append(
            f"| {key} | {r['test_agents']} | {acc} | {unseen} | {_pct(by['1']) if '1' in by else '-'} | "
            f"{_pct(by['2']) if '2' in by else '-'} | {_pct(by['3']) if '3' in by else '-'} | "
            f"{m['validity']['value']:.3f} | {m['feasible_mistakes']}/{m['mistakes']} | "
            f"{m['mean_cost_regret']:.4f} | {1e6 * m['inference_s_per_agent']:.1f} | "
            f"{ratio(m.get('speedup_vs_exact_bnb'))} | {ratio(m.get('speedup_vs_cvxpy_ilp'))} |")
    return "\n".join(lines)


def group_table(results: dict[str, Any]) -> list[str]:
    """Accuracy by group of every model beside the group-blind ceilings of its test split."""
    rules = [r for r, f in results.get("filters", {}).items() if "group_blind_ceiling" in f]
    if not rules:
        return []
    groups = sorted({g for r in results["models"].values() for m in r["seeds"]
                     for g in m.get("accuracy_by_group", {})}, key=int)
    lines = ["## Grouped access: accuracy by group and the group-blind ceiling", "",
             "Group modes: `blind` sees x only; `input` gets the group as a one-hot input; `per_group` is one "
             "model per group (the paper's Table 4 protocol). Ceilings (evaluation/metrics.py): *Bayes* is the "
             "expected accuracy of the best possible group-blind predictor under the world's group distribution "
             "(every test x solved in every group); *empirical* is the best any function of x can score on this "
             "test set's own joint, loose where x is unique in the test set.", "",
             "| model [filter] | group mode | overall | unseen x | " + " | ".join(f"group {g}" for g in groups) + " |",
             "|" + "---|" * (4 + len(groups))]
    for key, r in results["models"].items():
        if r["filter"] not in rules:
            continue
        by = [np.mean([m["accuracy_by_group"][g]["value"] for m in r["seeds"]]) for g in groups]
        lines.append(f"| {key} | {r.get('group_mode', 'blind')} | {r['accuracy_mean']:.3f} | "
                     f"{r.get('accuracy_unseen_mean', float('nan')):.3f} | " + " | ".join(f"{v:.3f}" for v in by) + " |")
    for rule in rules:
        for kind in ("bayes", "empirical"):
            c = results["filters"][rule]["group_blind_ceiling"][kind]
            lines.append(f"| group-blind ceiling, {kind} [{rule}] | - | {c['value']:.3f} | - | "
                         + " | ".join(f"{c['by_group'].get(g, float('nan')):.3f}" for g in groups) + " |")
    return lines + [""]


def _plots(run_dir: Path, arrays: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    names = []
    keys = list(arrays)
    # Figure 5: accuracy by CFE length.
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(keys)), 3.5))
    width = 0.8 / 3
    for j, k in enumerate((1, 2, 3)):
        vals = [arrays[key]["hit"][arrays[key]["lengths"] == k].mean() if (arrays[key]["lengths"] == k).any()
                else np.nan for key in keys]
        ax.bar(np.arange(len(keys)) + (j - 1) * width, vals, width, label=f"{k}-action")
    ax.set_xticks(np.arange(len(keys)), keys, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("accuracy (exact set match)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    ax.set_title("Accuracy by CFE length")
    fig.tight_layout()
    fig.savefig(out / "accuracy_by_length.png", dpi=120)
    plt.close(fig)
    names.append("accuracy_by_length.png")
    for key in keys:
        a = arrays[key]
        slug = "".join(c if c.isalnum() else "_" for c in key).strip("_")
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
        bins = np.linspace(0, 1, 21)
        axes[0].hist(a["confidence"][a["hit"]], bins=bins, alpha=0.7, label="right", density=True)
        axes[0].hist(a["confidence"][~a["hit"]], bins=bins, alpha=0.7, label="wrong", density=True)
        axes[0].set_xlabel("confidence")
        axes[0].set_title("Confidence of right vs wrong answers")
        axes[0].legend()
        wrong = ~a["hit"]
        for mask, label in ((wrong & a["valid"], "feasible mistake"), (wrong & ~a["valid"], "infeasible mistake")):
            axes[1].scatter(a["true_cost"][mask], a["cost"][mask], s=6, alpha=0.6, label=label)
        lim = [0, max(1.0, float(np.nanmax(np.r_[a["true_cost"], a["cost"]])))]
        axes[1].plot(lim, lim, "k--", lw=0.8)
        axes[1].set_xlabel("optimal CFE cost")
        axes[1].set_ylabel("generated CFE cost")
        axes[1].set_title("Mistake costs")
        axes[1].legend(fontsize=7)
        fig.suptitle(key, fontsize=9)
        fig.tight_layout()
        fig.savefig(out / f"{slug}.png", dpi=110)
        plt.close(fig)
        names.append(f"{slug}.png")
    return names


def write_report(run_dir: Path, results: dict[str, Any], arrays: dict[str, Any] | None) -> str:
    table = accuracy_table(results)
    t = results.get("timing", {})
    lines = [f"# Run `{results['run']}`", "", "## Accuracy (exact set match, ±1.96·SE)", "", table, ""]
    filters = results.get("filters", {})
    if filters:
        lines += ["*Unseen x*: test agents whose feature vector occurs nowhere in the filter's training split "
                  "(a random split puts some test agents' exact x in training): "
                  + "; ".join(f"[{r}] {f['unseen_agents']} of {f['test_agents']} ({f['unseen_share']:.1%})"
                              for r, f in filters.items()) + ".", ""]
    lines += group_table(results)
    if t:
        lines += ["## Exact solver time per agent (same run)", "",
                  f"- compiled branch and bound: {1e6 * t['exact_bnb_s_per_agent']:.1f} µs",
                  f"- CVXPY ILP (HiGHS): {1e3 * t['cvxpy_ilp_s_per_agent']:.3f} ms", ""]
    pol = [(k, r["seeds"][0]["policy"]) for k, r in results["models"].items() if "policy" in r["seeds"][0]]
    if pol:
        lines += ["## Policies against the exact optimum", "",
                  "| policy | optimality | validity | mean regret | mean steps | exact solver | infer µs/agent |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {_pct(p['optimality'])} | {p['validity']['value']:.3f} | {p['mean_regret']:.5f} | "
                  f"{p['mean_steps']:.2f} | {p['exact_solver']} ({p['exact_agents']} agents) | "
                  f"{1e6 * p['inference_s_per_agent']:.1f} |" for k, p in pol]
        lines.append("")
    ver = [(k, r["seeds"]) for k, r in results["models"].items() if "verified_top_k" in r["seeds"][0]]
    if ver:
        lines += ["## Named CFE with verified top-k decoding (evaluation/verified.py)", "",
                  "The cheapest of the k likeliest CFEs that the classifier accepts (k classifier queries per agent).",
                  "", "| model [filter] | k | accuracy (mean over seeds) | µs/agent |", "|---|---|---|---|"]
        lines += [f"| {k} | {seeds[0]['verified_top_k']['k']} | "
                  f"{np.mean([m['verified_top_k']['accuracy'] for m in seeds]):.4f} | "
                  f"{1e6 * np.mean([m['verified_top_k']['s_per_agent'] for m in seeds]):.0f} |" for k, seeds in ver]
        lines.append("")
    s = results["dataset"]
    lines += ["## Dataset", "", f"- size {s['size']}, by length {s['by_length']}, distinct CFEs {s['distinct_cfes']}",
              f"- CFEs seen once in the train split: {s['train_share_cfes_seen_once_pct']}%", ""]
    if arrays:
        lines += ["## Plots", ""] + [f"![{n}](plots/{n})" for n in _plots(run_dir, arrays)]
    (run_dir / "report.md").write_text("\n".join(lines) + "\n")
    return table


def headline(results: dict[str, Any]) -> list[str]:
    """One line per model: exact-match accuracy on the held-out agents and time per agent, beside the
    exact solvers' time measured in the same run (what the main job prints last)."""
    timing = results.get("timing", {})
    bnb, ilp = timing.get("exact_bnb_s_per_agent"), timing.get("cvxpy_ilp_s_per_agent")
    exact = "; ".join(part for part in (
        f"exact branch and bound {bnb * 1e6:,.1f} µs" if bnb else "",
        f"CVXPY ILP {ilp * 1e3:,.1f} ms" if ilp else "") if part)
    lines = []
    for key, r in results["models"].items():
        m = r["seeds"][0]
        lines.append(f"{key}: optimal action set on {r['accuracy_mean']:.1%} of {r['test_agents']:,} held-out agents, "
                     f"valid on {m['validity']['value']:.1%}, {m['inference_s_per_agent'] * 1e6:,.1f} µs per agent"
                     + (f" (exact solvers per agent, same run: {exact})" if exact else ""))
    return lines
