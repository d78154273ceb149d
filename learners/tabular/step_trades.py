"""Trades along a forest's steps: one changed numeric column back to a vocabulary value nearer the agent,
another numeric column on to a vocabulary value further out (issue 56).

On a model in steps (``steps.step_share``) an answer found early often takes too much of one feature and
none (or too little) of another that the optimum uses a little of: Credit forest's misses at 8 x 2000
were answers one feature short of MACE's set, 1.26-1.38 times its distance (an applicant asking for 155
where 125 and a small rise of another feature do). No move that only shrinks reaches that set, and the
nearest corners over it are hundreds of refused rows away. A trade walks there: the changed column gives
back ``BACK`` vocabulary steps while the partner moves on ``ON`` steps (from the agent's value where it is
unchanged, either way), every pair on a grid, and ``nearest_first`` keeps those nearer than the answer.
A heuristic; the model's own answer decides.
"""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.steps import vocab_sides

__all__ = ["step_trades"]

BACK = 4  # vocabulary values between the agent and the answer, nearest the answer first, per changed column
ON = 4  # vocabulary values past the partner's value, nearest first


def _back(v: np.ndarray, x: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """(N, k) the vocabulary values strictly between ``x`` and ``b`` (N,), nearest ``b`` first; NaN past them."""
    up = b > x
    vu, vd = vocab_sides(v)  # an upward change's values are upward moves' values
    i_up = np.searchsorted(vu, b, "left")[:, None] - 1 - np.arange(k)  # values below b, descending
    i_dn = np.searchsorted(vd, b, "right")[:, None] + np.arange(k)  # values above b, ascending
    vals = np.where(up[:, None], vu[np.clip(i_up, 0, len(vu) - 1)], vd[np.clip(i_dn, 0, len(vd) - 1)])
    inside = np.where(up[:, None], i_up >= 0, i_dn < len(vd)) & np.where(up[:, None], vals > x[:, None], vals < x[:, None])
    return np.where(inside, vals, np.nan)


def _on(v: np.ndarray, b: np.ndarray, up: np.ndarray, k: int) -> np.ndarray:
    """(N, k) the vocabulary values past ``b`` (N,) in the direction ``up`` (N,) bool, nearest first; NaN past the end."""
    vu, vd = vocab_sides(v)
    i_up = np.searchsorted(vu, b, "right")[:, None] + np.arange(k)
    i_dn = np.searchsorted(vd, b, "left")[:, None] - 1 - np.arange(k)
    ok = np.where(up[:, None], i_up < len(vu), i_dn >= 0)
    vals = np.where(up[:, None], vu[np.clip(i_up, 0, len(vu) - 1)], vd[np.clip(i_dn, 0, len(vd) - 1)])
    return np.where(ok, vals, np.nan)


def step_trades(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray]) -> np.ndarray:
    """(N, Q, D) rows per (changed column, partner, direction): the answer ``B`` (N, D) with the changed
    numeric column at ``BACK`` vocabulary values toward the agent and the partner at ``ON`` values past its
    own (its direction where it is changed, each way where not), on a grid; NaN where none."""
    cols = [c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if len(vocab[c])]
    if len(cols) < 2:
        return np.full((len(X), 0, X.shape[1]), np.nan)
    Bn = np.where(np.isnan(B), X, B)
    live = ~np.isnan(B).any(1)
    out = []
    for c1 in cols:
        moved = live & (np.abs(Bn[:, c1] - X[:, c1]) > 1e-12)
        if not moved.any():
            continue
        back = _back(vocab[c1], X[:, c1], Bn[:, c1], BACK)  # (N, BACK)
        for c2 in cols:
            if c2 == c1:
                continue
            changed = np.abs(Bn[:, c2] - X[:, c2]) > 1e-12
            for up in (True, False):
                way = np.full(len(X), up)
                ok = moved & (~changed | ((Bn[:, c2] > X[:, c2]) == up))  # a changed partner goes on its own way
                if not ok.any():
                    continue
                on = _on(vocab[c2], Bn[:, c2], way, ON)  # (N, ON)
                R = np.repeat(Bn[:, None, :], BACK * ON, axis=1)
                R[:, :, c1] = np.repeat(back, ON, axis=1)
                R[:, :, c2] = np.tile(on, (1, BACK))
                R[~ok] = np.nan
                out.append(R)
    if not out:
        return np.full((len(X), 0, X.shape[1]), np.nan)
    C = np.concatenate(out, axis=1)
    bad = np.isnan(C).any(-1)
    C = geo.project(X, np.where(bad[..., None], X[:, None, :], C))
    C[bad] = np.nan
    return C
