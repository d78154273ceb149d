"""The peers benchmark's verdicts and report (benchmarks/peers.py): which of our methods dominates
each peer (Pareto on validity, median distance ratio and seconds per agent, no constraint broken),
and the markdown tables of ``benchmarks/results/peers.md``."""

from __future__ import annotations

from typing import Any

from evaluation.counterfactual_metrics import dominates

OURS = ("mace", "geco", "generator", "served", "md_pso")
PEERS = ("dice_random", "dice_genetic", "dice_kdtree", "cfrl")


def dominance(summary: dict[str, dict]) -> dict[str, dict]:
    """Per peer: which of our methods dominate it (at least as valid, 0 violations, closer, no slower)."""
    out = {}
    for peer in PEERS:
        if peer not in summary:
            continue
        who = [ours for ours in OURS if ours in summary and dominates(summary[ours], summary[peer])]
        strict = [ours for ours in who if dominates(summary[ours], summary[peer], strict_distance=True)]
        out[peer] = {"dominated_by": who, "dominated": bool(who), "strictly_closer": strict}
    if "cfrl" in summary and "generator" in summary:
        g, c = summary["generator"], summary["cfrl"]
        out["generator_vs_cfrl"] = {
            "higher_validity": (g["valid_share"] or 0) > (c["valid_share"] or 0),
            "at_least_as_valid": (g["valid_share"] or 0) >= (c["valid_share"] or 0),
            "closer": g["ratio_median"] is not None and (c["ratio_median"] is None or g["ratio_median"] < c["ratio_median"]),
            "no_slower": g["seconds"] is not None and c["seconds"] is not None and g["seconds"] <= c["seconds"]}
    return out


# ----------------------------------------------------------------------------------------- report

def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


NAMES = {"mace": "MACE (certified)", "geco": "GeCo", "md_pso": "MD-PSO", "generator": "our generator (nearest_cfe)",
         "served": "our generator, GeCo fallback (as served)",
         "dice_random": "DiCE random", "dice_genetic": "DiCE genetic", "dice_kdtree": "DiCE kdtree",
         "cfrl": "alibi CFRL"}


SHORT = {"mace": "MACE", "geco": "GeCo", "md_pso": "MD-PSO", "generator": "generator", "served": "served"}


def _name(name: str, cell: dict) -> str:
    """The display name; CFRL's says its training steps beside alibi's default (issue 56)."""
    if name == "cfrl":
        steps = cell.get("training", {}).get("cfrl", {}).get("steps")
        return f"alibi CFRL ({steps:,} steps; alibi's default 100,000)" if steps else NAMES[name]
    return NAMES[name]


def report(cells: list[dict], command: str) -> str:
    out = ["# Peers side by side: DiCE and alibi's CounterfactualRL (`benchmarks/peers.py`)", "",
           f"Command: `{command}`. Seed 0; the same rejected test agents, the same model and the same "
           "constraints for every method (docs/peers.md says how each peer was given them). Every answer is "
           "re-checked with the real model and the schema's constraints (`evaluation/counterfactual_metrics.py`).",
           "", "Columns: **valid** = agents whose answer the real model accepts and that breaks no constraint / "
           "agents; **accepted** = agents with an answer the model accepts (constraints ignored); **viol.** = "
           "returned counterfactuals that break a constraint (immutable, monotone, domain, one-hot); "
           "**ratio** = median (p90) of the distance of the nearest valid answer over MACE's certified optimum "
           "(MACE's normalized l1), agents where both exist; **≤1%** = share within 1% of the optimum; "
           "**s/agent** = wall seconds per agent, one agent per call (2 shared CPU cores; load average in the "
           "JSON); **calls** = model calls (rows) per agent (MACE reads the white box: 0); "
           "**train s** = training time of the amortized methods (ours: MACE labels + fit).", ""]
    out += ["## Overview", "", "Per cell: each peer, and our generator and GeCo for reference. Dominated by: our methods "
            "that break no constraint and are no worse on validity, median distance ratio and mean s/agent, and "
            "strictly better on one of them (Pareto); (=): as close in median (both at MACE's optimum), not "
            "strictly closer.", "",
            "| data | model | agents | method | valid | viol. | ratio median | s/agent | calls | dominated by |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        for name in ("generator", "geco", *PEERS):
            s = c["summary"].get(name)
            if s is None:
                continue
            dom = c["dominance"].get(name)
            who = "" if dom is None else (", ".join(SHORT[o] + ("" if o in dom.get("strictly_closer", ()) else " (=)")
                                                     for o in dom["dominated_by"]) or "**none**")
            out.append(f"| {c['dataset']} | {c['model']} | {c['agents']} | {_name(name, c)} | {s['valid_count']}/"
                       f"{s['agents']} | {s['violations']} | {fmt(s['ratio_median'], '.2f')} | "
                       f"{fmt(s['seconds'], '.4f')} | {fmt(s['model_calls'], '.1f')} | {who} |")
    out.append("")
    for c in cells:
        out += [f"## {c['dataset']} × {c['model']} ({c['agents']} agents; test accuracy "
                f"{fmt(c['test_accuracy'])})", "",
                "| method | valid | accepted | viol. | ratio median (p90) | ≤1% | sparsity | s/agent | calls (rows) | "
                "train s |", "|---|---:|---:|---:|---|---:|---:|---:|---|---:|"]
        for name, s in c["summary"].items():
            tr = c["training"].get(name, {})
            train = tr.get("train_seconds")
            calls = "-" if s.get("model_calls") is None else (
                f"{s['model_calls']:.1f}" + (f" ({s['model_rows']:.0f})" if s.get("model_rows") is not None else ""))
            out.append(f"| {NAMES.get(name, name)} | {s['valid_count']}/{s['agents']} | {s['accepted_count']}/"
                       f"{s['agents']} | {s['violations']} | {fmt(s['ratio_median'], '.2f')} "
                       f"({fmt(s['ratio_p90'], '.2f')}) | {fmt(s['within'], '.0%')} | {fmt(s['sparsity'], '.2f')} | "
                       f"{fmt(s['seconds'], '.4f')} | {calls} | {fmt(train, '.1f')} |")
        dom = c.get("dominance", {})
        lines = []
        for peer in PEERS:
            if peer in dom:
                who = ", ".join(NAMES[o] for o in dom[peer]["dominated_by"]) or "**none**"
                lines.append(f"{NAMES[peer]}: dominated by {who}")
        if "generator_vs_cfrl" in dom:
            g = dom["generator_vs_cfrl"]
            lines.append("generator vs CFRL: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in g.items()))
        if lines:
            out += [""] + [f"- {s}" for s in lines]
        if c["diversity"]:
            out += ["", f"Diversity, k = 5, first {c['diverse_agents']} agents (over the valid answers: diversity = "
                    "mean pairwise distance, continuous |dx|/MAD + share of categorical changed):", "",
                    "| method | 5 valid (coverage) | valid per agent | diversity | norm. diversity | proximity | "
                    "sparsity | s/agent |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for name, s in c["diversity"].items():
                out.append(f"| {NAMES.get(name, name)} | {fmt(s['coverage'], '.0%')} | {fmt(s['valid'], '.1f')} | "
                           f"{fmt(s['diversity'], '.3f')} | {fmt(s['norm_diversity'], '.3f')} | "
                           f"{fmt(s['proximity'], '.3f')} | {fmt(s['sparsity'], '.3f')} | {fmt(s['seconds'], '.3f')} |")
        if c["errors"]:
            out += ["", "Errors: " + "; ".join(f"{k}: {str(v)[:300]}" for k, v in c["errors"].items())]
        if "cfrl" in c["training"]:
            t = c["training"]["cfrl"]
            out += ["", f"CFRL: retrained model disagrees with ours on {t['disagreements']} of {t['checked_rows']} "
                    f"rows; autoencoder {t['ae_seconds']:.1f} s + RL {t['rl_seconds']:.1f} s ({t['steps']} steps)."]
        out.append("")
    return "\n".join(out) + "\n"
