"""Round one of ``budget_search`` (issue 56): the proposals on rays from the agent and snapped to the labels'
value vocabulary (``_round_one``), the single-feature screens (``screens``), and, with a surrogate of the
model, the rows it picks from a much larger pool (``_first_round_with_surrogate``). Every function builds
rows only; ``budget_search`` asks the model about them."""

from __future__ import annotations

from typing import Any

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import nan_as_zero
from learners.tabular.steps import first_vocab_values
from learners.tabular.vocab_table import snap_outward, vocab_table

SCALES = (0.45, 0.7, 0.85, 1.0, 1.2, 1.5, 2.2)  # ray multiples of a proposal's numeric change in round 1
EXTRA_SHARE = 1 / 16  # of the first round's rows, at most this share for the fallback rows (coverage)
SCREEN_FRACTIONS = (1.0, 0.5, 0.25, 0.1, 0.03)  # a numeric screen's moves, as shares of the room either way
SCREEN_VOCAB = 3  # vocabulary values per numeric column and direction in the screens
# with a surrogate (``learners/tabular/surrogate.py``) the first round's candidates: each proposal on these rays
POOL_SCALES = tuple(np.round(np.geomspace(0.3, 4.0, 40), 6))
LEAD_SCALES = tuple(np.round(np.linspace(0.95, 1.15, 41), 6))  # and the ``lead`` proposals on these too (fine)
# the ``lead`` proposals (a white-box search's answers on the surrogate) on these rays in round one, always
LEAD_LADDER = (0.97, 0.985, 1.0, 1.01, 1.02, 1.035, 1.05, 1.075, 1.1, 1.15, 1.25, 1.4)
PICK_SHARE = 0.5  # of round one's rows with a surrogate, the share it picks from the pool
POOL_BLOCK = 64  # agents whose surrogate pool is built at a time (memory)


def _snap(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, vocab: list[np.ndarray]) -> np.ndarray:
    """``P`` (N, K, D) with each numeric change moved to the nearest vocabulary value at least as far from
    the agent in its direction (unchanged where the vocabulary has none): ``vocab_table.snap_outward``."""
    return snap_outward(vocab_table(geo, vocab), X, P)


def _round_one(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, vocab: list[np.ndarray] | None, rows: int,
               scales: tuple[float, ...] = SCALES, extra: np.ndarray | None = None) -> np.ndarray:
    """(N, Q, D) the first round's rows: proposals on rays and snapped, projected, at most ``rows`` per agent;
    ``extra`` (N, E, D) rows first, as they are (a share ``EXTRA_SHARE`` of the rows at most)."""
    num = geo.numeric
    scales = np.asarray(scales)
    if extra is not None and extra.shape[1]:
        e = min(extra.shape[1], int(rows * EXTRA_SHARE))
        if e:
            head = geo.project(X, np.asarray(extra[:, :e], float))
            return np.concatenate([head, _round_one(geo, X, P, vocab, rows - e, tuple(scales))], axis=1)
    K = P.shape[1]
    if K == 0:  # no proposals (a surrogate's lead ones may be all there are)
        return np.zeros((len(X), 0, X.shape[1]))
    per = len(scales) + (1 if vocab is not None else 0)
    k = max(1, min(K, -(-rows // per)))  # proposals kept (the first k: the caller orders them; the last in part)
    P = P[:, :k]
    ray = np.repeat(P[:, :, None, :], len(scales), axis=2)
    ray[..., num] = X[:, None, None, num] + scales[None, None, :, None] * (P[:, :, None, num] - X[:, None, None, num])
    parts = [ray.reshape(len(X), k * len(scales), -1)]
    if vocab is not None:
        parts.append(_snap(geo, X, P, vocab))
    C = geo.project(X, np.concatenate(parts, axis=1))
    return C[:, :rows]


def screens(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray] | None = None) -> np.ndarray:
    """(N, Q, D) one feature changed at a time: each mutable numeric column moved by ``SCREEN_FRACTIONS``
    of its room either way, each other category of a one-hot group, each binary flipped; ordered so that a
    cut keeps the coarsest first (every feature to its bound, then every category, then each numeric column
    at its ``SCREEN_VOCAB`` vocabulary values nearest the agent either way, then the finer moves).
    A proposal names the features the labels changed; these tell the search which single features flip
    the model for this agent at all, and bracket where (the refinement then shrinks them)."""
    N, D = X.shape
    lo, hi = geo.box(X)
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    parts = []

    def moved(cols: np.ndarray, vals: np.ndarray) -> np.ndarray:  # (N, len(cols), D) one column set per row
        R = np.repeat(X[:, None, :], len(cols), axis=1)
        R[:, np.arange(len(cols)), cols] = vals
        R[np.abs(vals - X[:, cols]) <= 1e-12] = np.nan  # no move: no row
        return R

    for i, f in enumerate(SCREEN_FRACTIONS):
        up = X[:, num] + f * (hi[:, num] - X[:, num])
        down = X[:, num] - f * (X[:, num] - lo[:, num])
        parts += [moved(num, up), moved(num, down)]
        if i == 0:  # the categories, flips and vocabulary values after every numeric feature at its bound
            parts += _one_category_each(geo, X)
            flips = np.flatnonzero((np.array(geo.raw_kinds)[geo.raw_of_column] == "binary") & ~geo.fixed)
            if len(flips):
                parts.append(moved(flips, 1.0 - X[:, flips]))
            if vocab is not None:  # the values the labels move a column to nearest the agent (a forest's splits)
                F = first_vocab_values(geo, X, vocab, SCREEN_VOCAB)
                # per column, each step, above the agent then below: one array op for them all
                order = [(c, step, side) for c in num if len(vocab[c]) for step in range(SCREEN_VOCAB) for side in (0, 1)]
                if order:
                    c_, step_, side_ = np.array(order).T
                    vals = F[side_, :, c_, step_].T  # (N, len(order))
                    parts.append(moved(c_, np.where(np.isnan(vals), X[:, c_], vals)))
    C = np.concatenate(parts, axis=1)
    bad = np.isnan(C).any(-1)
    C = geo.project(X, nan_as_zero(C))
    bad |= (np.abs(C - X[:, None, :]) <= 1e-12).all(-1)  # a move the box clipped back to the agent
    C[bad] = np.nan
    return C


def _one_category_each(geo: WorldGeometry, X: np.ndarray) -> list[np.ndarray]:
    """(N, 1, D) rows per column of each mutable one-hot group: the agent with that category (NaN where it
    is the agent's own)."""
    out = []
    for cols in geo.group_columns:
        if geo.fixed[cols].all():
            continue
        for c in cols:
            R = X[:, None, :].copy()
            R[:, 0, cols] = 0.0
            R[:, 0, c] = 1.0
            R[X[:, c] == 1.0] = np.nan
            out.append(R)
    return out


def _pooled_first_round(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, vocab: list[np.ndarray] | None, rows: int,
                        fallback: np.ndarray | None, surrogate: Any, lead: int = 0) -> np.ndarray:
    """(N, rows, D) the first round's rows chosen by ``surrogate.pick`` among the proposals on ``POOL_SCALES``
    rays and snapped (the first ``lead`` also on ``LEAD_SCALES``), the screens and the fallback rows,
    ``POOL_BLOCK`` agents at a time."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    for lo in range(0, len(X), POOL_BLOCK):
        sl = slice(lo, lo + POOL_BLOCK)
        parts = [_round_one(geo, X[sl], P[sl], vocab, P.shape[1] * (len(POOL_SCALES) + 1), POOL_SCALES),
                 screens(geo, X[sl], vocab)]
        if fallback is not None:
            parts.append(geo.project(X[sl], np.asarray(fallback[sl], float)))
        if lead:
            parts.append(_round_one(geo, X[sl], P[sl, :lead], None, lead * len(LEAD_SCALES), LEAD_SCALES))
        C = np.concatenate(parts, axis=1)
        out[sl] = surrogate.pick(geo, X[sl], C, rows, np.full(len(C), np.inf))
    return out


def _first_round_with_surrogate(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, vocab: list[np.ndarray] | None,
                                rows: int, fallback: np.ndarray | None, surrogate: Any, lead: int) -> np.ndarray:
    """(N, rows, D) the first round with a surrogate: the ``lead`` proposals on ``LEAD_LADDER``, then the
    other proposals as without one (``_round_one``) and a share ``PICK_SHARE`` of the rows chosen by
    ``surrogate.pick`` (``_pooled_first_round``). The share matters: the picks alone crowd round one
    into the few changed sets the surrogate favours, and a surrogate a few per cent off then leaves the
    refinement no other set to shrink (Adult MLP .99 -> .58 at 2 x 256 with picks alone; .99 -> 1.00
    with half)."""
    n_pick = int(PICK_SHARE * rows)
    L = _round_one(geo, X, P[:, :lead], None, lead * len(LEAD_LADDER), LEAD_LADDER)[:, :rows] if lead else np.zeros((len(X), 0, X.shape[1]))
    rest = _round_one(geo, X, P[:, lead:], vocab, max(0, rows - n_pick - L.shape[1]), extra=fallback)
    picked = _pooled_first_round(geo, X, P, vocab, rows - L.shape[1] - rest.shape[1], fallback, surrogate, lead)
    return np.concatenate([L, rest, picked], axis=1)
