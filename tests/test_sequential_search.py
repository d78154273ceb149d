"""The verified beam search of the sequential policies and the full-action encoder-decoder:
exhaustive width equals the exact grid search, answers are the world's, grouping is right, the
encoder-decoder trains, decodes, saves and loads."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sequential_candidates import FlatGrid
from envs.sequential_env import default_world
from learners.base import Generator, build_generator
from learners.policies.sequential import SequentialLookahead, sequential_context
from learners.policies.sequential_search import Nodes, beam_search, top_per_group
from solvers.sequential import ExactSequenceSearch


def _cheapest_first(nodes: Nodes, cand) -> tuple[np.ndarray, None]:
    """A ranking with no learning: minus the path's price after the step."""
    return -(nodes.cost[:, None] + cand.cost), None


@pytest.mark.parametrize("name", ["german", "adult"])
def test_exhaustive_beam_equals_exact(name):
    """With a width above the number of (action, value) steps nothing leaves the beam but what the
    price bound prunes (prices are >= 0), so the search is exhaustive: its cheapest answer of <= 2
    steps costs what the exact grid search's does."""
    world, X = default_world(name)
    X = X[:6] if name == "german" else X[[0, 5, 11]]
    A, V, found, stats = beam_search(world, _cheapest_first, X, width=10_000, max_steps=2, chunk=64)
    r = world.rollout(X, A, V)
    exact = ExactSequenceSearch(max_length=2)
    for i, x in enumerate(X):
        e = exact.solve(world, x)[0]
        assert found[i] == e.found
        if e.found:
            assert r.ok[i] and world.accepts(r.final[i:i + 1])[0]
            assert r.cost[i] == pytest.approx(e.cost, rel=1e-9)
    assert stats["expanded_per_agent"] > 100


@pytest.mark.parametrize("name", ["german", "adult"])
def test_scored_children_decide_as_the_world(name, monkeypatch):
    """With candidate scores the beam decides acceptance by their sign outside a margin and applies
    only the next beam's children; with an infinite margin every child is applied and decided by
    ``world.accepts`` (the reference). Both searches give the same answers. The scores' error is
    far inside the margin on the bundled worlds."""
    import learners.policies.sequential_search as search
    from envs.sequential_candidates import FlatGrid, candidates

    world, X = default_world(name)
    X = X[:25]
    la = SequentialLookahead(depth=2, estimate=True).fit(None, None, sequential_context(world))
    fast = la.predict_sequences(X, beam_width=6)
    monkeypatch.setattr(search, "SCORE_MARGIN", np.inf)
    ref = la.predict_sequences(X, beam_width=6)
    np.testing.assert_array_equal(fast.sets, ref.sets)
    np.testing.assert_array_equal(fast.values, ref.values)
    np.testing.assert_array_equal(fast.cost, ref.cost)
    grid = FlatGrid.of(world)
    cand = candidates(world, grid, X, np.zeros((len(X), world.n_actions), bool))
    i, k = np.nonzero(cand.mask)
    tr = world.apply(X[i], grid.action[k], grid.value[k])
    np.testing.assert_array_equal(tr.cost, cand.cost[i, k])  # the beam prices children by these
    exact = world.score(tr.states)
    assert (np.abs(exact - cand.score[i, k]) / np.maximum(1.0, np.abs(exact))).max() < search.SCORE_MARGIN / 20


def test_beam_answers_are_the_worlds_and_width_helps():
    """Every found answer is accepted and priced by ``world.rollout``; a wider beam of the same
    ranking never answers dearer (its beam contains the narrower one's paths only up to ties, so
    check the sum) and the lookahead's beam keeps raw validity."""
    world, X = default_world("german")
    X = X[:30]
    la = SequentialLookahead(depth=2, estimate=True).fit(None, None, sequential_context(world))
    raw = la.predict_sequences(X)
    costs, nodes = {}, {}
    for width in (2, 8):
        p = la.predict_sequences(X, beam_width=width)
        assert p.accepted.mean() >= raw.accepted.mean()
        r = world.rollout(X, p.sets, p.values)
        np.testing.assert_allclose(r.cost, p.cost)
        np.testing.assert_array_equal(r.ok & world.accepts(r.final), p.accepted)
        costs[width] = p.cost[p.accepted & raw.accepted].sum()
        # the search's statistics: one root per agent, at most ``width`` nodes per later depth, and
        # every node computes its whole grid of children
        nodes[width] = p.search["nodes_per_agent"]
        assert 1 <= nodes[width] <= 1 + width * (la._max_steps() - 1)
        assert p.search["scored_per_agent"] == pytest.approx(nodes[width] * FlatGrid.of(world).size)
    assert costs[8] <= costs[2] + 1e-9
    assert nodes[8] > nodes[2]
    with pytest.raises(ValueError, match="beam_width"):
        la.predict_sequences(X, beam_width=0)


def test_already_accepted_and_no_recourse():
    """An accepted agent gets the empty sequence; a search that may not take any step (max_steps
    reached by masking everything) answers nothing and says so."""
    world, X = default_world("german")
    acc = world.accepts(X)
    x_ok = X[acc][:1] if acc.any() else None
    none = lambda nodes, cand: (np.full(cand.mask.shape, -np.inf), None)  # noqa: E731
    A, V, found, _ = beam_search(world, none, X[:3], width=2, max_steps=3, score_children=False)
    assert not found.any() and (A == -1).all()
    if x_ok is not None:
        A, V, found, _ = beam_search(world, none, x_ok, width=2, max_steps=3)
        assert found.all() and (A == -1).all()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(-5, 5)), min_size=0, max_size=40), st.integers(1, 4))
def test_top_per_group(items, k):
    group = np.array([g for g, _ in items], dtype=np.int64)
    key = np.array([v for _, v in items], dtype=float)
    got = set(top_per_group(group, key, k).tolist())
    want = set()
    for g in set(group.tolist()):
        idx = [i for i in range(len(items)) if group[i] == g]
        idx.sort(key=lambda i: (-key[i], i))
        want |= set(idx[:k])
    assert got == want


@pytest.fixture(scope="module")
def labelled():
    """30 German agents labelled by the two-step lookahead (a cheap stand-in for the sequencer)."""
    world, X = default_world("german")
    X = X[:30]
    p = SequentialLookahead(depth=2).fit(None, None, sequential_context(world)).predict(X)
    return world, SimpleNamespace(X=X, actions=p.sets, values=p.values, cost=np.where(p.accepted, p.cost, np.inf),
                                  ok=p.accepted)


def test_encoder_decoder_trains_decodes_saves(labelled, tmp_path):
    world, lab = labelled
    model = build_generator("seq_encoder_decoder", {"epochs": 30, "eval_every": 10, "state_size": 32,
                                                    "hidden": [32], "augment_agents": 20}).fit(
        lab, None, sequential_context(world))
    info = model.fit_info_
    assert info["augmented_agents"] > 0 and len(info["heldout"]) == 3
    losses = [h["loss"] for h in info["heldout"]]
    assert losses[-1] < losses[0]  # it learns the training sequences
    raw = model.predict(lab.X)
    beam = model.predict_sequences(lab.X, beam_width=8)
    for p in (raw, beam):
        r = world.rollout(lab.X, p.sets, p.values)
        np.testing.assert_allclose(r.cost, p.cost)
        np.testing.assert_array_equal(r.ok & world.accepts(r.final), p.accepted)
    assert beam.accepted.mean() >= raw.accepted.mean()
    model.save(tmp_path / "ed")
    assert not list((tmp_path / "ed").glob("*.pkl"))
    loaded = Generator.load(tmp_path / "ed")
    for w in (1, 8):
        a, b = model.predict_sequences(lab.X, beam_width=w), loaded.predict_sequences(lab.X, beam_width=w)
        np.testing.assert_array_equal(a.sets, b.sets)
        np.testing.assert_allclose(a.cost, b.cost)


def test_encoder_decoder_errors(labelled):
    world, lab = labelled
    with pytest.raises(ValueError, match="head_dim"):
        build_generator("seq_encoder_decoder", {"head_dim": 0})
    with pytest.raises(ValueError, match="train.actions"):
        build_generator("seq_encoder_decoder", {}).fit(SimpleNamespace(X=lab.X), None, sequential_context(world))
    with pytest.raises(ValueError, match="ctx.world"):
        build_generator("seq_encoder_decoder", {}).fit(lab, None, SimpleNamespace(world=None, seed=0))
    with pytest.raises(RuntimeError, match="not fitted"):
        build_generator("seq_encoder_decoder", {}).predict(lab.X)


def test_encoder_decoder_head_inference_path_and_selection(labelled):
    """The chunked, cached inference head gives the autograd path's logits, the cache follows new
    weights, and the model-selection options (recombined held-out agents, a beam) are used."""
    import torch

    world, lab = labelled
    model = build_generator("seq_encoder_decoder", {"epochs": 4, "eval_every": 2, "state_size": 16, "hidden": [16],
                                                    "val_augment": 7, "select_width": 4}).fit(
        lab, None, sequential_context(world))
    assert model.fit_info_["heldout_agents"] == 3 + 7  # 10% of the 30 agents, plus the recombined ones
    net = model.net_
    state = torch.randn(37, net.from_state.in_features)
    with torch.no_grad():
        fast = net.head(net.from_state(state), rows=5)
    with torch.enable_grad():
        slow = net.head(net.from_state(state))
    torch.testing.assert_close(fast, slow.detach())
    weights = {k: v + 0.5 if k.startswith("from_token") else v for k, v in net.state_dict().items()}
    net.load_state_dict(weights)  # the cached token part must not survive new weights
    with torch.no_grad():
        after = net.head(net.from_state(state))
    with torch.enable_grad():
        torch.testing.assert_close(after, net.head(net.from_state(state)).detach())
    assert not torch.allclose(after, fast)
    with pytest.raises(ValueError, match="select_width"):
        build_generator("seq_encoder_decoder", {"select_width": 0})
    with pytest.raises(ValueError, match="val_augment"):
        build_generator("seq_encoder_decoder", {"val_augment": -1})
