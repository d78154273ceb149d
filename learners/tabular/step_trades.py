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
from learners.tabular.steps import vocab_between, vocab_past

__all__ = ["step_trades"]

BACK = 4  # vocabulary values between the agent and the answer, nearest the answer first, per changed column
ON = 4  # vocabulary values past the partner's value, nearest first


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
        back = vocab_between(vocab[c1], X[:, c1], Bn[:, c1], BACK)  # (N, BACK)
        for c2 in cols:
            if c2 == c1:
                continue
            changed = np.abs(Bn[:, c2] - X[:, c2]) > 1e-12
            for up in (True, False):
                way = np.full(len(X), up)
                ok = moved & (~changed | ((Bn[:, c2] > X[:, c2]) == up))  # a changed partner goes on its own way
                if not ok.any():
                    continue
                on = vocab_past(vocab[c2], Bn[:, c2], way, ON)  # (N, ON)
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
