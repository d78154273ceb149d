"""The named sets (learners/tabular/set_names.py; issue 56): a classifier of the agent ranks the labels'
changed sets, and the proposer proposes first, for each of the likeliest, the values of its nearest
training agents whose labels change exactly that set."""

from __future__ import annotations

import json

import numpy as np
import pytest

from learners.tabular import TabularGenerator, build_tabular_generator
from learners.tabular.set_names import SetNamer
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels


@pytest.fixture(scope="module")
def german():
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    return world, train_labels(labels, train), labels.X[test][:25]


def test_the_namer_learns_which_set_a_region_of_agents_changes():
    """Three sets, each the answer in its own region of the agent space: fresh agents' likeliest set is
    their region's, the ranking holds every set once, and it survives its arrays."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (600, 4))
    region = np.where(X[:, 0] > 0.6, 0, np.where(X[:, 1] > 0.5, 1, 2))
    sets = np.array([[True, False, False], [False, True, True], [True, True, False]])
    namer = SetNamer().fit(X, sets[region])
    assert len(namer.keys_) == 3 and (namer.keys_[namer.set_of_label_] == sets[region]).all()
    F = rng.uniform(0, 1, (300, 4))
    truth = np.where(F[:, 0] > 0.6, 0, np.where(F[:, 1] > 0.5, 1, 2))
    top = namer.rank(F, 3)
    assert top.shape == (300, 3) and (np.sort(top, 1) == np.arange(3)).all()
    named = namer.keys_[top[:, 0]]
    assert (named == sets[truth]).all(1).mean() >= 0.9
    again = SetNamer.from_arrays(namer.arrays())
    assert np.array_equal(again.rank(F, 2), namer.rank(F, 2))


def test_two_sets_and_one_set():
    """sklearn scores a binary problem with one row: the namer still ranks both sets; a single set is
    the only one named."""
    X = np.linspace(0, 1, 40)[:, None]
    two = SetNamer().fit(X, np.array([[x > 0.5, x <= 0.5] for x in X[:, 0]]))
    top = two.rank(np.array([[0.05], [0.95]]), 5)
    assert top.shape == (2, 2)
    assert two.keys_[top[0, 0]].tolist() == [False, True] and two.keys_[top[1, 0]].tolist() == [True, False]
    one = SetNamer().fit(X, np.ones((40, 2), bool))
    assert one.rank(X[:3], 4).tolist() == [[0], [0], [0]]


def test_the_proposers_named_rows_are_the_nearest_donors_of_each_named_set(german):
    """Each of the first rows sets, on the agent, the new values of the nearest training agent (the
    generator's own distance) whose label changes the set ranked at that place; donor rank comes first."""
    world, tl, X = german
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "set_names": 3, "set_donors": 2}).fit(world, tl)
    namer = gen.set_namer_
    rows = gen._named_set_rows(X)
    T = min(3, len(namer.keys_))
    assert rows.shape == (len(X), T * 2, X.shape[1])
    top = namer.rank(gen._scaled(X), 3)
    d = gen._train_distances(X)
    moved = np.abs(gen.CF_ - gen.X_) > 1e-12
    for i in range(len(X)):
        for t in range(T):
            members = np.flatnonzero(namer.set_of_label_ == top[i, t])
            donors = members[np.argsort(d[i, members], kind="stable")][:2]
            for j in range(2):
                row = rows[i, j * T + t]
                if j >= len(donors):
                    assert np.array_equal(row, X[i])
                    continue
                n = donors[j]
                assert (gen.changed_[n] == namer.keys_[top[i, t]]).all()
                assert np.array_equal(row, np.where(moved[n], gen.CF_[n], X[i]))
    # they lead the proposals; without them the proposals are the heads and the neighbours
    P = gen.candidates(world, X)
    assert np.array_equal(P[:, :T * 2], rows)
    gen.params.set_names = 0
    assert gen.candidates(world, X).shape[1] == P.shape[1] - T * 2


def test_a_proposer_saved_before_the_named_sets_loads_naming_none(german, tmp_path):
    """A generator saved without the namer (its config lacking ``set_names``) loads with ``set_names`` 0
    and answers as the same fit without named sets."""
    world, tl, X = german
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "set_names": 0}).fit(world, tl)
    gen.save(tmp_path / "old")
    cfg = json.loads((tmp_path / "old" / "config.json").read_text())
    del cfg["params"]["set_names"], cfg["params"]["set_donors"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(cfg))
    old = TabularGenerator.load(tmp_path / "old")
    assert old.params.set_names == 0 and old.set_namer_ is None
    a, b = gen.recommend(world, X), old.recommend(world, X)
    assert np.array_equal(np.nan_to_num(a.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))


def test_bad_counts_name_the_field():
    with pytest.raises(ValueError, match="set_names: must be >= 0"):
        build_tabular_generator("proposer", {"set_names": -1})
    with pytest.raises(ValueError, match="set_donors: must be >= 0"):
        build_tabular_generator("proposer", {"set_donors": -2})


def test_donor_rows_of_given_sets_lend_values_or_changes_and_none_for_a_set_no_label_has(german):
    """``set_donor_rows`` (the set oracle of ``benchmarks/forest_round_one.py`` gives it MACE's set): each
    row sets the donor's new values or adds its change; a set index of -1 lends the agent itself."""
    world, tl, X = german
    gen = build_tabular_generator("proposer", {"max_epochs": 5}).fit(world, tl)
    namer = gen.set_namer_
    sets = np.stack([np.zeros(len(X), np.int64), np.full(len(X), -1)], 1)
    d = gen._train_distances(X)
    members = np.flatnonzero(namer.set_of_label_ == 0)
    for values in (True, False):
        rows = gen.set_donor_rows(X, sets, 2, values=values)
        assert rows.shape == (len(X), 4, X.shape[1])
        for i in range(len(X)):
            donors = members[np.argsort(d[i, members], kind="stable")][:2]
            for j in range(2):
                assert np.array_equal(rows[i, 2 * j + 1], X[i])  # set -1: the agent
                if j >= len(donors):
                    assert np.array_equal(rows[i, 2 * j], X[i])
                    continue
                n = donors[j]
                want = np.where(np.abs(gen.CF_[n] - gen.X_[n]) > 1e-12, gen.CF_[n], X[i]) if values \
                    else X[i] + gen.CF_[n] - gen.X_[n]
                assert np.allclose(rows[i, 2 * j], want)
