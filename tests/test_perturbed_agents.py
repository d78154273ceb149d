"""Generated training agents (data_gen/perturbed_agents.py): rejected, in bounds, new, seeded."""

import numpy as np
import pytest

from data_gen.classifiers import build
from data_gen.perturbed_agents import PerturbParams, perturb_agents


@pytest.fixture(scope="module")
def german():
    b = build("german", "forest")
    neg = b.data.X_train[~b.world.accepts(b.data.X_train)]
    return b.world, neg


def test_generated_agents_are_rejected_valid_and_new(german):
    world, neg = german
    A = perturb_agents(world, neg, 300, seed=1)
    assert A.shape == (300, neg.shape[1])
    assert not world.accepts(A).any()
    world.schema.validate(A, name="A")  # bounds and integrality hold
    real = {r.tobytes() for r in neg}
    assert not any(r.tobytes() in real for r in A)
    assert len({r.tobytes() for r in A}) == 300
    for cols in world.groups().values():  # one category per one-hot group
        assert (A[:, cols].sum(1) == 1).all()
    assert np.array_equal(A, perturb_agents(world, neg, 300, seed=1))
    assert not np.array_equal(A, perturb_agents(world, neg, 300, seed=2))


def test_generated_agents_stay_near_their_rows(german):
    world, neg = german
    near = perturb_agents(world, neg, 200, seed=0, params=PerturbParams(numeric_scale=0.01, resample_prob=0.0))
    lo, hi = world.schema.bounds()
    span = np.where(hi > lo, hi - lo, 1)
    gap = np.min(np.abs(near[:, None, :] - neg[None, :, :]).__truediv__(span).sum(-1), axis=1)
    assert np.median(gap) < 0.1


def test_bad_input_is_named(german):
    world, neg = german
    with pytest.raises(ValueError, match="numeric_scale"):
        PerturbParams(numeric_scale=-1)
    with pytest.raises(ValueError, match="resample_prob"):
        PerturbParams(resample_prob=2)
    with pytest.raises(ValueError, match="rows"):
        perturb_agents(world, neg[:0], 5)
    assert perturb_agents(world, neg, 0).shape == (0, neg.shape[1])


def test_too_few_new_agents_raise_or_come_back_with_allow_fewer(german):
    """No noise and no resampling: every draw repeats a real row, so no new agent exists. Strict, that
    is an error naming the shortfall; with ``allow_fewer`` the (empty) set of those found comes back."""
    world, neg = german
    still = PerturbParams(numeric_scale=0.0, resample_prob=0.0)
    with pytest.raises(ValueError, match=r"only 0 of 5 new rejected agents"):
        perturb_agents(world, neg, 5, params=still, max_rounds=3)
    assert perturb_agents(world, neg, 5, params=still, max_rounds=3, allow_fewer=True).shape == (0, neg.shape[1])
    # a few possible values only (one numeric column moved by a tiny noise, rounded): fewer than asked, all new
    some = perturb_agents(world, neg[:3], 500, params=PerturbParams(numeric_scale=0.002, resample_prob=0.0),
                          max_rounds=5, allow_fewer=True, seed=0)
    assert 0 < len(some) < 500 and len({r.tobytes() for r in some}) == len(some)
    assert not world.accepts(some).any()
