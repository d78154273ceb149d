"""The answer's numeric changes on a fine grid toward the agent, in the rows the last round of ``budget_search``
leaves unused, on a model that answers in steps (issue 56).

A forest's optimum can lie between two of the labels' vocabulary values (a split none of the labels crosses), and
in the last round no later round can bisect toward it (``bisection.py`` needs a round after the one that brackets
it): the shrinking moves there take the vocabulary's values and three fractions (``moves.STEP_FRACTIONS``). German
forest's held-out agent 3 at 2 x 256: round one's answer moves credit amount 8,318 -> 7,656 (and duration one
month); MACE's optimum is 7,739 alone, between the vocabulary's 7,414 and 7,760, and round two, with 100 of its
rows unused, ended at 7,722 (1.029 of MACE). Rows a round leaves unused cost no round trip, so once every other
piece has had its rows (``budget_search``: the moves, screens, additions, corners, float32 nudges), the rest go to
the best answer with each changed numeric column at ``POINTS`` even fractions of its change, on the answer itself
and on the answer with one other changed feature given back (its set one feature smaller), nearest first and
spread over the nearness ranks (``rows.nearest_first``), only rows nearer than the answer. The rows before them are
the search's own, so no answer is farther than without them; what they cost is rows scored (at most
``budget_search.FINE_ROWS`` an answer)."""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import nan_as_zero

POINTS = 160  # even fractions of each changed numeric column's change, strictly between the agent and the answer:
# a step of 1/161 of it, under the 1% by which an answer is judged near MACE's (48 stopped 1-2.6% past an edge)


def fine_grid(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, points: int = POINTS) -> np.ndarray:
    """(N, Q, D) for each agent of ``X`` (N, D) with an answer ``B`` (N, D; NaN rows: none), the answer with one
    changed numeric column at ``points`` even fractions of its change (k / (points + 1), k = 1..points), and the
    same on the answer with each other changed raw feature back at the agent's value; projected onto the agent's
    box (integer columns rounded away from the agent), NaN rows where an agent has none of a kind."""
    N, D = X.shape
    if int(points) < 1:
        raise ValueError(f"points: must be >= 1, got {points!r}")
    found = ~np.isnan(B).any(-1)
    moved = np.abs(nan_as_zero(B) - X) > 1e-12  # (N, D)
    cols = geo.raw_columns()
    members = [c[c >= 0] for c in cols]
    raw_moved = np.stack([moved[:, m].any(1) for m in members], axis=1) & found[:, None]  # (N, J)
    variants = [(B, found)]  # the answer, then the answer with one changed raw feature back
    for j in np.flatnonzero(raw_moved.any(0)):
        V = B.copy()
        V[:, members[j]] = X[:, members[j]]
        variants.append((V, raw_moved[:, j] & (moved & (geo.raw_of_column != j)[None, :]).any(1)))
    f = np.arange(1, int(points) + 1) / (int(points) + 1)
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    parts = []
    for V, live in variants:  # a few variants and columns: loops over them, not over agents
        Vm = np.abs(nan_as_zero(V) - X) > 1e-12
        for c in num:
            on = live & Vm[:, c]
            if not on.any():
                continue
            R = np.repeat(V[:, None], len(f), axis=1)
            R[:, :, c] = X[:, None, c] + f[None, :] * (V[:, None, c] - X[:, None, c])
            R[~on] = np.nan
            parts.append(R)
    if not parts:
        return np.full((N, 0, D), np.nan)
    R = np.concatenate(parts, axis=1)
    gone = np.isnan(R).any(-1)
    P = geo.project(X, np.where(gone[..., None], X[:, None, :], R))
    P[gone] = np.nan
    return P
