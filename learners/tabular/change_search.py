"""The values the change-and-value search tries (``learners/tabular/change_value.py``), apart from
the network that ranks them: per numeric column, options around a predicted value
(``value_options``) and levels within the room an answer's distance leaves (``room_levels``,
``room_levels_compact``); combinations of several features within that room
(``combinations_within``); every one-feature move of a discrete feature (``discrete_variants``);
and the index helpers of a scan (``grid_indices``, ``numeric_in_subsets``). Their inner loops are
compiled in ``scan_kernels.py``."""

from __future__ import annotations

import functools

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.geometry import Variants, WorldGeometry, may_accept_within
from learners.tabular.polish import crossings, padded_edges, split_edges
from learners.tabular.scan_kernels import (
    combination_columns_kernel,
    combinations_kernel,
    discrete_moves_kernel,
    even_levels_kernel,
    split_levels_kernel,
)

PARTIAL_CAP = 2  # partial combinations kept per agent and step, in units of the final cap (combinations_within)
LADDER = np.array([0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0])  # multiples of a predicted change


def value_options(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, e: int) -> np.ndarray:
    """(N, D, e) values to try per numeric column, nearest to the predicted ``value`` first (NaN padded).

    A tree ensemble changes its decision only where a value crosses a split, so its options are
    split crossings (``crossings``: the value just across each split from the agent, exact under
    sklearn's float32 test) within the agent's reachable range: half the first ones the agent
    meets in the predicted direction, half those nearest the predicted value. Other models get
    multiples of the predicted change (``LADDER``) and the reachable bound."""
    N, D = X.shape
    out = np.full((N, D, e), np.nan)
    lo, hi = geo.box(X)
    cols = np.flatnonzero(geo.numeric & ~geo.fixed)
    edges = split_edges(world)
    if edges:
        half = max(1, e // 2)
        for c in (int(c) for c in cols if int(c) in edges):
            cand = crossings(edges[c], X[:, c])  # (N, T): each split crossed from the agent's side
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


def room_levels(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, room: np.ndarray,
                requests: list[tuple[int, bool]]) -> dict[tuple[int, bool], np.ndarray]:
    """``room_levels_compact`` as (N, D, e) arrays over every column (NaN where a column has none)."""
    levels, pos = room_levels_compact(world, geo, X, room, requests)
    return {r: v[:, pos] for r, v in levels.items()}


def room_levels_compact(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, room: np.ndarray,
                        requests: list[tuple[int, bool]]) -> tuple[dict[tuple[int, bool], np.ndarray], np.ndarray]:
    """Per request (e, nearest), (N, D, e) values per numeric column within ``room`` (N,) of
    normalized change from the agent and within its reachable box (NaN padded): a tree ensemble's
    split crossings, else e evenly spaced values each way (an integer column's every step when they
    fit); the ``e`` nearest the agent when ``nearest`` (crossings), else all reachable values where
    they fit and ``e`` evenly spread over them (ordered by value: both directions) where not.
    All columns at once (a tree's crossings padded to its most split column; its arrays hold fewer
    than e values per column where no agent has e within reach). Compact: (N, C + 1, e)
    arrays over the C columns that have values, and ``pos`` (D,): each column's place in them (C,
    an all-NaN slot, for the others)."""
    N, D = X.shape
    edges = split_edges(world)
    cols = np.flatnonzero(geo.numeric & ~geo.fixed)
    if edges:  # a column a tree ensemble never splits on changes no decision
        cols = np.array([c for c in cols if int(c) in edges], np.int64)
    pos = np.full(D, len(cols), np.int64)
    pos[cols] = np.arange(len(cols))
    if not len(cols):
        return {r: np.full((N, 1, r[0]), np.nan) for r in requests}, pos
    out: dict[tuple[int, bool], np.ndarray] = {}
    lo, hi = geo.box(X)
    reach = room[:, None] * geo.span[cols][None, :]  # (N, C)
    args = (X[:, cols], lo[:, cols], hi[:, cols], reach, geo.rounded[cols])
    if edges:  # split crossings, computed once for all requests (compiled)
        es = np.array([e for e, _ in requests], np.int64)
        vals = split_levels_kernel(*padded_edges(world, cols), *args, es, np.array([r[1] for r in requests], bool))
        for i, (e, nearest) in enumerate(requests):  # at most e values: no agent has more within its room
            w = min(e, vals.shape[-1])
            out[(e, nearest)] = np.full((N, len(cols) + 1, w), np.nan)
            out[(e, nearest)][:, : len(cols), :] = vals[i, :, :, :w]
    else:  # evenly spaced steps (compiled: the (N, C, 2e) candidates are never built)
        for e, nearest in requests:
            out[(e, nearest)] = np.full((N, len(cols) + 1, e), np.nan)
            out[(e, nearest)][:, : len(cols), :] = even_levels_kernel(*args, int(e))
    return out, pos


def combinations_within(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, best: np.ndarray, values: int,
                        cap: int, common: np.ndarray | None = None) -> tuple[Variants, np.ndarray]:
    """Variants of the agents ``X`` (N, D) that change two or more mutable numeric columns at once, each
    to one of its ``values`` split crossings nearest the agent within the room of the distance
    ``best`` (N,; the world's, cost weights included), and come out nearer than ``best`` (by Eq. 3 on
    the changed columns, exact here; with weights and an l0 term, by the unweighted reach):
    enumerated feature by feature, a partial combination dropped as soon as it cannot win (and, where
    more than ``PARTIAL_CAP * cap`` per agent remain, all but the farthest), at most ``cap`` per agent (the
    farthest: a combination only just inside the room is the likeliest accepted). ``common`` (D, m), or
    (N, D, m) per agent; NaN padded: further values per column to try where they are reachable and
    within the room (the values the training answers move a column to).
    The answers a tree ensemble needs several features for, each moved a little, which a scan of one
    to three features misses (GeCo's combinations, batched). An agent whose box of options the
    model's score bound rules out (``may_accept_within``) gets none: none of them would be accepted."""
    a, b, g = geo.weights
    best = np.asarray(best, float)
    room = geo.reach(best) / max(b + g, 1e-12)  # the cost weights: the unweighted change a nearer row may have
    N = len(X)
    cols = np.array([c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if c in split_edges(world)], np.int64)
    if len(cols) < 2 or values < 1:
        return Variants(X, np.zeros(0, np.int64), np.zeros((0, 2), np.int64), np.zeros((0, 2))), np.zeros(0, np.int64)
    levels, pos = room_levels_compact(world, geo, X, room, [(values, True)])
    lv = levels[(values, True)][:, pos[cols]]  # (N, F, e)
    if common is not None and common.shape[-1]:
        lo, hi = geo.box(X)
        per_agent = common.ndim == 3
        cv = (common[:, cols] if per_agent else np.broadcast_to(common[cols][None], (N, len(cols), common.shape[1]))).copy()
        xc = X[:, cols, None]
        fine = (cv >= lo[:, cols, None]) & (cv <= hi[:, cols, None]) & (cv != xc) \
            & (np.abs(cv - xc) <= (room[:, None] * geo.span[cols][None, :])[..., None] + 1e-12)
        lv = _first_of_each(np.concatenate([lv, np.where(fine, cv, np.nan)], axis=2))  # a crossing met again: once
    step = np.abs(lv - X[:, cols, None]) / geo.span[cols][None, :, None]  # normalized change of each option (NaN: none)
    if geo.cost is not None and a == 0:  # l1 / l-inf under cost weights: each option's step weighted by its direction, exact
        w = geo.cost[geo.raw_of_column[cols]]  # (F, 2): up, down
        step = step * np.where(lv < X[:, cols, None], w[None, :, 1, None], w[None, :, 0, None])
    elif geo.cost is not None:  # l0 terms count each change at its weight: prune by the unweighted reach (a superset)
        best = geo.reach(best)
    # an agent whose box of options (its own values too) the model's score bound rules out gets none
    filled = np.where(np.isnan(lv), X[:, cols, None], lv)
    live = may_accept_within(world, X, np.broadcast_to(cols, (N, len(cols))), filled.min(-1), filled.max(-1))
    who, pick = combinations_kernel(np.ascontiguousarray(step), np.where(live, np.asarray(best, float), 0.0), float(a),
                                    float(b), float(g), int(cap), int(PARTIAL_CAP * cap))
    vc, vv = combination_columns_kernel(who, pick, cols, np.ascontiguousarray(lv))
    return Variants(X, who, vc, vv), who


@functools.lru_cache(maxsize=64)
def grid_indices(sizes: tuple[int, ...]) -> np.ndarray:
    """(prod(sizes), k) every index combination of k axes of these sizes, the last axis fastest
    (built once per shape; read-only)."""
    out = np.stack(np.meshgrid(*[np.arange(m) for m in sizes], indexing="ij"), -1).reshape(-1, len(sizes))
    out.flags.writeable = False
    return out


def _first_of_each(vals: np.ndarray) -> np.ndarray:
    """``vals`` (..., m) with each value met again along the last axis set to NaN (its first stays)."""
    order = np.argsort(vals, axis=-1, kind="stable")  # NaN last; equal values in their order
    sv = np.take_along_axis(vals, order, -1)
    again = np.zeros(sv.shape, bool)
    again[..., 1:] = sv[..., 1:] == sv[..., :-1]
    out = vals.copy()
    np.put_along_axis(out, order, np.where(again, np.nan, sv), -1)
    return out


def discrete_variants(geo: WorldGeometry, X: np.ndarray) -> tuple[Variants, np.ndarray]:
    """Each agent of ``X`` (N, D) with one non-numeric raw feature at another value it may reach
    (each other column of a one-hot group, each other code of a binary or nominal feature), as
    variants of the agents (only the columns a move changes; compiled: no (N, moves, D) rows are
    built), agent by agent in the order of the moves, and the agent of each (T,)."""
    ptr, cols, vals = _discrete_moves(geo)
    if len(ptr) < 2:
        return Variants(X, np.zeros(0, np.int64), np.full((0, 1), -1, np.int64), np.zeros((0, 1))), np.zeros(0, np.int64)
    lo, hi = geo.box(X)
    owner, vc, vv = discrete_moves_kernel(np.ascontiguousarray(X, float), lo, hi, ptr, cols, vals)
    return Variants(X, owner, vc, vv), owner


def _discrete_moves(geo: WorldGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every one-feature move of a discrete feature: where each move's columns start (moves + 1,)
    in the columns it sets and their values (built once per geometry)."""
    hit = geo.__dict__.get("_discrete_moves")
    if hit is not None:
        return hit
    ptr, cols, values = [0], [], []
    for j, kind in enumerate(geo.raw_kinds):
        if kind == "numeric":
            continue
        members = np.flatnonzero(geo.raw_of_column == j)
        if kind == "group":
            options = [(members, (members == c).astype(float)) for c in members]
        else:
            options = [(members, np.array([v])) for v in np.arange(np.ceil(geo.lower[members[0]]),
                                                                    np.floor(geo.upper[members[0]]) + 1)]
        for cs, v in options:
            cols.extend(int(c) for c in cs)
            values.extend(float(a) for a in v)
            ptr.append(len(cols))
    out = (np.array(ptr, np.int64), np.array(cols, np.int64), np.array(values, float))
    geo.__dict__["_discrete_moves"] = out
    return out


def numeric_in_subsets(geo: WorldGeometry, subs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For subsets ``subs`` (N, S, J) of raw features: which raw features are numeric (J,), the
    column of each numeric one (J,; -1 elsewhere) and how many numeric features each subset has (N, S)."""
    J = subs.shape[2]
    num_raw = np.zeros(J, bool)
    num_raw[geo.raw_of_column[geo.numeric]] = True
    col_of_raw = np.full(J, -1)
    col_of_raw[geo.raw_of_column[geo.numeric]] = np.flatnonzero(geo.numeric)
    return num_raw, col_of_raw, (subs & num_raw).sum(-1)
