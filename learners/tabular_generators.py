"""Amortized counterfactual generators for the tabular worlds, trained on MACE's labels.

A generator answers a batch of rejected agents (encoded rows) with counterfactuals in one pass:

1. ``candidates(world, X)`` proposes K encoded rows per agent (the method's own idea);
2. every candidate is *projected* onto what the agent may reach (schema bounds, immutable and
   increase-/decrease-only features, integer codes rounded away from the agent, one valid 1 per
   one-hot group) and the whole (N, K) batch is checked with the model in one call;
3. the nearest accepted candidate (MACE's normalized distance, Eq. 3) is *polished*: its numeric
   changes shrink toward the agent by bisection while the model still accepts (a few batched
   calls), then each changed feature is tried back at the agent's value (one batched call).

Every point returned was itself accepted by a model call and lies in the agent's reachable box
(no value is recomputed after its check: ``x + (c - x)`` can miss ``c``'s last bit); an agent
none of whose candidates is accepted gets a NaN row (the server then falls back to a solver).
The polish only shortens the answer; it is a heuristic, and the answers carry no certificate.

Methods (``TABULAR_GENERATORS``):

- ``nearest_cfe``: no learning, the baseline. The k nearest training agents (Euclidean on the
  schema-scaled rows) lend their MACE counterfactual: the features they changed take the
  neighbour's new values (absolute) or the neighbour's change added to the agent (relative).
- ``named_cfe``: a named-CFE classifier (learners.named_cfe, the learning-CFE paper's MC model)
  over the set of raw features MACE changed; for each of its top classes, the nearest training
  agent with that class lends its values as above.

Persistence follows learners/base.py: ``config.json`` + ``arrays.npz`` (+ the classifier's
``weights.pt``), never a pickle.
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from envs.tabular import TabularWorld
from solvers.mace.distance import Norm, norm_weights, raw_features

MARGIN = 1e-6  # LR/MLP white boxes are float64 copies: an answer must clear this score to be sure


# ---------------------------------------------------------------------------------------- geometry

@dataclass
class WorldGeometry:
    """Per-column arrays of a tabular world that the vectorized steps below need."""

    lower: np.ndarray  # (D,) schema bounds
    upper: np.ndarray
    fixed: np.ndarray  # (D,) bool: immutable
    up: np.ndarray  # increase-only
    down: np.ndarray  # decrease-only
    integral: np.ndarray  # (D,) bool: integer codes (ordinal, binary, integer numbers, one-hot)
    numeric: np.ndarray  # (D,) bool: columns measured by |dx| / span (shrinkable)
    span: np.ndarray  # (D,) R_j of numeric columns (1 elsewhere)
    raw_of_column: np.ndarray  # (D,) raw feature index of each column
    raw_kinds: list[str]  # per raw feature: numeric | binary | nominal | group
    group_columns: list[np.ndarray]  # columns of each one-hot group
    weights: tuple[float, float, float]  # (alpha, beta, gamma) of Eq. 3

    @classmethod
    def of(cls, world: TabularWorld, norm: Norm = "one") -> WorldGeometry:
        """The geometry of ``world`` (cached per world object and norm: a server asks on every request)."""
        key = (id(world), norm if isinstance(norm, str) else tuple(norm))
        hit = _GEOMETRY.get(key)
        if hit is not None and hit[0] is world:
            return hit[1]
        geo = cls._build(world, norm)
        if len(_GEOMETRY) > 64:
            _GEOMETRY.clear()
        _GEOMETRY[key] = (world, geo)
        return geo

    @classmethod
    def _build(cls, world: TabularWorld, norm: Norm) -> WorldGeometry:
        schema = world.schema
        lo, hi = schema.bounds()
        mut = np.array([f.mutability for f in schema.features])
        raws = raw_features(schema)
        of_col = np.zeros(len(schema), np.int64)
        numeric = np.zeros(len(schema), bool)
        span = np.ones(len(schema))
        for j, r in enumerate(raws):
            of_col[list(r.columns)] = j
            if r.kind == "numeric":
                numeric[r.columns[0]] = True
                span[r.columns[0]] = r.span if r.span > 0 else np.inf
        integral = np.array([f.kind in ("binary", "ordinal", "categorical") or f.group is not None
                             or bool(getattr(f, "integer", False)) for f in schema.features])
        return cls(np.asarray(lo, float), np.asarray(hi, float), mut == "immutable", mut == "increase",
                   mut == "decrease", integral, numeric, span, of_col, [r.kind for r in raws],
                   [np.asarray(r.columns) for r in raws if r.kind == "group"], norm_weights(norm, len(raws)))

    def __post_init__(self) -> None:
        in_group = np.zeros(len(self.integral), bool)
        for cols in self.group_columns:
            in_group[cols] = True
        self.rounded = self.integral & ~in_group  # integer codes outside one-hot groups

    @property
    def n_raw(self) -> int:
        return len(self.raw_kinds)

    def box(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) reachable bounds per agent: schema bounds narrowed by mutability."""
        lo = np.where(self.fixed | self.up, np.maximum(self.lower, X), self.lower)
        hi = np.where(self.fixed | self.down, np.minimum(self.upper, X), self.upper)
        return lo, hi

    def project(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """Candidates ``C`` (N, K, D) made reachable for the agents ``X`` (N, D)."""
        Xb = X[:, None, :]
        lo, hi = self.box(X)
        C = np.clip(np.nan_to_num(C, nan=0.0), lo[:, None, :], hi[:, None, :])
        for cols in self.group_columns:  # exactly one 1 per one-hot group (its largest entry)
            g = C[..., cols]
            C[..., cols] = (np.arange(len(cols)) == g.argmax(-1)[..., None]).astype(float)
        ints = self.rounded
        if ints.any():  # round away from the agent: the change is at least the proposed one
            d = C[..., ints] - Xb[..., ints]
            C[..., ints] = Xb[..., ints] + np.sign(d) * np.ceil(np.abs(d) - 1e-9)
            C = np.clip(C, lo[:, None, :], hi[:, None, :])
        return C

    def deltas(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(..., J) per-raw-feature normalized deltas of candidates ``C`` (..., D) from ``X``."""
        diff = np.abs(C - X)
        out = np.zeros(C.shape[:-1] + (self.n_raw,))
        num = np.flatnonzero(self.numeric)
        out[..., self.raw_of_column[num]] = np.nan_to_num(diff[..., num] / self.span[num])
        other = np.flatnonzero(~self.numeric)
        if len(other):
            moved = (diff[..., other] > 1e-9).astype(float)
            np.maximum.at(np.moveaxis(out, -1, 0), self.raw_of_column[other], np.moveaxis(moved, -1, 0))
        return out

    def distance(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """MACE's Eq. 3 distance of ``C`` (..., D) from ``X`` (broadcast), in [0, 1]."""
        a, b, g = self.weights
        d = self.deltas(X, C)
        return a * (d > 1e-12).sum(-1) + b * d.sum(-1) + g * d.max(-1, initial=0.0)

    def violations(self, X: np.ndarray, C: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """(N,) bool: does a row of ``C`` leave the agent's reachable box or break a one-hot group?"""
        lo, hi = self.box(X)
        bad = ((C < lo - tol) | (C > hi + tol)).any(-1)
        for cols in self.group_columns:
            bad |= np.abs(C[:, cols].sum(-1) - 1) > tol
        ints = self.integral
        bad |= (np.abs(C[:, ints] - np.round(C[:, ints])) > tol).any(-1)
        return bad


_GEOMETRY: dict[tuple, tuple[TabularWorld, WorldGeometry]] = {}


def accepts(world: TabularWorld, X: np.ndarray) -> np.ndarray:
    """Acceptance as verified: bit-exact trees and forests as they are, LR/MLP copies with a margin."""
    X = np.atleast_2d(X)
    if getattr(world.model, "exact", False):
        return world.model.predict(X)
    return world.model.score(X) >= MARGIN


def accepted_distances(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(N, K) distance of each candidate row ``C`` (N, K, D) the model accepts, inf elsewhere and
    where a row is the agent itself: one model call, distances only of the accepted rows."""
    N, K, D = C.shape
    ok = accepts(world, C.reshape(-1, D)).reshape(N, K)
    i, k = np.nonzero(ok)
    d = np.full((N, K), np.inf)
    if len(i):
        rows = C[i, k]
        moved = (np.abs(rows - X[i]) > 1e-12).any(-1)  # the agent itself is no answer
        d[i[moved], k[moved]] = geo.distance(X[i[moved]], rows[moved])
    return d


def _line_search(world: TabularWorld, make, near: np.ndarray, far: np.ndarray, integral: np.ndarray, *,
                 rounds: int, probes: int) -> np.ndarray:
    """Per item, the accepted value nearest to ``near`` on the segment [near, far] (``far`` is
    accepted): ``probes`` evenly spaced points per item and round, all items in one model call
    (``make`` turns the (n, probes) values into rows), so ``rounds`` calls reach a resolution of
    (probes + 1) ** -rounds of the segment. Integer items probe integers (rounded away from near)."""
    near, far = near.astype(float).copy(), far.astype(float).copy()
    n, t = len(near), np.arange(1, probes + 1) / (probes + 1)
    every = np.arange(n)
    for _ in range(rounds):
        V = near[:, None] + (far - near)[:, None] * t[None, :]
        gap = np.abs(V - near[:, None])
        V = np.where(integral[:, None], near[:, None] + np.sign(far - near)[:, None] * np.ceil(gap - 1e-9), V)
        live = V != far[:, None]
        if not live.any():
            break
        ok = accepts(world, make(V)).reshape(n, probes) & live
        has = ok.any(1)
        j = ok.argmax(1)
        last_live = np.where(live.any(1), probes - 1 - live[:, ::-1].argmax(1), 0)
        new_near = np.where(has, np.where(j > 0, V[every, np.maximum(j - 1, 0)], near),
                            np.where(live.any(1), V[every, last_live], near))
        far = np.where(has, V[every, j], far)
        near = new_near
    return far


def split_edges(world: TabularWorld) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per column of a tree ensemble, its split thresholds with their ``split_limits`` (t, U, L):
    the values where its decision can change (empty for other models; cached per model)."""
    from envs.models import TreeEnsemble, split_limits

    model = getattr(world.model, "model", world.model)  # a counting wrapper forwards to the model
    if not isinstance(model, TreeEnsemble):
        return {}
    hit = _EDGES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    per: dict[int, list[np.ndarray]] = {}
    for t in model.trees:
        inner = t.left >= 0
        for c in np.unique(t.feature[inner]):
            per.setdefault(int(c), []).append(t.threshold[inner & (t.feature == c)])
    edges = {}
    for c, ts in per.items():
        t = np.unique(np.concatenate(ts))
        u, lft = split_limits(t)
        edges[c] = (t, np.asarray(u, float), np.asarray(lft, float))
    if len(_EDGES) > 64:
        _EDGES.clear()
    _EDGES[id(model)] = (model, edges)
    return edges


_EDGES: dict[int, tuple[Any, dict]] = {}


def crossings(edges: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    """(n, T) the value just across each split from ``x`` (n,): right of it above, left of it below."""
    t, u, lft = edges
    return np.where(t[None, :] >= x[:, None], lft[None, :], u[None, :])


def _leaf_boxes(model: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per tree, (lower, upper) (nodes, D): the closed box of float64 inputs that reach each node
    (``split_limits``: a left branch is x <= U, a right branch x >= L, exactly as sklearn tests)."""
    hit = model.__dict__.get("_leaf_boxes")
    if hit is not None:
        return hit
    out = []
    for t in model.trees:
        U, Lo = t.limits()
        n = len(t.left)
        lo = np.full((n, model.n_features), -np.inf)
        hi = np.full((n, model.n_features), np.inf)
        for k in range(n):  # sklearn numbers a child after its parent
            left, right = t.left[k], t.right[k]
            if left < 0:
                continue
            f = t.feature[k]
            lo[left], hi[left] = lo[k], hi[k]
            hi[left, f] = min(hi[k, f], U[k])
            lo[right], hi[right] = lo[k], hi[k]
            lo[right, f] = max(lo[k, f], Lo[k])
        out.append((lo, hi))
    model.__dict__["_leaf_boxes"] = out
    return out


def cell_clip(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """For a tree ensemble, the point of each accepted row's *cell* (the box where every tree
    reaches the same leaves, so the decision is the same) nearest its agent: the agent clipped
    into the cell and its reachable box (integer columns rounded inward, a one-hot group the row's
    own where the clip would break it), checked by one model call. Exact for every norm of Eq. 3,
    which is monotone in each |change|. Rows of other models, and NaN rows, come back unchanged."""
    from envs.models import TreeEnsemble

    model = getattr(world.model, "model", world.model)
    rows = np.flatnonzero(~np.isnan(C).any(1))
    if not isinstance(model, TreeEnsemble) or not len(rows):
        return C
    c, x = C[rows], X[rows]
    leaves = world.model.leaves(c)  # through a counting wrapper when there is one
    lo, hi = geo.box(x)
    for j, (blo, bhi) in enumerate(_leaf_boxes(model)):
        lo = np.maximum(lo, blo[leaves[:, j]])
        hi = np.minimum(hi, bhi[leaves[:, j]])
    P = np.clip(x, lo, hi)
    r = geo.rounded
    P[:, r] = np.where(P[:, r] > x[:, r], np.ceil(P[:, r] - 1e-9), np.where(P[:, r] < x[:, r], np.floor(P[:, r] + 1e-9), P[:, r]))
    for cols in geo.group_columns:
        broken = np.abs(P[:, cols].sum(1) - 1) > 1e-9
        P[np.ix_(broken, cols)] = c[np.ix_(broken, cols)]
    inside = ((P >= lo - 1e-12) & (P <= hi + 1e-12)).all(1)  # a rounding may leave the cell
    inside[inside] = accepts(world, P[inside])  # and the model has the last word
    P = np.where(inside[:, None], P, c)
    out = C.copy()
    out[rows] = P
    return out


def _edge_sweep(world: TabularWorld, geo: WorldGeometry, x: np.ndarray, c: np.ndarray, sweeps: int = 2) -> np.ndarray:
    """Coordinate descent over a tree ensemble's splits: each changed numeric column in turn (all
    agents at once, one model call per position) moves to the accepted split crossing nearest the
    agent, the other columns held; exact per column, since the decision changes only at splits."""
    edges = split_edges(world)
    c = c.copy()
    cols_all = np.array([j for j in np.flatnonzero(geo.numeric) if j in edges], np.int64)
    if not len(cols_all):
        return c
    for _ in range(sweeps):
        moved_any = False
        changed = np.abs(c[:, cols_all] - x[:, cols_all]) > 1e-12  # (n, m)
        k_max = int(changed.sum(1).max(initial=0))
        for r in range(k_max):
            rank = np.cumsum(changed, 1) - 1
            a_idx, m_idx = np.nonzero(changed & (rank == r))
            if not len(a_idx):
                continue
            by_col: dict[int, np.ndarray] = {}
            for m in np.unique(m_idx):
                by_col[int(cols_all[m])] = a_idx[m_idx == m]
            width = max(len(edges[col][0]) for col in by_col)
            rows, owners, vals = [], [], []
            for col, agents in by_col.items():
                v = crossings(edges[col], x[agents, col])  # (n, T)
                if geo.rounded[col]:
                    gap = v - x[agents, col][:, None]
                    v = x[agents, col][:, None] + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9)
                closer = (np.abs(v - x[agents, col][:, None]) < np.abs(c[agents, col] - x[agents, col])[:, None] - 1e-12) \
                    & (np.sign(v - x[agents, col][:, None]) == np.sign(c[agents, col] - x[agents, col])[:, None])
                v = np.where(closer, v, np.nan)
                v = np.pad(v, ((0, 0), (0, width - v.shape[1])), constant_values=np.nan)
                T = np.repeat(c[agents][:, None, :], width, axis=1)
                T[:, :, col] = np.where(np.isnan(v), c[agents, col][:, None], v)
                rows.append(T)
                owners.append(np.repeat(agents[:, None], width, 1))
                vals.append(v)
            T = np.concatenate(rows)  # (n, width, D)
            V = np.concatenate(vals)
            own = np.concatenate(owners)[:, 0]
            col_of = np.concatenate([np.full(len(a), col) for col, a in by_col.items()])
            live = ~np.isnan(V)
            if not live.any():
                continue
            ok = np.zeros(V.shape, bool)
            ok[live] = accepts(world, T[live])
            gap = np.where(ok, np.abs(V - x[own, col_of][:, None]), np.inf)
            best = gap.argmin(1)
            hit = np.isfinite(gap[np.arange(len(own)), best])
            c[own[hit], col_of[hit]] = V[np.flatnonzero(hit), best[hit]]
            moved_any |= bool(hit.any())
        if not moved_any:
            break
    return c


def polish(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *, rounds: int = 4,
           probes: int = 15) -> np.ndarray:
    """Shorten accepted answers ``C`` (N, D; NaN rows skipped) while the model accepts them: one
    scale of all numeric changes, then each numeric change on its own (combined if the model still
    accepts), then each changed feature back at the agent's value. About 2 + rounds + 2 model calls."""
    C = C.copy()
    rows = np.flatnonzero(~np.isnan(C).any(1))
    if not len(rows):
        return C
    x, c = X[rows], C[rows]
    c = cell_clip(world, geo, x, c)  # a tree ensemble: the nearest point of each answer's cell, exactly
    num = geo.numeric
    if num.any() and rounds > 0:
        P = probes

        lo, hi = geo.box(x)
        xn, cn, lon, hin = x[:, None, num], c[:, None, num], lo[:, None, num], hi[:, None, num]
        rnd = geo.rounded[num]

        def scaled(S: np.ndarray) -> np.ndarray:  # (n, P) scales -> projected rows (numeric columns only move)
            V = xn + S[..., None] * (cn - xn)
            V[..., rnd] = xn[..., rnd] + np.sign(V[..., rnd] - xn[..., rnd]) * np.ceil(
                np.abs(V[..., rnd] - xn[..., rnd]) - 1e-9)
            T = np.repeat(c[:, None, :], P, axis=1)
            T[..., num] = np.clip(V, lon, hin)
            return T.reshape(-1, c.shape[1])

        s = _line_search(world, scaled, np.zeros(len(c)), np.ones(len(c)), np.zeros(len(c), bool),
                         rounds=max(1, rounds // 2), probes=P)
        shrunk = scaled(np.repeat(s[:, None], P, axis=1)).reshape(len(c), P, -1)[:, 0]
        c = np.where((s < 1.0)[:, None], shrunk, c)  # scale 1 was never probed: x + (c - x) may miss c's last bit
        a_idx, cols = np.nonzero(num[None, :] & (np.abs(c - x) > 1e-12))
        if len(a_idx):
            base = c[a_idx]

            def moved(V: np.ndarray) -> np.ndarray:
                T = np.repeat(base[:, None, :], P, axis=1)
                T[np.arange(len(a_idx))[:, None], np.arange(P)[None, :], cols[:, None]] = V
                return T.reshape(-1, c.shape[1])

            far = _line_search(world, moved, x[a_idx, cols], c[a_idx, cols], geo.integral[cols], rounds=rounds,
                               probes=P)
            combined = c.copy()
            combined[a_idx, cols] = far
            c = np.where(accepts(world, combined)[:, None], combined, c)
        if split_edges(world):  # a tree ensemble: each change scanned exactly over its splits
            c = _edge_sweep(world, geo, x, c)
    # each changed raw feature back at the agent's value, all tried in one call
    changed = geo.deltas(x, c) > 1e-12
    a_idx, j_idx = np.nonzero(changed)
    if len(a_idx):
        trials = c[a_idx].copy()
        cols = geo.raw_of_column[None, :] == j_idx[:, None]
        trials[cols] = x[a_idx][cols]
        ok = accepts(world, trials)
        d = geo.distance(x[a_idx], trials)
        best_d = geo.distance(x, c)
        for t in np.flatnonzero(ok)[np.argsort(d[ok], kind="stable")]:  # greedy: smallest distance first
            i = a_idx[t]
            if d[t] < best_d[i] - 1e-12:  # one drop per agent: trials were made from the undropped row
                c[i], best_d[i] = trials[t], d[t]
    C[rows] = c
    return C


# ------------------------------------------------------------------------------------ generators

@dataclass
class TabularLabels:
    """Solved agents a tabular generator learns from (MACE's answers)."""

    X: np.ndarray  # (M, D) encoded agents
    CF: np.ndarray  # (M, D) their counterfactuals
    distance: np.ndarray  # (M,) MACE's distance


class TabularGenerator(ABC):
    """Base of the tabular generators: candidates -> projection -> batched verification -> polish."""

    method: ClassVar[str]
    Params: ClassVar[type]

    def __init__(self, **params: Any):
        from learners.base import build_params

        self.params = build_params(self.method, self.Params, params)

    # learned state shared by the methods: the training agents and their answers
    def _store(self, world: TabularWorld, labels: TabularLabels) -> None:
        if len(labels.X) == 0:
            raise ValueError(f"{self.method}: no solved training agents to learn from")
        D = len(world.schema)
        if labels.X.shape[1] != D or labels.CF.shape != labels.X.shape:
            raise ValueError(f"{self.method}: labels have {labels.X.shape[1]} columns, the world {D}")
        self.X_, self.CF_ = np.asarray(labels.X, float), np.asarray(labels.CF, float)
        self.n_columns_ = D
        geo = WorldGeometry.of(world)
        self.changed_ = geo.deltas(self.X_, self.CF_) > 1e-12  # (M, J)
        self.scale_lo_, span = geo.lower, geo.upper - geo.lower
        self.scale_span_ = np.where(span > 0, span, 1.0)

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        return ((X - self.scale_lo_) / self.scale_span_).astype(np.float32)

    def _lend(self, geo: WorldGeometry, X: np.ndarray, donors: np.ndarray) -> np.ndarray:
        """(N, 3k, D) candidates from each donor's changed features: the donor's new values (absolute),
        the donor's change added to the agent (relative), and the numeric changes pushed to the
        agent's bound in the same direction (extreme; the polish brings them back)."""
        N, k = donors.shape
        col_changed = self.changed_[donors][..., geo.raw_of_column]  # (N, k, D)
        xb = np.broadcast_to(X[:, None, :], (N, k, X.shape[1]))
        absolute = np.where(col_changed, self.CF_[donors], xb)
        rel = xb + (self.CF_[donors] - self.X_[donors])
        relative = np.where(col_changed & geo.numeric, rel, absolute)
        lo, hi = geo.box(X)
        step = self.CF_[donors] - self.X_[donors]
        pushed = np.where(step > 0, hi[:, None, :], np.where(step < 0, lo[:, None, :], xb))
        extreme = np.where(col_changed & geo.numeric, pushed, absolute)
        return np.concatenate([absolute, relative, extreme], axis=1)

    def _neighbours(self, X: np.ndarray, k: int, among: np.ndarray | None = None) -> np.ndarray:
        """Indices of the k nearest training agents (scaled Euclidean), optionally among a mask."""
        A, B = self._scaled(X), self._scaled(self.X_)
        d = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]
        if among is not None:
            d = np.where(among, d, np.inf)
        k = min(k, d.shape[1])
        idx = np.argpartition(d, k - 1, axis=1)[:, :k]
        return np.take_along_axis(idx, np.argsort(np.take_along_axis(d, idx, 1), 1), 1)

    @abstractmethod
    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> TabularGenerator:
        """Learn from MACE's answers; returns self."""

    @abstractmethod
    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        """(N, K, D) proposed counterfactuals (not yet projected or verified)."""

    def recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm = "one", polish_rounds: int | None = None,
                  n_alternatives: int = 0) -> Recommendations:
        """The nearest verified counterfactual per agent (NaN rows where no candidate is accepted)."""
        t0 = time.perf_counter()
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != self.n_columns_:
            raise ValueError(f"X: expected {self.n_columns_} encoded columns, got {X.shape[1]}")
        geo = WorldGeometry.of(world, norm)
        C = geo.project(X, self.candidates(world, X))
        N, K, D = C.shape
        dist = accepted_distances(world, geo, X, C)
        order = np.argsort(dist, axis=1, kind="stable")
        steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
        top = min(K, max(1, int(self.params.polish_top)) if steps >= 0 else 1)
        pick = order[:, :top]  # the nearest accepted candidates are each polished, then the nearest wins
        P = C[np.arange(N)[:, None], pick].reshape(N * top, D)
        live = np.isfinite(np.take_along_axis(dist, pick, 1)).reshape(-1)
        P[~live] = np.nan
        Xr = np.repeat(X, top, axis=0)
        if steps >= 0:
            P = polish(world, geo, Xr, P, rounds=steps, probes=int(self.params.polish_probes))
        dp = np.where(live, geo.distance(Xr, np.nan_to_num(P)), np.inf).reshape(N, top)
        best = dp.argmin(1)
        found = np.isfinite(dp[np.arange(N), best])
        CF = np.where(found[:, None], P.reshape(N, top, D)[np.arange(N), best], np.nan)
        d = np.where(found, dp[np.arange(N), best], np.inf)
        alts = None
        if n_alternatives > 0:  # the next distinct accepted candidates, nearest first
            alts = np.full((N, n_alternatives, D), np.nan)
            for i in np.flatnonzero(found):
                seen = [CF[i]]
                for kk in order[i, 1:]:
                    if not np.isfinite(dist[i, kk]) or len(seen) > n_alternatives:
                        break
                    if all(np.abs(C[i, kk] - s).max() > 1e-9 for s in seen):
                        alts[i, len(seen) - 1] = C[i, kk]
                        seen.append(C[i, kk])
        return Recommendations(CF, d, found, alts, time.perf_counter() - t0)

    # persistence ------------------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        return {"X": self.X_, "CF": self.CF_, "changed": self.changed_, "scale_lo": self.scale_lo_,
                "scale_span": self.scale_span_}

    def _set_arrays(self, z: dict[str, np.ndarray]) -> None:
        self.X_, self.CF_, self.changed_ = z["X"], z["CF"], z["changed"].astype(bool)
        self.scale_lo_, self.scale_span_ = z["scale_lo"], z["scale_span"]
        self.n_columns_ = self.X_.shape[1]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path / "arrays.npz", **self._arrays())
        meta = self._save_extra(path)
        (path / "config.json").write_text(json.dumps(
            {"method": self.method, "params": dataclasses.asdict(self.params), "meta": meta}, indent=2))
        return path

    def _save_extra(self, path: Path) -> dict[str, Any]:
        return {}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore what ``_save_extra`` wrote (nothing by default)."""

    @staticmethod
    def load(path: str | Path) -> TabularGenerator:
        path = Path(path)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model: {path} has no config.json (not a saved tabular generator)")
        cfg = json.loads((path / "config.json").read_text())
        klass = TABULAR_GENERATORS.get(cfg.get("method"))
        if klass is None:
            raise ValueError(f"{path}: unknown tabular generator {cfg.get('method')!r}; known: {sorted(TABULAR_GENERATORS)}")
        gen = klass(**cfg["params"])
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            gen._set_arrays({k: z[k] for k in z.files})
        gen._load_extra(path, cfg.get("meta", {}))
        return gen


@dataclass
class Recommendations:
    """What ``TabularGenerator.recommend`` returns for a batch."""

    CF: np.ndarray  # (N, D) encoded counterfactuals, NaN rows where none was accepted
    distance: np.ndarray  # (N,) MACE's distance (inf where none)
    found: np.ndarray  # (N,) bool
    alternatives: np.ndarray | None = None  # (N, n, D) further accepted candidates (NaN padded), unpolished
    seconds: float = 0.0  # wall time of the whole batch

    def __iter__(self):  # CF, distance = gen.recommend(...)
        return iter((self.CF, self.distance))


@dataclass
class NearestCfeParams:
    """Hyperparameters of the k-nearest-neighbour baseline."""

    k: int = 10  # training agents that lend their counterfactual (2k candidates: absolute and relative)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)

    def __post_init__(self) -> None:
        if int(self.k) < 1:
            raise ValueError(f"k: must be >= 1, got {self.k}")


class NearestCfeGenerator(TabularGenerator):
    """No learning: the nearest training agents' MACE answers, transplanted and verified."""

    method = "nearest_cfe"
    Params = NearestCfeParams

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> NearestCfeGenerator:
        self._store(world, labels)
        return self

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        return self._lend(WorldGeometry.of(world), X, self._neighbours(X, int(self.params.k)))


@dataclass
class NamedCfeTabularParams:
    """Hyperparameters of the named-CFE tabular generator (classifier: learners.named_cfe's MLP)."""

    top_classes: int = 5  # classifier's top classes tried per agent (2 candidates each)
    neighbours_per_class: int = 2  # nearest training agents of each class that lend their values
    knn_candidates: int = 0  # extra plain nearest-neighbour donors (0: the network's answer alone)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)
    hidden: tuple[int, ...] = (256, 256)  # classifier MLP widths
    max_epochs: int = 60  # classifier training epochs
    batch_size: int = 128  # classifier batch size
    lr: float = 3e-3  # classifier peak learning rate
    dropout: float = 0.1  # classifier dropout

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        for name in ("top_classes", "neighbours_per_class"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")


class NamedCfeTabularGenerator(TabularGenerator):
    """Which features to change from a named-CFE classifier; their values from the nearest agents
    whose MACE answer changed the same features."""

    method = "named_cfe"
    Params = NamedCfeTabularParams

    def _classifier(self):
        from learners.named_cfe import NamedCfeGenerator

        p = self.params
        return NamedCfeGenerator(hidden=p.hidden, max_epochs=p.max_epochs, batch_size=p.batch_size, lr=p.lr,
                                 dropout=p.dropout, patience=max(10, p.max_epochs // 4))

    def _sets(self) -> np.ndarray:
        ids = np.where(self.changed_, np.arange(self.changed_.shape[1]), np.iinfo(np.int64).max)
        width = max(1, int(self.changed_.sum(1).max(initial=0)))
        ids = np.sort(ids, axis=1)[:, :width]
        return np.where(ids == np.iinfo(np.int64).max, -1, ids)

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> NamedCfeTabularGenerator:
        from data_gen.dataset import Split
        from data_gen.encodings import CfeVocabulary
        from learners.base import FitContext

        self._store(world, labels)
        sets = self._sets()
        J = self.changed_.shape[1]
        vocab = CfeVocabulary(sets, [f"change_{j}" for j in range(J)])
        split = Split(X=self._scaled(self.X_), groups=np.zeros(len(sets), np.int64), sets=sets,
                      cost=np.asarray(labels.distance, float), class_ids=vocab.encode(sets),
                      runtime=np.zeros(len(sets)))
        ctx = FitContext(n_features=self.n_columns_, n_actions=J, max_len=sets.shape[1], seed=seed,
                         progress=progress)
        self.clf_ = self._classifier().fit(split, None, ctx)
        if not np.array_equal(self.clf_.classes_, vocab.sets_):  # the classifier numbers classes as vocab does
            raise RuntimeError("named_cfe: classifier classes differ from the label vocabulary")
        self.train_class_ = vocab.encode(sets)
        return self

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        p = self.params
        geo = WorldGeometry.of(world)
        P = self.clf_.predict_proba(self._scaled(X))
        m = min(int(p.top_classes), P.shape[1])
        top = np.argsort(-P, axis=1)[:, :m]  # (N, m)
        A, B = self._scaled(X), self._scaled(self.X_)
        d = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]  # (N, M)
        q = int(p.neighbours_per_class)
        donors = []
        for r in range(m):  # nearest training agents of the r-th class of each agent
            dm = np.where(self.train_class_[None, :] == top[:, r:r + 1], d, np.inf)
            kk = min(q, dm.shape[1])
            idx = np.argpartition(dm, kk - 1, axis=1)[:, :kk]
            idx = np.take_along_axis(idx, np.argsort(np.take_along_axis(dm, idx, 1), 1), 1)
            has = np.isfinite(np.take_along_axis(dm, idx, 1))
            idx = np.where(has, idx, np.argmin(d, axis=1)[:, None])  # a class with no member left: nearest agent
            donors.append(idx)
        if p.knn_candidates > 0:
            donors.append(self._neighbours(X, int(p.knn_candidates)))
        return self._lend(geo, X, np.concatenate(donors, axis=1))

    def _save_extra(self, path: Path) -> dict[str, Any]:
        self.clf_.save(path / "classifier")
        np.savez(path / "train_class.npz", train_class=self.train_class_)
        return {}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        from learners.named_cfe import NamedCfeGenerator

        self.clf_ = NamedCfeGenerator.load(path / "classifier")
        with np.load(path / "train_class.npz", allow_pickle=False) as z:
            self.train_class_ = z["train_class"]


LADDER = np.array([0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0])  # multiples of a predicted change


def value_options(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, e: int) -> np.ndarray:
    """(N, D, e) values to try per numeric column, nearest to the predicted ``value`` first (NaN padded).

    A tree ensemble changes its decision only where a value crosses a split, so its options are
    the two sides of every split threshold of the column within the agent's reachable range
    (``split_limits``: exact under sklearn's float32 test), nearest to the predicted value; other
    models get multiples of the predicted change (``LADDER``) and the reachable bound."""
    from envs.models import TreeEnsemble, split_limits

    N, D = X.shape
    out = np.full((N, D, e), np.nan)
    lo, hi = geo.box(X)
    cols = np.flatnonzero(geo.numeric & ~geo.fixed)
    model = getattr(world.model, "model", world.model)  # a counting wrapper forwards to the model
    if isinstance(model, TreeEnsemble):
        thresholds: dict[int, list[np.ndarray]] = {}
        for t in model.trees:
            inner = t.left >= 0
            for c in cols:
                sel = inner & (t.feature == c)
                if sel.any():
                    thresholds.setdefault(int(c), []).append(t.threshold[sel])
        half = max(1, e // 2)
        for c, ts in thresholds.items():
            t = np.unique(np.concatenate(ts))
            u, lft = split_limits(t)
            # crossing a split from the agent's side: just right of it going up, just left going down
            cand = np.where(t[None, :] >= X[:, c, None], lft[None, :], u[None, :])  # (N, T)
            reach = (cand >= lo[:, c, None]) & (cand <= hi[:, c, None]) & (cand != X[:, c, None])
            up = value[:, c, None] >= X[:, c, None]
            same_side = (cand > X[:, c, None]) == up
            near_x = np.where(reach & same_side, np.abs(cand - X[:, c, None]), np.inf)  # first splits crossed
            near_v = np.where(reach, np.abs(cand - value[:, c, None]), np.inf)  # splits near the prediction
            k = min(half, cand.shape[1])
            ia = np.argsort(near_x, axis=1, kind="stable")[:, :k]
            ib = np.argsort(near_v, axis=1, kind="stable")[:, : min(e - k, cand.shape[1])]
            idx = np.concatenate([ia, ib], 1)
            fin = np.isfinite(np.concatenate([np.take_along_axis(near_x, ia, 1), np.take_along_axis(near_v, ib, 1)], 1))
            out[:, c, : idx.shape[1]] = np.where(fin, np.take_along_axis(cand, idx, 1), np.nan)
    else:
        ladder = LADDER[np.argsort(np.abs(LADDER - 1.0), kind="stable")][: max(e - 1, 1)]
        step = value[:, cols] - X[:, cols]
        vals = X[:, cols, None] + step[..., None] * ladder
        bound = np.where(step > 0, hi[:, cols], lo[:, cols])[..., None]
        vals = np.concatenate([vals, bound], -1)[..., :e]
        vals = np.clip(vals, lo[:, cols, None], hi[:, cols, None])
        vals[np.broadcast_to((step == 0)[..., None], vals.shape)] = np.nan
        out[:, cols, : vals.shape[-1]] = vals
    return out


def room_levels(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, room: np.ndarray, e: int, *,
                nearest: bool = False) -> np.ndarray:
    """(N, D, e) values per numeric column within ``room`` (N,) of normalized change from the agent
    and within its reachable box (NaN padded): a tree ensemble's split crossings, else evenly
    spaced values in each allowed direction; the ``e`` nearest the agent when ``nearest``, else
    ``e`` evenly spread from the nearest to the farthest."""
    N, D = X.shape
    out = np.full((N, D, e), np.nan)
    lo, hi = geo.box(X)
    edges = split_edges(world)
    for c in np.flatnonzero(geo.numeric & ~geo.fixed):
        reach = room * geo.span[c]
        if c in edges:
            cand = crossings(edges[c], X[:, c])
        elif c not in edges and edges:
            continue  # a tree ensemble never splits on this column: no value of it changes the decision
        else:
            t = np.arange(1, e // 2 + 1) / (e // 2)
            cand = np.concatenate([X[:, c, None] + reach[:, None] * t, X[:, c, None] - reach[:, None] * t], 1)
        if geo.rounded[c]:
            gap = cand - X[:, c, None]
            cand = X[:, c, None] + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9)
        ok = (cand >= lo[:, c, None]) & (cand <= hi[:, c, None]) & (cand != X[:, c, None]) \
            & (np.abs(cand - X[:, c, None]) <= reach[:, None] + 1e-12)
        gap = np.where(ok, np.abs(cand - X[:, c, None]), np.inf)
        order = np.argsort(gap, axis=1, kind="stable")
        n_ok = ok.sum(1)
        if nearest:
            pick = np.broadcast_to(np.arange(e)[None, :], (len(X), e))
        else:  # evenly spread over the reachable crossings
            pick = np.floor(np.arange(e)[None, :] * np.maximum(n_ok, 1)[:, None] / e).astype(np.int64)
        pick = np.minimum(pick, cand.shape[1] - 1)
        vals = np.take_along_axis(cand, np.take_along_axis(order, pick, 1), 1)
        live = np.arange(e)[None, :] < np.minimum(n_ok, e)[:, None]
        out[:, c, :] = np.where(live, vals, np.nan)
    return out


@dataclass
class ChangeValueParams:
    """Hyperparameters of the change-and-value tabular generator."""

    top_features: int = 6  # most probable changed features whose subsets are enumerated per agent
    top_subsets: int = 8  # most probable subsets of those tried per agent
    donors_per_subset: int = 1  # nearest training agents with exactly that subset that lend their values too
    knn_candidates: int = 4  # plain nearest-neighbour donors too (coverage where the network is unsure; 0: none)
    grid_subsets: int = 4  # most probable subsets whose values are searched on a grid (0: no grid)
    grid_values: int = 24  # values tried per numeric feature of a one-feature subset (fewer for larger subsets)
    grid_rows: int = 64  # at most this many grid rows per subset (values per feature = rows ** (1 / features))
    scan_subsets: int = 4  # most probable subsets of one or two numeric features re-searched within the best answer's reach (0: none)
    scan_levels: tuple[int, int] = (8, 32)  # values of the first and the second feature of a scanned pair
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)
    hidden: tuple[int, ...] = (256, 256)  # network MLP widths
    max_epochs: int = 80  # training epochs
    batch_size: int = 128  # training batch size
    lr: float = 3e-3  # peak learning rate (one-cycle)
    dropout: float = 0.1  # dropout after each hidden layer
    value_weight: float = 1.0  # weight of the value loss beside the which-features loss

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        for name in ("top_features", "top_subsets", "donors_per_subset"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if int(self.top_features) > 12:
            raise ValueError(f"top_features: at most 12 (2**top_features subsets are scored), got {self.top_features}")
        self.scan_levels = tuple(int(v) for v in self.scan_levels)
        if len(self.scan_levels) != 2 or min(self.scan_levels) < 1:
            raise ValueError(f"scan_levels: two counts >= 1, got {self.scan_levels}")


def _change_value_net(n_columns: int, n_raw: int, hidden: tuple[int, ...], dropout: float):
    """One MLP trunk, two heads: a logit per raw feature (does it change?) and the change of each
    encoded column in spans of the column (tanh; for a one-hot group the largest new column wins)."""
    from torch import nn

    from learners.torch_training import mlp

    class ChangeValueNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = mlp(n_columns, hidden[:-1], hidden[-1], batch_norm=True, dropout=dropout)
            self.change = nn.Linear(hidden[-1], n_raw)
            self.value = nn.Linear(hidden[-1], n_columns)

        def forward(self, x):
            h = nn.functional.relu(self.trunk(x))
            return self.change(h), self.value(h)

    return ChangeValueNet()


class ChangeValueGenerator(TabularGenerator):
    """Learned: which raw features to change (one sigmoid each, the named-action idea factored
    per feature as MCf factors classes) and the value each encoded column takes (the full-action
    idea on tabular rows). The most probable subsets of the top features are each filled with the
    predicted values, with those values pushed to the reachable bound (the polish brings them back),
    and with the values of the nearest training agent whose MACE answer changed that same subset."""

    method = "change_value"
    Params = ChangeValueParams

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> ChangeValueGenerator:
        import torch

        from learners.base import FitContext
        from learners.torch_training import TorchParams, fit_lightning

        self._store(world, labels)
        p = self.params
        geo = WorldGeometry.of(world)
        J, D = self.changed_.shape[1], self.n_columns_
        X = self._scaled(self.X_)
        Y = ((self.CF_ - self.X_) / self.scale_span_).astype(np.float32)  # the change, in spans
        col_changed = self.changed_[:, geo.raw_of_column].astype(np.float32)  # value loss only where it changed
        pos = self.changed_.mean(0)
        weight = torch.as_tensor(np.clip((1 - pos) / np.maximum(pos, 1e-3), 1.0, 20.0) ** 0.5, dtype=torch.float32)
        vw = float(p.value_weight)

        def loss_fn(model, batch):
            xb, cb, yb, mb = batch
            logit, value = model(xb)
            bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, cb, pos_weight=weight)
            mse = ((torch.tanh(value) - yb) ** 2 * mb).sum() / mb.sum().clamp_min(1.0)
            return bce + vw * mse

        rng = np.random.default_rng(seed)
        order = rng.permutation(len(X))
        n_val = max(1, int(round(0.1 * len(X)))) if len(X) >= 20 else 0
        val, tr = order[:n_val], order[n_val:] if n_val else order
        if not n_val:
            val = order
        tensors = [torch.as_tensor(a) for a in (X, self.changed_.astype(np.float32), Y, col_changed)]
        self.net_ = _change_value_net(D, J, p.hidden, p.dropout)
        tp = TorchParams(hidden=p.hidden, dropout=p.dropout, lr=p.lr, batch_size=p.batch_size, max_epochs=p.max_epochs,
                         patience=max(10, p.max_epochs // 4), batch_norm=True)
        ctx = FitContext(n_features=D, n_actions=J, max_len=J, seed=seed, progress=progress)
        self.fit_info_ = fit_lightning(self.net_, loss_fn, [t[tr] for t in tensors], [t[val] for t in tensors], tp, ctx)
        self.train_sets_ = self._set_keys(self.changed_)
        return self

    @staticmethod
    def _set_keys(changed: np.ndarray) -> np.ndarray:
        """(M,) one integer per subset of raw features (bit j: feature j changed)."""
        return (changed.astype(np.int64) << np.arange(changed.shape[1], dtype=np.int64)).sum(1)

    def _predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, J) change probabilities and (N, D) predicted encoded values."""
        import torch

        from learners.torch_training import predict_batched

        def both(m, xb):
            logit, value = m(xb)
            return torch.cat([torch.sigmoid(logit), torch.tanh(value)], 1)

        out = predict_batched(self.net_, self._scaled(X), both)
        J = out.shape[1] - self.n_columns_
        return out[:, :J].astype(float), X + out[:, J:] * self.scale_span_

    def subsets(self, prob: np.ndarray) -> np.ndarray:
        """(N, S, J) bool: the ``top_subsets`` most probable non-empty subsets of each agent's
        ``top_features`` most probable features (independent Bernoullis), most probable first."""
        p = self.params
        N, J = prob.shape
        L = min(int(p.top_features), J)
        top = np.argsort(-prob, axis=1)[:, :L]  # (N, L)
        masks = ((np.arange(1, 2 ** L)[:, None] >> np.arange(L)[None, :]) & 1).astype(bool)  # (2^L-1, L)
        q = np.clip(np.take_along_axis(prob, top, 1), 1e-6, 1 - 1e-6)  # (N, L)
        logp = masks[None] * np.log(q)[:, None, :] + ~masks[None] * np.log1p(-q)[:, None, :]
        S = min(int(p.top_subsets), len(masks))
        best = np.argsort(-logp.sum(-1), axis=1, kind="stable")[:, :S]  # (N, S)
        out = np.zeros((N, S, J), bool)
        chosen = masks[best]  # (N, S, L)
        rows = np.repeat(np.arange(N), S * L)
        subs = np.tile(np.repeat(np.arange(S), L), N)
        cols = np.repeat(top[:, None, :], S, axis=1).reshape(-1)
        out[rows, subs, cols] = chosen.reshape(-1)
        return out

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        p = self.params
        geo = WorldGeometry.of(world)
        prob, value = self._predict(X)
        subs = self.subsets(prob)  # (N, S, J)
        N, S, _ = subs.shape
        col = subs[..., geo.raw_of_column]  # (N, S, D)
        xb = np.broadcast_to(X[:, None, :], col.shape)
        predicted = np.where(col, value[:, None, :], xb)
        lo, hi = geo.box(X)
        step = value - X
        pushed = np.where(step > 0, hi, np.where(step < 0, lo, X))
        extreme = np.where(col & geo.numeric, pushed[:, None, :], predicted)
        parts = [predicted, extreme]
        # the nearest training agents whose MACE answer changed exactly this subset lend their values
        keys = self._set_keys(subs.reshape(N * S, -1)).reshape(N, S)
        A, B = self._scaled(X), self._scaled(self.X_)
        d = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]  # (N, M)
        q = min(int(p.donors_per_subset), len(self.X_))
        donors = []
        for s in range(S):
            ds = np.where(self.train_sets_[None, :] == keys[:, s:s + 1], d, np.inf)
            idx = np.argpartition(ds, q - 1, axis=1)[:, :q]
            has = np.isfinite(np.take_along_axis(ds, idx, 1))
            donors.append(np.where(has, idx, -1))
        donors = np.concatenate(donors, axis=1)  # (N, S*q), -1: no training agent has that subset
        lent = self._lend(geo, X, np.maximum(donors, 0))  # (N, 3*S*q, D)
        missing = np.tile(donors < 0, 3)
        lent[missing] = X[np.nonzero(missing)[0]]  # the agent itself: dropped as no answer
        parts.append(lent)
        if p.knn_candidates > 0:
            parts.append(self._lend(geo, X, self._neighbours(X, int(p.knn_candidates))))
        if p.grid_subsets > 0:
            parts.append(self._grid(world, geo, X, value, subs[:, : int(p.grid_subsets)]))
        return np.concatenate(parts, axis=1)

    def recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm = "one", polish_rounds: int | None = None,
                  n_alternatives: int = 0) -> Recommendations:
        """As the base class, then a second search where the answer is known: each of the
        ``scan_subsets`` most probable subsets with one or two numeric features is scanned within
        the reach the best answer's distance leaves (first feature on ``scan_levels[0]`` values, the
        second on ``scan_levels[1]``, in one model call), and a nearer accepted point is polished."""
        rec = super().recommend(world, X, norm=norm, polish_rounds=polish_rounds, n_alternatives=n_alternatives)
        if int(self.params.scan_subsets) <= 0 or not rec.found.any():
            return rec
        t0 = time.perf_counter()
        X = np.atleast_2d(np.asarray(X, float))
        geo = WorldGeometry.of(world, norm)
        rows = np.flatnonzero(rec.found & (rec.distance > 0))
        x = X[rows]
        prob, value = self._predict(x)
        subs = self.subsets(prob)[:, : int(self.params.scan_subsets)]
        C = self._scan(world, geo, x, value, subs, rec.distance[rows])  # (n, K, D)
        n, K, D = C.shape
        d = accepted_distances(world, geo, x, C)  # the rows are reachable as built: no projection
        best = d.argmin(1)
        better = d[np.arange(n), best] < rec.distance[rows] - 1e-12
        if better.any():
            steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
            P = C[np.flatnonzero(better), best[better]]
            if steps >= 0:
                P = polish(world, geo, x[better], P, rounds=steps, probes=int(self.params.polish_probes))
            dp = geo.distance(x[better], P)
            take = dp < rec.distance[rows[better]] - 1e-12
            idx = rows[np.flatnonzero(better)[take]]
            rec.CF[idx] = P[take]
            rec.distance[idx] = dp[take]
        rec.seconds += time.perf_counter() - t0
        return rec

    def _scan(self, world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, subs: np.ndarray,
              best: np.ndarray) -> np.ndarray:
        """(N, S * R, D) rows, R = (e1 + 1) * e2: per subset of one to three numeric features, their
        values within the reach of the distance ``best`` (N,), the subset's other features at the
        predicted value. One feature: its R crossings nearest the agent; two: e1 spread values (and
        the agent's own) times e2 spread values; three: a grid of the same size."""
        a, b, g = geo.weights
        room = best / max(b + g, 1e-12)  # the largest normalized change of one feature that can still win
        e1, e2 = self.params.scan_levels
        R = (e1 + 1) * e2
        N, S, J = subs.shape
        t3 = max(1, int(np.floor((R / 2) ** (1 / 3))))  # three features: (t3+1)^2 * 2 t3 <= R rows
        shapes = {1: [R], 2: [e1, e2], 3: [t3, t3, max(1, R // (t3 + 1) ** 2)]}
        levels = {}
        for k, shape in shapes.items():
            for e in shape:
                if (e, k == 1) not in levels:
                    levels[(e, k == 1)] = room_levels(world, geo, X, room, e, nearest=k == 1)
        out = np.repeat(X[:, None, :], S * R, axis=1)
        base = geo.project(X, np.where(subs[..., geo.raw_of_column], value[:, None, :], X[:, None, :]))  # (N, S, D)
        num_raw = np.zeros(J, bool)
        num_raw[geo.raw_of_column[geo.numeric]] = True
        col_of_raw = np.full(J, -1)
        col_of_raw[geo.raw_of_column[geo.numeric]] = np.flatnonzero(geo.numeric)
        k_num = (subs & num_raw).sum(-1)
        for k, shape in shapes.items():
            ii, ss = np.nonzero(k_num == k)
            if not len(ii):
                continue
            cols = col_of_raw[np.argsort(~(subs[ii, ss] & num_raw), axis=1, kind="stable")[:, :k]]  # (n, k)
            axes = []
            for pos, e in enumerate(shape):
                v = levels[(e, k == 1)][ii, cols[:, pos]]  # (n, e)
                if pos < k - 1:  # all but the last feature may also stay at the agent's value (NaN here)
                    v = np.concatenate([v, np.full((len(ii), 1), np.nan)], 1)
                axes.append(v)
            sizes = [v.shape[1] for v in axes]
            combos = np.stack(np.meshgrid(*[np.arange(m) for m in sizes], indexing="ij"), -1).reshape(-1, k)
            m = len(combos)
            rows = np.repeat(base[ii, ss][:, None, :], m, axis=1)  # (n, m, D)
            n_idx = np.arange(len(ii))[:, None]
            for pos in range(k):
                v = axes[pos][:, combos[:, pos]]  # (n, m)
                c = cols[:, pos]
                rows[n_idx, np.arange(m)[None, :], c[:, None]] = np.where(np.isnan(v), X[ii, c][:, None], v)
            dead = np.isnan(axes[-1][:, combos[:, -1]])  # the last feature has no value there
            rows[dead] = X[ii][np.nonzero(dead)[0]]
            out[ii[:, None], ss[:, None] * R + np.arange(m)[None, :]] = rows
        return out

    def _grid(self, world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, subs: np.ndarray
              ) -> np.ndarray:
        """(N, S * R, D) candidates: for each of the first S subsets, the product of value options of
        its numeric features (discrete features take the predicted value), at most ``grid_rows`` rows
        per subset; rows beyond a subset's grid repeat the agent (dropped as no answer)."""
        p = self.params
        N, S, _ = subs.shape
        R = int(p.grid_rows)
        E = int(p.grid_values)
        options = value_options(world, geo, X, value, E)  # (N, D, E), NaN padded
        out = np.repeat(X[:, None, :], S * R, axis=1)
        base = np.where(subs[..., geo.raw_of_column], value[:, None, :], X[:, None, :])  # (N, S, D)
        num_raw = np.zeros(subs.shape[2], bool)
        num_raw[geo.raw_of_column[geo.numeric]] = True
        col_of_raw = np.full(subs.shape[2], -1)
        col_of_raw[geo.raw_of_column[geo.numeric]] = np.flatnonzero(geo.numeric)
        k_num = (subs & num_raw).sum(-1)  # (N, S) numeric features per subset
        for k in range(1, int(k_num.max(initial=0)) + 1):
            e = min(E, int(np.floor(R ** (1.0 / k) + 1e-9)))
            if e < 2 and k > 1:
                continue
            ii, ss = np.nonzero(k_num == k)
            if not len(ii):
                continue
            cols = col_of_raw[np.argsort(~(subs[ii, ss] & num_raw), axis=1, kind="stable")[:, :k]]  # (n, k)
            opts = options[ii[:, None], cols, :e]  # (n, k, e)
            combos = np.stack(np.meshgrid(*[np.arange(e)] * k, indexing="ij"), -1).reshape(-1, k)  # (e^k, k)
            rows = np.repeat(base[ii, ss][:, None, :], len(combos), axis=1)  # (n, e^k, D)
            vals = opts[:, np.arange(k)[None, :], combos]  # (n, e^k, k)
            bad = np.isnan(vals).any(-1)
            n_idx = np.arange(len(ii))[:, None, None]
            rows[n_idx, np.arange(len(combos))[None, :, None], cols[:, None, :]] = np.nan_to_num(vals)
            rows[bad] = X[ii][np.nonzero(bad)[0]]
            out[ii[:, None], ss[:, None] * R + np.arange(len(combos))[None, :]] = rows
        return out

    def _save_extra(self, path: Path) -> dict[str, Any]:
        import torch

        torch.save(self.net_.state_dict(), path / "weights.pt")
        np.savez(path / "train_sets.npz", train_sets=self.train_sets_)
        return {"n_raw": int(self.changed_.shape[1]), "fit": getattr(self, "fit_info_", None)}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        import torch

        self.net_ = _change_value_net(self.n_columns_, int(meta["n_raw"]), self.params.hidden, self.params.dropout)
        self.net_.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        self.net_.eval()
        with np.load(path / "train_sets.npz", allow_pickle=False) as z:
            self.train_sets_ = z["train_sets"]


TABULAR_GENERATORS: dict[str, type[TabularGenerator]] = {
    NearestCfeGenerator.method: NearestCfeGenerator,
    NamedCfeTabularGenerator.method: NamedCfeTabularGenerator,
    ChangeValueGenerator.method: ChangeValueGenerator,
}


def build_tabular_generator(method: str, params: dict[str, Any] | None = None) -> TabularGenerator:
    if method not in TABULAR_GENERATORS:
        raise ValueError(f"method: unknown tabular generator {method!r}; known: {sorted(TABULAR_GENERATORS)}")
    return TABULAR_GENERATORS[method](**(params or {}))


__all__ = ["TABULAR_GENERATORS", "ChangeValueGenerator", "NamedCfeTabularGenerator", "NearestCfeGenerator", "Recommendations",
           "TabularGenerator", "TabularLabels", "WorldGeometry", "accepts", "build_tabular_generator", "polish"]
