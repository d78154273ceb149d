"""benchmarks/auto_setting.py: its fit record, its page, its resume and its argument checks (the measurement itself
is a benchmark: it fits every cell)."""

from __future__ import annotations

import argparse
import json

import pytest

import benchmarks.auto_setting as au


def _run(share: float) -> dict:
    return {"budget": {"calls": 2, "rows": 256}, "optimal_share": share, "validity": 1.0, "rows_median": 250.0,
            "rows_max": 256, "calls": 2, "ms_per_agent": 1.0}


def _cell(name: str = "credit/forest", **asked) -> dict:
    info = {"setting": {"chosen": {"surrogate": False, "student_agents": 10000, "student_use": "both",
                                   "student_pool": 10000, "student_threshold": 0.2, "self_labels": 1500},
                        "why": "the model answers in steps"},
            "steps": {"share": 1.0, "rows": 512}, "student": {"rows": 2_000_000}, "self_labels": {"rows": 1_800_000}}
    args = argparse.Namespace(fit=0, budgets="2x256", fresh_agents=400, latency_ms=20.0,
                                                      timed_agents=100, repeats=2)
    return {"cell": name, **au.asked(args), **asked, "agents": 100,
            "table": {"name": "proposer_student_self-both-t0.1-near128", "student_threshold": 0.1},
            "auto": {"seconds": 150.0, "unlabelled": 2300, **au.fit_rows(info)},
            "runs": {"auto": [_run(0.94)], "table": [_run(0.95)], au.NO_NET: [_run(0.78)]},
            "fresh": {"agents": 400, "runs": {"auto": [_run(0.9)], "table": [_run(0.905)], au.NO_NET: [_run(0.6375)]}},
            "p50_ms": {"auto": 58.3, "table": 53.8}}


def test_the_fit_record_adds_the_rows_of_every_part():
    rec = _cell()["auto"]
    assert rec["rows"] == 512 + 2_000_000 + 1_800_000 and rec["rows_by_part"]["surrogate"] == 0
    assert rec["chosen"]["student_use"] == "both" and not rec["surrogate_used"] and rec["steps_share"] == 1.0


def test_the_page_has_a_row_per_cell_and_says_why():
    page = au.report([_cell()], argparse.Namespace(cells="credit/forest", budgets="2x256", fit=0))
    row = ("| credit/forest | 100 | 1.00 | student (10,000 agents), both, 1,500 self-labels | 3,800,512 | 2.5 | "
           "proposer_student_self-both-t0.1-near128 | 0.940 | 0.950 | 0.780 | 400: 0.9000 / 0.9050 / 0.6375 | 58.3 / 53.8 |")
    assert row in page
    assert "- credit/forest: the model answers in steps" in page


def test_a_cell_written_already_is_kept_unless_asked_again(tmp_path, monkeypatch):
    out = tmp_path / "auto"
    out.mkdir()
    (out / "credit_forest.json").write_text(json.dumps(_cell()))

    def never(cell, args):
        raise AssertionError(f"{cell} answered again")

    monkeypatch.setattr(au, "run_cell", never)
    argv = ["--cells", "credit/forest", "--out", str(out), "--fresh-agents", "400"]
    au.main(argv)
    assert "0.940" in (tmp_path / "auto.md").read_text()
    monkeypatch.setattr(au, "run_cell", lambda cell, args: _cell(cell, fit=7))
    au.main([*argv, "--force"])  # --force: fitted and answered again
    assert json.loads((out / "credit_forest.json").read_text())["fit"] == 7
    monkeypatch.setattr(au, "run_cell", lambda cell, args: _cell(cell, fit=8))
    au.main(["--cells", "credit/forest", "--out", str(out)])  # other settings (no fresh agents): answered again
    assert json.loads((out / "credit_forest.json").read_text())["fit"] == 8


@pytest.mark.parametrize("argv, message", [
    (["--cells", "mars/forest"], "--cells: unknown mars/forest"),
    (["--budgets", "2x256,lots"], "--budgets: expected RxN"),
    (["--fresh-agents", "-1"], "--fresh-agents: must be >= 0"),
    (["--repeats", "0"], "--repeats: must be >= 1"),
])
def test_bad_arguments_name_the_flag(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        au.main([*argv, "--out", str(tmp_path / "x")])
    assert message in capsys.readouterr().err + str(err.value)
