"""Rows spread over the changed sets they name, the sets a round already tried last (issue 56).

An agent that round one left with nothing accepted gets, in round two, more of the student's picks
(``budget_search``'s ``next_picks``). Taken nearest first they crowd into one or two changed sets: Adult forest's
held-out agent 84 has 131 of its first 200 picks on {capital gain, hours}, all refused, and its first accepted
corner is the 1,209th nearest. A student that accepted every pick of round one wrongly is likely wrong about those
sets again, so ``spread_over_sets`` takes picks round robin over their changed raw-feature sets (each set's nearest
first, then each set's second, ...), the sets with fewer of round one's refused rows ahead and, among equals, the
set whose nearest pick is nearer. Alone it loses agents whose answer is one of the next nearest picks (Credit
forest's held-out agent 55: 1.11 times MACE's distance where the nearest picks reach it), so the search takes
the picks alternately nearest first and spread (``alternate_spread``). Measured on the saved fits (2 x 256, four
fits): Adult forest's fresh real agents without an answer 20 -> 10 of 1,600, within 1% of MACE + 1 agent a fit, its
held-out and validation agents the same; Credit forest's answers the same (see ``docs/generators_log.md``,
*Round two's picks spread over their sets*). A heuristic: it orders rows, each is still asked of the model.
"""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import fresh

__all__ = ["LOST_SPREAD", "alternate_spread", "set_keys", "spread_over_sets"]

LOST_SPREAD = 4  # picks listed per pick kept, for an agent with nothing accepted (the sets to spread over)

_WEIGHTS = np.random.default_rng(20261206).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def set_keys(geo: WorldGeometry, X: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(N, Q) uint64 a key of the raw features each row of ``R`` (N, Q, D) changes from its agent's ``X`` (N, D)
    (a sum of one fixed random odd word per changed feature, wrapping: equal sets, equal keys); 0 for NaN rows and
    for the agent itself."""
    changed = np.abs(np.nan_to_num(R) - X[:, None, :]) > 1e-12  # (N, Q, D)
    raw = np.zeros(changed.shape[:2] + (geo.n_raw,), bool)
    for j, cols in enumerate(geo.raw_columns()):  # (a raw feature's columns: one, or a one-hot group)
        cols = cols[cols >= 0]
        raw[..., j] = changed[..., cols].any(-1)
    with np.errstate(over="ignore"):
        keys = (raw.astype(np.uint64) * _WEIGHTS[:geo.n_raw]).sum(-1, dtype=np.uint64)
    return np.where(np.isnan(R).any(-1), np.uint64(0), keys)


def spread_over_sets(geo: WorldGeometry, X: np.ndarray, R: np.ndarray, tried: np.ndarray) -> np.ndarray:
    """``R`` (N, Q, D) reordered per agent round robin over the rows' changed sets: every set's first row (in ``R``'s
    order), then every set's second, ...; within a turn, sets with fewer rows in ``tried`` (N, T, D: rows already
    asked and refused) first, then by where the set first appears in ``R``. NaN rows last."""
    N, Q, D = R.shape
    if not N or not Q:
        return R
    keys = set_keys(geo, X, R)
    nan = np.isnan(R).any(-1)
    agent = np.repeat(np.arange(N), Q).reshape(N, Q)
    pos = np.broadcast_to(np.arange(Q), (N, Q))
    # each row's turn: how many earlier rows of its agent share its set (a stable sort by agent, key, position)
    o = np.lexsort((pos.ravel(), keys.ravel(), nan.ravel(), agent.ravel()))  # (NaN rows: a group of their own)
    k_s, a_s, n_s = keys.ravel()[o], agent.ravel()[o], nan.ravel()[o]
    start = np.r_[True, (k_s[1:] != k_s[:-1]) | (a_s[1:] != a_s[:-1]) | (n_s[1:] != n_s[:-1])]
    group = np.cumsum(start) - 1
    first_at = np.flatnonzero(start)
    turn, first = np.empty(N * Q, np.int64), np.empty(N * Q, np.int64)
    turn[o] = np.arange(N * Q) - first_at[group]
    first[o] = pos.ravel()[o][first_at[group]]
    # how many tried rows share each row's set (N x Q x T: a few agents, hundreds of rows each)
    count = np.zeros((N, Q), np.int64)
    if tried.ndim == 3 and tried.shape[1]:
        live = ~np.isnan(tried).any(-1)  # (a NaN tried row names no set)
        count = ((keys[:, :, None] == set_keys(geo, X, tried)[:, None, :]) & live[:, None, :]).sum(-1)
    turn = turn.reshape(N, Q)
    order = np.lexsort((pos.ravel(), first, count.ravel(), turn.ravel(), nan.ravel(), agent.ravel())).reshape(N, Q) % Q
    return np.take_along_axis(R, order[:, :, None], 1)


def alternate_spread(geo: WorldGeometry, X: np.ndarray, R: np.ndarray, tried: np.ndarray) -> np.ndarray:
    """``R`` (N, Q, D) taken alternately in its own order and in ``spread_over_sets``' order, each row once (the
    first of its two places): the nearest picks keep half the rows, the spread the other half."""
    S = spread_over_sets(geo, X, R, tried)
    both = np.stack([R, S], axis=2).reshape(R.shape[0], 2 * R.shape[1], R.shape[2])
    return fresh(both)[:, :R.shape[1]]
