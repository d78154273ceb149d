"""Scoring GeCo's candidates: the black box, or the model partially evaluated on the agent (paper §5.2).

Every candidate differs from the agent x only in its groups Δ'; all other features are the
constants of x. ``BlackBox`` builds each candidate's full row and calls ``predict_proba`` (the
only option for a pure black box; with the Δ-representation this is the materialization cost the
paper describes). When the model's code is at hand (the project's ``TreeEnsemble``,
``LinearModel`` and ``MLPModel``), ``specialize`` returns a model specialised to x instead:

- **Trees and forests.** Every node's test is decided for x once; nodes on columns no candidate
  can change are folded away; a candidate reads its own value only at nodes on its changed
  groups Δ' (from the Δ-representation directly) and x's decision everywhere else. All trees
  and all candidates descend together, one vectorized step per level.
- **Logistic regression and ReLU MLPs.** The first layer's product with x is precomputed into
  the bias; a candidate adds ``(x' - x) @ W_1`` over its changed columns only (the
  Δ-representation adds one precomputed vector per changed group). Later layers are dense.

Both give the model's own probabilities (trees: bit for bit; affine layers: up to float
rounding), so GeCo's answer does not depend on the choice; the final answers are re-scored by
the black box anyway.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from envs.models import LinearModel, MLPModel, TreeEnsemble
from solvers.blackbox import CountingModel
from solvers.geco.population import Population
from solvers.geco.space import AgentSpace


class Evaluator(ABC):
    """P(accept) of a population, with its calls and rows counted."""

    def __init__(self) -> None:
        self.calls = 0  # batched evaluations
        self.rows = 0  # candidates scored

    def proba(self, pop: Population) -> np.ndarray:
        if len(pop) == 0:
            return np.zeros(0)
        self.calls += 1
        self.rows += len(pop)
        return self._proba(pop)

    @abstractmethod
    def _proba(self, pop: Population) -> np.ndarray:
        ...


class BlackBox(Evaluator):
    """Full rows into ``predict_proba`` (one call per ``max_cells`` cells, normally one per generation)."""

    def __init__(self, model: CountingModel, max_cells: int = 1 << 24) -> None:
        super().__init__()
        self.model = model  # the counted black box
        self.max_cells = max_cells  # rows x columns materialized per call at most

    def _proba(self, pop: Population) -> np.ndarray:
        d = len(pop.agent.x)
        step = max(1, self.max_cells // max(d, 1))
        return np.concatenate([self.model.predict_proba(pop.take(np.arange(s, min(s + step, len(pop)))).rows())
                               for s in range(0, len(pop), step)])


def left_limits(tree: Any) -> np.ndarray:
    """The largest value that goes left at each node, as the model itself compares.

    A white-box copy that is bit-exact to scikit-learn compares ``float32(x) <= threshold``, which
    holds iff ``x <= U`` for its ``limits()``; an older copy compares ``x <= threshold``.
    """
    limits = getattr(tree, "limits", None)
    return np.asarray(limits()[0] if callable(limits) else tree.threshold, float)


class ForestCode:
    """All trees of a ``TreeEnsemble`` in one node table (global node ids); built once per model."""

    def __init__(self, model: TreeEnsemble) -> None:
        offsets = np.concatenate([[0], np.cumsum([len(t.left) for t in model.trees])[:-1]]).astype(np.int64)
        pairs = list(zip(model.trees, offsets, strict=True))
        self.left = np.concatenate([np.where(t.left >= 0, t.left + o, -1) for t, o in pairs])
        self.right = np.concatenate([np.where(t.right >= 0, t.right + o, -1) for t, o in pairs])
        self.feature = np.concatenate([t.feature for t in model.trees])
        self.limit = np.concatenate([left_limits(t) for t in model.trees])
        self.p1 = np.concatenate([t.p1 for t in model.trees])
        self.boosted = bool(getattr(model, "boosted", False))  # P = sigmoid(sum of leaf values), not mean P(1)
        if self.boosted:
            self.p1 = self.p1 - np.concatenate([t.p0 for t in model.trees])  # the leaf value p1 - p0
        self.roots = offsets
        self.internal = self.left >= 0
        depth, frontier = 0, self.roots
        while frontier.size:
            frontier = np.concatenate([self.left[frontier], self.right[frontier]])
            frontier = frontier[frontier >= 0]
            depth += 1
        self.hops = int(np.ceil(np.log2(depth + 1)))  # pointer-jumping rounds that cover a root-leaf path

    def specialize(self, agent: AgentSpace) -> ForestSpecializer:
        return ForestSpecializer(self, agent)


class ForestSpecializer(Evaluator):
    """A tree ensemble partially evaluated on the agent x.

    Every test of x is decided once (``x_left``). Nodes on columns no candidate can change (an
    immutable feature, a group without feasible values) are folded away by pointer jumping, so
    M_x holds only nodes on changeable columns. A candidate then descends all trees at once
    (one vectorized step per level): at a node on one of its changed groups Δ' it compares its
    own value (read from the Δ-representation), at any other node it takes x's branch.
    """

    def __init__(self, code: ForestCode, agent: AgentSpace) -> None:
        super().__init__()
        self.code = code
        f, prog = code, agent.space.program
        n = len(f.left)
        self.x_left = agent.x[f.feature] <= f.limit
        child_x = np.where(f.internal, np.where(self.x_left, f.left, f.right), np.arange(n))
        changeable = np.zeros(len(agent.x) + 1, bool)
        changeable[agent.mutable_cols()] = True
        kept = f.internal & changeable[f.feature]
        jump = np.where(kept | ~f.internal, np.arange(n), child_x)
        for _ in range(f.hops):
            jump = jump[jump]  # the first kept node or leaf at or below, following x
        self.left = jump[np.maximum(f.left, 0)]
        self.right = jump[np.maximum(f.right, 0)]
        self.roots = jump[f.roots]
        self.group = np.where(f.internal, prog.col_group[f.feature], len(prog.groups))  # leaves: no group

    def _proba(self, pop: Population) -> np.ndarray:
        f = self.code
        changed = np.hstack([pop.changed(), np.zeros((len(pop), 1), bool)])  # (P, G+1)
        rows = np.arange(len(pop))[:, None]
        node = np.broadcast_to(self.roots, (len(pop), len(self.roots)))
        while True:
            active = f.internal[node]
            if not active.any():
                break
            own = changed[rows, self.group[node]]
            go_left = np.where(own, pop.values_at(f.feature[node]) <= f.limit[node], self.x_left[node])
            node = np.where(active, np.where(go_left, self.left[node], self.right[node]), node)
        values = np.ascontiguousarray(f.p1[node].T)
        if not f.boosted:
            return values.mean(axis=0)  # the model's own average over trees
        margin = np.zeros(len(pop))
        for v in values:  # in tree order, as the model sums
            margin += v
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-margin))


class AffineCode:
    """Logistic regression or a ReLU MLP as (first layer, later layers); built once per model."""

    def __init__(self, model: LinearModel | MLPModel) -> None:
        if isinstance(model, LinearModel):
            self.W1, self.b1, self.rest = model.w[:, None], np.array([model.b]), []
        else:
            self.W1, self.b1 = model.weights[0], model.biases[0]
            self.rest = list(zip(model.weights[1:], model.biases[1:], strict=True))

    def specialize(self, agent: AgentSpace) -> AffineSpecializer:
        return AffineSpecializer(self, agent)


class AffineSpecializer(Evaluator):
    """Logistic regression or a ReLU MLP with the first layer's product with x folded into the bias."""

    def __init__(self, code: AffineCode, agent: AgentSpace) -> None:
        super().__init__()
        self.code = code
        self.base = agent.x @ code.W1 + code.b1  # the static part of layer 1

    def _proba(self, pop: Population) -> np.ndarray:
        z = self.base + pop.delta_dot(self.code.W1)
        for W, b in self.code.rest:
            z = np.maximum(z, 0.0) @ W + b
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-z[:, 0]))


def model_code(model: Any) -> ForestCode | AffineCode | None:
    """The model's code for partial evaluation, or None when it is a pure black box."""
    if isinstance(model, TreeEnsemble):
        return ForestCode(model)
    if isinstance(model, LinearModel | MLPModel):
        return AffineCode(model)
    return None
