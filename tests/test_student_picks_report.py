"""benchmarks/student_picks.py: its table (a row per cell, agent set and pool, the p50 ratio of one stage to the
stages) and its argument check (the timing itself is a benchmark; the picks' equality is tested in
tests/test_student.py against a loop over the whole pool)."""

from __future__ import annotations

import pytest

from benchmarks.student_picks import main, report


def _timing(one: float, staged: float) -> dict:
    return {"one_stage_p50": one, "one_stage_p90": one + 5, "one_stage_mean": one + 1,
            "staged_p50": staged, "staged_p90": one + 6, "staged_mean": staged + 20, "same_picks": True}


def test_each_set_and_pool_is_a_row_with_its_ratio():
    cell = {"cell": "credit/forest", "stage_first": 256, "stage_growth": 8,
            "sets": {"test": {"agents": 100, "1000": _timing(14.0, 16.0), "10000": _timing(116.0, 29.0)},
                     "fresh": {"agents": 400, "10000": _timing(120.0, 30.0)}}}
    text = report([cell], "python benchmarks/student_picks.py")
    assert "the nearest 256 corners, then 8 times more up to the pool" in text
    assert "| credit/forest | test (100) | 1,000 | 14.0 / 19.0 / 15.0 | 16.0 / 20.0 / 36.0 | 0.9x |" in text
    assert "| credit/forest | test (100) | 10,000 | 116.0 / 121.0 / 117.0 | 29.0 / 122.0 / 49.0 | 4.0x |" in text
    assert "| credit/forest | fresh (400) | 10,000 |" in text and "| credit/forest | fresh (400) | 1,000 |" not in text


def test_a_bad_pool_list_stops_before_any_fit():
    with pytest.raises(SystemExit, match="--pools: expected comma-separated counts >= 1"):
        main(["--pools", "1000,ten"])
