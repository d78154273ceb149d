"""benchmarks/cfrl_budget.py's tables and plot from saved runs (no alibi needed: the runs are made up)."""

from __future__ import annotations

import matplotlib.image as mpimg

from benchmarks.cfrl_budget import plot, report, run_label


def cell(name: str, machine: str, steps: list[int], valid: list[float], ratio: list[float | None],
         device: str = "cpu") -> dict:
    return {"cell": name, "agents": 50, "machine": machine, "device": device,
            "curve": [{"steps": s, "train_seconds": s / 40, "train_model_calls": s + 9, "valid": v,
                       "ratio_median": r, "within_1pct": 0.0} for s, v, r in zip(steps, valid, ratio, strict=True)]}


RUNS = [
    cell("german/mlp", "", [2000, 100_000], [0.9, 0.98], [9.3, 9.05]),
    cell("adult/mlp", "lent H200 machine, its CPUs alone", [2000, 25_578], [1.0, 0.98], [8.7, 1.9]),
    cell("adult/mlp", "lent H200 machine", [2000, 6_786], [0.98, 1.0], [8.1, 5.2], device="cuda"),
    cell("compas/mlp", "lent H200 machine, its CPUs alone", [2000, 27_598], [0.0, 0.0], [None, None]),
]


def test_report_has_a_row_per_checkpoint_and_a_dash_where_nothing_was_valid():
    md = report(RUNS)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == sum(len(c["curve"]) for c in RUNS)
    assert "| compas | mlp | lent H200 machine, its CPUs alone, torch on cpu | 50 | 27,598 |" in md
    assert all(line.split("|")[9].strip() == "-" for line in rows if "compas" in line)
    assert "100,000" in md and "9.05" in md


def test_run_labels_tell_the_runs_of_a_cell_apart():
    labels = [run_label(c) for c in RUNS]
    assert labels[0] == "2 cores, 100,000 steps"
    assert labels[1] == "GPU machine, its CPUs, 25,578 steps"
    assert labels[2] == "GPU machine, its GPU, 6,786 steps"
    assert len(set(labels)) == len(labels)


def test_plot_draws_every_cell_even_one_never_valid(tmp_path):
    # a cell with no valid answer has no distance: a log axis over no value used to raise
    path = tmp_path / "curve.png"
    plot(RUNS, path)
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 600
