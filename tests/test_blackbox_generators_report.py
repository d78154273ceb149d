"""``benchmarks/blackbox_generators.py``'s seed-spread table (``--spread-seeds``): min-max (mean) per method
and budget from the cell's JSON, and nothing for cells that have no spread."""

from __future__ import annotations

from benchmarks.blackbox_generators import spread_table


def _cell(name: str, proposer: list[float], no_net: list[float]) -> dict:
    return {"cell": name, "mace_solved": 36, "spread": {"seeds": [0, 1, 2], "methods": {
        "proposer": {"2x256": proposer, "8x2000": [1.0, 1.0, 1.0]},
        "search_no_net": {"2x256": no_net, "8x2000": [0.5, 0.75, 1.0]}}}}


def test_the_spread_table_gives_each_methods_range_and_mean_over_the_seeds():
    lines = spread_table([_cell("german/forest", [0.75, 0.806, 0.833], [0.694, 0.694, 0.722]),
                          {"cell": "adult/mlp", "mace_solved": 100}])
    rows = [r for r in lines if r.startswith("| german")]
    assert len(rows) == 1 and not any(r.startswith("| adult") for r in lines)
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[:4] == ["german", "forest", "36", "0, 1, 2"]
    assert cells[4:] == ["0.75-0.83 (0.80)", "1.00-1.00 (1.00)", "0.69-0.72 (0.70)", "0.50-1.00 (0.75)"]


def test_no_spread_no_table():
    assert spread_table([{"cell": "german/forest", "mace_solved": 36}]) == []
