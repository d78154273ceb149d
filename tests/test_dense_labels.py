"""benchmarks/dense_labels.py: its argument checks, its table and the transplant bound on a tiny world (the
measurement itself is a benchmark)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.dense_labels import main, report, transplant_share


def test_the_table_has_a_row_per_label_count_and_a_dash_where_nothing_was_measured():
    cell = {"cell": "german/forest", "test_agents": 36, "labeller_optimal": 0.972, "sizes": [
        {"extra": 0, "labels": 500, "transplant": {"128": 0.528, "256": 0.583}, "proposer": {"2x256": 0.861,
                                                                                          "8x2000": 0.972},
         "fit_seconds": 4.2},
        {"extra": 60000, "labels": 60475, "transplant": {"128": 0.583, "256": 0.639}}]}
    text = report([cell], "python benchmarks/dense_labels.py")
    assert "| german/forest (36; labeller 0.97) | 0 | 0.528 | 0.583 | 0.861 | 0.972 | 4 |" in text
    assert "| german/forest (36; labeller 0.97) | 60,000 | 0.583 | 0.639 | - | - | - |" in text


@pytest.mark.parametrize("argv, message", [(["--cells", "mars/forest"], "--cells: unknown cell 'mars/forest'"),
                                           (["--extra", "many"], "--extra/--fits: expected comma-separated"),
                                           (["--fits", "-5"], "--extra/--fits: counts must be 0 or more")])
def test_bad_arguments_name_the_flag(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_a_neighbour_whose_change_is_the_agents_optimum_is_found_and_a_far_one_is_not():
    """A line world, accepted at x0 > 0.45, and an agent at 0.2 whose reference answer is 0.5. The one labelled
    agent moved x0 to 0.5: set on the agent, that value is the answer; a label that moved x0 to 0.9 is accepted
    but more than 1% farther, so it does not count."""
    from envs.models import LinearModel
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld
    from learners.tabular.geometry import WorldGeometry

    schema = FeatureSchema((Feature("a", "numeric", 0.0, 1.0), Feature("b", "numeric", 0.0, 1.0)))
    world = TabularWorld("toy/line", schema, LinearModel(np.array([1.0, 0.0]), -0.45))
    geo = WorldGeometry.of(world, "one")
    T = np.array([[0.2, 0.3]])
    d = geo.distance(T, np.array([[0.5, 0.3]]))
    near = transplant_share(world, geo, T, d, np.array([True]), np.array([[0.1, 0.3]]), np.array([[0.5, 0.3]]), 1)
    far = transplant_share(world, geo, T, d, np.array([True]), np.array([[0.1, 0.3]]), np.array([[0.9, 0.3]]), 1)
    assert (near, far) == (1.0, 0.0)
