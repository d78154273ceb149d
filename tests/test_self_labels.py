"""Self-labelling (learners/tabular/self_labels.py, ``ProposerParams.self_labels``; issue 56): the user's rejected
rows without MACE's answer, answered at fit time by the proposer's own search through the black box. Its calls
counted, every added answer accepted and never nearer than MACE's certified optimum (a second route), the
student's vocabulary kept MACE's (the search's widened by the self-labels' values where asked), an interrupted run resumed from its blocks, the answers the same on one process or two,
persisted, and bad input named."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from learners.tabular import TabularGenerator, TabularLabels, WorldGeometry, build_tabular_generator
from learners.tabular.geometry import accepts
from learners.tabular.self_labels import answer_unlabelled
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels

FAST = {"max_epochs": 10, "self_label_calls": 3, "self_label_rows": 300, "self_label_workers": 1}


@pytest.fixture(scope="module")
def german():
    world, neg = german_rejected()
    labels, train, test = german_mace_labels()
    return world, train_labels(labels, train), labels, test, neg[70:110]  # 40 rejected rows MACE never saw


def _with(tl: TabularLabels, unlabelled: np.ndarray) -> TabularLabels:
    return TabularLabels(tl.X, tl.CF, tl.distance, unlabelled=unlabelled)


def test_self_labels_are_counted_accepted_and_join_the_labels(german):
    world, tl, _, _, U = german
    bb = BlackBoxModel(world.model)
    gen = build_tabular_generator("proposer", {**FAST, "self_labels": 30}).fit(replace(world, model=bb), _with(tl, U))
    info = gen.fit_info_["self_labels"]
    assert info["agents"] == 30 and 0 < info["answered"] <= 30 and info["kept_blocks"] == 0
    assert info["labels"] == len(tl.X) + info["answered"] == len(gen.X_)
    assert bb.calls == gen.fit_info_["steps"]["calls"] + info["calls"]  # every fit-time call is on the books
    assert bb.rows == gen.fit_info_["steps"]["rows"] + info["rows"] and info["rows"] <= 30 * 300
    new_X, new_CF = gen.X_[len(tl.X):], gen.CF_[len(tl.X):]
    at = [int(np.flatnonzero((U[:30] == x).all(1))[0]) for x in new_X]  # the agents answered, in their order
    assert len(at) == info["answered"] and np.all(np.diff(at) > 0)
    assert accepts(world, new_CF).all()  # each added answer is one the model accepts
    geo = WorldGeometry.of(world)
    assert np.array_equal(geo.project(new_X, new_CF[:, None, :])[:, 0], new_CF)  # inside each agent's box
    plain = build_tabular_generator("proposer", FAST).fit(world, tl)
    assert all(np.array_equal(a, b) for a, b in zip(gen.vocab_, plain.vocab_, strict=True))  # MACE's vocabulary
    assert gen.set_namer_.set_of_label_.shape == (len(gen.X_),)  # the namer refitted on every label


def test_self_labels_are_never_nearer_than_mace(german):
    """A second route: agents MACE certified, self-labelled as if unlabelled."""
    world, tl, labels, test, _ = german
    X, d_mace = labels.X[test], labels.distance[test]
    gen = build_tabular_generator("proposer", FAST).fit(world, tl)
    CF, found, _ = answer_unlabelled(gen, world, X, Budget(3, 300))
    assert found.any()
    d = WorldGeometry.of(world).distance(X[found], CF[found])
    assert np.all(d >= d_mace[found] * (1 - 1e-6) - 1e-9)
    assert accepts(world, CF[found]).all()


def test_an_interrupted_run_resumes_from_its_blocks(german, tmp_path, monkeypatch):
    import learners.tabular.self_labels as SL

    world, tl, _, _, U = german
    monkeypatch.setattr(SL, "BLOCK", 10)
    gen = build_tabular_generator("proposer", FAST).fit(world, tl)
    whole, found, _ = answer_unlabelled(gen, world, U, Budget(3, 300), memory=tmp_path, state=b"s")
    (work,) = tmp_path.iterdir()
    chunks = sorted(work.glob("chunk_*"))
    assert len(chunks) == 4
    chunks[1].unlink()
    chunks[3].unlink()  # two blocks lost: a run stopped part way
    bb = BlackBoxModel(world.model)
    again, found2, info = answer_unlabelled(gen, replace(world, model=bb), U, Budget(3, 300), memory=tmp_path, state=b"s")
    assert info["kept_blocks"] == 2 and 0 < bb.rows == info["rows"] <= 20 * 300
    assert np.array_equal(np.nan_to_num(whole, nan=-7), np.nan_to_num(again, nan=-7)) and np.array_equal(found, found2)
    bb2 = BlackBoxModel(world.model)
    answer_unlabelled(gen, replace(world, model=bb2), U, Budget(3, 300), memory=tmp_path, state=b"s")
    assert bb2.calls == 1 and bb2.rows == int(found[:10].sum())  # all kept: only the check of the first block's answers


def test_two_processes_answer_as_one(german, monkeypatch):
    import learners.tabular.self_labels as SL

    world, tl, _, _, U = german
    monkeypatch.setattr(SL, "BLOCK", 20)
    gen = build_tabular_generator("proposer", FAST).fit(world, tl)
    one = answer_unlabelled(gen, world, U, Budget(2, 256), n_workers=1)
    two = answer_unlabelled(gen, world, U, Budget(2, 256), n_workers=2)
    assert np.array_equal(np.nan_to_num(one[0], nan=-7), np.nan_to_num(two[0], nan=-7))
    assert one[2]["rows"] == two[2]["rows"]


def test_kept_blocks_of_another_model_are_refused(german, tmp_path):
    world, tl, _, _, U = german
    gen = build_tabular_generator("proposer", FAST).fit(world, tl)
    answer_unlabelled(gen, world, U[:10], Budget(2, 128), memory=tmp_path, state=b"s")

    class Refuses:  # another model: refuses everything
        n_features = world.model.n_features

        def predict_proba(self, X):
            return np.zeros(len(np.atleast_2d(X)))

    with pytest.raises(ValueError, match="not this model's"):
        answer_unlabelled(gen, replace(world, model=Refuses()), U[:10], Budget(2, 128), memory=tmp_path, state=b"s")


@pytest.mark.parametrize("proposals", ["network", "averages"])
def test_save_load_keeps_the_self_labels(german, proposals, tmp_path):
    world, tl, labels, test, U = german
    gen = build_tabular_generator("proposer", {**FAST, "proposals": proposals, "self_labels": 20}).fit(world, _with(tl, U))
    gen.save(tmp_path / "m")
    back = TabularGenerator.load(tmp_path / "m")
    assert np.array_equal(back.X_, gen.X_) and len(back.X_) > len(tl.X)
    X = labels.X[test][:10]
    a, b = gen.recommend_within(world, X, Budget(2, 256)), back.recommend_within(world, X, Budget(2, 256))
    assert np.array_equal(np.nan_to_num(a.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))


def test_bad_input_names_the_field(german):
    world, tl, _, _, U = german
    with pytest.raises(ValueError, match="labels.unlabelled: expected"):
        build_tabular_generator("proposer", {**FAST, "self_labels": 5}).fit(world, _with(tl, U[:, :3]))
    with pytest.raises(ValueError, match="self_labels: must be >= 0"):
        build_tabular_generator("proposer", {"self_labels": -1})
    with pytest.raises(ValueError, match="self_label_rows: must be >= 1"):
        build_tabular_generator("proposer", {"self_label_rows": 0})
    gen = build_tabular_generator("proposer", {**FAST, "self_labels": 5}).fit(world, tl)  # none given: none asked
    assert "self_labels" not in gen.fit_info_ and len(gen.X_) == len(tl.X)


def test_self_labels_after_a_fit_match_those_inside_it(german):
    world, tl, _, _, U = german
    inside = build_tabular_generator("proposer", {**FAST, "self_labels": 20}).fit(world, _with(tl, U))
    after = build_tabular_generator("proposer", {**FAST, "self_labels": 20}).fit(world, tl).add_self_labels(world, U[:20])
    assert np.array_equal(inside.X_, after.X_) and np.array_equal(inside.CF_, after.CF_)


def test_the_key_ignores_where_blocks_are_kept_and_the_workers(german):
    world, tl, _, _, _ = german
    a = build_tabular_generator("proposer", {**FAST, "self_label_memory": "/a", "self_label_workers": 1}).fit(world, tl)
    b = build_tabular_generator("proposer", {**FAST, "self_label_memory": "b", "self_label_workers": 2}).fit(world, tl)
    c = build_tabular_generator("proposer", {**FAST, "self_label_rows": 301}).fit(world, tl)
    assert a._state_bytes() == b._state_bytes() != c._state_bytes()


def test_self_label_values_widen_the_search_vocabulary_not_the_students(german, tmp_path):
    """With ``self_label_values`` the search answers with MACE's vocabulary and every value the self-labels move a
    column of it to; ``vocab_`` (the student's corners) stays MACE's; the self-labels' key does not move (none
    joined yet when they are answered), an answering search's state does where the vocabulary widened; saved."""
    world, tl, labels, test, U = german
    off = build_tabular_generator("proposer", {**FAST, "self_labels": 30}).fit(world, _with(tl, U))
    on = build_tabular_generator("proposer", {**FAST, "self_labels": 30, "self_label_values": True}).fit(world, _with(tl, U))
    assert np.array_equal(on.X_, off.X_) and np.array_equal(on.CF_, off.CF_)  # the same self-labels: the same key
    assert off.search_vocabulary() is off.vocab_
    wide, moved = on.search_vocabulary(), np.abs(on.CF_ - on.X_) > 1e-12
    added = 0
    for c, (v, w) in enumerate(zip(on.vocab_, wide, strict=True)):
        assert np.array_equal(v, off.vocab_[c])  # MACE's, for the student
        expect = np.union1d(v, on.CF_[moved[:, c], c]) if len(v) else v
        assert np.array_equal(w, expect)
        added += len(w) - len(v)
    assert added > 0  # the self-labels reached values no MACE label has
    assert on._state_bytes() != off._state_bytes()
    before = build_tabular_generator("proposer", {**FAST, "self_label_values": True}).fit(world, tl)
    assert before.search_vocabulary() is before.vocab_
    assert before._state_bytes() == build_tabular_generator("proposer", FAST).fit(world, tl)._state_bytes()
    on.save(tmp_path / "m")
    back = TabularGenerator.load(tmp_path / "m")
    assert all(np.array_equal(a, b) for a, b in zip(back.search_vocabulary(), wide, strict=True))
    X = labels.X[test][:10]
    a, b = on.recommend_within(world, X, Budget(2, 256)), back.recommend_within(world, X, Budget(2, 256))
    assert np.array_equal(np.nan_to_num(a.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))
