"""Consequence-aware cost model: c_i(x) = b_i * g_i(x) (CSCF paper, section 3.2, Eq. 1 and 2).

A feature relationship graph holds, for edges k -> h, functions tau_kh(x) in [0, 1]. The discount
of a feature is the average of its incoming tau (Eq. 1); the discount of an action is the average
over the features it affects that have incoming edges (Eq. 2), and 1 when none has (the paper:
"g_i evaluates to 1.0 if no feature in I_a is influenced by another one"). With no graph, c = b.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TauFn = Callable[[np.ndarray], np.ndarray]  # (batch, d) states -> (batch,) factors in [0, 1]


@dataclass(frozen=True)
class Edge:
    """tau_kh: how holding/raising feature ``source`` makes changing ``target`` cheaper."""

    source: int
    target: int
    tau: TauFn


class ConsequenceGraph:
    """The feature relationship graph G = (X, E) of the CSCF cost model, vectorized over states."""

    def __init__(self, n_features: int, edges: list[Edge]):
        for e in edges:
            for end in (e.source, e.target):
                if not 0 <= end < n_features:
                    raise ValueError(f"edges: feature index {end} outside [0, {n_features})")
        self.n_features = n_features
        self.edges = list(edges)
        self.in_degree = np.bincount([e.target for e in edges], minlength=n_features).astype(float)

    def feature_discounts(self, X: np.ndarray) -> np.ndarray:
        """Eq. 1: g_hat_h(x) for every feature (1 where h has no incoming edge); shape (batch, d)."""
        X = np.atleast_2d(X)
        total = np.zeros((X.shape[0], self.n_features))
        for e in self.edges:
            total[:, e.target] += np.asarray(e.tau(X), dtype=float)
        has = self.in_degree > 0
        out = np.ones_like(total)
        out[:, has] = total[:, has] / self.in_degree[has]
        return out

    def action_discounts(self, X: np.ndarray, affected: np.ndarray) -> np.ndarray:
        """Eq. 2: g_i(x) for actions whose affected features are the rows of ``affected`` (A, d).

        Returns (batch, A): the mean feature discount over affected features with incoming edges,
        1 for actions that touch none.
        """
        affected = np.asarray(affected, dtype=bool)
        influenced = affected & (self.in_degree > 0)
        counts = influenced.sum(axis=1)
        ghat = self.feature_discounts(X)
        sums = ghat @ influenced.T.astype(float)
        return np.where(counts > 0, sums / np.maximum(counts, 1), 1.0)


def capability_graph(n_features: int, edges: list[tuple[int, int, float]]) -> ConsequenceGraph:
    """A graph for binary capability worlds: holding capability k multiplies the effort of
    changing h by ``factor`` (tau_kh = factor if x_k = 1 else 1)."""
    out = []
    for k, h, factor in edges:
        if not 0.0 <= factor <= 1.0:
            raise ValueError(f"edges: discount factor {factor} for {k}->{h} must be in [0, 1]")
        out.append(Edge(k, h, lambda X, k=k, f=factor: np.where(X[:, k] > 0, f, 1.0)))
    graph = ConsequenceGraph(n_features, out)
    graph.capability_edges = [(int(k), int(h), float(f)) for k, h, f in edges]  # kept for saving
    return graph
