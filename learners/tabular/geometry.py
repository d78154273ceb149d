"""The geometry of a tabular world that every tabular generator needs: per-column bounds,
mutability, integer codes and one-hot groups (``WorldGeometry``: projection onto what an agent may
reach, MACE's Eq. 3 distance, constraint checks), and acceptance as verified (``accepts``).

A world with rules (``envs.rules``, issue 55) adds ``WorldGeometry.gate`` (``learners.tabular.rules``):
the agents' boxes narrowed by the one-column rules, the shared checker on every candidate a search
accepts (``accepts_for``, ``accepts_variants_for``, ``accepted_distances``,
``nearest_accepted_variants``, ``violations``), and the rules' cost weights in ``distance``. Without
rules the gate is None and every step is exactly what it was."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.rules import RuleGate
from solvers.mace.distance import Norm, distance_features, norm_weights

BOXES_KEPT = 4  # agents' boxes kept per geometry (a search asks the same few several times)
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
    gate: RuleGate | None = None  # the world's rules (learners.tabular.rules); None: the schema's mutability only

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
        raws = distance_features(schema)
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
                   [np.asarray(r.columns) for r in raws if r.kind == "group"], norm_weights(norm, len(raws)),
                   RuleGate.of(world))

    def __post_init__(self) -> None:
        in_group = np.zeros(len(self.integral), bool)
        for cols in self.group_columns:
            in_group[cols] = True
        self.rounded = self.integral & ~in_group  # integer codes outside one-hot groups

    @property
    def n_raw(self) -> int:
        return len(self.raw_kinds)

    @property
    def cost(self) -> np.ndarray | None:
        """(J, 2) the world's cost weights of each raw feature's increase and decrease; None: all 1."""
        return None if self.gate is None else self.gate.cost

    def box(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) reachable bounds per agent: schema bounds narrowed by mutability (and by the world's
        one-column rules: ``RuleGate.box``)."""
        raise_lo, cut_hi = self.__dict__.get("_box_masks") or self.__dict__.setdefault(
            "_box_masks", (self.fixed | self.up, self.fixed | self.down))
        lo = np.where(raise_lo, np.maximum(self.lower, X), self.lower)
        hi = np.where(cut_hi, np.minimum(self.upper, X), self.upper)
        if self.gate is not None and len(X) > 1 and (X == X[:1]).all():  # one agent's rows (its starts, its moves)
            lo1, hi1 = self.box(X[:1])
            return np.repeat(lo1, len(X), axis=0), np.repeat(hi1, len(X), axis=0)
        if self.gate is not None:
            # A search asks the same agents' boxes several times, and the rules' narrowing loops over
            # rules: the last few answers are kept (one tuple, swapped whole: safe across request threads).
            key = (lo.shape, np.ascontiguousarray(X, float).tobytes())
            kept = self.__dict__.get("_boxes", ())
            for k, klo, khi in kept:
                if k == key:
                    return klo.copy(), khi.copy()
            lo, hi = self.gate.box(np.broadcast_to(X, lo.shape), lo, hi)
            self.__dict__["_boxes"] = ((key, lo.copy(), hi.copy()), *kept[:BOXES_KEPT - 1])
        return lo, hi

    def keeps(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(...) bool: each row of ``C`` (..., D) keeps the world's rules for its agent in ``X`` (broadcast);
        all True without rules."""
        if self.gate is None:
            return np.ones(np.shape(C)[:-1], bool)
        return self.gate.keeps(X, C)

    def project(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """Candidates ``C`` (N, K, D) made reachable for the agents ``X`` (N, D): clipped into the
        box (NaN as 0), exactly one 1 per one-hot group (its largest entry), integer columns rounded
        away from the agent (the change is at least the proposed one). A compiled loop
        (``geometry_kernels.project_kernel``)."""
        from learners.tabular.geometry_kernels import project_kernel

        lo, hi = self.box(X)
        cols, ends = self.group_arrays()
        return project_kernel(np.ascontiguousarray(X, float), np.ascontiguousarray(C, float), lo, hi, cols, ends,
                              self.rounded)

    def raw_columns(self) -> np.ndarray:
        """(J, w) each raw feature's columns, -1 padded (built once)."""
        cols = self.__dict__.get("_raw_columns")
        if cols is None:
            members = [np.flatnonzero(self.raw_of_column == j) for j in range(self.n_raw)]
            cols = np.full((self.n_raw, max(len(m) for m in members)), -1, np.int64)
            for j, m in enumerate(members):
                cols[j, : len(m)] = m
            self.__dict__["_raw_columns"] = cols
        return cols

    def group_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The one-hot groups' columns, concatenated (G,), and where each group ends in them (groups,)
        (built once)."""
        groups = self.__dict__.get("_group_arrays")
        if groups is None:
            cols = [np.asarray(c, np.int64) for c in self.group_columns]
            groups = (np.concatenate(cols) if cols else np.zeros(0, np.int64),
                      np.cumsum([len(c) for c in cols]).astype(np.int64))
            self.__dict__["_group_arrays"] = groups
        return groups

    def deltas(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(..., J) per-raw-feature normalized deltas of candidates ``C`` (..., D) from ``X`` (broadcast):
        |dx| / span for a numeric feature, 1 for a discrete one where any of its columns moved."""
        from learners.tabular.geometry_kernels import deltas_kernel

        X2, C2, shape = self._rows(X, C)
        return deltas_kernel(X2, C2, self.numeric, self.span, self.raw_of_column, self.n_raw).reshape(shape + (self.n_raw,))

    def distance(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """MACE's Eq. 3 distance of ``C`` (..., D) from ``X`` (broadcast), in [0, 1] (compiled: the
        searches measure thousands of rows per request)."""
        from learners.tabular.geometry_kernels import distance_kernel

        a, b, g = self.weights
        X2, C2, shape = self._rows(X, C)
        if self.cost is not None:
            return self._weighted(X2, C2).reshape(shape)
        return distance_kernel(X2, C2, self.numeric, self.span, self.raw_of_column, self.n_raw, float(a), float(b),
                               float(g)).reshape(shape)

    def reach(self, d: np.ndarray) -> np.ndarray:
        """The unweighted distance a row may have and still be nearer than ``d`` under the cost weights:
        ``d`` / the smallest weight where it is below 1 (every weighted distance is at least that weight
        times the unweighted one), so a search that prunes by the unweighted distance loses no nearer row;
        ``d`` itself without weights (a weight of 0 counts as 1e-3 here, so the reach stays finite)."""
        if self.cost is None:
            return d
        w = max(float(self.cost.min()), 1e-3)
        return d if w >= 1.0 else np.asarray(d) / w

    @property
    def direction_costs(self) -> np.ndarray:
        """(J, 2) the cost weights of each raw feature's increase and decrease, all 1 without weights."""
        return np.ones((self.n_raw, 2)) if self.cost is None else self.cost

    def cost_kernel_args(self) -> tuple[np.ndarray, np.ndarray]:
        """The cost weights as the compiled kernels take them (``kernel_helpers._row_distance_weighted``):
        (J, 2) up/down weights (0 rows without weights) and per raw feature the column whose move tells
        the direction (-1 for a category: its first weight)."""
        hit = self.__dict__.get("_cost_args")
        if hit is None:
            first = self.raw_columns()[:, 0].astype(np.int64)
            cat = np.isin(np.array(self.raw_kinds), ("group", "nominal"))
            weights = np.zeros((0, 2)) if self.cost is None else np.ascontiguousarray(self.cost, float)
            hit = (weights, np.where(cat, -1, first).astype(np.int64))
            self.__dict__["_cost_args"] = hit
        return hit

    def _weighted(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(R,) Eq. 3 with the world's cost weights (``solvers.mace.distance``) of rows ``C`` from ``X`` (R, D):
        each feature's delta and change count times the weight of the direction it moved (compiled: numpy's
        formula, the same bits, ``geometry_kernels.weighted_distance_kernel``)."""
        from learners.tabular.geometry_kernels import weighted_distance_kernel

        cost, col = self.cost_kernel_args()
        a, b, g = self.weights
        return weighted_distance_kernel(X, C, self.numeric, self.span, self.raw_of_column, self.n_raw, float(a),
                                        float(b), float(g), cost, col)

    def _rows(self, X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """``X`` and ``C`` broadcast to one shape (..., D), as (R, D) float rows, and that leading shape."""
        X, C = np.asarray(X, float), np.asarray(C, float)
        shape = X.shape if X.shape == C.shape else np.broadcast_shapes(X.shape, C.shape)
        D = shape[-1]
        if X.ndim == 2 and X.shape == C.shape:  # the common case: rows against rows, no broadcast
            return np.ascontiguousarray(X), np.ascontiguousarray(C), shape[:-1]

        def rows(A: np.ndarray) -> np.ndarray:  # a broadcast side is copied into whole rows
            return np.ascontiguousarray(np.broadcast_to(A, shape).reshape(-1, D))

        return rows(X), rows(C), shape[:-1]

    def violations(self, X: np.ndarray, C: np.ndarray, tol: float = 1e-9, rules: bool = True) -> np.ndarray:
        """(N,) bool: does a row of ``C`` leave the agent's reachable box, leave an integer code fractional or
        break a one-hot group (or, with ``rules``, one of the world's rules)? Without ``rules`` a NaN entry breaks none."""
        lo, hi = self.box(X)
        bad = ((C < lo - tol) | (C > hi + tol)).any(-1)
        for cols in self.group_columns:
            bad |= np.abs(C[:, cols].sum(-1) - 1) > tol
        ints = self.integral
        bad |= (np.abs(C[:, ints] - np.round(C[:, ints])) > tol).any(-1)
        if rules and self.gate is not None:  # and the world's rules, by the shared checker
            bad |= ~self.keeps(X, np.where(np.isfinite(C), C, 0.0))
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
    from learners.tabular.geometry_kernels import accepted_distances_kernel

    N, K, D = C.shape
    ok = accepts(world, C.reshape(-1, D)).reshape(N, K)
    if geo.gate is not None and ok.any():  # and the world's rules
        n, k = np.nonzero(ok)
        ok[n, k] = geo.keeps(X[n], C[n, k])
    a, b, g = geo.weights
    out = accepted_distances_kernel(np.ascontiguousarray(X, float), np.ascontiguousarray(C, float), ok, geo.numeric,
                                    geo.span, geo.raw_of_column, geo.n_raw, float(a), float(b), float(g))
    if geo.cost is not None:  # the rules' cost weights
        n, k = np.nonzero(np.isfinite(out))
        out[n, k] = geo.distance(X[n], C[n, k])
    return out


def accepts_for(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``accepts`` of rows ``R`` (n, D) of the agents ``X`` (n, D; broadcast), and, where the world has
    rules, each keeps them (the shared checker, on the accepted rows only). Without rules: ``accepts``."""
    ok = accepts(world, R)
    if geo.gate is not None and ok.any():
        idx = np.flatnonzero(ok)
        ok[idx] = geo.keeps(np.broadcast_to(X, np.shape(R))[idx], np.atleast_2d(R)[idx])
    return ok


def accepts_variants_for(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, V: Variants) -> np.ndarray:
    """``accepts_variants`` of ``V`` whose base row i belongs to agent ``X[i]``, and, where the world has
    rules, each accepted row keeps them (built only for the check). Without rules: ``accepts_variants``."""
    ok = accepts_variants(world, V)
    if geo.gate is not None and ok.any():
        idx = np.flatnonzero(ok)
        ok[idx] = geo.keeps(X[V.index[idx]], V.rows(idx))
    return ok


def first_within(key: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per group (ascending), the index of its entry with the smallest ``key`` (ties: the lower index;
    NaN last): what ``np.lexsort((key, group))`` puts first in each group (compiled where the groups
    are indices, as every search's are)."""
    group = np.asarray(group)
    if len(group) and group.dtype.kind in "iu" and group.min() >= 0:
        from learners.tabular.geometry_kernels import first_within_kernel

        return first_within_kernel(np.ascontiguousarray(key, float), np.ascontiguousarray(group, np.int64))
    order = np.lexsort((key, group))
    g = group[order]
    return order[np.r_[True, g[1:] != g[:-1]]] if len(order) else order


def nearest_accepted(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, T: np.ndarray, owner: np.ndarray,
                     k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """For rows ``T`` (M, D) each proposed for agent ``owner[m]`` of ``X`` (N, D): per agent the
    distances of its ``k`` nearest rows the model accepts, nearest first (N, k; inf where fewer) and
    those rows' indices (N, k; -1 there). One model call."""
    d, index, _ = nearest_accepted_variants(world, geo, X, Variants.of_rows(T), owner, k)
    return d, index


# ---------------------------------------------------------------------------------------- variants

@dataclass
class Variants:
    """Candidate rows as a few columns of base rows changed: row t is ``base[index[t]]`` with column
    ``cols[t, i]`` set to ``vals[t, i]`` where ``cols[t, i] >= 0``. The scans and sweeps try many
    rows that differ from a few base rows in one to three columns; a white-box model scores them
    without the (rows, columns) matrix (``WhiteBoxModel.score_variants``), which cost more to build
    than to score."""

    base: np.ndarray  # (B, D)
    index: np.ndarray  # (T,) base row of each variant
    cols: np.ndarray  # (T, k) changed columns, -1 padded
    vals: np.ndarray  # (T, k) their values

    def __len__(self) -> int:
        return len(self.index)

    def rows(self, which: np.ndarray | None = None) -> np.ndarray:
        """(n, D) the rows (all, or those at ``which``)."""
        from envs.models import variant_rows

        if which is None:
            return variant_rows(self.base, self.index, self.cols, self.vals)
        return variant_rows(self.base, self.index[which], self.cols[which], self.vals[which])

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> Variants:
        """Whole rows as variants that change nothing."""
        n = len(rows)
        return cls(np.asarray(rows, float), np.arange(n), np.full((n, 1), -1), np.zeros((n, 1)))

    @classmethod
    def concat(cls, parts: list[Variants]) -> Variants:
        """One set of variants from several (their bases stacked, columns padded to the widest)."""
        k = max(p.cols.shape[1] for p in parts)
        T = sum(len(p.index) for p in parts)
        index, cols, vals = np.empty(T, np.int64), np.full((T, k), -1, np.int64), np.zeros((T, k))
        at, off = 0, 0
        for p in parts:  # filled in place: no padded copy of each part
            n, w = len(p.index), p.cols.shape[1]
            index[at:at + n] = p.index + off
            cols[at:at + n, :w] = p.cols
            vals[at:at + n, :w] = p.vals
            at, off = at + n, off + len(p.base)
        return cls(np.concatenate([p.base for p in parts]), index, cols, vals)


def accepts_variants(world: TabularWorld, V: Variants) -> np.ndarray:
    """``accepts`` of the rows ``V`` describes, in one model call: scored as variants where the model
    can (``score_variants``), else built and scored as rows."""
    if not len(V):
        return np.zeros(0, bool)
    score = getattr(world.model, "score_variants", None)
    if score is None:
        return accepts(world, V.rows())
    s = score(V.base, V.index, V.cols, V.vals)
    return s > 0 if getattr(world.model, "exact", False) else s >= MARGIN


BOUND_SLACK = 1e-9  # a box is skipped only where its score bound is this far below acceptance (rounding)


def may_accept_within(world: TabularWorld, base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray
                      ) -> np.ndarray:
    """(n,) False where no row that is ``base[i]`` but for columns ``cols[i]`` (-1: none) within
    [``lo[i]``, ``hi[i]``] can be accepted, by the model's score bound (``score_bounds``: a white
    box's parameters, not a query); True where it may be, or the model has no bound. A search skips
    the rows of a box that cannot: no accepted row is lost."""
    bound_of = getattr(world.model, "score_bounds", None)
    bound = bound_of(base, cols, lo, hi) if bound_of is not None and len(base) else None
    if bound is None:
        return np.ones(len(base), bool)
    return bound > -BOUND_SLACK if getattr(world.model, "exact", False) else bound >= MARGIN - BOUND_SLACK


def repeats(P: np.ndarray) -> np.ndarray:
    """(N, k) True where row ``P[i, j]`` (N, k, D) equals an earlier row ``P[i, j' < j]`` of its agent
    (bit for bit; NaN rows never equal): a search polishes each distinct start once."""
    same = (P[:, :, None, :] == P[:, None, :, :]).all(-1)  # (N, k, k)
    return np.tril(same, -1).any(2)


def nearest_accepted_variants(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, V: Variants,
                              owner: np.ndarray, k: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``nearest_accepted`` of variant rows: per agent the distances of its ``k`` nearest accepted
    rows (N, k) and their positions in ``V`` (N, k; -1 where fewer), and the (N, k, D) rows (NaN
    where none); one model call, and only accepted rows are ever built."""
    from learners.tabular.geometry_kernels import nearest_accepted_kernel

    a, b, g = geo.weights
    ok = accepts_variants(world, V)  # the one model call; the rest compiled: only kept rows are built

    def nearest(ok: np.ndarray, k: int = k) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return nearest_accepted_kernel(np.ascontiguousarray(X, float), np.ascontiguousarray(V.base, float),
                                       np.ascontiguousarray(V.index, np.int64), np.ascontiguousarray(V.cols, np.int64),
                                       np.ascontiguousarray(V.vals, float), ok, np.ascontiguousarray(owner, np.int64),
                                       int(k), geo.numeric, geo.span, geo.raw_of_column, geo.n_raw, float(a), float(b),
                                       float(g), *geo.cost_kernel_args())

    if geo.gate is not None:  # the world's rules: the nearest accepted rows checked (16k per agent at a time),
        checked = np.zeros(len(ok), bool)  # those that break one dropped, until the nearest are all checked
        owners = np.asarray(owner)
        for _ in range(3):
            pos = nearest(ok, max(4 * int(k), 8))[1]
            todo = pos[pos >= 0]
            todo = todo[~checked[todo]]
            if not len(todo):
                break
            checked[todo] = True
            ok[todo] = geo.keeps(X[owners[todo]], V.rows(todo))
        else:  # many break a rule: check every accepted row left at once
            idx = np.flatnonzero(ok & ~checked)
            ok[idx] = geo.keeps(X[owners[idx]], V.rows(idx))
    out = nearest(ok)
    if geo.cost is None:
        return out
    d, pos, rows = out  # the kernel ranks by the weighted distance (its own order of sums): re-measured exactly
    d = np.where(np.isfinite(d), geo.distance(X[:, None, :], np.nan_to_num(rows)), np.inf)
    order = np.argsort(d, axis=1, kind="stable")
    return (np.take_along_axis(d, order, 1), np.take_along_axis(pos, order, 1),
            np.take_along_axis(rows, order[..., None], 1))
