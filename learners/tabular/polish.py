"""Shortening an accepted counterfactual while the model still accepts it (the polish).

A multi-probe line search scales all numeric changes toward the agent, then each on its own;
each changed feature is tried back at the agent's value. On a tree ensemble the answer first
moves to the nearest point of its *cell* (``cell_clip``: where every tree reaches the same
leaves) and each change is swept across the splits toward the agent (``split_edges``, with
sklearn's float32 split semantics) in place of the line search per change. Every point returned
was itself accepted by a model call: no value is recomputed after its check (``x + (c - x)`` can
miss ``c``'s last bit). A heuristic: no certificate."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.geometry import (
    Variants,
    WorldGeometry,
    accepts,
    accepts_for,
    accepts_variants,
    accepts_variants_for,
)
from learners.tabular.polish_kernels import scaled_rows_kernel
from learners.tabular.trade_kernels import trade_pick_kernel, trade_round_kernel


def _line_search(world: TabularWorld, make, near: np.ndarray, far: np.ndarray, integral: np.ndarray, *,
                 rounds: int, probes: int, geo: WorldGeometry | None = None, agents: np.ndarray | None = None
                 ) -> np.ndarray:
    """Per item, the accepted value nearest to ``near`` on the segment [near, far] (``far`` is
    accepted): ``probes`` evenly spaced points per item and round, all items in one model call
    (``make`` turns the (n, probes) values into rows, item by item, or variants whose base i is item
    i's), so ``rounds`` calls reach a resolution of (probes + 1) ** -rounds of the segment. Integer
    items probe integers (rounded away from near). Where ``geo`` has the world's rules, a probe must
    keep them for its item's agent (``agents`` (n, D)) to count as accepted."""
    from learners.tabular.polish_kernels import probe_update_kernel, probe_values_kernel

    near, far = np.array(near, float), np.array(far, float)
    n, t = len(near), np.arange(1, probes + 1) / (probes + 1)
    integral = np.ascontiguousarray(integral, bool)
    for _ in range(rounds):
        V, live = probe_values_kernel(near, far, t, integral)  # compiled: a polish call's fixed cost was these steps
        if not live.any():
            break
        R = make(V)
        if geo is not None and geo.gate is not None:
            ok = (accepts_variants_for(world, geo, agents, R) if isinstance(R, Variants) else
                  accepts_for(world, geo, np.repeat(agents, probes, axis=0), R)).reshape(n, probes)
        else:
            ok = (accepts_variants(world, R) if isinstance(R, Variants) else accepts(world, R)).reshape(n, probes)
        near, far = probe_update_kernel(V, ok, live, near, far)
    return far


def split_edges(world: TabularWorld) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per column of a tree ensemble, its split thresholds with their limits (t, U, L; ``Tree.limits``):
    the values where its decision can change (empty for other models; cached per model)."""
    from envs.models import TreeEnsemble

    model = getattr(world.model, "model", world.model)  # a counting wrapper forwards to the model
    if not isinstance(model, TreeEnsemble):
        return {}
    hit = _EDGES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    per: dict[int, list[np.ndarray]] = {}
    for t in model.trees:
        inner = t.left >= 0
        U, L = t.limits()  # sklearn's float32 test, or an imported model's float64 split point
        for c in np.unique(t.feature[inner]):
            at = inner & (t.feature == c)
            per.setdefault(int(c), []).append(np.stack([t.threshold[at], U[at], L[at]]))
    edges = {}
    for c, ts in per.items():
        t, first = np.unique(np.concatenate(ts, axis=1)[0], return_index=True)
        tul = np.concatenate(ts, axis=1)[:, first]
        edges[c] = (t, tul[1].astype(float), tul[2].astype(float))
    if len(_EDGES) > 64:
        _EDGES.clear()
    _EDGES[id(model)] = (model, edges)
    return edges


_EDGES: dict[int, tuple[Any, dict]] = {}


def padded_edges(world: TabularWorld, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``split_edges`` of the columns ``cols`` as three (C, T) arrays (t, U, L), NaN padded to the
    most split column (cached per model and columns): crossings of all columns at once."""
    edges = split_edges(world)
    key = tuple(int(c) for c in cols)
    entry = _PADDED.get(id(edges))
    if entry is None or entry[0] is not edges:  # a new model (split_edges caches one dict per model)
        if len(_PADDED) > 64:
            _PADDED.clear()
        entry = _PADDED[id(edges)] = (edges, {})
    cache = entry[1]
    hit = cache.get(key)
    if hit is not None:
        return hit
    T = max((len(edges[c][0]) for c in key if c in edges), default=0)
    out = tuple(np.full((len(key), T), np.nan) for _ in range(3))
    for i, c in enumerate(key):
        if c in edges:
            for arr, src in zip(out, edges[c], strict=True):
                arr[i, : len(src)] = src
    cache[key] = out
    return out


_PADDED: dict[int, tuple[dict, dict]] = {}


def all_padded_edges(world: TabularWorld, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``padded_edges`` of every column 0..D-1 and each column's number of splits (D,) (cached: the
    sweeps ask on every call)."""
    edges = split_edges(world)
    entry = _PADDED.get(id(edges))
    hit = entry[1].get(("all", D)) if entry is not None and entry[0] is edges else None
    if hit is not None:
        return hit
    t, u, lft = padded_edges(world, np.arange(D))  # (creates the model's cache entry)
    n = (~np.isnan(t)).sum(1).astype(np.int64) if t.size else np.zeros(D, np.int64)
    out = _PADDED[id(edges)][1][("all", D)] = (t, u, lft, n)
    return out


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


def _stacked_leaf_boxes(model: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_leaf_boxes`` of all trees stacked: each tree's first row (T,) and the (nodes, D) lower and
    upper bounds (cached on the model)."""
    hit = model.__dict__.get("_stacked_leaf_boxes")
    if hit is None:
        boxes = _leaf_boxes(model)
        offsets = np.cumsum([0] + [len(lo) for lo, _ in boxes[:-1]]).astype(np.int64)
        hit = (offsets, np.concatenate([lo for lo, _ in boxes]), np.concatenate([hi for _, hi in boxes]))
        model.__dict__["_stacked_leaf_boxes"] = hit
    return hit


def cell_clip(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """For a tree ensemble, the point of each accepted row's *cell* (the box where every tree
    reaches the same leaves, so the decision is the same) nearest its agent: the agent clipped
    into the cell and its reachable box (integer columns, one-hot entries too, rounded inward: a group
    split at 0.5 would clip to (0.5, 0.5 + 1 ulp), whose sum is 1 to any tolerance; a one-hot group the
    row's own where the clip would break it), checked by one model call. Exact for every norm of Eq. 3,
    which is monotone in each |change|. Rows of other models, and NaN rows, come back unchanged."""
    from envs.models import TreeEnsemble

    model = getattr(world.model, "model", world.model)
    rows = np.flatnonzero(~np.isnan(C).any(1))
    if not isinstance(model, TreeEnsemble) or not len(rows):
        return C
    c, x = C[rows], X[rows]
    leaves = world.model.leaves(c)  # through a counting wrapper when there is one
    lo, hi = geo.box(x)
    from learners.tabular.polish_kernels import cell_points_kernel

    offsets, node_lo, node_hi = _stacked_leaf_boxes(model)
    g_cols, g_ends = geo.group_arrays()
    P, inside = cell_points_kernel(np.ascontiguousarray(leaves, np.int64), offsets, node_lo, node_hi, lo, hi,
                                   np.ascontiguousarray(x, float), np.ascontiguousarray(c, float), geo.integral, g_cols,
                                   g_ends)
    inside[inside] = accepts_for(world, geo, x[inside], P[inside])  # and the model has the last word
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
    if not edges:
        return c
    from learners.tabular.polish_kernels import edge_apply_kernel, edge_crossings_kernel

    t, u, lft, n_splits = all_padded_edges(world, x.shape[1])
    cols_all = np.flatnonzero(geo.numeric & (n_splits > 0))  # the numeric columns a tree splits on
    if not len(cols_all):
        return c
    act = np.arange(len(c))  # a sweep that moves none of an agent's columns would move none the next time
    for _ in range(sweeps):
        moved = np.zeros(len(c), bool)
        changed = np.abs(c[act][:, cols_all] - x[act][:, cols_all]) > 1e-12  # (n, m)
        first = np.argsort(~changed, axis=1, kind="stable")  # each agent's changed columns first, in order
        table = np.where(np.take_along_axis(changed, first, 1), cols_all[first], -1)
        for r in range(int(changed.sum(1).max(initial=0))):  # each agent's r-th changed column, all at once
            own, col_of, v = edge_crossings_kernel(table, r, act, x, c, t, u, lft, n_splits, geo.rounded)
            if not len(own):
                continue
            ok = accepts_variants_for(world, geo, x, Variants(c, own, col_of[:, None], v[:, None]))
            # per (agent, column) the accepted crossing nearest the agent (ties: the first split), in place
            edge_apply_kernel(own, col_of, v, ok, x, c, moved)
        act = np.flatnonzero(moved)
        if not len(act):
            break
    return c


# What a trade gives back, four ways: an integer column's steps (its own shares, rounded up, where the
# change is over twice the largest step: an amount changed by thousands); a real column's shares of its
# change; a tree ensemble's real column, splits (k > 0: the k-th split back from the answer; -1: all
# but the split nearest the agent; 0: all, back at the agent's value)
TRADE_BACK_STEPS = (1.0, 2.0, 4.0, 8.0, 16.0)
TRADE_BACK_SHARES = (1 / 16, 1 / 4, 1 / 2, 1.0, 15 / 16)
TRADE_BACK_SPLITS = (0, 0, 0, 0, -1)
TRADE_BACK_INT_SHARES = (1 / 2, 3 / 4, 7 / 8, 15 / 16, 1.0)  # an integer column's shares, where its change is large
_BACKS = (np.array(TRADE_BACK_STEPS), np.array(TRADE_BACK_INT_SHARES), np.array(TRADE_BACK_SHARES),
          np.array(TRADE_BACK_SPLITS, np.int64))  # (B,) each, as ``trade_round_kernel`` takes them
# where the feature that takes the trade up moves: these shares of the room the give-back frees (a
# move of the whole room cannot win; the polish after a trade shortens the move that won)
TRADE_SHARES = np.array([1 / 64, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 7 / 8, 15 / 16, 31 / 32, 63 / 64])  # fine near 1: a
# smooth boundary's trades often win by a few percent


def trade_sweep(world: TabularWorld, geo: WorldGeometry, x: np.ndarray, c: np.ndarray, rounds: int = 2) -> np.ndarray:
    """Trades between two numeric features, where coordinate moves stop one step short: for every
    changed numeric column i and every other mutable numeric column j, i gives back a step toward
    the agent and j moves on (further from the agent) by ``TRADE_SHARES`` of the room that step
    frees, the distance j may move and still come out nearer; the nearest accepted trade of each
    agent is kept if it is nearer. One model call per round, all agents at once; an agent that no
    trade moved would get the same trades again, so a later round sweeps only those it moved."""
    c = c.copy()
    X_all, C_all = x, c
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    if len(num) < 2:
        return C_all
    lo_all, hi_all = geo.box(x)
    a_w, b_w, g_w = geo.weights
    if b_w + g_w <= 0:  # an l0 distance: a numeric trade never shortens it
        return C_all
    edges = split_edges(world)
    if edges:
        splits = all_padded_edges(world, x.shape[1])
    else:  # no splits: the kernel moves on the share ladder and never reads them
        splits = (np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0, np.int64))
    act = np.arange(len(X_all))  # the agents a round sweeps: all, then those the last round moved
    rule = (geo.numeric, geo.span, geo.raw_of_column, geo.n_raw)
    for _ in range(rounds):
        # compiled up to the model call and after it: the steps between calls were most of a sweep's time
        x, c = X_all[act], C_all[act]
        d_now, own, cols, vals = trade_round_kernel(x, c, lo_all[act], hi_all[act], num, *rule, geo.rounded,
                                                    float(a_w), float(b_w), float(g_w), *_BACKS, TRADE_SHARES,
                                                    bool(edges), *splits, *geo.cost_kernel_args())
        if not len(own):
            break
        ok = accepts_variants_for(world, geo, x, Variants(c, own, cols, vals))
        agents, rows = trade_pick_kernel(x, c, own, cols, vals, ok, d_now, *rule, float(a_w), float(b_w), float(g_w),
                                         *geo.cost_kernel_args())
        if not len(agents):
            break
        C_all[act[agents]] = rows
        act = act[agents]  # ascending: one per agent
    return C_all


def polish(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *, rounds: int = 4,
           probes: int = 15) -> np.ndarray:
    """Shorten accepted answers ``C`` (N, D; NaN rows skipped) while the model accepts them: one
    scale of all numeric changes, then each numeric change on its own (combined if the model still
    accepts; a tree ensemble: the exact split sweep instead), then each changed feature back at the
    agent's value. About 2 + rounds + 2 model calls (a tree ensemble: 3 + its sweeps)."""
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
        num_cols = np.flatnonzero(num)

        def scaled(S: np.ndarray) -> np.ndarray:  # (n, m) scales -> (n * m, D) projected rows (numeric columns only move)
            return scaled_rows_kernel(x, c, np.ascontiguousarray(S, float), num_cols, geo.rounded, lo, hi)

        trees = bool(split_edges(world))
        # the joint scale: half the rounds, a tree ensemble one (the split sweep below is exact per column;
        # a second round changed no answer of the 4 forest cells)
        s = _line_search(world, scaled, np.zeros(len(c)), np.ones(len(c)), np.zeros(len(c), bool),
                         rounds=1 if trees else max(1, rounds // 2), probes=P, geo=geo, agents=x)
        shrunk = scaled(s[:, None])
        c = np.where((s < 1.0)[:, None], shrunk, c)  # scale 1 was never probed: x + (c - x) may miss c's last bit
        # each change on its own: a line search, but on a tree ensemble the split sweep below is exact per
        # column (its decision changes only at splits), so probing between them would only repeat it
        a_idx, cols = np.nonzero(num[None, :] & (np.abs(c - x) > 1e-12))
        if len(a_idx) and not trees:
            base = c[a_idx]

            def moved(V: np.ndarray) -> Variants:  # (n, P) values of each entry's column, as variants of its row
                return Variants(base, np.repeat(np.arange(len(a_idx)), P), np.repeat(cols, P)[:, None], V.reshape(-1, 1))

            far = _line_search(world, moved, x[a_idx, cols], c[a_idx, cols], geo.integral[cols], rounds=rounds,
                               probes=P, geo=geo, agents=x[a_idx])
            combined = c.copy()
            combined[a_idx, cols] = far
            c = np.where(accepts_for(world, geo, x, combined)[:, None], combined, c)
        if trees:  # a tree ensemble: each change scanned exactly over its splits
            c = _edge_sweep(world, geo, x, c)
    # each changed raw feature back at the agent's value, all tried in one call
    a_idx, j_idx = np.nonzero(geo.deltas(x, c) > 1e-12)
    if len(a_idx):
        cols = geo.raw_columns()[j_idx]  # (E, w) the dropped feature's columns, -1 padded
        vals = np.where(cols >= 0, x[a_idx[:, None], np.maximum(cols, 0)], 0.0)
        trials = Variants(c, a_idx, cols, vals)
        # a tree ensemble scores variants exactly; a smooth model's variant scores may differ in the last
        # bits, so its trials are scored as rows (the decision at the margin is the rows')
        exact = getattr(world.model, "exact", False)
        ok = accepts_variants_for(world, geo, x, trials) if exact else accepts_for(world, geo, x[a_idx], trials.rows())
        # one drop per agent (trials were made from the undropped row): its nearest accepted one, if nearer
        a_w, b_w, g_w = geo.weights
        agents, dropped = trade_pick_kernel(x, c, a_idx, cols, vals, ok, geo.distance(x, c), geo.numeric, geo.span,
                                            geo.raw_of_column, geo.n_raw, float(a_w), float(b_w), float(g_w),
                                            *geo.cost_kernel_args())
        c[agents] = dropped
    C[rows] = c
    return C
