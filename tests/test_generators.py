"""Amortized CFE generators: persistence, accuracy against a trivial baseline, interface checks."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from data_gen.config import DatasetConfig
from data_gen.dataset import build_dataset
from learners.base import GENERATORS, FitContext, Generator, build_generator
from learners.named_cfe import HammingKnnGenerator

METHODS = ["named_cfe", "hamming_knn", "named_action", "full_action_seq", "full_action_multilabel"]
TORCH_METHODS = [m for m in METHODS if m != "hamming_knn"]
# Every case runs through the same checks; a case is a method or a "method:variant" with its own params.
CASES = METHODS + ["named_cfe:factored"]
TORCH_CASES = [c for c in CASES if c != "hamming_knn"]
SMALL = {"hidden": [64, 64], "batch_size": 128, "max_epochs": 15, "patience": 4}
PARAMS = {m: dict(SMALL) for m in TORCH_CASES} | {"hamming_knn": {"k": 5}}
PARAMS["full_action_seq"] |= {"hidden": [64], "state_size": 64}
PARAMS["named_cfe:factored"] |= {"output": "factored", "hidden": [], "embed_dim": 32, "set_hidden": [32],
                                 "max_epochs": 30}


def method_of(case: str) -> str:
    return case.split(":")[0]
SAVED_FILES = {"config.json", "weights.pt", "arrays.npz", "classes.npz"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ds = build_dataset(DatasetConfig(n_features=8, n_actions=12, n_agents=3000, seed=1),
                       tmp_path_factory.mktemp("data"), "tiny", progress=False)
    train, test = ds.split("all")
    return ds, train, test


@pytest.fixture(scope="module")
def ctx(tiny):
    ds = tiny[0]
    return FitContext.from_world(ds.world, max_len=int(ds.length.max()), seed=0, progress=False)


@pytest.fixture(scope="module")
def fitted(tiny, ctx):
    _, train, _ = tiny
    cache: dict[str, Generator] = {}

    def get(case: str) -> Generator:
        if case not in cache:
            cache[case] = build_generator(method_of(case), PARAMS[case]).fit(train, None, ctx)
        return cache[case]

    return get


def padded(sets: np.ndarray, width: int) -> np.ndarray:
    return np.pad(sets, ((0, 0), (0, width - sets.shape[1])), constant_values=-1)


def accuracy(pred_sets: np.ndarray, true_sets: np.ndarray) -> float:
    w = max(pred_sets.shape[1], true_sets.shape[1])
    return float((padded(pred_sets, w) == padded(true_sets, w)).all(1).mean())


@pytest.mark.parametrize("method", CASES)
def test_beats_most_frequent_cfe(method, tiny, fitted):
    _, train, test = tiny
    uniq, counts = np.unique(train.sets, axis=0, return_counts=True)
    baseline = accuracy(np.repeat(uniq[counts.argmax()][None], len(test), 0), test.sets)
    acc = accuracy(fitted(method).predict(test.X).sets, test.sets)
    assert acc > max(0.8, baseline + 0.3), (method, acc, baseline)


@pytest.mark.parametrize("case", CASES)
def test_save_load_roundtrip(case, tiny, fitted, tmp_path):
    _, _, test = tiny
    model, method = fitted(case), method_of(case)
    path = model.save(tmp_path / case.replace(":", "_"))
    files = {p.name for p in path.iterdir()}
    assert "config.json" in files and files <= SAVED_FILES
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["method"] == method
    for f in files - {"config.json"}:  # every array file loads without pickle
        if f.endswith(".pt"):
            torch.load(path / f, weights_only=True)
        else:
            with np.load(path / f, allow_pickle=False) as z:
                [z[k] for k in z.files]
    before = model.predict(test.X)
    for loaded in (Generator.load(path), type(model).load(path)):
        assert type(loaded) is type(model)
        after = loaded.predict(test.X)
        np.testing.assert_array_equal(after.sets, before.sets)
        np.testing.assert_allclose(after.confidence, before.confidence, rtol=1e-6)
    other = GENERATORS[next(m for m in METHODS if m != method)]
    with pytest.raises(ValueError, match=method):
        other.load(path)


@pytest.mark.parametrize("method", CASES)
def test_prediction_shapes(method, tiny, fitted, ctx):
    _, _, test = tiny
    model = fitted(method)
    pred = model.predict(test.X[:37])
    assert pred.sets.ndim == 2 and pred.sets.shape[0] == 37 and pred.sets.dtype == np.int64
    assert pred.confidence.shape == (37,)
    assert np.all((pred.confidence >= 0) & (pred.confidence <= 1))
    s = pred.sets
    assert (s[:, 0] >= 0).all() and ((s >= 0).sum(1) <= ctx.max_len).all()  # 1..max_len actions
    valid = s >= 0
    assert (valid[:, 1:] <= valid[:, :-1]).all()  # padding only at the end
    assert np.all(np.where(valid[:, 1:], s[:, 1:] > s[:, :-1], True))  # strictly ascending
    assert (s < ctx.n_actions).all()
    assert model.predict(test.X[0]).sets.shape[0] == 1
    with pytest.raises(ValueError, match="X"):
        model.predict(test.X[:, :-1])


@pytest.mark.parametrize("method", METHODS)
def test_unknown_hyperparameter_is_named(method):
    with pytest.raises(ValueError, match="no_such_knob"):
        GENERATORS[method](no_such_knob=3)


@pytest.mark.parametrize("case", TORCH_CASES)
def test_same_seed_same_model(case, tiny, ctx):
    _, train, test = tiny
    params = PARAMS[case] | {"max_epochs": 2}
    a = build_generator(method_of(case), params).fit(train, None, ctx).predict(test.X)
    b = build_generator(method_of(case), params).fit(train, None, ctx).predict(test.X)
    np.testing.assert_array_equal(a.sets, b.sets)
    np.testing.assert_array_equal(a.confidence, b.confidence)


def test_knn_k1_returns_own_cfe(tiny, ctx):
    _, train, _ = tiny
    pred = HammingKnnGenerator(k=1).fit(train, None, ctx).predict(train.X)
    np.testing.assert_array_equal(padded(pred.sets, train.sets.shape[1]), train.sets)
    np.testing.assert_array_equal(pred.confidence, 1.0)


@pytest.mark.parametrize("method", ["full_action_seq", "full_action_multilabel"])
def test_full_action_only_knows_actions_in_training_cfes(method, tiny, ctx):
    _, train, test = tiny
    used = train.sets[:, 0]  # only the first action of each CFE: hide the others
    sub = train.sets.copy()
    sub[:, 1:] = -1
    train_one = type(train)(train.X, train.groups, sub, train.cost, train.class_ids, train.runtime)
    model = build_generator(method, PARAMS[method] | {"max_epochs": 2}).fit(train_one, None, ctx)
    pred = model.predict(test.X).sets
    assert set(pred[pred >= 0].tolist()) <= set(used.tolist())
    with pytest.raises(ValueError, match="action_vectors"):
        build_generator(method, PARAMS[method]).fit(
            train, None, FitContext(ctx.n_features, ctx.n_actions, ctx.max_len, seed=0, progress=False))


def test_fit_with_validation_split_and_run_dir(tiny, ctx, tmp_path):
    _, train, test = tiny
    run_ctx = FitContext(**{**ctx.__dict__, "run_dir": tmp_path / "run"})
    model = build_generator("named_action", PARAMS["named_action"] | {"max_epochs": 3}).fit(train, test, run_ctx)
    assert model.fit_info_["epochs"] >= 1
    assert (tmp_path / "run" / "logs" / "metrics.csv").exists()
    assert list((tmp_path / "run" / "checkpoints").glob("*.ckpt"))


def test_factored_output_can_express_the_exact_set_cover(tiny, ctx):
    """FactoredLogits' docstring claim, with hand-set weights: f(x) = lam (1 - x), g(s) = -(features s
    leaves uncovered), b_c = -cost(s_c). Its argmax is then the cheapest training CFE that covers
    every missing feature, i.e. the optimum whenever the optimum is in the vocabulary."""
    ds, train, test = tiny
    model = build_generator("named_cfe", {"output": "factored", "hidden": [], "embed_dim": ctx.n_features,
                                          "set_hidden": [ctx.n_features], "max_epochs": 1}).fit(train, None, ctx)
    net, n, lam = model.model_, ctx.n_features, 1e3
    V = torch.as_tensor(ds.world.actions, dtype=torch.float32)  # (A, n)
    with torch.no_grad():
        enc = net.agent_encoder[0]
        enc.weight.copy_(-lam * torch.eye(n))
        enc.bias.fill_(lam)
        first, last = net.set_encoder[0], net.set_encoder[-1]
        first.weight.copy_(-V.T)
        first.bias.fill_(1.0)
        last.weight.copy_(-torch.eye(n))
        last.bias.zero_()
        net.bias.copy_(-torch.as_tensor(ds.world.set_costs(model.classes_), dtype=torch.float32))
    pred = model.predict(test.X).sets
    vocab = {tuple(r[r >= 0]) for r in model.classes_}
    known = np.array([tuple(r[r >= 0]) in vocab for r in test.sets])
    assert known.mean() > 0.8
    np.testing.assert_allclose(ds.world.set_costs(pred)[known], test.cost[known], rtol=1e-6)
    _, _, valid = ds.world.rollout(test.X, pred)
    assert valid[known].all()


def test_factored_output_checks_its_params():
    with pytest.raises(ValueError, match="output"):
        build_generator("named_cfe", {"output": "sparse"})
    with pytest.raises(ValueError, match="embed_dim"):
        build_generator("named_cfe", {"output": "factored", "embed_dim": 0})
    with pytest.raises(ValueError, match="accelerator"):
        build_generator("named_action", {"accelerator": "tpu"})


@pytest.mark.parametrize("schedule, min_epochs", [("onecycle", 4), ("constant", 0)])
def test_early_stopping_waits_for_the_warm_up(schedule, min_epochs, ctx):
    """A validation loss that only rises stops training after ``patience`` epochs, counted from the
    end of one-cycle's warm-up (20% of 20 epochs = 4), not from the first epoch."""
    from torch import nn

    from learners.lightning_fit import fit_lightning
    from learners.torch_training import TorchParams

    calls = {"val": 0}

    def loss(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        out = ((model(x) - y) ** 2).mean()
        if not model.training:
            calls["val"] += 1
            return out * 0 + calls["val"]  # rises at every validation epoch
        return out

    data = (torch.randn(64, 3), torch.randn(64, 1))
    params = TorchParams(max_epochs=20, patience=1, batch_size=32, schedule=schedule)
    info = fit_lightning(nn.Linear(3, 1), loss, data, data, params, ctx)
    assert min_epochs + 1 <= info["epochs"] <= min_epochs + 3, info
