"""The report and the plots of ``benchmarks/tabular_generators.py``: the Markdown tables of every cell
(``report``), the learning curves (``plot``) and the time-against-optimality frontier (``plot_frontier``),
and the display names of the methods they show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

METHODS = {"nearest_cfe": "k-NN (no learning)", "named_cfe": "named-CFE (learned)",
           "change_value_fast": "change-and-value, no scan (learned)",
           "change_value_no_net": "change-and-value search, no network (ablation)",
           "change_value": "change-and-value (learned)"}
ONLINE = {"geco": "GeCo (online)", "md_pso": "MD-PSO (online)"}
FRESH_METHODS = ("nearest_cfe", "change_value_no_net", "change_value")


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def report(cells: list[dict[str, Any]], command: str) -> str:
    budgets: dict[int, list[str]] = {}
    for c in cells:
        budgets.setdefault(c["curve"][-1]["labels"], []).append(f"{c['dataset']}/{c['model']}")
    per_cell = ("" if len(budgets) < 2 else " Largest label budget per cell (`--sizes-for`): " + "; ".join(
        f"{n:,} for {', '.join(names)}" for n, names in sorted(budgets.items(), reverse=True)) + ".")
    lines = ["# Learned generators against not learning, real data, MACE labels (`benchmarks/tabular_generators.py`)",
             "", f"Command: `{command}`.{per_cell} Seed 0. Held-out agents: rejected rows of each data set's test split, "
             "labelled by MACE with a certificate (l1, rel_tol 1e-3). Training agents: the training split's "
             "rejected rows, then agents drawn around them (data_gen/perturbed_agents.py), labelled by MACE (rel_tol 1e-2).",
             "", "**optimal**: share of the MACE-solved held-out agents answered validly within 1% of MACE's certified "
             "distance. **valid**: share of answers the real model accepts with no constraint broken. "
             "**µs/agent**: batched, the best of at least 5 runs and 0.25 s of runs with the garbage collector "
             "off, as timeit (GeCo, MD-PSO: one agent per call). **× MACE**: MACE's mean seconds per agent, "
             "collector off too, over ours. **calls**: model calls per answer, median / p95 (one agent per request). "
             "**labels CPU h**: MACE's CPU time for the training labels.", "",
             "## At the largest label budget", "",
             "| data | model | agents | method | labels | optimal | valid | ratio p90 | µs/agent | × MACE | calls med / p95 |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        last = c["curve"][-1]
        entries = [(METHODS[k], last["labels"], m) for k, m in last["methods"].items()]
        entries += [(ONLINE[k], 0, m) for k, m in c["online"].items()]
        for name, n, m in entries:
            lines.append(f"| {c['dataset']} | {c['model']} | {c['test_mace_solved']} | {name} | {n:,} | "
                         f"{_f(m['optimal_share'])} | {_f(m['validity'])} | {_f(m['distance_ratio_p90'])} | "
                         f"{m['us_per_agent_batched']:,.0f} | "
                         # every row against this cell's MACE time (GeCo's and MD-PSO's may come from an earlier run)
                         f"{c['mace']['s_per_agent_mean'] / (m['us_per_agent_batched'] / 1e6):,.0f}× | "
                         f"{m['calls_median']:.0f} / {m['calls_p95']:.0f} |")
        lines.append(f"| {c['dataset']} | {c['model']} | {c['test_mace_solved']} | MACE (certified) | - | 1.000 | 1.000 | "
                     f"1.000 | {1e6 * c['mace']['s_per_agent_mean']:,.0f} | 1× | 0 (white box) |")
    lines += ["", "## Learning curves (optimal share against training labels)", "",
              "| data | model | labels | real rows | labels CPU h | " + " | ".join(METHODS.values()) + " |",
              "|---|---|---:|---:|---:|" + "---:|" * len(METHODS)]
    for c in cells:
        for p in c["curve"]:
            drawn = p.get("agents", p["labels"])  # fewer where the draws found no more new rejected rows
            shown = f"{p['labels']:,}" + (f" ({drawn:,} drawn)" if drawn < p["labels"] else "")
            lines.append(f"| {c['dataset']} | {c['model']} | {shown} | {min(p['labels'], c['real_training_rows']):,} | "
                         f"{p['label_cpu_hours']:.3f} | "
                         + " | ".join(_f(p["methods"][k]["optimal_share"]) for k in METHODS) + " |")
    fresh = [c for c in cells if c.get("fresh", {}).get("methods")]
    if fresh:
        lines += ["", "## On agents never looked at (`--fresh-agents`)", "",
                  "The search's parameters were chosen while looking at the held-out sample above. These are "
                  "further rejected test rows outside it (German has none left), MACE-labelled, answered by the "
                  "generators at the largest label budget.", "",
                  "| data | model | agents (MACE solved) | " + " | ".join(METHODS[k] for k in FRESH_METHODS) + " |",
                  "|---|---|---:|" + "---:|" * len(FRESH_METHODS)]
        for c in fresh:
            f = c["fresh"]
            lines.append(f"| {c['dataset']} | {c['model']} | {f['agents']} ({f.get('mace_solved', '-')}) | "
                         + " | ".join(_f(f["methods"][k]["optimal_share"]) for k in FRESH_METHODS) + " |")
    return "\n".join(lines) + "\n"


def _cell_grid(n_cells: int, cols: int = 4):
    """A matplotlib (Agg) grid of one panel per cell, 4 to a row: (pyplot, figure, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (n_cells + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    return plt, fig, axes


def _save_grid(plt, fig, axes, n_cells: int, path: Path, *, legend_loc: str, legend_size: int = 7) -> None:
    """The grid's spare panels blanked, the legend on the first, written to ``path`` and closed."""
    for ax in list(axes.flat)[n_cells:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=legend_size, loc=legend_loc)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    plt, fig, axes = _cell_grid(len(cells))
    for ax, c in zip(axes.flat, cells, strict=False):
        n = [p["labels"] for p in c["curve"]]
        for k, name in METHODS.items():
            ax.plot(n, [p["methods"][k]["optimal_share"] for p in c["curve"]], marker="o", label=name)
        for k, name in ONLINE.items():
            if k in c["online"]:
                ax.axhline(c["online"][k]["optimal_share"], ls="--", lw=1, label=name, color="grey" if k == "geco" else "tan")
        ax.set_xscale("log")
        drawn = [p.get("agents", p["labels"]) for p in c["curve"]]  # fewer where the draws ran out (COMPAS)
        ax.set_xticks(n, [f"{v:,}" + (f"\n({d:,})" if d < v else "") for v, d in zip(n, drawn, strict=True)])
        ax.minorticks_off()
        ax.set_ylim(0.5, 1.02)  # the curves differ near 1; a method below 0.5 leaves the plot at the bottom
        ax.set_title(f"{c['dataset']} × {c['model']}", pad=22)
        ax.set_xlabel("training labels")
        ax.set_ylabel("within 1% of MACE")
        top = ax.secondary_xaxis("top")  # the same points, labelled by what their labels cost
        top.set_xticks(n, [f"{p['label_cpu_hours']:.2g} h" for p in c["curve"]], fontsize=7)
        top.minorticks_off()
        top.set_xlabel("labelling CPU hours", fontsize=7)
    _save_grid(plt, fig, axes, len(cells), path, legend_loc="lower right")


TARGET_SPEEDUP = 200.0  # the target: this many times faster than MACE per agent


def plot_frontier(cells: list[dict[str, Any]], path: Path) -> None:
    """Per cell, each method at the largest label budget as one point: time per agent (log, batched;
    GeCo and MD-PSO one agent per call) against the share within 1% of MACE, with MACE itself at
    (its time, 1) and the 200x-MACE line. Up and to the left is better."""
    plt, fig, axes = _cell_grid(len(cells))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, c in zip(axes.flat, cells, strict=False):
        top = c["curve"][-1]["methods"]
        points = [(name, top[k]) for k, name in METHODS.items()] + \
                 [(name, c["online"][k]) for k, name in ONLINE.items() if k in (c.get("online") or {})]
        for i, (name, m) in enumerate(points):
            ax.scatter(m["us_per_agent_batched"], m["optimal_share"], s=28, color=colours[i % len(colours)],
                       marker="o" if i < len(METHODS) else "s", label=name, zorder=3)
        mace_us = 1e6 * c["mace"]["s_per_agent_mean"]
        ax.scatter(mace_us, 1.0, marker="*", s=90, color="black", label="MACE (certified)", zorder=3)
        ax.axvline(mace_us / TARGET_SPEEDUP, ls=":", color="black", lw=1, label=f"{TARGET_SPEEDUP:.0f}× MACE")
        ax.set_xscale("log")
        ax.set_ylim(0.5, 1.02)
        last = c["curve"][-1]
        ax.set_title(f"{c['dataset']} × {c['model']} ({min(last['labels'], last.get('agents', last['labels'])):,} labels)")
        ax.set_xlabel("µs per agent")
        ax.set_ylabel("within 1% of MACE")
    _save_grid(plt, fig, axes, len(cells), path, legend_loc="lower left", legend_size=6)
