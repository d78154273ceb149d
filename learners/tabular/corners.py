"""The nearest corners of the labels' vocabulary, in order of distance (issue 56).

A forest answers in steps: its accepted regions are boxes whose edges are its split thresholds, and an
optimal counterfactual sits just past some of them. MACE's answers on the training agents land on those
edges, so the labels' values per column (``budget_search.value_vocabulary``) are, for the thresholds
that matter, the forest's own. A *corner* changes any subset of an agent's features, each numeric one to
a vocabulary value, each discrete one to another allowed level. Under a separable distance (MACE's l1
norm, with or without per-direction cost weights) the corners in increasing distance can be listed
without building all of them: the k smallest sums of one sorted option list per feature.

Scored in that order, the first accepted corner is the nearest accepted one of the set. They are listed best first
(``corner_kernels.best_first``: a heap of frontier corners, exact, ties in the order of the corner's option vector),
about k x features heap steps for k corners. On the
held-out agents of the four forests MACE's optimum was a corner for .78 (German: its optima also move
features the vocabulary lacks) to .96 of them, but many nearer corners are refused first: among the
corners that change exactly the optimum's columns, a median of 4 (German) to 28 (Credit) and a 90th
percentile of 81 to 520 are nearer. So the enumeration alone is within 1% on .53-.60 of the agents at
256 rows (``benchmarks/forest_corners.py``), below ``budget_search``. What the enumeration is for: the
rows a round has left once its moves, additions and screens are asked (each row once: ``rows.fresh``),
for a model in steps, go to the nearest corners not yet asked that are nearer than the answer.

With ``cuts`` (a tree ensemble's split points per column, ``split_cuts``) only the corners that model tells
apart are listed (``distinct_values``: per numeric feature, the nearest value between two cuts), so the same k
reaches farther: with the forest's own splits the cap of 1,000 corners on Credit forest's fresh agents rises
from .715 to .770 (``benchmarks/corner_pool_cap.py --distinct``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from learners.tabular.corner_kernels import best_first_many, options_kernel
from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import nan_as_zero, take_rows
from learners.tabular.vocab_table import vocab_sides

__all__ = ["CornerOptions", "corner_options", "distinct_values", "nearest_corners", "split_cuts"]

CORNER_BLOCK = 64  # agents enumerated at a time (memory: block x k x options)


@functools.lru_cache(maxsize=1024)
def _sided(column: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A numeric column's vocabulary (its float64 bytes) as its values going either way (``vocab_sides``: above the
    agent each edge's upward copy, below its downward one), sorted, and which of them a move up and a move down
    takes; computed once per vocabulary (an answer lists its corners in stages, each stage every column)."""
    vu, vd = vocab_sides(np.frombuffer(column, float))
    v = np.union1d(vu, vd)
    return v, np.isin(v, vu), np.isin(v, vd)


def _options(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], j: int, lo: np.ndarray, hi: np.ndarray,
             cuts: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw feature ``j``'s options per agent: (N, n, w) values of its columns and (N, n) distances of the
    agent with only that change (inf where an agent has fewer), nearest first (ties in the options' order); with
    ``cuts``, only the values ``distinct_values`` keeps."""
    cols = geo.raw_columns()[j]
    cols = cols[cols >= 0]
    N = len(X)
    kind = geo.raw_kinds[j]
    if kind == "numeric":
        c = cols[0]
        v, up, down = _sided(np.asarray(vocab[c], float).tobytes())
        V = np.broadcast_to(v, (N, len(v)))
        side = np.where(V > X[:, c:c + 1], up[None, :], down[None, :])
        ok = (V >= lo[:, c:c + 1] - 1e-12) & (V <= hi[:, c:c + 1] + 1e-12) & (np.abs(V - X[:, c:c + 1]) > 1e-12) & side
        if cuts is not None:
            ok = distinct_values(v, X[:, c], ok, cuts[c])
        vals = V[:, :, None]
    elif kind == "group":
        eye = np.eye(len(cols))
        vals = np.broadcast_to(eye, (N, len(cols), len(cols)))
        current = X[:, cols] > 0.5
        ok = ~current & (hi[:, cols] >= 1.0) & (lo[:, cols] <= 0.0).all(1, keepdims=True)
    else:  # binary or nominal: one integer column, every other allowed code
        c = cols[0]
        codes = np.arange(np.floor(geo.lower[c]), np.ceil(geo.upper[c]) + 1)
        V = np.broadcast_to(codes, (N, len(codes)))
        ok = (V >= lo[:, c:c + 1] - 1e-12) & (V <= hi[:, c:c + 1] + 1e-12) & (np.abs(V - X[:, c:c + 1]) > 1e-12)
        vals = V[:, :, None]
    if not ok.any():
        return np.zeros((N, 0, len(cols))), np.zeros((N, 0))
    R = np.repeat(X[:, None, :], vals.shape[1], axis=1)
    R[:, :, cols] = vals
    d = np.where(ok, geo.distance(X[:, None, :], R), np.inf)
    order = np.argsort(d, axis=1, kind="stable")
    return np.take_along_axis(np.broadcast_to(vals, (N,) + vals.shape[1:]), order[:, :, None], 1), \
        np.take_along_axis(d, order, 1)


def distinct_values(v: np.ndarray, x: np.ndarray, ok: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """``ok`` (N, n) of one numeric column's sorted values ``v`` (n,) for agents at ``x`` (N,), keeping only
    values a model that splits the column at ``cuts`` (sorted; a row goes left where value <= cut) tells
    apart from the agent and from each other: none between the agent's own two cuts, and of the values
    between two cuts only the nearest to the agent (the cheapest of a set the model scores alike). A column
    with no cuts keeps none (the model does not read it)."""
    key = np.searchsorted(cuts, v, side="left")  # the cuts a value lies above (nondecreasing in v)
    ok = ok & (key[None, :] != np.searchsorted(cuts, x, side="left")[:, None])
    up = ok & (v[None, :] > x[:, None])
    down = ok & ~up
    start = np.searchsorted(key, key, side="left")  # first index of each value's interval
    stop = np.searchsorted(key, key, side="right") - 1  # and its last
    cu = np.cumsum(up, axis=1)
    before = np.where(start > 0, cu[:, np.maximum(start - 1, 0)], 0)
    first_up = up & (cu - before == 1)  # above the agent: the lowest value of its interval
    cd = np.cumsum(down[:, ::-1], axis=1)[:, ::-1]  # down values at or after each index
    after = np.where(stop + 1 < len(v), cd[:, np.minimum(stop + 1, len(v) - 1)], 0)
    last_down = down & (cd - after == 1)  # below the agent: the highest value of its interval
    return first_up | last_down


def split_cuts(model: Any, columns: int) -> list[np.ndarray]:
    """Per encoded column, the sorted points where a tree ensemble (``envs.models.TreeEnsemble``) splits it: a
    row goes left at or below one (``Tree.limits``, exact for float32 splits too); the ``cuts`` of
    ``nearest_corners``."""
    at: list[list[np.ndarray]] = [[] for _ in range(columns)]
    for t in model.trees:
        inner = t.left >= 0
        upper = t.limits()[0]
        for c in np.unique(t.feature[inner]):
            at[int(c)].append(upper[inner & (t.feature == c)])
    return [np.unique(np.concatenate(a)) if a else np.zeros(0) for a in at]


@dataclass
class CornerOptions:
    """Each feature's options for a batch of agents, nearest first (``corner_options``): what a longer list of the
    same agents' corners needs again, so a search in stages builds them once."""

    features: list[int]  # the raw features that may change
    values: list[np.ndarray]  # per feature (N, n, w) its options' values of its columns
    dist: np.ndarray  # (N, features, n) their distances (inf past an agent's own)
    counts: np.ndarray  # (N, features) how many each agent has

    def take(self, a: np.ndarray) -> CornerOptions:
        """The options of agents ``a`` of the batch."""
        return CornerOptions(self.features, [v[a] for v in self.values], self.dist[a], self.counts[a])


def corner_options(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], *,
                   cuts: list[np.ndarray] | None = None) -> CornerOptions:
    """The options of ``nearest_corners`` for agents ``X`` (N, D): each changeable raw feature's values in the
    agent's box, nearest first (``cuts``: only those ``distinct_values`` keeps)."""
    X = np.atleast_2d(np.asarray(X, float))
    lo, hi = geo.box(X)
    features = [j for j in range(geo.n_raw) if not geo.fixed[geo.raw_columns()[j][0]]]
    if cuts is None and geo.cost is None:  # MACE's distance unweighted: one compiled call (``options_kernel``)
        return _compiled_options(geo, X, vocab, features, lo, hi)
    return _numpy_options(geo, X, vocab, features, lo, hi, cuts)


def _numpy_options(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], features: list[int], lo: np.ndarray,
                   hi: np.ndarray, cuts: list[np.ndarray] | None) -> CornerOptions:
    """``corner_options`` feature by feature in numpy (``_options``): with ``cuts``, or under cost weights."""
    values, dists = [], []
    for j in features:
        vals, d = _options(geo, X, vocab, j, lo, hi, cuts)
        values.append(vals)
        dists.append(d)
    n = max([d.shape[1] for d in dists], default=0)
    dist = np.full((len(X), len(features), max(n, 1)), np.inf)
    for f, d in enumerate(dists):
        dist[:, f, :d.shape[1]] = d
    return CornerOptions(features, values, dist, np.isfinite(dist).sum(-1))  # nearest first: the finite ones lead


def _option_table(geo: WorldGeometry, vocab: list[np.ndarray], features: list[int]) -> tuple[Any, ...]:
    """The options of ``features`` as ``options_kernel`` takes them (kinds, columns, values and their sides) and
    per feature its options' values of its columns, built once per geometry and vocabulary (kept on ``geo``)."""
    kept = geo.__dict__.get("_option_table")
    if kept is not None and len(kept[0]) == len(vocab) and all(u is v for u, v in zip(kept[0], vocab, strict=True)):
        return kept[1]
    kinds, cols, col_start, vals, up, down, val_start, values = [], [], [0], [], [], [], [0], []
    for j in features:
        c = geo.raw_columns()[j]
        c = c[c >= 0]
        if geo.raw_kinds[j] == "group":
            kinds.append(1)
            v, u, dn = np.zeros(0), np.zeros(0, bool), np.zeros(0, bool)
            values.append(np.eye(len(c)))
        else:  # numeric: the vocabulary's values either way; a code: every one in the column's range, either way
            kinds.append(0)
            if geo.raw_kinds[j] == "numeric":
                v, u, dn = _sided(np.asarray(vocab[c[0]], float).tobytes())
            else:
                v = np.arange(np.floor(geo.lower[c[0]]), np.ceil(geo.upper[c[0]]) + 1)
                u = dn = np.ones(len(v), bool)
            values.append(v[:, None])
        cols.extend(c.tolist())
        col_start.append(len(cols))
        vals.append(v)
        up.append(u)
        down.append(dn)
        val_start.append(val_start[-1] + len(v))
    table = (np.array(kinds, np.int64), np.array(cols, np.int64), np.array(col_start, np.int64),
             np.concatenate(vals or [np.zeros(0)]), np.concatenate(up or [np.zeros(0, bool)]),
             np.concatenate(down or [np.zeros(0, bool)]), np.array(val_start, np.int64), values)
    geo.__dict__["_option_table"] = (list(vocab), table)
    return table


def _compiled_options(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], features: list[int],
                      lo: np.ndarray, hi: np.ndarray) -> CornerOptions:
    """``corner_options`` without cuts, unweighted, in one compiled call: the same distances, order and counts
    (``tests/test_corners.py``); each feature's values (N, n, w) in its options' order."""
    kinds, cols, col_start, vals, up, down, val_start, values = _option_table(geo, vocab, features)
    a, b, g = geo.weights
    dist, order, counts = options_kernel(X, lo, hi, kinds, cols, col_start, vals, up, down, val_start, geo.numeric,
                                         geo.span, geo.raw_of_column, geo.n_raw, float(a), float(b), float(g))
    per = [values[f][order[:, f, :len(values[f])]] for f in range(len(features))]
    return CornerOptions(features, per, dist, counts)


def nearest_corners(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], k: int, *,
                    cuts: list[np.ndarray] | None = None, options: CornerOptions | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(N, k, D) each agent's ``k`` nearest corners (the agent itself left out) in increasing distance, and
    (N, k) their distances; NaN rows and inf where an agent has fewer, or where a row breaks the world's
    rules. The order is exact for a separable distance (MACE's l1, weighted or not), ties in the order of the
    corners' option vectors (``corner_kernels.best_first``). ``cuts``: per encoded column the sorted split points
    of a model in steps; then only corners it tells apart (``distinct_values``). ``options``: ``corner_options``
    of these agents (with the same ``cuts``), built once for several lists."""
    X = np.atleast_2d(np.asarray(X, float))
    N, D = X.shape
    rows, dist = np.full((N, k, D), np.nan), np.full((N, k), np.inf)
    for s in range(0, N, CORNER_BLOCK):
        sl = np.arange(s, min(N, s + CORNER_BLOCK))
        o = corner_options(geo, X[sl], vocab, cuts=cuts) if options is None else options.take(sl)
        sums, choice = best_first_many(o.dist, o.counts, k + 1)  # the agent itself first, every feature kept
        rows[sl], dist[sl] = _listed(geo, X[sl], sums, choice, o.values, o.features)
    return rows, dist


def _listed(geo: WorldGeometry, X: np.ndarray, sums: np.ndarray, choice: np.ndarray, options: list[np.ndarray],
            features: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(N, k, D) the corners that ``choice`` (N, k + 1, features) names, nearest first (``sums`` their distances,
    in order), rule breakers and the agent itself dropped, and (N, k) their distances."""
    N, width = sums.shape
    k = width - 1
    R = np.repeat(X[:, None, :], width, axis=1)
    cols_of = geo.raw_columns()
    for f, j in enumerate(features):
        if not options[f].shape[1]:
            continue
        cols = cols_of[j][cols_of[j] >= 0]
        idx = choice[:, :, f]
        v = take_rows(options[f], np.maximum(idx, 0))  # (N, width, w)
        R[:, :, cols] = np.where((idx >= 0)[:, :, None], v, R[:, :, cols])
    live = np.isfinite(sums) & (choice >= 0).any(-1)  # the agent itself is not a corner
    R[~live] = np.nan
    R[live & ~geo.keeps(X[:, None, :], nan_as_zero(R))] = np.nan  # (every value finite: the agent's, the vocabulary's)
    d = np.where(np.isnan(R).any(-1), np.inf, sums)
    keep = np.argsort(~np.isfinite(d), axis=1, kind="stable")[:, :k]  # order kept, rule-breakers dropped
    return take_rows(R, keep), np.take_along_axis(d, keep, 1)
