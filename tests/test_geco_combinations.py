"""GeCo's combinations of threshold moves below its best answer (issue 34), on a Credit-forest agent
it once missed.

Agent 25 of the benchmark's seeded sample (``benchmarks/mace.py --geco``: 50 rejected test agents,
seed 0): MACE's certified l1 optimum changes four amounts by a few units each, every one a split
threshold of the forest; each move alone lowers P(accept) or leaves it unchanged, and so does every
pair and every triple but one, so the ascent (a beam ranked by P) never assembled them and GeCo
answered 1.27x the optimum. Every combination of such moves below the best answer is now scored.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from data_gen.classifiers import build, negatives
from solvers.geco import GeCo, Plaf
from solvers.mace import MACE, distance


@pytest.fixture(scope="module")
def credit_forest():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = build("credit", "forest", seed=0)
    neg = negatives(b.world, b.data.X_test)
    X = neg[np.sort(np.random.default_rng(0).choice(len(neg), size=min(50, len(neg)), replace=False))]
    return b, X


def test_four_threshold_crossings_reach_the_certified_optimum(credit_forest):
    b, X = credit_forest
    x = X[25]
    mace = MACE(norm="one").solve(b.world, x)[0]
    assert mace.optimal
    got = GeCo(plaf=Plaf()).fit(b.world, b.data.X_train).solve(b.world, x)
    best = got[0].final_state
    assert got[0].valid and b.world.accepts(best[None])[0]
    assert not b.world.schema.mutability_violations(x, best[None], tol=0.0)[0]
    d = float(distance(b.world.schema, x, best[None], "one")[0])
    assert d <= 1.01 * mace.extra["distance"]
    assert int(np.sum(best != x)) >= 4  # the four moves together
    plain = GeCo(plaf=Plaf(), combine_depth=0).fit(b.world, b.data.X_train).solve(b.world, x)
    assert d <= float(distance(b.world.schema, x, plain[0].final_state[None], "one")[0]) + 1e-15
