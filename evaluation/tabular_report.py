"""``report.md`` of a tabular run (``evaluation.tabular_experiment.evaluate_tabular``'s metrics as a table).

A run on the white-box route is scored against MACE's certified optimum; one on the black-box route
(``evaluation.blackbox_runs``) against GeCo's labels, which certify nothing: its report says so
("reference: GeCo, not certified") and its MACE-only figures read "n/a (black box)".
"""

from __future__ import annotations

from typing import Any

from evaluation.blackbox_runs import NOT_APPLICABLE, REFERENCE


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else v if isinstance(v, str) else format(v, fmt)


def tabular_report(m: dict[str, Any]) -> str:
    """The report of ``evaluate_tabular``'s metrics ``m`` (markdown)."""
    if m.get("route") == "black-box":
        return _black_box_report(m)
    c, lab = m["classifier"], m["labels"]
    lines = [f"# {m['world']}: generators against MACE", "",
             f"Classifier test accuracy {c['test_accuracy']:.3f}. MACE labels: {lab['agents']} rejected agents, "
             f"{lab['n_ok']} solved, {lab['n_no_recourse']} with no recourse (certified), {lab['n_unknown']} unknown; "
             f"{m['train_agents']} train, {m['test_agents']} held out ({m['unseen_test_agents']} with an x not in "
             "train).", "",
             "Optimal: within 1% of MACE's certified distance. Distance ratio: the answer's distance over MACE's. "
             "Validity: the model accepts the answer (its own decision rule, as scikit-learn decides) and no constraint is broken (of the answered agents); the generators themselves keep a score margin of 1e-6 on LR/MLP copies. "
             "Coverage: answered share of the agents MACE solved. *No polish*: the same generator answering its "
             "nearest verified candidate as it is (one model call), without the search that shortens it.", "",
             *_header("optimal", "× MACE")]
    lines += _generator_rows(m)
    if "geco" in m:
        g = m["geco"]
        lines.append(f"| GeCo (online, first {g['agents']}) | {_f(g['coverage'])} | {_f(g['validity'])} | "
                     f"{_f(g['optimal_share'])} | - | {_f(g['distance_ratio_median'])} / {_f(g['distance_ratio_p90'])} "
                     f"| {_f(g['mean_changed_features'], '.2f')} | {1e6 * g['s_per_agent_mean']:,.0f} | - | "
                     f"{m['mace']['s_per_agent_mean'] / g['s_per_agent_mean']:,.1f}× |")
    mc = m["mace"]
    lines.append(f"| MACE (certified) | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 / 1.000 | "
                 f"{_f(lab['mean_features_changed'], '.2f')} | {1e6 * mc['s_per_agent_mean']:,.0f} | - | 1× |")
    lines += ["", f"MACE: {mc['s_per_agent_mean']:.3f} s per agent (max {mc['s_per_agent_max']:.2f} s); "
                  f"certified share {_f(mc['certified_share'])}.", ""]
    return "\n".join(lines)


def _header(optimal: str, speed: str) -> list[str]:
    return [f"| method | coverage | validity | {optimal} | {optimal} (unseen x) | ratio median / p90 | changed features | "
            f"µs/agent (batched) | ms single p50 / p99 | {speed} |",
            "|---|---|---|---|---|---|---|---|---|---|"]


def _generator_rows(m: dict[str, Any]) -> list[str]:
    return [f"| {name} | {_f(g['coverage'])} | {_f(g['validity'])} | {_f(g['optimal_share'])} | "
            f"{_f(g['unseen']['optimal_share'])} | {_f(g['distance_ratio_median'])} / "
            f"{_f(g['distance_ratio_p90'])} | {_f(g['mean_changed_features'], '.2f')} | "
            f"{g['us_per_agent_batched']:.0f} | {g['ms_single_p50']:.2f} / {g['ms_single_p99']:.2f} | "
            f"{g['speedup_vs_mace']:,.0f}× |" for name, g in m["generators"].items()]


def _black_box_report(m: dict[str, Any]) -> str:
    c, lab, ref = m["classifier"], m["labels"], m["mace"]
    acc = c.get("test_accuracy")
    lines = [f"# {m['world']}: generators against GeCo (black-box route)", "",
             f"Metrics against GeCo's labels (**reference: {REFERENCE}**). The user's model has no white box, so "
             "MACE cannot read it: the labels are GeCo's answers (a heuristic search, no lower bound), and no answer "
             "of this run is certified optimal. A generator may beat GeCo (distance ratio below 1).", "",
             f"Model test accuracy {_f(acc)}. GeCo labels: {lab['agents']} rejected agents, {lab['n_ok']} answered, "
             f"{lab['n_unknown'] + lab['n_no_recourse']} without an answer (not a proof that none exists); "
             f"{m['train_agents']} train, {m['test_agents']} held out ({m['unseen_test_agents']} with an x not in "
             "train).", "",
             "Within 1% of GeCo: the answer's distance is at most 1.01 times GeCo's. Distance ratio: the answer's "
             "distance over GeCo's. Validity: the user's model accepts the answer and no constraint is broken (of "
             "the answered agents). Coverage: answered share of the agents GeCo answered. *No polish*: the same "
             "generator answering its nearest verified candidate as it is.", "",
             *_header("within 1% of GeCo", "× GeCo")]
    lines += _generator_rows(m)
    lines.append(f"| GeCo labels (reference, not certified) | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 / 1.000 | "
                 f"{_f(lab['mean_features_changed'], '.2f')} | {1e6 * ref['s_per_agent_mean']:,.0f} | - | 1× |")
    lines += ["", f"GeCo: {ref['s_per_agent_mean']:.3f} s per agent (max {ref['s_per_agent_max']:.2f} s). "
                  f"Certified share: {_f(ref.get('certified_share', NOT_APPLICABLE))}.", ""]
    return "\n".join(lines)
