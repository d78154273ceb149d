"""benchmarks/self_labels.py: its tables (the shares over fits, each self-label variant's cost and quality) and the
unlabelled agents it picks (the measurement itself is a benchmark)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks.self_labels import report, unlabelled_agents


def _info(answered: int, seconds: float) -> dict:
    return {"agents": 1500, "answered": answered, "calls": 96, "rows": 1_500_000, "seconds": seconds, "kept_blocks": 0}


def _fit(seed: int, fresh: float) -> dict:
    fit = {"seed": seed, "no_net": {"test": 0.7, "fresh": 0.6}, "without": {"test": 0.88, "fresh": 0.71},
           "without_self": {"test": 0.81, "fresh": fresh}, "with": {"test": 0.92, "fresh": 0.81},
           "with_self": {"test": 0.91, "fresh": fresh + 0.05},
           "without_self_info": _info(1500, 96.0), "with_self_info": _info(1498, 150.0)}
    if seed == 0:
        fit["without_self_quality"] = {"agents": 1000, "within_1pct": 0.951, "found": 1.0}
    return fit


def test_the_shares_are_min_max_mean_over_fits_and_the_costs_means():
    cell = {"cell": "credit/forest", "budget": "2x256", "labels": 500, "unlabelled": 1500,
            "agents": {"test": 100, "fresh": 400}, "fits": [_fit(0, 0.79), _fit(1, 0.81)]}
    text = report([cell], "python benchmarks/self_labels.py")
    assert ("| credit/forest | fresh real (400) | 0.600-0.600 (0.600) | 0.710-0.710 (0.710) | 0.790-0.810 (0.800) "
            "| 0.810-0.810 (0.810) | 0.840-0.860 (0.850) |") in text
    assert "| credit/forest | proposer | 1,500 | 1500 | 96, 1,500,000 | 96 | 0.951 of 1000 |" in text
    assert "| credit/forest | proposer + student | 1,500 | 1498 | 96, 1,500,000 | 150 | - |" in text
    assert "validation" not in text.split("| cell | variant")[0].split("|---|")[-1]  # no agents of that set: no row


def test_a_fit_whose_self_labels_were_kept_is_left_out_of_the_costs():
    """Self-labels answered from an earlier run's memory asked nothing: the costs are the means of the fits that
    asked, and the row says how many those were."""
    fits = [_fit(0, 0.79), _fit(1, 0.81)]
    fits[0]["without_self_info"] = {**_info(1500, 0.0), "calls": 0, "rows": 0, "kept_blocks": 12}
    for f in fits:
        f["with_self_info"] = {**_info(1498, 0.0), "calls": 0, "rows": 0, "kept_blocks": 12}
    cell = {"cell": "credit/forest", "budget": "2x256", "labels": 500, "unlabelled": 1500,
            "agents": {"test": 100, "fresh": 400}, "fits": fits}
    text = report([cell], "python benchmarks/self_labels.py")
    assert ("| credit/forest | proposer | 1,500 | 1500 | 96, 1,500,000 | 96 (1 of 2 fits; the others' self-labels kept "
            "from an earlier run) | 0.951 of 1000 |") in text
    assert "| credit/forest | proposer + student | 1,500 | 1498 | kept from an earlier run | - | - |" in text


def test_unlabelled_agents_are_real_rejected_rows_past_the_labels():
    from tests.tabular_worlds import german_rejected

    world, neg = german_rejected()

    class Data:
        X_train = neg

    class C:
        build = argparse.Namespace(world=world, data=Data)

    args = argparse.Namespace(seed=0, val_agents=0)
    order = neg[np.random.default_rng(0).permutation(len(neg))]
    U = unlabelled_agents(C, order[:10], 20, args)
    assert U.shape == (20, neg.shape[1])
    assert np.array_equal(U, order[10:30])  # the seeded order, the labelled agents left out


def test_another_budget_writes_files_of_its_own():
    from benchmarks.self_labels import result_names

    assert result_names("2x256") == ("", "self_labels.md")
    assert result_names("8x2000") == ("-8x2000", "self_labels_8x2000.md")
    assert result_names("2x256", {"student_members": 2, "student_use": "both"}) == ("-m2-both", "self_labels_m2-both.md")
    assert result_names("8x2000", {"student_use": "both"}) == ("-8x2000-both", "self_labels_8x2000-both.md")
    assert result_names("2x256", {"student_use": "both", "student_threshold": 0.1, "student_near_picks": 128,
                                  "student_members": 1}) == ("-both-t0.1-near128", "self_labels_both-t0.1-near128.md")
    assert result_names("2x256", {"student_use": "both", "self_label_values": True}, 6000) == (
        "-both-values-n6000", "self_labels_both-values-n6000.md")  # another count of self-labels: its own files
    assert result_names("2x256", None, 1500) == ("", "self_labels.md")
    cell = {"cell": "credit/forest", "budget": "8x2000", "labels": 500, "unlabelled": 1500,
            "agents": {"test": 100, "fresh": 400}, "fits": [_fit(0, 0.79)]}
    assert "at 8 x 2000 (round trips x rows)" in report([cell], "python benchmarks/self_labels.py --budget 8x2000")


def test_a_rerun_keeps_the_fits_of_the_same_setting_only(tmp_path):
    from benchmarks.self_labels import kept_fits

    setting = {"cell": "credit/forest", "budget": "2x256", "labels": 500, "unlabelled": 1500,
               "agents": {"test": 100, "fresh": 400}}
    path = tmp_path / "credit_forest.json"
    path.write_text(json.dumps({**setting, "student": {"fit_seconds": 1.0}, "fits": [_fit(0, 0.79), _fit(1, 0.81)]}))
    out = {**setting, "fits": []}
    kept = kept_fits(path, out)
    assert sorted(kept) == [0, 1] and kept[1]["without_self"]["fresh"] == 0.81
    assert out["student"] == {"fit_seconds": 1.0}
    assert kept_fits(path, {**setting, "fits": []}, force=True) == {}
    assert kept_fits(path, {**setting, "unlabelled": 6000, "fits": []}) == {}  # another setting: run again
    assert kept_fits(tmp_path / "none.json", {**setting, "fits": []}) == {}
    # saved before the student's setting was kept: the default student's, not another's
    assert sorted(kept_fits(path, {**setting, "student_members": 1, "student_use": "round_one", "fits": []})) == [0, 1]
    assert kept_fits(path, {**setting, "student_members": 2, "fits": []}) == {}
    assert kept_fits(path, {**setting, "student_use": "both", "fits": []}) == {}
    assert kept_fits(path, {**setting, "student_threshold": 0.1, "fits": []}) == {}


def test_a_saved_fit_names_its_count_of_self_labels_where_it_is_not_1500():
    """Fits with 6,000 self-labels are saved beside the 1,500's, not over them (remote_student.py and misses.py
    load them by name)."""
    from benchmarks.self_labels import STUDENT_DEFAULTS, saved_name

    both = {**STUDENT_DEFAULTS, "student_use": "both", "self_label_values": True}
    assert saved_name("with", argparse.Namespace(**both, self_labels=6000)) == "proposer_student_self-both-values-n6000"
    assert saved_name("with", argparse.Namespace(**both, self_labels=1500)) == "proposer_student_self-both-values"
    assert saved_name("without", argparse.Namespace(**both, self_labels=6000)) == "proposer_self-n6000"
    assert saved_name("without", argparse.Namespace(**both, self_labels=1500)) == "proposer_self"


def test_a_run_of_one_variant_reports_that_variant_alone():
    """``--variants with``: the fits hold no proposer without the student; its columns read "-", it has no cost row."""
    fits = [_fit(0, 0.79), _fit(1, 0.81)]
    for f in fits:
        for k in ("without", "without_self", "without_self_info", "without_self_quality"):
            f.pop(k, None)
    cell = {"cell": "adult/forest", "budget": "2x256", "labels": 500, "unlabelled": 6000,
            "agents": {"test": 100, "fresh": 400}, "fits": fits}
    text = report([cell], "python benchmarks/self_labels.py --variants with")
    assert "| adult/forest | fresh real (400) | 0.600-0.600 (0.600) | - | - | 0.810-0.810 (0.810) | 0.840-0.860 (0.850) |" in text
    assert "| adult/forest | proposer + student | 6,000 |" in text
    assert "| adult/forest | proposer |" not in text


def test_an_unknown_variant_stops_before_any_work():
    from benchmarks.self_labels import main

    with pytest.raises(SystemExit, match="--variants: expected some of without, with, got 'student'"):
        main(["--variants", "student"])
