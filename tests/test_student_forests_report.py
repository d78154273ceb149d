"""benchmarks/student_forests.py: its table (one column per corner pool the student scored, a cell run before the
pools were measured shown without them) and its argument checks (the measurement itself is a benchmark)."""

from __future__ import annotations

import pytest

from benchmarks.student_forests import main, parse_pools, report, with_key


def _fit(seed: int, test: float, pooled: float | None) -> dict:
    fit = {"seed": seed, "no_net": {"test": 0.7}, "without": {"test": 0.8},
           "with": {"test": test, "test_rows_median": 256.0}}
    if pooled is not None:
        fit["with_10000"] = {"test": pooled, "test_rows_median": 256.0}
    return fit


def _cell(name: str, pooled: bool) -> dict:
    cell = {"cell": name, "test_agents": 100, "validation_agents": 0, "fresh_agents": 0,
            "student": {"rows": 2_000_000, "rows_remembered": 2_000_000 if pooled else 0,
                        "rows_asked": 20_000 if pooled else 2_020_000, "calls": 4 if pooled else 17, "fit_seconds": 300.0}, "pick_ms": 15.0,
            "fits": [_fit(0, 0.80, 0.84 if pooled else None), _fit(1, 0.82, 0.86 if pooled else None)]}
    if pooled:
        cell["pick_ms_10000"] = 120.0
    return cell


def test_each_pool_is_a_column_and_a_cell_without_it_shows_a_dash():
    text = report([_cell("credit/forest", True), _cell("adult/forest", False)], "python benchmarks/student_forests.py")
    assert "| proposer + student | + student, 10,000 corners |" in text
    assert "| credit/forest | held-out test (100) | 0.700 0.700 (0.700) | 0.800 0.800 (0.800) | 0.800 0.820 (0.810) " \
           "| 0.840 0.860 (0.850) |" in text
    assert "| adult/forest | held-out test (100) | 0.700 0.700 (0.700) | 0.800 0.800 (0.800) | 0.800 0.820 (0.810) | - |" in text
    assert "| 15.0 | 120.0 |" in text and "| 15.0 | - |" in text
    assert "| 2,000,000 (2,000,000), 20,000 in 4 calls, 300 s |" in text  # a rerun's student: its answers remembered
    assert "| 2,000,000 (0), 2,020,000 in 17 calls, 300 s |" in text


def test_distinct_corners_are_the_last_column_where_a_fit_measured_them():
    new = _cell("credit/forest", True)
    for f, v in zip(new["fits"], (0.78, 0.79), strict=True):
        f["with_distinct"] = {"test": v, "test_rows_median": 256.0}
    new["pick_ms_distinct"] = 14.0
    text = report([new, _cell("adult/forest", False)], "python benchmarks/student_forests.py")
    assert "| + student, 10,000 corners | + student, distinct corners |" in text
    assert "| 0.840 0.860 (0.850) | 0.780 0.790 (0.785) |" in text
    assert "| 0.800 0.820 (0.810) | - | - |" in text  # a cell run before: dashes
    assert "| 15.0 | 120.0 | 14.0 |" in text and "| 15.0 | - | - |" in text
    assert "+ student, distinct corners" not in report([_cell("adult/forest", False)], "x")  # no fit measured it: no column


def test_the_report_names_the_budget_its_cells_ran_at():
    one = _cell("credit/forest", False)
    one["budget"] = "1x128"
    assert "Share within 1% of MACE at 1 x 128 (per fit seed" in report([one], "x")
    assert "at 2 x 256 (per fit seed" in report([_cell("credit/forest", False)], "x")  # a cell run before the key


def test_the_first_pool_is_the_plain_column():
    assert [with_key(p, [1000, 10000]) for p in (1000, 10000)] == ["with", "with_10000"]
    assert parse_pools("1000,3000") == [1000, 3000]


@pytest.mark.parametrize("bad", ["1000,x", "0", "1000,,10", "-5"])
def test_a_bad_pool_list_stops_the_run_before_any_fit(bad, tmp_path):
    with pytest.raises(SystemExit, match="--student-pools"):
        main(["--student-pools", bad, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
