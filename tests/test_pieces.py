"""``pieces.piece_optimum`` under integer columns, the rules and their cost weights (issue 55), against
enumeration: on the all-discrete world of ``test_mace_rules`` (1,440 states) with its MLP, every
state on the start's linear piece is enumerated; the MILP's point is accepted, keeps the rules, is
never farther than the start and never nearer than the enumerated optimum of the piece; where the
rules have no disjunction (step bounds, cost weights) it is that optimum. The start may be the
agent itself (a rejected start: its own piece)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.rules import RuleSet
from envs.tabular import TabularWorld
from learners.tabular.geometry import MARGIN, WorldGeometry
from learners.tabular.pieces import affine_layers, piece_optimum
from tests.test_mace import _all_states, _fit, _negatives
from tests.test_mace_rules import KINDS, _data, _schema


@pytest.fixture(scope="module")
def mlp():
    X, y = _data()
    return _fit("mlp", X, y), X


def _pattern(world: TabularWorld, R: np.ndarray) -> np.ndarray:
    weights, biases = affine_layers(world)
    h, out = R, []
    for W, b in zip(weights[:-1], biases[:-1], strict=True):
        z = h @ W + b
        out.append(z > 0)
        h = np.maximum(z, 0.0)
    return np.concatenate(out, 1)


@pytest.mark.parametrize("rules", ["none", *KINDS])
def test_piece_optimum_is_the_enumerated_optimum_of_the_piece(mlp, rules):
    model, X = mlp
    world = TabularWorld(f"pieces/{rules}", _schema(), model,
                         rules=None if rules == "none" else RuleSet.from_dict(KINDS[rules]))
    geo = WorldGeometry.of(world, "one")
    S = _all_states(world.schema)
    moving = geo.numeric & ~geo.fixed
    exact = rules in ("none", "steps", "weights")  # no disjunction: the MILP's region is the whole piece
    agents = _negatives(world, X, 6)
    checked = 0
    for x in agents:
        ok = world.accepts(S) & geo.keeps(x[None], S) & ~geo.violations(np.broadcast_to(x, S.shape), S)
        starts = [x, *S[ok][np.argsort(geo.distance(x[None], S[ok]))[:3]]]  # the agent and its 3 nearest answers
        for c in starts:
            score = float(world.model.score(c[None])[0])
            need = 2 * MARGIN if score < MARGIN else min(2 * MARGIN, score)
            same = (S[:, ~moving] == c[~moving]).all(1) & (_pattern(world, S) == _pattern(world, c[None])).all(1)
            region = same & geo.keeps(x[None], S) & ~geo.violations(np.broadcast_to(x, S.shape), S) \
                & (world.model.score(S) >= need - 1e-12)
            R = piece_optimum(world, geo, x[None], c[None].copy())[0]
            d_start = geo.distance(x[None], c[None])[0] if score >= MARGIN else np.inf
            d = geo.distance(x[None], R[None])[0]
            if (R != c).any():  # replaced: an accepted, rule-keeping, nearer point of the box
                assert world.model.score(R[None])[0] >= MARGIN and geo.keeps(x[None], R[None])[0]
                assert not geo.violations(x[None], R[None])[0] and d < d_start
            if region.any():
                best = geo.distance(x[None], S[region]).min()
                assert d >= best - 1e-9  # never nearer than the piece allows
                if exact:
                    assert d <= best + 1e-9, (rules, x, c, R, best)
                checked += 1
    assert checked >= 3


def test_piece_optimum_leaves_rejected_pieces_and_other_models_alone(mlp):
    """A rejected start whose piece cannot clear the margin comes back as it was; a tree has no pieces."""
    model, X = mlp
    world = TabularWorld("pieces/none", _schema(), model)
    geo = WorldGeometry.of(world, "one")
    x = _negatives(world, X, 1)[0]
    lo, hi = geo.box(x[None])
    far = np.where(geo.numeric & ~geo.fixed, lo[0], x)  # every movable column at its low end
    R = piece_optimum(world, geo, x[None], far[None].copy())[0]
    assert (R == far).all() or world.model.score(R[None])[0] >= MARGIN
    tree_world = TabularWorld("pieces/tree", _schema(), _fit("tree", *_data()))
    T = piece_optimum(tree_world, WorldGeometry.of(tree_world, "one"), x[None], far[None].copy())
    np.testing.assert_array_equal(T[0], far)
