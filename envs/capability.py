"""The capability (set-cover) world of the learning-CFE paper (sections 2 and 4.1).

Binary features are capabilities; an action adds capabilities (x' = max(x, a_i)); the classifier
accepts when x_j >= t_j for every j; costs are additive, or order-dependent with a consequence
graph (holding capability k makes actions that touch feature h cheaper, CSCF Eq. 1-2). Agents
may belong to hidden groups that select their thresholds (differential validity) and the actions
they may use (grouped access).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.classifiers import ThresholdClassifier
from envs.costs import ConsequenceGraph, capability_graph
from envs.recourse import Recourse


class CapabilityWorld:
    """Actions ``(A, n)`` over ``n`` binary capabilities, with efforts ``costs`` ``(A,)``.

    ``thresholds``: (n,) or (G, n); ``access``: None (every action for everyone) or (G, A) bool;
    ``discount_edges``: ``(k, h, factor)`` triples of the consequence graph, or None for c = b.
    """

    def __init__(self, actions: np.ndarray, costs: np.ndarray, thresholds: np.ndarray,
                 access: np.ndarray | None = None, discount_edges: Sequence[tuple[int, int, float]] | None = None,
                 action_names: Sequence[str] | None = None, feature_names: Sequence[str] | None = None):
        actions = np.asarray(actions)
        costs = np.asarray(costs, dtype=float)
        if actions.ndim != 2 or actions.shape[0] == 0:
            raise ValueError(f"actions: expected a non-empty (A, n) matrix, got shape {actions.shape}")
        if not np.isin(actions, (0, 1)).all():
            raise ValueError("actions: entries must be 0 or 1")
        if costs.shape != (actions.shape[0],):
            raise ValueError(f"costs: expected shape ({actions.shape[0]},), got {costs.shape}")
        if not np.all(np.isfinite(costs)) or (costs <= 0).any():
            raise ValueError("costs: every action cost must be finite and > 0")
        self.actions = actions.astype(bool)
        self.costs = costs
        self.classifier = ThresholdClassifier(thresholds)
        if self.classifier.n_features != self.n_features:
            raise ValueError(f"thresholds: expected {self.n_features} features, got {self.classifier.n_features}")
        if not np.isin(self.classifier.thresholds, (0, 1)).all():
            raise ValueError("thresholds: entries must be 0 or 1")
        if access is not None:
            access = np.atleast_2d(np.asarray(access, dtype=bool))
            if access.shape[1] != self.n_actions:
                raise ValueError(f"access: expected {self.n_actions} columns, got shape {access.shape}")
        self.access = access
        groups = {len(self.classifier.thresholds), 1 if access is None else len(access)} - {1}
        if len(groups) > 1:
            raise ValueError(f"thresholds and access: group counts differ ({sorted(groups)})")
        self.n_groups = groups.pop() if groups else 1
        self.discount_edges = [tuple(e) for e in discount_edges] if discount_edges else []
        self.graph: ConsequenceGraph | None = (
            capability_graph(self.n_features, self.discount_edges) if self.discount_edges else None)
        self.action_names = list(action_names) if action_names is not None else [f"a{i}" for i in range(self.n_actions)]
        self.feature_names = list(feature_names) if feature_names is not None else [f"f{j}" for j in range(self.n_features)]
        if len(self.action_names) != self.n_actions or len(self.feature_names) != self.n_features:
            raise ValueError("action_names/feature_names: lengths must match the action matrix")

    # ------------------------------------------------------------------ shapes and checks
    @property
    def n_actions(self) -> int:
        return self.actions.shape[0]

    @property
    def n_features(self) -> int:
        return self.actions.shape[1]

    @property
    def order_matters(self) -> bool:
        return self.graph is not None

    def thresholds_of(self, groups: np.ndarray | None) -> np.ndarray:
        t = self.classifier.thresholds.astype(bool)
        return t[0] if len(t) == 1 or groups is None else t[np.asarray(groups)]

    def allowed(self, groups: np.ndarray | int | None) -> np.ndarray:
        """Which actions each agent may use: (A,) for a scalar group, (B, A) for a batch."""
        if self.access is None:
            shape = (self.n_actions,) if groups is None or np.ndim(groups) == 0 else (len(groups), self.n_actions)
            return np.ones(shape, dtype=bool)
        if groups is None:
            if len(self.access) > 1:
                raise ValueError("group: this world has grouped action access; pass each agent's group")
            return self.access[0]
        return self.access[0 if len(self.access) == 1 else np.asarray(groups)]

    def validate_agents(self, X: Any, groups: Any = None, *, name: str = "x") -> tuple[np.ndarray, np.ndarray | None]:
        """Return agents as a (B, n) uint8 array (and groups as int array) or raise a clear ValueError."""
        try:
            arr = np.asarray(X, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: values must be 0 or 1") from None
        arr = np.atleast_2d(arr)
        if arr.ndim != 2 or arr.shape[1] != self.n_features:
            raise ValueError(f"{name}: expected {self.n_features} features per agent, got shape {np.shape(X)}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name}: contains NaN or inf")
        if not np.isin(arr, (0.0, 1.0)).all():
            r, c = np.argwhere(~np.isin(arr, (0.0, 1.0)))[0]
            raise ValueError(f"{name}: row {r} feature {c} is {arr[r, c]}; capability features are 0 or 1")
        if groups is None:
            if self.n_groups > 1:
                raise ValueError(f"group: this world has {self.n_groups} groups; pass each agent's group")
            return arr.astype(np.uint8), None
        g = np.atleast_1d(np.asarray(groups))
        if g.shape != (arr.shape[0],) or not np.issubdtype(g.dtype, np.integer):
            raise ValueError(f"group: expected {arr.shape[0]} integer group ids, got {g!r}")
        if ((g < 0) | (g >= self.n_groups)).any():
            raise ValueError(f"group: ids must be in [0, {self.n_groups}), got {sorted(set(g.tolist()))}")
        return arr.astype(np.uint8), g.astype(np.int64)

    # ------------------------------------------------------------------ dynamics
    def deficits(self, X: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        """The capabilities each agent still needs: t & ~x, (B, n) bool."""
        return self.thresholds_of(groups) & ~np.atleast_2d(X).astype(bool)

    def accepts(self, X: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        return ~self.deficits(X, groups).any(axis=-1)

    def step_costs(self, X: np.ndarray) -> np.ndarray:
        """Cost of every action at every state: c = b * g(x), shape (B, A)."""
        X = np.atleast_2d(X)
        if self.graph is None:
            return np.broadcast_to(self.costs, (X.shape[0], self.n_actions))
        return self.costs * self.graph.action_discounts(X.astype(float), self.actions)

    def set_costs(self, action_sets: np.ndarray) -> np.ndarray:
        """Order-blind cost (sum of efforts) of padded action-id rows (-1 = none), shape (B,)."""
        S = np.atleast_2d(action_sets)
        return np.where(S >= 0, self.costs[np.maximum(S, 0)], 0.0).sum(axis=1)

    def rollout(self, X: np.ndarray, sequences: np.ndarray, groups: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply padded action sequences (B, L; -1 = stop) to agents in batch.

        Returns final states (B, n), sequence costs (B,) priced in order, and validity (B,):
        accepted at the end, every action allowed for the agent's group and used at most once.
        """
        X = np.atleast_2d(X).astype(bool).copy()
        S = np.atleast_2d(np.asarray(sequences, dtype=np.int64))
        if S.shape[0] != X.shape[0]:
            raise ValueError(f"sequences: expected {X.shape[0]} rows, got {S.shape[0]}")
        if (S >= self.n_actions).any():
            raise ValueError(f"sequences: action ids must be < {self.n_actions}")
        total = np.zeros(len(X))
        ok = np.ones(len(X), dtype=bool)
        allowed = self.allowed(groups) if groups is not None else self.allowed(np.zeros(len(X), int))
        allowed = np.broadcast_to(allowed, (len(X), self.n_actions))
        rows = np.arange(len(X))
        for col in range(S.shape[1]):
            a = S[:, col]
            act = a >= 0
            if not act.any():
                continue
            ai = np.maximum(a, 0)
            ok &= ~act | allowed[rows, ai]
            ok &= ~act | ~(S[:, :col] == a[:, None]).any(axis=1)  # no action twice
            step = self.step_costs(X[act])[np.arange(act.sum()), ai[act]]
            total[act] += step
            X[act] |= self.actions[ai[act]]
        ok &= self.accepts(X, groups)
        return X.astype(np.uint8), total, ok

    def evaluate(self, x: np.ndarray, sequence: Sequence[int], group: int | None = None, method: str = "given",
                 runtime: float = 0.0, **extra: Any) -> Recourse:
        """One agent and one ordered action sequence -> a priced, checked :class:`Recourse`."""
        t0 = time.perf_counter()
        seq = np.array([list(sequence)], dtype=np.int64).reshape(1, -1)
        if seq.size == 0:
            seq = np.full((1, 1), -1, dtype=np.int64)
        final, cost, ok = self.rollout(np.atleast_2d(x), seq, None if group is None else np.array([group]))
        ids = tuple(int(i) for i in sequence)
        return Recourse(tuple((self.action_names[i], None) for i in ids), ids, final[0], float(cost[0]),
                        bool(ok[0]), method, runtime=runtime or time.perf_counter() - t0, **extra)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "capability",
            "actions": self.actions.astype(int).tolist(),
            "costs": self.costs.tolist(),
            "thresholds": self.classifier.thresholds.astype(int).tolist(),
            "access": None if self.access is None else self.access.astype(int).tolist(),
            "discount_edges": [list(e) for e in self.discount_edges],
            "action_names": self.action_names,
            "feature_names": self.feature_names,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CapabilityWorld:
        if d.get("kind") != "capability":
            raise ValueError(f"world: expected kind 'capability', got {d.get('kind')!r}")
        return cls(np.array(d["actions"]), np.array(d["costs"]), np.array(d["thresholds"]),
                   None if d["access"] is None else np.array(d["access"]), d["discount_edges"] or None,
                   d["action_names"], d["feature_names"])

    def fingerprint(self) -> str:
        """A content hash of the world definition (detects a changed world at load time)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
