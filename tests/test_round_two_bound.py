"""benchmarks/round_two_bound.py: its argument checks and its table (the measurement itself is a benchmark)."""

from __future__ import annotations

import pytest

from benchmarks.round_two_bound import main, report


def _cell(name: str, shares: list[float]) -> dict:
    return {"cell": name, "test_agents": 36, "methods": {"proposer": {"generator": "saved", "budgets": [
        {"round_two_rows": w, "optimal_share": s, "rows_median": 100.0 + w, "rows_max": 128 + w}
        for w, s in zip((128, 512, 2000), shares, strict=True)]}}}


def test_the_table_has_a_column_per_round_two_width_and_the_widest_rows():
    text = report([_cell("german/forest", [0.861, 0.889, 0.9])], "python benchmarks/round_two_bound.py")
    assert "| 2 x 256 (W = 128) | W = 512 | W = 2000 | rows median at the widest |" in text
    assert "| german/forest (36) | proposer | 0.861 | 0.889 | 0.900 | 2100 |" in text


@pytest.mark.parametrize("argv, message", [(["--cells", "mars/forest"], "--cells: unknown cell 'mars/forest'"),
                                           (["--methods", "magic"], "--methods: expected some of")])
def test_bad_arguments_name_the_flag(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)
