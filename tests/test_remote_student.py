"""benchmarks/remote_student.py: its table (a row per cell and generator, the table generator's setting beside it, the
repeats' p50 in brackets) and its argument check (the timing itself is a benchmark; the answers' sameness under
the faster picks is tested in tests/test_student.py and tests/test_corners.py)."""

from __future__ import annotations

import pytest

from benchmarks.remote_student import SETTINGS, main, report


def test_each_generator_is_a_row_and_the_tables_says_its_setting():
    name, setting = SETTINGS["credit/forest"]
    result = {"cell": "credit/forest", "fit": 0, "agents": 100, "latency_ms": 20.0, "load_average": 0.1,
              "generator": {"name": name, **setting},
              "methods": {name: {"p50_ms": 55.1, "p50_runs": [54.6, 55.7], "p99_ms": 156.2},
                          "proposer": {"p50_ms": 48.4, "p50_runs": [48.4, 48.4], "p99_ms": 55.3},
                          "geco": {"p50_ms": 1920.2, "p50_runs": [1920.2], "p99_ms": 2360.5}}}
    text = report([result])
    assert ("| credit/forest | proposer_student_self-both-t0.1-near128-values (the table's) | student_use both, "
            "student_threshold 0.1, student_near_picks 128, self_label_values True | 55.1 (54.6, 55.7) | 156.2 |") in text
    assert "| credit/forest | proposer |  | 48.4 (48.4, 48.4) | 55.3 |" in text
    assert "| credit/forest | geco |  | 1920.2 (1920.2) | 2360.5 |" in text
    assert "100 held-out agents a cell, fit seed 0, 20 ms a call" in text


def test_a_cell_without_a_student_setting_stops_before_any_work():
    with pytest.raises(SystemExit, match="--cells: 'compas/mlp' has no setting here"):
        main(["--cells", "compas/mlp"])


def test_each_cell_times_a_fit_that_a_committed_command_saves():
    """The saved fits this script loads are written by self_labels.py (its ``saved_name`` at the cell's setting) or
    by blackbox_generators.py's spread (a method of its ``METHODS``): a fresh clone can make every one."""
    import argparse

    from benchmarks.blackbox_generators import METHODS
    from benchmarks.self_labels import SELF_LABELS, STUDENT_DEFAULTS, saved_name

    for cell, (name, setting) in SETTINGS.items():
        if name.startswith("proposer_student_self"):
            args = argparse.Namespace(**{**STUDENT_DEFAULTS, "self_labels": SELF_LABELS, **setting})
            assert saved_name("with", args) == name, cell
        else:
            assert name in METHODS, cell


def test_a_missing_fit_names_the_command_that_writes_it(tmp_path):
    """Stopped before any labelling, with the command for the cell's missing fit: self_labels.py at the cell's
    setting for the student with self-labels, the spread (the committed seeds) for the others."""
    from benchmarks.remote_student import fit_command

    with pytest.raises(SystemExit, match="proposer_student_self-both-t0.1-near128-values is missing: fit it first with\n"
                                         "    python benchmarks/self_labels.py --cells credit/forest --student-use both "
                                         "--student-threshold 0.1 --student-near-picks 128 --self-label-values --seeds 0 "
                                         "--generators"):
        main(["--cells", "credit/forest", "--generators", str(tmp_path)])
    assert fit_command("german/forest", "proposer_student_round_two", 0, "g") == (
        "python benchmarks/blackbox_generators.py --cells german/forest --spread-seeds 0,1,2,3 "
        "--spread-methods proposer,search_no_net,proposer_student_round_two --generators g")
    assert fit_command("credit/mlp", "proposer_surrogates", 0, "g") == (
        "python benchmarks/blackbox_generators.py --cells credit/mlp --spread-seeds 0,1,2,3 "
        "--spread-methods proposer,search_no_net,proposer_surrogates --generators g")
    assert fit_command("adult/forest", "proposer", 7, "g") == (
        "python benchmarks/blackbox_generators.py --cells adult/forest --spread-seeds 7 --generators g")
