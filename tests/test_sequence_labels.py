"""Sequence labels (data_gen.sequence_labels) and the world builder (data_gen.sequential_worlds)."""

import json

import numpy as np
import pytest

from data_gen.sequence_labels import SequenceLabelSet, label_sequences
from data_gen.sequential_worlds import build_sequential, rejected_agents
from envs.sequential import SequentialWorld
from solvers.sequential import BRKGASequencer, ExactSequenceSearch
from tests.seq_worlds import toy_agents, toy_world

SMALL = BRKGASequencer(pop_size=60, n_offspring=48, n_mutants=12, n_generations=10, polish=3)


@pytest.fixture(scope="module")
def toy():
    world = toy_world(1)
    X = toy_agents(world, 5, 2)
    X[4] = [9, 8, 9, 0, 1]  # accepted already
    return world, X


def test_labels_resume_save_and_load(toy, tmp_path):
    world, X = toy
    labels = label_sequences(world, X, tmp_path / "work", SMALL, chunk_size=2, n_jobs=1, progress=False)
    assert len(labels) == 5 and labels.status[4] == "already_accepted" and labels.cost[4] == 0
    for i in np.flatnonzero(labels.ok):
        r = world.evaluate(X[i], labels.steps(i))
        assert r.valid and r.cost == pytest.approx(labels.cost[i])  # the cheapest sequence, priced by the world
        members = labels.front_agent == i
        assert members.sum() == labels.front_size[i] and labels.front_cost[members].min() == pytest.approx(labels.cost[i])
    # a rerun after losing one chunk recomputes only that chunk and gives the same labels
    chunks = sorted((tmp_path / "work").glob("chunk_*.npz"))
    assert len(chunks) == 3
    kept = chunks[0].stat().st_mtime_ns
    chunks[1].unlink()
    again = label_sequences(world, X, tmp_path / "work", SMALL, chunk_size=2, n_jobs=1, progress=False)
    assert chunks[0].stat().st_mtime_ns == kept and again.content_hash() == labels.content_hash()
    labels.save(tmp_path / "ds", {"config": {"seed": 0}})
    back = SequenceLabelSet.load(tmp_path / "ds")
    assert back.content_hash() == labels.content_hash() and back.steps(0) == labels.steps(0)
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["summary"]["agents"] == 5 and manifest["config"] == {"seed": 0}
    manifest["content_hash"] = "0" * 64
    (tmp_path / "ds" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="does not match its manifest"):
        SequenceLabelSet.load(tmp_path / "ds")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        SequenceLabelSet.load(tmp_path / "work")


def test_exact_labels_and_bad_agents(toy, tmp_path):
    world, X = toy
    labels = label_sequences(world, X[:3], tmp_path / "exact", ExactSequenceSearch(), chunk_size=3, n_jobs=1,
                             progress=False)
    assert (labels.front_size[labels.ok] == 1).all() and labels.summary()["agents"] == 3
    with pytest.raises(ValueError, match="expected 5 features"):
        label_sequences(world, X[:, :4], tmp_path / "bad", SMALL, n_jobs=1, progress=False)


def test_build_german_world_trains_and_caches(tmp_path):
    built = build_sequential("german", cache_dir=tmp_path, max_iter=30)  # a quick, unconverged MLP
    world = built.world
    assert world.action_names[:2] == ["WaitYears", "Naturalize"] and world.graph is None
    assert 0.5 < built.metrics["test_accuracy"] <= 1 and world.meta["variant"] == "scf"
    assert world.meta["params"]["hidden_layer_sizes"] == [40, 40]
    again = build_sequential("german", cache_dir=tmp_path, max_iter=30)
    assert again.cached and again.world.fingerprint() == world.fingerprint()
    X = rejected_agents(built, 5, seed=1)
    assert len(X) <= 5 and not world.accepts(X).any()
    everyone = rejected_agents(built, None, split="all")
    n_test = int((~world.accepts(built.data.X_test)).sum())
    assert {tuple(r) for r in everyone[:n_test]} == {tuple(r) for r in built.data.X_test[~world.accepts(built.data.X_test)]}
    world.save(tmp_path / "german.json")
    assert SequentialWorld.load(tmp_path / "german.json").fingerprint() == world.fingerprint()
    with pytest.raises(ValueError, match="unknown sequential world 'mars'"):
        build_sequential("mars")
    with pytest.raises(ValueError, match="split"):
        rejected_agents(built, 3, split="train")
