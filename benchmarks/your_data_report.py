"""The report of ``benchmarks/your_data.py``: one row per table x model, the deployment-size target."""

from __future__ import annotations

from typing import Any

TARGET_CERTIFIED, TARGET_MEDIAN_S = 0.95, 10.0  # issue 54: MACE certified on >= 95% of agents, median <= 10 s


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _gen(c: dict[str, Any], name: str) -> str:
    g = c.get("generators", {}).get(name)
    if g is None:
        return "- | - | -"
    solved = c["mace"]["solved"]
    broke = g.get("broke_constraints", 0)
    share = g.get("valid_optimal_share", g["optimal_share"] if not broke and g["validity"] == 1.0 else None)
    if share is None:
        return "- (rerun the cell) | - | -"

    oracle = f"{g['oracle_accepted']}/{g['answered'] - broke}" + (f" (+{broke} not a record)" if broke else "")
    return (f"{_f(share, '.2f')} ({round(share * solved)}/{solved}) | "
            f"{oracle} | {g['us_per_agent_batched']:,.0f}")


def report(cells: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Your data: ISLP Default and Wage x six model families, each in a Pipeline", "",
        f"`{command}` (seed 0; 2 CPU cores shared with other work, wall-clock times). Script and protocol: "
        "`benchmarks/your_data.py`; walkthrough: `docs/your_data.md`.", "",
        "Every model is `Pipeline(ColumnTransformer([OneHotEncoder, OrdinalEncoder (Wage's education), "
        "StandardScaler]), model)` fitted by the script on the 80% training split; the agents are rejected rows "
        "of the 20% test split. **Agreement**: rows of the whole table on which `build_user_world` compared the "
        "white box with the Pipeline's own `predict_proba` (all agreed; the count at the decision boundary is "
        "in brackets). **MACE**: certified (optimum within 0.1%, or no recourse proved) / agents; seconds per "
        "explanation, one process, after an untimed warm-up. **Generators**: trained on MACE's answers for "
        "the training agents (column *labels*: solved / drawn); *≤1%*: share of MACE-solved agents answered "
        "within 1% of MACE's distance by a record the user's Pipeline accepts; *oracle*: answers the user's own Pipeline accepts / answers that are "
        "records (an answer breaking a constraint, e.g. a one-hot group at 0.5, is no record: counted apart); µs per "
        "agent batched (warmed up, best of ≥ 5 runs). **DiCE random**: its defaults, `total_CFs=1`, on the "
        "Pipeline itself: valid (accepted by the Pipeline, no constraint broken) / agents, median ratio of its "
        "distance to MACE's (MACE's normalised l1 via the world's encoding), seconds per agent (median).", "",
        "| table | model | route | agreement (boundary) | test acc. | agents | MACE certified | MACE s median / p95 "
        "| MACE answers accepted by the Pipeline | labels | change_value ≤1% | oracle | µs/agent | nearest_cfe ≤1% "
        "| oracle | µs/agent | DiCE valid | DiCE ratio median | DiCE s/agent |",
        "|---|---|---|---|---:|---:|---|---|---|---|---|---|---:|---|---|---:|---|---:|---:|",
    ]
    for c in cells:
        table, model = c["cell"].split("/")
        a = c["agreement"]
        head = f"| {table} | {model} | {c['route']} | {a['rows']:,} ({a['boundary']}) | {c['test_accuracy']:.3f} |"
        if "mace" not in c:
            lines.append(head + f" - | {c.get('skipped', '-')} |" + " - |" * 12)
            continue
        m, lab, d = c["mace"], c["training_labels"], c.get("dice_random")
        dice = (f"{d['valid']}/{d['agents']} | {_f(d['ratio_median'], '.2f')} | {d['s_median']:.2f}"
                if d else "- | - | -")
        lines.append(
            head + f" {c['agents']} | {m['certified']}/{m['agents']} | {m['s_median']:.2f} / {m['s_p95']:.2f} | "
            f"{m['oracle_accepted']}/{m['oracle_checked']} | {lab['solved']}/{lab['agents']} | "
            f"{_gen(c, 'change_value')} | {_gen(c, 'nearest_cfe')} | {dice} |")
    lines += ["", "## The deployment-size target (200 trees of depth 6)", "",
              f"Target: MACE certified on ≥ {TARGET_CERTIFIED:.0%} of agents, median ≤ {TARGET_MEDIAN_S:g} s per "
              "explanation.", ""]
    big = [c for c in cells if c["cell"].split("/")[1].endswith("200") and "mace" in c]
    for c in big:
        m = c["mace"]
        met = m["certified_share"] >= TARGET_CERTIFIED and m["s_median"] <= TARGET_MEDIAN_S
        lines.append(f"- `{c['cell']}`: certified {m['certified']}/{m['agents']} ({m['certified_share']:.0%}), "
                     f"median {m['s_median']:.2f} s, p95 {m['s_p95']:.2f} s, max {m['s_max']:.2f} s: "
                     f"**{'met' if met else 'missed'}**.")
    if not big:
        lines.append("- (no deployment-size cell in this run)")
    lines += ["", "## Per cell", ""]
    for c in cells:
        extra = [f"fit {c['seconds']['fit']:.1f} s", f"build_user_world {c['seconds']['build_user_world']:.1f} s"]
        if "cell" in c["seconds"]:
            extra.append(f"cell {c['seconds']['cell']:.0f} s")
        if "load_average" in c:
            extra.append(f"load average at the end {c['load_average'][0]:.1f}")
        if "finished_at" in c:
            extra.append(f"finished {c['finished_at']}" + (f" (code {c['code']})" if c.get("code") else ""))
        lines.append(f"- `{c['cell']}`: {c['report']}; {', '.join(extra)}.")
        if c.get("notes"):
            lines.append(f"  Notes: {'; '.join(c['notes'])}.")
        if "mace" in c:
            m, d = c["mace"], c.get("dice_random") or {}
            lines.append(f"  MACE: {m['solved']} solved, {m['no_recourse']} no recourse, {m['unknown']} unknown; "
                         f"mean {m['s_mean']:.2f} s, max {m['s_max']:.2f} s. Rejected test rows: "
                         f"{c['rejected_test_rows']}. Training labels: {c['training_labels']['real_rejected_rows']} "
                         f"real rejected rows + drawn agents, {c['training_labels']['mace_cpu_seconds']:.0f} MACE "
                         "CPU s.")
            for name, g in c.get("generators", {}).items():
                calls = f", model calls median {g['calls_median']:.0f}" if "calls_median" in g else ""
                fails = g.get("single_failures") or {}
                fail = (f"; answering one agent alone raised on {len(fails)} agents (agent {next(iter(fails))}: "
                        f"{next(iter(fails.values()))})" if fails else "")
                lines.append(f"  {name}: coverage {_f(g['coverage'])}, validity {_f(g['validity'])}, ratio median "
                             f"{_f(g['distance_ratio_median'])} / p90 {_f(g['distance_ratio_p90'])}, single agent "
                             f"{_f(g['ms_single_p50'], '.2f')} ms p50{calls}{fail}, fit "
                             f"{g['fit_seconds']:.1f} s"
                             + (f"; {g['broke_constraints']} answers breaking a constraint (agents "
                                f"{g.get('broken_rows')})" if g.get("broke_constraints") else "")
                             + (f"; the Pipeline rejects the white box's accepted answer for agents "
                                f"{g['oracle_rejected_rows']}" if g.get("oracle_rejected_rows") else "") + ".")
            if d:
                lines.append(f"  DiCE random: answered {d['answered']}, accepted by the Pipeline "
                             f"{d['accepted_by_pipeline']}, constraint violations {d['violations']}, within 1% of "
                             f"MACE {_f(d['within_1pct'], '.2f')}, ratio p90 {_f(d['ratio_p90'], '.2f')}, mean "
                             f"{d['s_mean']:.2f} s; errors {d['errors']}"
                             + (f" (first: {d['first_error']})" if d.get("first_error") else "") + ".")
    return "\n".join(lines) + "\n"
