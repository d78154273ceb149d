"""``benchmarks/blackbox_generators.py``'s seed-spread table (``--spread-seeds``): min-max (mean) per method
and budget from the cell's JSON, and nothing for cells that have no spread; ``--refit`` / ``--rescore``'s
argument checks."""

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


def test_a_method_one_cells_spread_did_not_fit_is_a_dash_in_that_row():
    mlp = _cell("german/mlp", [0.9, 0.95, 1.0], [0.3, 0.3, 0.3])
    mlp["spread"]["methods"]["proposer_surrogate"] = {"2x256": [0.881, 0.905], "8x2000": [1.0, 1.0]}
    lines = spread_table([_cell("german/forest", [0.75, 0.806, 0.833], [0.694, 0.694, 0.722]), mlp])
    head = next(r for r in lines if r.startswith("| data"))
    assert head.count("surrogate") == 2  # one column per budget, between the proposer's and the no-network's
    forest = [c.strip() for c in next(r for r in lines if r.startswith("| german | forest")).strip("|").split("|")]
    ours = [c.strip() for c in next(r for r in lines if r.startswith("| german | mlp")).strip("|").split("|")]
    assert forest[6:8] == ["-", "-"] and ours[6:8] == ["0.88-0.91 (0.89)", "1.00-1.00 (1.00)"]
    assert ours[4] == "0.90-1.00 (0.95)" and ours[8] == "0.30-0.30 (0.30)"


def test_no_spread_no_table():
    assert spread_table([{"cell": "german/forest", "mace_solved": 36}]) == []


def test_round_one_report_reads_which_raw_features_a_row_changes():
    """``forest_round_one.changed_sets``: a one-hot group is one raw feature, changed when any of its columns is."""
    import numpy as np

    from benchmarks.forest_round_one import changed_sets
    from learners.tabular import WorldGeometry
    from tests.tabular_worlds import german_train_split

    world, labels, _ = german_train_split()
    geo = WorldGeometry.of(world)
    x = labels.X[0]
    group = next(c[c >= 0] for c in geo.raw_columns() if (c >= 0).sum() > 1)
    R = np.repeat(x[None], 3, 0)
    R[1, group] = np.roll(x[group], 1)  # another category of the group
    R[2, geo.raw_columns()[0][0]] += 1.0
    S = changed_sets(geo, x, R)
    assert S.shape == (3, geo.n_raw) and not S[0].any()
    assert S[1].sum() == 1 and S[1][geo.raw_of_column[group[0]]]
    assert S[2].sum() == 1 and S[2][0]
    X, CF = labels.X[:20], labels.CF[:20]  # a row of agents against a row of answers: each its own
    np.testing.assert_array_equal(changed_sets(geo, X, CF), np.array([changed_sets(geo, X[i], CF[i])[0] for i in range(20)]))


def test_past_the_optimum_counts_the_agents_whose_answer_scaled_further_is_still_accepted():
    """``forest_round_one.past_the_optimum`` against a model that accepts a move of one column of up to 1.75
    times the answer's (refusing more: not monotone): x 1.1-1.5 accepted for all, x 2 and x 3 for none."""
    import numpy as np

    from benchmarks.forest_round_one import PAST, past_the_optimum
    from learners.tabular import WorldGeometry
    from tests.tabular_worlds import german_train_split

    world, labels, _ = german_train_split()
    geo = WorldGeometry.of(world)
    X = labels.X[:30].copy()
    lo, hi = geo.box(X)
    j = next(int(c) for c in np.flatnonzero(geo.numeric) if (hi[:, c] - X[:, c] >= 12).all())
    base = X[:, j].min()  # every agent at the same value of column j: the model need not know whose row it scores
    X[:, j] = base
    step = 4.0  # an integer move: the projection keeps every scaled row on the column's grid
    CF = X.copy()
    CF[:, j] += step

    class Band:
        n_features = X.shape[1]

        def predict_proba(self, R):
            return ((R[:, j] - base > 0) & (R[:, j] - base <= 1.75 * step)).astype(float)

    class Stub:
        model = Band()

    got = past_the_optimum(Stub(), geo, X, CF)
    assert got == {str(s): (1.0 if s <= 1.5 else 0.0) for s in PAST}



def test_refit_and_rescore_name_only_known_methods_and_need_the_cells_run(tmp_path):
    """``--refit`` and ``--rescore`` take any of the methods (each full run saves every generator) and say
    which flag and value are wrong; both keep a cell's other figures, so a cell never run is an error."""
    import pytest

    from benchmarks.blackbox_generators import main

    for flag in ("--refit", "--rescore"):
        with pytest.raises(SystemExit, match=f"{flag}: expected some of proposer.*got 'nope'"):
            main([flag, "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--refit: .*german_forest.json is missing; run the cell first"):
        main(["--refit", "search_knn", "--cells", "german/forest", "--out", str(tmp_path)])


def test_a_full_run_keeps_the_cells_spread(tmp_path):
    """A cell's full run (``--force``) replaces its fits' figures but keeps the spread its JSON holds (the spread's
    fits are its own); a cell with no JSON, or none in it, has none."""
    import json

    from benchmarks.blackbox_generators import keep_spread

    path = tmp_path / "german_forest.json"
    assert "spread" not in keep_spread({"cell": "german/forest"}, path)
    spread = {"seeds": [0, 1], "methods": {"proposer": {"2x256": [0.8, 0.9]}}}
    path.write_text(json.dumps({"cell": "german/forest", "methods": {"old": []}, "spread": spread}))
    out = keep_spread({"cell": "german/forest", "methods": {"new": []}}, path)
    assert out["spread"] == spread and out["methods"] == {"new": []}
    path.write_text(json.dumps({"cell": "german/forest"}))
    assert "spread" not in keep_spread({"cell": "german/forest"}, path)
