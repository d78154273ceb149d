"""The recourse audit's report: audit.md and its plots (per-group cost CDFs with the interval band,
features changed per group). The numbers come from evaluation.audit.summarize."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become None (an unknown or absent bound)."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _iv(v: list[float] | None, fmt: str = ".4g") -> str:
    if v is None:
        return "-"
    lo, hi = (("∞" if x is None or not math.isfinite(x) else format(x, fmt)) for x in v)
    return lo if lo == hi else f"[{lo}, {hi}]"


def _p(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _rules_line(rules: list[str] | None) -> str:
    """The rules the audit ran under, in one paragraph (``rules``: the world's rule names; None: none)."""
    if not rules:
        return ("Rules: the schema's mutability only (immutable and increase/decrease-only features); "
                "the run's world has no rules (world/rules.json).")
    own = [r for r in rules if not r.endswith("(schema)")]
    return (f"Rules: every answer and bound is under the world's {len(rules)} rules (world/rules.json; MACE "
            f"certifies under them, generator answers that break one are not counted): the schema's mutability "
            f"({len(rules) - len(own)}) and " + "; ".join(f"`{r}`" for r in own) + ".")


def audit_markdown(m: dict[str, Any], figures: list[str]) -> str:
    """The audit as Markdown: population, routes and times, per-group tables, comparisons, caveats."""
    pop, r, s = m["population"], m["routes"], m["seconds"]
    sample = (f"a seeded sample of {pop['audited']} (seed {pop['sample']['seed']}) of the {pop['rejected_test_agents']}"
              if pop["sample"] else f"all {pop['audited']}")
    mace = m["mace"]
    lines = [
        f"# Recourse audit: {m['world']}", "",
        f"Agents: {sample} rejected agents of the classifier's test split ({m['dataset']}, {m['model']}). "
        f"Cost: MACE's normalized {mace['norm']}-distance (Eq. 3, in [0, 1]). "
        f"Each agent's cost is an interval [lower, upper]: upper = the distance of a verified counterfactual "
        f"(generator `{m['generator']}` or MACE, the nearer), lower = MACE's certificate delta_min.", "",
        _rules_line(m.get("rules")), "",
        f"- with recourse: {m['with_recourse']}; proven without any: {m['proven_none']}; unknown (no answer, "
        f"no proof within MACE's {mace['time_limit']:g} s): {m['unknown']}",
        f"- certified within 1% (relative width (upper - lower) / upper <= 0.01): "
        f"{_p(m['certified_share_1pct'])} of the agents with recourse; 99th percentile of the width "
        f"{_iv([m['rel_width_p99']] * 2) if m['rel_width_p99'] is not None else '-'}",
        f"- routes: lower bound from the run's own MACE labels {r['lower_bound_from_run_labels']}, "
        f"MACE solved {r['mace_solved']}; generator verified answers {r['generator_verified_answers']}; "
        f"upper bound from generator {r['upper_bound_from']['generator']}, MACE {r['upper_bound_from']['mace']}, "
        f"labels {r['upper_bound_from']['labels']}",
        f"- time: {s['total_this_call']:.1f} s wall this call (MACE {s['mace_total']:.1f} s summed over agents"
        + (f", {s['mace_per_solved_agent']:.2f} s per solved agent" if s["mace_per_solved_agent"] else "")
        + f"; generator {s['generator_total']:.2f} s for all agents); workers: {m['compute']['n_workers']} "
        f"({m['compute']['backend']}). Chunks resumed from an earlier call are not in this call's wall time.", "",
    ]
    for attr, a in m["attributes"].items():
        feat = m["group_features"][attr]
        lines += [f"## By {attr} (feature `{feat}`)", "",
                  f"`{feat}` is {'/'.join(a['mutability'])} in the world: "
                  + ("no answer may change it" if a["mutability"] == ["immutable"] else "answers MAY change it")
                  + f"; answers that change it (checked): {a['answers_changing_it']}.", "",
                  "| group | agents | with recourse | proven none | unknown | mean cost | median cost | p90 cost | "
                  "certified ≤1% | features changed (mean) | changed most |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for g, st in a["groups"].items():
            most = ", ".join(f"{f['feature']} {100 * f['share']:.0f}%" for f in st["features_changed_most"][:3])
            lines.append(f"| {g} | {st['agents']} | {_p(st['share_with_recourse'])} | {_p(st['share_proven_none'])} | "
                         f"{st['unknown']} | {_iv(st['cost_mean'])} | {_iv(st['cost_median'])} | "
                         f"{_iv(st['cost_quantiles']['0.9'])} | {_p(st['certified_share_1pct'])} | "
                         f"{st['features_changed_mean'] or 0:.2f} | {most} |")
        lines += ["", f"Against the reference group **{a['reference']}** (mean cost of the agents with recourse; "
                  "bootstrap 95% CI from the bounds):", "",
                  "| group | ratio (range) | ratio 95% CI | difference (range) | difference 95% CI | conclusion |",
                  "|---|---|---|---|---|---|"]
        for g, c in a["compared_to_reference"].items():
            lines.append(f"| {g} | {_iv(c['ratio'], '.3f')} | {_iv(c['ratio_ci'], '.3f')} | "
                         f"{_iv(c['difference'])} | {_iv(c['difference_ci'])} | {c['conclusion']} |")
        if a["too_small_to_compare"]:
            lines.append(f"\nNot compared (fewer than 10 agents with recourse): {', '.join(a['too_small_to_compare'])}.")
        lines.append("")
    lines += [
        "## How to read it", "",
        "- Every interval holds the true value whatever the uncertified agents' optima are: a mean, median or "
        "quantile is monotone in each agent's cost, so taken at the lower and at the upper ends it brackets the "
        "true one. The ratio and difference CIs take, in every bootstrap replicate, the least and the most "
        "favourable ends, so the true statistic's percentile interval lies inside them.",
        "- The cost is the distance to the nearest counterfactual under the world's plausibility rules "
        "(immutable and monotone features, ranges); it is not effort, money or time, and it says nothing "
        "about whether the features used are fair to ask for.",
        "- Costs are over the agents with recourse; the shares with and without recourse are separate. "
        "Unknown agents (no answer, no proof) are outside both and listed.",
        "- The comparisons are associations in this model's rejected population, not causal effects; "
        "a sample audit describes the sampled agents (seeded), a group with few agents has a wide CI.", "",
    ]
    lines += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(lines) + "\n"


def audit_plots(agents: Any, groups: dict[str, np.ndarray], m: dict[str, Any], out_dir: str | Path) -> list[str]:
    """audit_cost_cdf_<attr>.png (per group: the CDF of the lower and of the upper bounds, the band between
    holds the true CDF) and audit_features_<attr>.png (share of answers changing each feature, per group)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    files = []
    has = agents.has_recourse
    for attr, labels in groups.items():
        labels = np.asarray(labels).astype(str)
        a = m["attributes"][attr]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for k, g in enumerate(a["groups"]):
            sel = has & (labels == g)
            if not sel.any():
                continue
            lo, hi = np.sort(agents.lower[sel]), np.sort(agents.upper[sel])
            grid = np.unique(np.concatenate([lo, hi]))
            f_lo = np.searchsorted(lo, grid, side="right") / len(lo)  # CDF of the lower ends: above the true one
            f_hi = np.searchsorted(hi, grid, side="right") / len(hi)
            color = f"C{k % 10}"
            ax.fill_between(grid, f_hi, f_lo, step="post", color=color, alpha=0.25, linewidth=0)
            ax.step(grid, f_hi, where="post", color=color, label=f"{g} (n={int(sel.sum())})")
        ax.set_xlabel("cost of recourse (normalized distance)")
        ax.set_ylabel("share of agents with recourse")
        ax.set_title(f"{m['world']}: cost CDF by {attr} (band: certified interval)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"audit_cost_cdf_{attr}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(str(path))
        feats = sorted({f["feature"] for st in a["groups"].values() for f in st["features_changed_most"]})
        if feats:
            fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.45 * len(feats) * max(1, len(a["groups"])) ** 0.5))
            width = 0.8 / max(1, len(a["groups"]))
            for k, (g, st) in enumerate(a["groups"].items()):
                ax.barh(np.arange(len(feats)) + k * width, [st["feature_share"][f] for f in feats], height=width,
                        label=g, color=f"C{k % 10}")
            ax.set_yticks(np.arange(len(feats)) + 0.4 - width / 2, feats, fontsize=8)
            ax.set_xlabel("share of answers changing the feature")
            ax.set_title(f"{m['world']}: features changed by {attr}")
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"audit_features_{attr}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            files.append(str(path))
    return files
