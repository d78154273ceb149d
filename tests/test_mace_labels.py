"""MACE labels over a population: resumable chunks, encodings, storage, and learners training on them."""

from __future__ import annotations

import numpy as np
import pytest

from data_gen import classifiers as tab
from data_gen.mace_labels import MaceLabelSet, label_tabular, raw_feature_index, scale_states
from learners.base import FitContext, build_generator
from solvers.mace import MACE


@pytest.fixture(scope="module")
def compas(tmp_path_factory):
    b = tab.build("compas", "lr", cache_dir=tmp_path_factory.mktemp("cache"))
    X = tab.negatives(b.world, b.data.X_train)[:120]
    return b.world, X


@pytest.fixture(scope="module")
def labels(compas, tmp_path_factory):
    world, X = compas
    return label_tabular(world, X, MACE(backend="milp", norm="one"), tmp_path_factory.mktemp("work"),
                         chunk_size=30, n_jobs=2, progress=False)


def test_every_label_is_a_verified_counterfactual(compas, labels):
    world, X = compas
    assert len(labels) == len(X)
    assert set(labels.status) <= {"ok", "no_recourse"}
    ok = labels.ok
    assert ok.sum() > len(X) // 2
    assert world.accepts(labels.cf[ok]).all()
    assert not world.schema.mutability_violations(X[ok], labels.cf[ok]).any()
    assert (labels.delta_min[ok] <= labels.distance[ok] + 1e-9).all()
    assert np.isnan(labels.cf[~ok]).all() and np.isinf(labels.distance[~ok]).all()


def test_resume_relabels_only_missing_chunks(compas, labels, tmp_path):
    world, X = compas
    solver = MACE(backend="milp", norm="one")
    label_tabular(world, X[:60], solver, tmp_path, chunk_size=30, n_jobs=1, progress=False)
    (tmp_path / "chunk_00001.npz").unlink()
    stamp = (tmp_path / "chunk_00000.npz").stat().st_mtime_ns
    again = label_tabular(world, X[:60], solver, tmp_path, chunk_size=30, n_jobs=1, progress=False)
    assert (tmp_path / "chunk_00000.npz").stat().st_mtime_ns == stamp  # finished chunk not redone
    np.testing.assert_allclose(again.distance, labels.distance[:60])


def test_encodings_agree_with_the_changes(compas, labels):
    world, _ = compas
    names, of_column = raw_feature_index(world.schema)
    assert len(names) == len(labels.feature_names) and of_column.max() == len(names) - 1
    enc = labels.encodings()
    ok = labels.ok
    changed = enc["named_action"].astype(bool)
    moved = np.abs(enc["full_action"]) > 1e-9  # (n_ok, D): the changes, column by column
    for j in range(len(names)):
        np.testing.assert_array_equal(changed[:, j], moved[:, of_column == j].any(1))
    assert changed.any(1).all()  # a counterfactual of a rejected agent changes something
    assert enc["named_cfe"].min() == 0 and len(enc["vocabulary"]) == enc["named_cfe"].max() + 1
    assert len(enc["named_cfe"]) == ok.sum()


def test_save_load_round_trip(labels, tmp_path):
    labels.save(tmp_path / "labels", meta={"world": "compas/lr"})
    back = MaceLabelSet.load(tmp_path / "labels")
    np.testing.assert_array_equal(back.status, labels.status)
    np.testing.assert_allclose(back.cf, labels.cf)
    np.testing.assert_allclose(back.distance, labels.distance)
    assert back.feature_names == labels.feature_names


def test_generators_train_on_mace_labels(compas, labels):
    world, _ = compas
    scaled = scale_states(world.schema, labels.X)
    assert scaled.min() >= 0 and scaled.max() <= 1
    split, vocab = labels.to_split(world.schema)
    ctx = FitContext(n_features=split.X.shape[1], n_actions=len(labels.feature_names),
                     max_len=split.sets.shape[1], action_names=labels.action_names, progress=False)
    for method, params in (("named_action", {"hidden": (32,), "max_epochs": 30}),
                           ("named_cfe", {"hidden": (32,), "max_epochs": 30})):
        model = build_generator(method, {**params, "batch_size": 32}).fit(split, None, ctx)
        pred = model.predict(split.X)
        acc = (pred.sets[:, : split.sets.shape[1]] == split.sets).all(1).mean()
        majority = np.bincount(split.class_ids).max() / len(split)
        assert acc >= majority - 1e-9, (method, acc, majority)


def test_a_tiny_training_run_does_not_break_the_lr_schedule(compas, labels):
    world, _ = compas
    split, _ = labels.to_split(world.schema)
    ctx = FitContext(n_features=split.X.shape[1], n_actions=len(labels.feature_names),
                     max_len=split.sets.shape[1], progress=False)
    # 5 epochs of one batch = 5 steps: OneCycleLR's 20% warm-up spans zero steps and divided by zero
    model = build_generator("named_cfe", {"hidden": (8,), "max_epochs": 5, "batch_size": 10_000}).fit(split, None, ctx)
    assert model.predict(split.X).sets.shape[0] == len(split)


def test_a_chunk_of_other_agents_is_refused(compas, tmp_path):
    """Chunks may come from another run or machine (``--labels-only`` on a larger one): a chunk whose
    agents are not the rows asked for must never label them."""
    world, X = compas
    solver = MACE(backend="milp", norm="one")
    label_tabular(world, X[:10], solver, tmp_path, chunk_size=5, n_jobs=1, progress=False)
    again = label_tabular(world, X[:10], solver, tmp_path, chunk_size=5, n_jobs=1, progress=False)
    np.testing.assert_array_equal(again.X, X[:10])
    with pytest.raises(ValueError, match="labels of other agents for rows 0-5"):
        label_tabular(world, X[10:20], solver, tmp_path, chunk_size=5, n_jobs=1, progress=False)
