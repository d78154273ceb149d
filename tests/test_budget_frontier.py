"""benchmarks/budget_frontier.py: its leads, its page and plot, its resume and its argument checks (the measurement
itself is a benchmark: it needs the saved fits)."""

from __future__ import annotations

import json

import pytest

import benchmarks.budget_frontier as bf


def _run(calls: int, rows: int, share: float, median: float) -> dict:
    return {"budget": {"calls": calls, "rows": rows}, "optimal_share": share, "validity": 1.0, "rows_median": median,
            "rows_max": rows, "calls": calls, "ms_per_agent": 1.0}


def _cell(name: str = "adult/forest") -> dict:
    table = [_run(1, 128, 0.80, 120), _run(2, 256, 0.96, 256)]
    proposer = [_run(1, 128, 0.70, 110), _run(2, 256, 0.91, 250)]
    no_net = [_run(1, 128, 0.55, 100), _run(2, 256, 0.90, 240)]
    return {"cell": name, "fit": 0, "generator": {"name": "proposer_student_self-both", "student_use": "both"},
            **bf._asked(bf.parse(["--budgets", "1x128,2x256"])),
            "sets": {"held-out": {"agents": 100, "mace_solved": 100,
                                  "methods": {bf.TABLE: table, "proposer": proposer, bf.NO_NET: no_net}}}}


def test_the_lead_is_the_table_generator_minus_the_search_without_the_network_budget_by_budget():
    assert bf.leads(_cell(), "held-out") == pytest.approx([0.25, 0.06])


def test_the_page_has_a_row_per_method_and_the_lead_and_the_plot_is_drawn(tmp_path):
    page = bf.report([_cell()], "python benchmarks/budget_frontier.py")
    assert "## adult/forest (fit 0; table generator `proposer_student_self-both`, student_use both)" in page
    assert "| method | 1 x 128 | 2 x 256 |" in page
    assert "| table generator | 0.8000 (120) | 0.9600 (256) |" in page
    assert "| search_no_net | 0.5500 (100) | 0.9000 (240) |" in page
    assert "| lead over the search without the network | +25.00 | +6.00 |" in page
    bf.plot([_cell()], tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    two = _cell("credit/forest")
    two["sets"]["fresh"] = two["sets"]["held-out"]  # a second row of panels, empty where a cell has no such agents
    bf.plot([_cell(), two], tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000


def test_a_cell_written_already_is_not_answered_again(tmp_path, monkeypatch):
    out = tmp_path / "frontier"
    out.mkdir()
    (out / "adult_forest.json").write_text(json.dumps(_cell()))

    def never(cell, args):
        raise AssertionError(f"{cell} answered again")

    monkeypatch.setattr(bf, "run_cell", never)
    bf.main(["--cells", "adult/forest", "--out", str(out), "--budgets", "1x128,2x256"])
    assert json.loads((tmp_path / "frontier.json").read_text())[0]["cell"] == "adult/forest"
    assert "+25.00" in (tmp_path / "frontier.md").read_text()
    assert (tmp_path / "frontier.png").exists()
    monkeypatch.setattr(bf, "run_cell", lambda cell, args: _cell(cell) | {"fit": 7})  # --force: answered again
    bf.main(["--cells", "adult/forest", "--out", str(out), "--budgets", "1x128,2x256", "--force"])
    assert json.loads((out / "adult_forest.json").read_text())["fit"] == 7
    monkeypatch.setattr(bf, "run_cell", lambda cell, args: _cell(cell) | {"fit": 8})  # other budgets: answered again
    bf.main(["--cells", "adult/forest", "--out", str(out), "--fit", "7"])
    assert json.loads((out / "adult_forest.json").read_text())["fit"] == 8


@pytest.mark.parametrize("argv, message", [
    (["--cells", "mars/forest"], "--cells: 'mars/forest' has no table generator"),
    (["--budgets", "2x256,lots"], "--budgets: expected RxN"),
    (["--fresh-agents", "-1"], "--val-agents / --fresh-agents"),
])
def test_bad_arguments_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        bf.parse(argv)
    assert message in capsys.readouterr().err
