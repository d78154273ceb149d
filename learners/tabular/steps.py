"""A model that answers in steps (a tree ensemble), told through its answers alone, and the first-round rows
that suit one (issue 56).

A forest's probability is constant between its splits: moving one numeric feature of an agent by a
millionth of its span leaves it exactly as it was (a split lies between two values, not at one), where a
network's or a linear model's probability changes with any move. ``step_share``
measures that share on a few hundred training agents (one call; counted where the model is a
``BlackBoxModel``).

On such a model the nearest accepted row sits just past splits, and the labels' answers move a numeric
column to those edges (the value vocabulary: MACE's answers on the held-out agents of German, Credit and
Adult forest have 84%, 97% and 97% of their numeric values in the vocabulary of 500 training labels, most
of them among the first few values from the agent). ``corner_grid`` turns the proposals' changed sets into
rows at those values: for each distinct changed set, in the proposals' order, its numeric columns each at
``GRID_VALUES`` vocabulary values nearest the agent, in the proposal's direction and the other way in
turn (a grid over 1, 2 or 3 columns), the other changes as proposed. Both ways because a forest need not
be monotone: of the misses at 2 x 256 on German and Credit forest, most had MACE's changed set among the
proposals with one column moved the wrong way (German forest .72 -> .81 with both ways). On a smooth model
the same rows waste the budget (Credit MLP .67 -> .55 at 2 x 256), hence the probe.
"""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import repeats, row_keys
from learners.tabular.vocab_table import first_values, vocab_sides, vocab_table

GRID_VALUES = {1: 8, 2: 4, 3: 3}  # vocabulary values per numeric column of a changed set, by its numeric columns
STEP_PROBES = 256  # agents probed for steps
STEP_MOVE = 1e-6  # the probe's move, in spans of the column
STEP_SHARE_MIN = 0.5  # a model whose probability stays put for at least this share of them answers in steps


def step_share(model, geo: WorldGeometry, X: np.ndarray, *, probes: int = STEP_PROBES, seed: int = 0) -> float:
    """Share of probed agents (drawn from ``X``) whose probability under ``model`` is exactly unchanged
    after one mutable continuous column moves by ``STEP_MOVE`` of its span (up where the agent's box has
    the room): near 1 for a tree ensemble, whose splits lie between values, near 0 for a network or a
    linear model. One call. A world with integer columns only moves them off their grid (only the model
    sees the row: one integer step crosses some tree's split for most agents of a large forest); a model
    that refuses such rows is not probed (0: no grid)."""
    num = np.flatnonzero(geo.numeric & ~geo.fixed & ~geo.rounded)  # continuous columns: any row is valid
    if not len(num):  # integer columns only: moved off their grid, where the model takes such rows
        num = np.flatnonzero(geo.numeric & ~geo.fixed)
    if not len(num) or not len(X):
        return 0.0
    rng = np.random.default_rng(seed)
    A = np.asarray(X, float)[rng.integers(0, len(X), probes)]
    lo, hi = geo.box(A)
    c = num[rng.integers(0, len(num), len(A))]
    rows = np.arange(len(A))
    step = STEP_MOVE * np.where(np.isfinite(geo.span[c]) & (geo.span[c] > 0), geo.span[c], 1.0)
    up = A[rows, c] + step <= hi[rows, c]
    R = A.copy()  # not projected: an integer column moved off its grid (a split between two codes is not crossed)
    R[rows, c] = np.where(up, A[rows, c] + step, A[rows, c] - step)
    moved = np.abs(R - A).max(1) > 0
    if not moved.any():
        return 0.0
    try:
        p = model.predict_proba(np.concatenate([A[moved], R[moved]]))
    except ValueError:  # a model that checks its integer codes (a user's Pipeline behind its schema): no probe
        return 0.0
    n = int(moved.sum())
    return float(np.mean(p[:n] == p[n:]))


def corner_grid(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, vocab: list[np.ndarray], rows: int) -> np.ndarray:
    """(N, rows, D) for each distinct changed set among the proposals ``P`` (N, K, D), in order, the
    proposal with its 1 to 3 changed numeric columns on a grid of ``GRID_VALUES`` vocabulary values each:
    the first value from the agent in the proposal's direction, the first the other way, the second in the
    proposal's direction, ... (a column with none: the proposed value), projected; NaN padded where an
    agent has fewer. Every proposal of a grid size at once, then each agent's rows in proposal order."""
    N, K, D = P.shape
    out = np.full((N, rows, D), np.nan)
    if rows <= 0:
        return out
    Pp = geo.project(X, np.asarray(P, float))
    moved = np.abs(Pp - X[:, None, :]) > 1e-12
    numeric = moved & geo.numeric
    m = numeric.sum(-1)
    repeat = repeats(row_keys(moved.astype(float)))  # a changed set an earlier proposal has
    first = first_vocab_values(geo, X, vocab, max(GRID_VALUES.values()))  # (2, N, D, V): up, down
    agent, order, R_all, ok_all = [], [], [], []
    for size, V in GRID_VALUES.items():
        n, k = np.nonzero((m == size) & ~repeat)  # every (agent, proposal) of this size at once
        if not len(n):
            continue
        cols = np.argsort(~numeric[n, k], axis=1, kind="stable")[:, :size]  # (L, size)
        p = Pp[n, k]
        own = np.take_along_axis(p, cols, 1)
        upward = own > np.take_along_axis(X[n], cols, 1)
        ahead = np.where(upward[..., None], first[0][n[:, None], cols, :V], first[1][n[:, None], cols, :V])
        behind = np.where(upward[..., None], first[1][n[:, None], cols, :V], first[0][n[:, None], cols, :V])
        vals = np.stack([ahead, behind], -1).reshape(*ahead.shape[:-1], 2 * V)[..., :V]  # either way, in turn
        vals[..., 0] = np.where(np.isnan(vals[..., 0]), own, vals[..., 0])  # none in the vocabulary: as proposed
        grid = np.stack(np.meshgrid(*[np.arange(V)] * size, indexing="ij"), -1).reshape(-1, size)  # (G, size)
        R = np.repeat(p[:, None, :], len(grid), axis=1)
        for t in range(size):
            np.put_along_axis(R, np.repeat(cols[:, t][:, None, None], len(grid), 1), vals[:, t, grid[:, t]][..., None], 2)
        ok = ~np.isnan(R).any(-1)
        R = geo.project(X[n], np.nan_to_num(R))
        ok &= np.abs(R - X[n][:, None, :]).max(-1) > 1e-12  # the box clipped it back to the agent
        g = np.arange(len(grid))
        agent.append(np.repeat(n, len(grid)))
        order.append((k[:, None] * 10_000 + g[None, :]).reshape(-1))  # proposal, then grid point
        R_all.append(R.reshape(-1, D))
        ok_all.append(ok.reshape(-1))
    if not agent:
        return out
    agent, order, R, ok = (np.concatenate(v) for v in (agent, order, R_all, ok_all))
    seq = np.lexsort((order, agent))  # each agent's rows in proposal order, as they fill its rows
    agent, R, ok = agent[seq], R[seq], ok[seq]
    pos = np.cumsum(ok) - 1  # an agent's rows: its place among them (the running count restarts per agent)
    start = np.searchsorted(agent, agent, "left")
    pos = pos - np.concatenate([[0], np.cumsum(ok)])[start]
    keep = ok & (pos < rows)
    out[agent[keep], pos[keep]] = R[keep]
    return out


def first_vocab_values(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], V: int) -> np.ndarray:
    """(2, N, D, V) per agent and numeric column the first ``V`` vocabulary values above the agent's value
    (ascending) and below it (descending); NaN past the vocabulary's end and for other columns (the corner grid,
    and ``budget_search``'s screens and vocabulary moves): ``vocab_past`` for every column at once."""
    return first_values(vocab_table(geo, vocab), X, V)


def vocab_past(v: np.ndarray, b: np.ndarray, up: np.ndarray, k: int) -> np.ndarray:
    """(N, k) the values of a column's vocabulary ``v`` past ``b`` (N,) in the direction ``up`` (N,) bool, nearest
    first, each edge's copy on that side (``vocab_sides``); NaN past the vocabulary's end."""
    vu, vd = vocab_sides(v)
    i_up = np.searchsorted(vu, b, "right")[:, None] + np.arange(k)
    i_dn = np.searchsorted(vd, b, "left")[:, None] - 1 - np.arange(k)
    vals = np.where(up[:, None], vu[np.clip(i_up, 0, len(vu) - 1)], vd[np.clip(i_dn, 0, len(vd) - 1)])
    return np.where(np.where(up[:, None], i_up < len(vu), i_dn >= 0), vals, np.nan)


def vocab_between(v: np.ndarray, x: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """(N, k) the values of a column's vocabulary ``v`` strictly between ``x`` and ``b`` (N,), nearest ``b`` first,
    each edge's copy on the side of the change from ``x`` to ``b`` (``vocab_sides``); NaN past them."""
    vu, vd = vocab_sides(v)
    up = b > x
    i_up = np.searchsorted(vu, b, "left")[:, None] - 1 - np.arange(k)  # values below b, descending
    i_dn = np.searchsorted(vd, b, "right")[:, None] + np.arange(k)  # values above b, ascending
    vals = np.where(up[:, None], vu[np.clip(i_up, 0, len(vu) - 1)], vd[np.clip(i_dn, 0, len(vd) - 1)])
    inside = np.where(up[:, None], (i_up >= 0) & (vals > x[:, None]), (i_dn < len(vd)) & (vals < x[:, None]))
    return np.where(inside, vals, np.nan)


def float32_nudges(geo: WorldGeometry, X: np.ndarray) -> np.ndarray:
    """(N, 2C, D) each agent with one mutable numeric column (of C) moved one float32 step up, then one down,
    within its box (NaN rows where there is no room). A tree that reads float32 and splits right at the agent's
    value (Credit forest's fresh agent 128 at 580.0 on a split ``x <= 580``) is crossed by the next float32,
    half a float32 step in MACE's answer; the search's shrinks reach it by fractions of a change a round (37 times
    MACE's distance after 8 rounds). Offered in the rows a round leaves unused."""
    cols = np.flatnonzero(geo.numeric & ~geo.fixed & ~geo.integral)
    N, D = X.shape
    lo, hi = geo.box(X)
    out = np.repeat(X[:, None, :], 2 * len(cols), axis=1)
    f = X[:, cols].astype(np.float32)
    for k, way in enumerate((np.inf, -np.inf)):
        v = np.nextafter(f, np.float32(way)).astype(float)  # the next float32 past the agent's own reading
        room = (v >= lo[:, cols]) & (v <= hi[:, cols])
        idx = k * len(cols) + np.arange(len(cols))
        out[:, idx, cols] = np.where(room, v, np.nan)
    out[np.isnan(out).any(-1) | ~geo.keeps(X[:, None, :], out)] = np.nan
    return out
