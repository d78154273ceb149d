"""The rows that shorten an accepted answer by one move, and the choice of the answers to shorten: the
refinement rounds of ``budget_search`` (issue 56), one start's moves independent of the others'."""

from __future__ import annotations

import numpy as np

from learners.tabular.first_round import screens
from learners.tabular.geometry import WorldGeometry
from learners.tabular.lifts import one_more_feature
from learners.tabular.rows import nan_as_zero, packed_rows, repeats, take_rows
from learners.tabular.rows import projected as _projected
from learners.tabular.slides import slides
from learners.tabular.step_trades import step_trades
from learners.tabular.steps import first_vocab_values
from learners.tabular.vocab_table import between_values, vocab_table

# a numeric change shrunk to these fractions of itself (coarse far from the answer, fine near it)
FRACTIONS = tuple(np.round(np.concatenate([np.linspace(0.05, 0.75, 8), 1 - np.geomspace(0.2, 0.004, 12)]), 6))
RAY = tuple(np.round(1 - np.geomspace(0.6, 0.002, 20), 6))  # the whole numeric change scaled toward the agent
PAIR_FRACTIONS = (0.0, 0.3, 0.6, 0.8, 0.9, 1.0)  # the grid of a pair of numeric changes (1.0: as it is)
VOCAB_STEPS = 8  # vocabulary values between the agent and the answer tried per numeric column
# on a model that answers in steps (``steps.step_share``) the shrinks go to the vocabulary's values (a forest's
# splits) more than to fractions: most fractions of a change land in the cell the answer is in already
STEP_VOCAB_STEPS = 24
STEP_FRACTIONS = (0.5, 0.8, 0.95)
STEP_FLIPS = 2  # and a changed column goes to this many vocabulary values on the other side of the agent
TRADE_BACKS = (1.0, 2.0)  # integer steps a changed integer column gives back in a trade
TRADE_SHARES = (0.125, 0.25, 0.5, 0.75, 1.0)  # of the room a give-back frees, the partner's move
# on a smooth model the partner's optimum is anywhere in (0.75, 1) of it (German MLP, 8 x 2,000: a give-back of two
# months needed 0.79 of the amount it freed); a forest's partner moves to its splits (step_trades), not finer shares
SMOOTH_TRADE_SHARES = (0.125, 0.25, 0.5, 0.75, 0.8, 0.875, 0.95, 1.0)
ADD_SHRINK = (0.5, 0.7, 0.85, 0.95)  # the answer's numeric changes scaled toward the agent when a feature is added
# in steps, two changed numeric columns go at once to the answer's value or one of this many vocabulary values just
# inside it (a forest's optimum is often both columns on the split edges just inside the answer found, which the
# one-column shrinks reach one column at a time: a round each); chosen on validation agents (docs/generators_log.md)
STEP_INNER_VALUES = 6
# in steps, ahead of a refinement round's spread: the answer's edges, each changed numeric column alone and in pairs
# at one of this many vocabulary values just inside the answer (``answer_edges``; Credit forest at 2 x 256 .818 ->
# .847 over four fits, German .840 -> .868, Adult .900 -> .905, 8 x 2,000 unchanged: docs/generators_log.md)
EDGE_VALUES = 12
# in steps: the best answer's changed numeric columns alone at this many vocabulary values just inside it, and each
# changed feature back, in place of a round's nearest spread moves (``answer_shrinks``; Adult forest at 2 x 256:
# validation .971 -> .978 over four fits, fresh .968 -> .970, held-out the same: docs/generators_log.md)
ANSWER_SHRINKS = 4


def _starts(C: np.ndarray, d: np.ndarray, k: int, X: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(N, k, D) each agent's ``k`` nearest distinct accepted rows of ``C`` (N, Q, D) and (N, k) their
    distances (inf, rows NaN, where there are fewer). With the agents ``X``, the nearest row of each
    changed set comes first (nearest first), then the next nearest rows: a farther answer that changes
    other features may shrink below the nearest one, which the shrinking moves of one set never reach."""
    C, d = _accepted_only(C, d)
    order = np.argsort(d, axis=1, kind="stable")
    d = np.take_along_axis(d, order, 1)
    C = take_rows(C, order)
    dup = np.zeros_like(d, bool)
    dup[:, 1:] = (d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:])  # equal distance: most likely the same row
    d = np.where(dup, np.inf, d)
    key = d.copy()
    if X is not None and C.shape[1] > 1:  # a row whose changed set a nearer row has ranks after every first
        packed = np.packbits(np.abs(nan_as_zero(C) - X[:, None, :]) > 1e-12, axis=-1)  # (N, Q, bytes)
        width = -(-packed.shape[-1] // 8) * 8  # whole 8-byte words
        moved = np.zeros((*packed.shape[:2], width), np.uint8)
        moved[..., : packed.shape[-1]] = packed
        # the rows come nearest first, so each (agent, set)'s first is its nearest
        repeat = repeats(np.ascontiguousarray(moved).view(np.dtype((np.void, width)))[..., 0])
        key[repeat & np.isfinite(d)] += 1e6  # after every first of its set, in distance order
    order = np.argsort(key, axis=1, kind="stable")[:, :k]
    d = np.take_along_axis(d, order, 1)
    S = take_rows(C, order)
    S[~np.isfinite(d)] = np.nan
    if S.shape[1] < k:
        S = np.pad(S, ((0, 0), (0, k - S.shape[1]), (0, 0)), constant_values=np.nan)
        d = np.pad(d, ((0, 0), (0, k - d.shape[1])), constant_values=np.inf)
    return S, d


def _accepted_only(C: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``C`` (N, Q, D) and ``d`` (N, Q) cut to each agent's rows of finite distance (the accepted ones), in order:
    the same starts as from every row scored (the others never become one), sorted in a fraction of the time."""
    live = np.isfinite(d)
    K = max(int(live.sum(1).max(initial=0)), 1)
    if K >= d.shape[1]:
        return C, d
    return packed_rows(live, K, C), packed_rows(live, K, d, np.inf)


def _moves(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None, steps: bool = False,
           lo: np.ndarray | None = None, trades: bool = False) -> np.ndarray:
    """(N, Q, D) rows that shorten each agent's accepted rows ``S`` (N, T, D) by one move (none from NaN rows);
    ``lo`` (N, T): the bracket of each start's ray (``_brackets``)."""
    N, T, D = S.shape
    # every start at once (start-major per agent): one call, not T, where a request is one agent (latency);
    # a NaN start (an agent with fewer answers) has no moves, so only the live ones are built
    live = np.flatnonzero(~np.isnan(S).any(-1).reshape(N * T))
    if not len(live):
        return np.full((N, T, D), np.nan)
    M1 = _moves_one(geo, np.repeat(X, T, axis=0)[live], S.reshape(N * T, D)[live], vocab, steps,
                    None if lo is None else lo.reshape(N * T)[live], trades)
    M = np.full((N * T, M1.shape[1], D), np.nan)
    M[live] = M1
    return M.reshape(N, T * M1.shape[1], D)


def _brackets(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(N, T) for each start ``S`` (N, T, D), the largest fraction f < 1 of its numeric change at which a
    rejected row of ``R`` (N, Q, D) lies on its ray (x + f (s - x), its other columns as s's; integer
    columns within rounding), 0 where none: on a smooth model the boundary lies between f and 1."""
    if not R.shape[1]:
        return np.zeros(S.shape[:2])
    num = geo.numeric
    dS = nan_as_zero(S - X[:, None, :])  # (N, T, D)
    real = num & ~geo.rounded
    # f is read off one column: the largest real change, else the integer change of the most steps (its
    # rounding error, 0.5 / steps, the smallest)
    key = np.where((real & (dS != 0)).any(-1), np.argmax(np.where(real, np.abs(dS) / geo.span, -1.0), axis=-1),
                   np.argmax(np.where(num, np.abs(dS), -1.0), axis=-1))
    k = np.take_along_axis(dS, key[..., None], -1)[..., 0]  # (N, T)
    dR = R - X[:, None, :]  # (N, Q, D), NaN rows unscored
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.take_along_axis(dR[:, None], key[:, :, None, None], -1)[..., 0] / k[..., None]  # (N, T, Q)
        # only the (start, row) pairs whose key column puts the row inside the ray are checked column by column
        n, t, q = np.nonzero((k[..., None] != 0) & (f > 0) & (f < 1 - 1e-9))
        s, r, f = dS[n, t], dR[n, q], f[n, t, q]  # (L, D), (L, D), (L,)
        # a rounded key column reads f to within 0.5 / |k|, which every other column's check allows for
        slack = np.where(geo.rounded[key[n, t]], 0.5 / np.abs(k[n, t]), 0.0)[:, None] * np.abs(s)
        resid = np.abs(r - f[:, None] * s)
        tol = np.where(geo.rounded, 0.5, 0.0) + 1e-9 * (1.0 + np.abs(s)) + slack
        on = np.where(num, resid <= tol, np.abs(r - s) <= 1e-12).all(-1)
    out = np.zeros(S.shape[:2])
    np.maximum.at(out, (n[on], t[on]), f[on])  # the largest such f per start (f > 0: 0 where none)
    return out


def _moves_one(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None, steps: bool = False,
               lo: np.ndarray | None = None, trades: bool = False) -> np.ndarray:
    """(N, Q, D) rows that shorten each agent's answer ``B`` (N, D) by one move (NaN rows where B is NaN):
    ``_shrinks``, then ``_ray`` (the only part that depends on the bracket ``lo``), projected row by row, each
    answer's real moves first (most of a model in steps' are NaN: fewer rows for every later step)."""
    return _projected(geo, X, _shrinks(geo, X, B, vocab, steps, trades) + [_ray(geo, X, B, lo, steps)], packed=True)


def _ray(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, lo: np.ndarray | None = None, steps: bool = False
         ) -> np.ndarray:
    """(N, len(RAY), D) each answer's whole numeric change scaled toward the agent by ``RAY``; where ``lo``
    (N,) > 0 (a rejected row on the answer's ray) evenly inside (lo, 1) instead (unprojected)."""
    N, num = len(X), np.flatnonzero(geo.numeric)
    t = np.broadcast_to(np.asarray(RAY), (N, len(RAY)))
    if lo is not None and not steps:  # a bracket known: evenly inside it (1% of the change wants a fine grid)
        inner = lo[:, None] + (1 - lo[:, None]) * np.arange(1, len(RAY) + 1)[None, :] / (len(RAY) + 1)
        t = np.where(lo[:, None] > 0, inner, t)
    R = np.repeat(B[:, None], t.shape[1], axis=1)
    R[:, :, num] = X[:, None, num] + t[:, :, None] * (B[:, None, num] - X[:, None, num])
    return R


def _shrinks(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None, steps: bool = False,
             trades: bool = False) -> list[np.ndarray]:
    """The moves of ``_moves_one`` but the ray, each part (N, Q_i, D) unprojected: a changed feature back to the
    agent's value, a numeric change shrunk (fractions, vocabulary values between), two shrunk together (and, in
    steps, two at once onto the vocabulary values just inside the answer: ``inner_grid``), the trades, the
    slides (a smooth model) or the step trades (in steps, with ``trades``)."""
    N, D = X.shape
    parts = _features_back(geo, X, B)
    num = np.flatnonzero(geo.numeric)
    f = np.asarray(STEP_FRACTIONS if steps else FRACTIONS)
    V = STEP_VOCAB_STEPS if steps else VOCAB_STEPS
    F = first_vocab_values(geo, X, vocab, V) if vocab is not None else None
    for c in num:  # each numeric change shrunk
        R = np.repeat(B[:, None], len(f), axis=1)
        R[:, :, c] = X[:, None, c] + f[None, :] * (B[:, None, c] - X[:, None, c])
        parts.append(R)
        if F is not None and len(vocab[c]):  # the vocabulary values between the agent and the answer, nearest to the agent first
            b = B[:, c]
            up = b > X[:, c]
            vals = np.where(up[:, None], F[0, :, c], F[1, :, c])
            inside = ~np.isnan(vals) & np.where(up[:, None], vals < b[:, None], vals > b[:, None])
            R = np.repeat(B[:, None], V, axis=1)
            R[:, :, c] = np.where(inside, vals, np.nan)
            parts.append(R)
            if steps and STEP_FLIPS:  # the change to the other side of the agent (a forest need not be monotone)
                moved = np.abs(b - X[:, c]) > 1e-12
                R = np.repeat(B[:, None], STEP_FLIPS, axis=1)
                R[:, :, c] = np.where(moved[:, None], np.where(up[:, None], F[1, :, c, :STEP_FLIPS], F[0, :, c, :STEP_FLIPS]), np.nan)
                parts.append(R)
    g = np.asarray(PAIR_FRACTIONS)  # two numeric changes shrunk together, on a grid (an optimum trading them)
    changed = np.abs(nan_as_zero(B) - X) > 1e-12
    levels = X[:, :, None] + g[None, None, :] * (B - X)[:, :, None]  # (N, D, G) each column's change shrunk
    parts += _pair_rows(B, changed, num, levels, np.repeat(np.arange(len(g)), len(g)), np.tile(np.arange(len(g)), len(g)))
    if steps and STEP_INNER_VALUES and vocab is not None:
        parts += inner_grid(geo, X, B, vocab, changed, STEP_INNER_VALUES)
    parts += _trades(geo, X, B, changed, TRADE_SHARES if steps else SMOOTH_TRADE_SHARES)
    if steps and trades and vocab is not None:  # in steps, a round to follow: along the splits (step_trades.py)
        parts.append(step_trades(geo, X, B, vocab))
    if not steps:  # a smooth boundary: less of one real change, more of another
        parts.append(slides(geo, X, B))
    return parts


def _trades(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, changed: np.ndarray,
            shares: tuple[float, ...] = TRADE_SHARES) -> list[np.ndarray]:
    """(N, Q, D) rows per changed integer column: it gives back ``TRADE_BACKS`` steps toward the agent and
    another numeric column moves on, either way it may, by ``shares`` of the distance that frees (the
    optimum that takes one step less of an integer feature and tips over with a little of another). All
    (column, steps, partner, direction) combinations at once: one agent's moves are built per request."""
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    ints = num[geo.rounded[num]]
    if not len(ints) or len(num) < 2:
        return []
    Bn = nan_as_zero(B)
    c, k = np.repeat(ints, len(TRADE_BACKS)), np.tile(np.asarray(TRADE_BACKS), len(ints))
    live = changed[:, c] & (np.abs(Bn[:, c] - X[:, c]) > k - 1e-9)
    keep = np.flatnonzero(live.any(0))  # the (column, steps) some agent can give back
    if not len(keep):
        return []
    partners = [np.repeat(num[num != c[i]], 2) for i in keep]  # each other column, up then down
    size = np.array([len(p) for p in partners])
    j = np.concatenate(partners)
    sgn = np.tile([1.0, -1.0], len(j) // 2)
    c, k, live = np.repeat(c[keep], size), np.repeat(k[keep], size), np.repeat(live[:, keep], size, axis=1)
    lo, hi = geo.box(X)
    cost, raw = geo.direction_costs, geo.raw_of_column
    g = Bn[:, c] - X[:, c]  # (N, T) the integer column's change
    freed = k / geo.span[c] * np.where(g < 0, cost[raw[c], 1], cost[raw[c], 0])  # the normalized, weighted change a give-back frees
    w = np.where(sgn > 0, cost[raw[j], 0], cost[raw[j], 1])
    step = np.asarray(shares)[None, None, :] * (freed / w)[:, :, None] * geo.span[j][None, :, None]  # (N, T, S)
    D = X.shape[1]
    R = np.repeat(np.repeat(B[:, None, None, :], len(c), 1), len(shares), 2)  # (N, T, S, D)
    n, t = np.arange(len(X))[:, None], np.arange(len(c))[None, :]
    R[n, t, :, c[None, :]] = (B[:, c] - np.sign(g) * k)[:, :, None]
    R[n, t, :, j[None, :]] = B[:, j][:, :, None] + sgn[None, :, None] * step
    bad = ~live | (sgn * (Bn[:, j] - X[:, j]) < -1e-12)  # it changed the other way
    bad |= np.where(sgn > 0, hi[:, j] <= B[:, j], lo[:, j] >= B[:, j])  # no room that way
    R[bad] = np.nan
    return [R.reshape(len(X), -1, D)]


def _additions(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None,
               Sc: np.ndarray | None = None) -> np.ndarray:
    """(N, Q, D) the answers ``B`` (N, D) with one more raw feature changed (a ``screens`` move of a feature
    ``B`` leaves at the agent's value) and their numeric changes scaled by ``ADD_SHRINK``: a changed set
    that needs a feature the proposals left out is reached by adding it, then shrinking (a later round)."""
    Sc = screens(geo, X, vocab) if Sc is None else Sc
    changed = np.abs(nan_as_zero(B) - X) > 1e-12  # the answer's own changes, before they are scaled
    num = geo.numeric
    out = []
    for t in ADD_SHRINK:
        base = np.array(B, float)
        base[:, num] = X[:, num] + t * (base[:, num] - X[:, num])
        out.append(one_more_feature(X, base, Sc, changed))
    return _projected(geo, X, out)


def _pair_rows(B: np.ndarray, changed: np.ndarray, num: np.ndarray, levels: np.ndarray, i1: np.ndarray,
               i2: np.ndarray) -> list[np.ndarray]:
    """(N, len(i1), D) per pair of numeric columns ``num`` that an agent's answer ``B`` changes both of: the answer
    with the first column at its ``levels`` (N, D, G) ``i1`` and the second at ``i2``, row by row (NaN rows for
    the agents that change only one of them)."""
    parts = []
    for i, c1 in enumerate(num):
        for c2 in num[i + 1:]:
            both = changed[:, c1] & changed[:, c2]
            if not both.any():
                continue
            R = np.repeat(B[:, None], len(i1), axis=1)
            R[:, :, c1] = levels[:, c1, i1]
            R[:, :, c2] = levels[:, c2, i2]
            R[~both] = np.nan
            parts.append(R)
    return parts


def inner_values(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray], K: int) -> np.ndarray:
    """(N, D, K) per agent and numeric column the ``K`` vocabulary values strictly between the agent's value
    and the answer's, nearest to the answer first (a forest's split edges just inside the answer); NaN where
    fewer and for other columns."""
    Bn = nan_as_zero(B)
    out = between_values(vocab_table(geo, vocab), X, Bn, K)  # every column at once: ``vocab_between``'s values
    out[np.abs(Bn - X) <= 1e-12] = np.nan
    return out


def inner_grid(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray], changed: np.ndarray,
               K: int, W: np.ndarray | None = None) -> list[np.ndarray]:
    """(N, Q, D) rows per pair of changed numeric columns: each at its answer's value or one of the ``K``
    vocabulary values just inside it (``inner_values``), both at once (a pair the one-column shrinks reach
    only one at a time), the answer itself left out; then every changed numeric column at its first inner
    value at once. ``W``: ``inner_values(geo, X, B, vocab, K)`` where the caller has it already."""
    W = inner_values(geo, X, B, vocab, K) if W is None else W
    num = np.flatnonzero(geo.numeric)
    L = np.concatenate([B[:, :, None], W], axis=2)  # (N, D, K + 1): level 0 the answer's own value
    # every pair of levels but (0, 0), the answer itself
    parts = _pair_rows(B, changed, num, L, np.repeat(np.arange(K + 1), K + 1)[1:], np.tile(np.arange(K + 1), K + 1)[1:])
    R = B.copy()
    first = W[:, :, 0]
    R[:, num] = np.where(np.isnan(first[:, num]), B[:, num], first[:, num])
    parts.append(R[:, None])
    return parts


def edge_twins(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray]) -> np.ndarray:
    """(N, Q, D) the answers ``B`` with one changed numeric column moved to its first vocabulary value inside the
    answer as a float32 reader sees it on the answer's side (``vocab_table.float32_sides``), where the labels'
    copy of that edge reads on the agent's side; NaN rows elsewhere. The copy the labels hold is asked by
    ``answer_edges``; this is the other, a float32 step away."""
    from learners.tabular.vocab_table import float32_sides

    N, D = X.shape
    num = [c for c in np.flatnonzero(geo.numeric) if len(vocab[c])]
    out = np.full((N, len(num), D), np.nan)
    Bn = nan_as_zero(B)
    first = between_values(vocab_table(geo, vocab), X, Bn, 1)[:, :, 0]  # ``vocab_between``'s first, every column
    for i, c in enumerate(num):
        x, b = X[:, c], Bn[:, c]
        v = first[:, c]
        f = np.where(~np.isnan(v), v, 0.0)
        up, down = float32_sides(f, f)
        t = np.where(b > x, up, down)  # the answer's side of the edge
        keep = ~np.isnan(v) & (t != v) & ~np.isnan(B).any(-1)  # (no value lies between an unchanged column's ends)
        out[keep, i] = B[keep]
        out[keep, i, c] = t[keep]
    return out


def answer_edges(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray], K: int = EDGE_VALUES
                 ) -> np.ndarray:
    """(N, Q, D) the answers ``B`` with their numeric changes moved onto a forest's split edges just inside them:
    each changed numeric column alone at one of the ``K`` vocabulary values between the agent and the answer
    nearest the answer (``inner_values``), then ``inner_grid``'s pairs; NaN rows where a column has fewer
    values or did not change, and for agents without an answer (a NaN row of ``B``). A miss of the right
    changed set is mostly such a value a few per cent short of the optimum, which the even spread of a round's
    many moves over their nearness ranks often leaves out."""
    W = inner_values(geo, X, B, vocab, K)
    parts = _columns_alone(geo, B, W)
    parts += inner_grid(geo, X, B, vocab, np.abs(nan_as_zero(B) - X) > 1e-12, K, W)
    out = np.concatenate(parts, axis=1)
    out[np.isnan(B).any(-1)] = np.nan
    return out


def answer_shrinks(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray], K: int = ANSWER_SHRINKS
                   ) -> np.ndarray:
    """(N, Q, D) the answers ``B`` one move shorter: each raw feature back to the agent's value, then each changed
    numeric column alone at one of the ``K`` vocabulary values just inside the answer (``inner_values``); NaN rows
    where a column has fewer values, and for agents without an answer. A round's moves are many, and its even
    spread over their nearness ranks can leave out the one move that was needed (Adult forest's agent at hours 44
    whose optimum is hours 43, the answer's next value in)."""
    out = np.concatenate(_features_back(geo, X, B) + _columns_alone(geo, B, inner_values(geo, X, B, vocab, K)), axis=1)
    out[np.isnan(out).any(-1)] = np.nan
    out[np.isnan(B).any(-1)] = np.nan
    return out


def _features_back(geo: WorldGeometry, X: np.ndarray, B: np.ndarray) -> list[np.ndarray]:
    """(N, 1, D) per raw feature: the answers ``B`` with that feature back to the agent's value."""
    cols = geo.raw_columns()
    parts = []
    for j in range(geo.n_raw):
        m = cols[j][cols[j] >= 0]
        R = B.copy()
        R[:, m] = X[:, m]
        parts.append(R[:, None])
    return parts


def _columns_alone(geo: WorldGeometry, B: np.ndarray, W: np.ndarray) -> list[np.ndarray]:
    """(N, K, D) per numeric column: the answers ``B`` with that column alone at each of its values ``W`` (N, D, K)."""
    parts = []
    for c in np.flatnonzero(geo.numeric):
        R = np.repeat(B[:, None], W.shape[2], axis=1)
        R[:, :, c] = W[:, c, :]
        parts.append(R)
    return parts
