"""``learners.tabular.step_trades`` (issue 56): the trades along a forest's splits against a plain loop over
their definition, and the one move that takes an answer one feature short to the optimum."""

from __future__ import annotations

import numpy as np
import pytest

from learners.tabular import WorldGeometry
from learners.tabular.budget_search import _moves_one, value_vocabulary
from learners.tabular.step_trades import BACK, ON, step_trades
from tests.tabular_worlds import german_train_split


@pytest.fixture(scope="module")
def german():
    world, labels, _ = german_train_split()
    geo = WorldGeometry.of(world)
    return geo, labels, value_vocabulary(geo, labels.X, labels.CF)


def _by_loop(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray]) -> list[np.ndarray]:
    """Per agent, every trade row written out one at a time from the definition (the second route)."""
    cols = [c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if len(vocab[c])]
    out = []
    for i in range(len(X)):
        x, b, rows = X[i], B[i], []
        for c1 in cols:
            if abs(b[c1] - x[c1]) <= 1e-12:
                continue
            v1 = vocab[c1]
            back = sorted((u for u in v1 if min(x[c1], b[c1]) < u < max(x[c1], b[c1])), key=lambda u: abs(u - b[c1]))
            for c2 in cols:
                if c2 == c1:
                    continue
                for up in (True, False):
                    if abs(b[c2] - x[c2]) > 1e-12 and (b[c2] > x[c2]) != up:
                        continue  # a changed partner goes on its own way only
                    on = sorted((u for u in vocab[c2] if (u > b[c2] if up else u < b[c2])), key=lambda u: abs(u - b[c2]))
                    for u1 in back[:BACK]:
                        for u2 in on[:ON]:
                            r = b.copy()
                            r[c1], r[c2] = u1, u2
                            rows.append(r)
        out.append(geo.project(x[None], np.array(rows).reshape(1, -1, len(x)))[0] if rows else np.zeros((0, len(x))))
    return out


def test_step_trades_match_a_loop_over_every_combination(german):
    """The vectorized trades give, per agent, exactly the rows of the definition written as a loop; an agent
    whose answer changes nothing, or is missing (NaN), gets none."""
    geo, labels, vocab = german
    X, B = labels.X[:15], labels.CF[:15].copy()
    B[2] = X[2]
    B[5] = np.nan
    R = step_trades(geo, X, B, vocab)
    want = _by_loop(geo, X, np.where(np.isnan(B), X, B), vocab)
    assert sum(len(w) for w in want) > 0
    for i in range(len(X)):
        got = R[i][~np.isnan(R[i]).any(1)]
        if i in (2, 5):
            assert not len(got)
            continue
        assert len(got) == len(want[i])
        np.testing.assert_allclose(got[np.lexsort(got.T)], want[i][np.lexsort(want[i].T)], rtol=0, atol=1e-9)


def test_a_trade_takes_an_answer_one_feature_short_to_the_optimum(german):
    """An answer that moves one column far (its 6th split) where the optimum moves it to its 3rd split and
    another column to its first: the trades reach that optimum in one move, the other moves do not."""
    geo, labels, vocab = german
    cols = [c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if len(vocab[c]) >= 8]
    assert len(cols) >= 2
    lo, hi = geo.box(labels.X)
    for i in range(len(labels.X)):  # an agent with room for 6 splits up on the first column and 1 on the second
        x = labels.X[i]
        c1, c2 = cols[0], cols[1]
        up1, up2 = vocab[c1][vocab[c1] > x[c1]], vocab[c2][vocab[c2] > x[c2]]
        if len(up1) >= 6 and len(up2) and up1[5] <= hi[i, c1] and up2[0] <= hi[i, c2]:
            break
    else:
        pytest.skip("no German agent with room on both columns")
    B = x.copy()
    B[c1] = up1[5]
    optimum = x.copy()
    optimum[c1], optimum[c2] = up1[2], up2[0]
    optimum = geo.project(x[None], optimum[None, None])[0, 0]

    def reaches(M: np.ndarray) -> bool:
        return bool((np.abs(np.nan_to_num(M[0]) - optimum) < 1e-9).all(1).any())

    assert reaches(_moves_one(geo, x[None], B[None], vocab, steps=True, trades=True))
    assert not reaches(_moves_one(geo, x[None], B[None], vocab, steps=True, trades=False))
