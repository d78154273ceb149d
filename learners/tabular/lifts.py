"""Near misses lifted by one more feature, for a model that answers in steps (issue 56).

A forest's ``predict_proba`` is the share of its trees that accept a row. A refused row that most trees
already accept (0.4 of them, say) and that lies nearer than the best answer so far is often one feature
short of an answer: the trees that refuse it split on a feature it left at the agent's value. The search
keeps, per agent, the ``NEAR_K`` refused rows with the highest such share (at least ``NEAR_MIN``) nearer
than its best answer (``near_misses``, updated after every round), and the next refinement round gives a
share ``LIFT_SHARE`` of its rows to those rows with one more raw feature moved as the screens move it
(``lift_rows``), nearest first and nearer than the answer (``lifted``).

The search's other moves only shrink an accepted row or add to the best answer; neither reaches a set that
a nearer refused row almost had. Quick runs on the saved black-box forest generators (the same network
and seeds): Credit forest .74 -> .79 and Adult .83 -> .85 at 2 x 256, German .94 -> .97 and Adult .98 -> .99
at 8 x 2,000 (``docs/generators.md``). A smooth model's probability is not a vote count, and its searches
already bracket the boundary on each ray, so the lifts are used only where the model answers in steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import fresh, nan_as_zero, nearest_first, projected, take_rows

NEAR_K = 2  # refused rows per agent kept as near misses (the highest acceptance share first)
NEAR_MIN = 0.4  # a refused row is a near miss only where the model's probability is at least this
LIFT_SHARE = 0.25  # of a refinement round's rows, the share for the near misses lifted by one feature
LIFT_BLOCK = 64  # agents whose lifts are built at a time (memory: screens x near misses x D)


def near_misses(geo: WorldGeometry, X: np.ndarray, rows: np.ndarray, proba: np.ndarray, ok: np.ndarray,
                best: np.ndarray, kept: tuple[np.ndarray, np.ndarray] | None = None, k: int = NEAR_K,
                floor: float = NEAR_MIN) -> tuple[np.ndarray, np.ndarray]:
    """((N, k, D), (N, k)) per agent the refused rows of ``rows`` (N, Q, D; ``proba`` and ``ok`` (N, Q) the
    model's answers) and of ``kept`` (the previous near misses and their probabilities) with the highest
    probability, at least ``floor``, and nearer than ``best`` (N,): the rows and their probabilities
    (NaN rows and -1 where an agent has fewer)."""
    if kept is not None:
        rows, proba = np.concatenate([kept[0], rows], axis=1), np.concatenate([kept[1], proba], axis=1)
        ok = np.concatenate([np.zeros(kept[1].shape, bool), ok], axis=1)
    live = ~np.isnan(rows).any(-1) & ~np.isnan(proba) & ~ok
    d = geo.distance(X[:, None, :], nan_as_zero(rows))
    p = np.where(live & (proba >= floor) & (d < best[:, None]), proba, -1.0)
    top = np.argsort(-p, axis=1, kind="stable")[:, :k]  # stable: among equal shares, the earlier row
    near, p_near = take_rows(rows, top), np.take_along_axis(p, top, 1)
    near[p_near < 0] = np.nan
    return near, p_near


def one_more_feature(X: np.ndarray, B: np.ndarray, Sc: np.ndarray, changed: np.ndarray | None = None) -> np.ndarray:
    """(N, Q, D) the rows ``B`` (N, D) with one more raw feature moved as each screen of ``Sc`` (N, Q, D)
    moves it, not projected; NaN where the screen's feature is one of ``changed`` (N, D; default: the columns
    ``B`` changes), or either row is missing. Also the search's additions (``moves._additions``)."""
    moves = np.abs(nan_as_zero(Sc) - X[:, None, :]) > 1e-12
    changed = np.abs(nan_as_zero(B) - X) > 1e-12 if changed is None else changed
    dead = (moves & changed[:, None, :]).any(-1) | np.isnan(Sc).any(-1) | np.isnan(B).any(-1)[:, None]
    R = np.where(moves, Sc, B[:, None, :])
    R[dead] = np.nan
    return R


def lift_rows(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, Sc: np.ndarray) -> np.ndarray:
    """(N, Q, D) ``one_more_feature`` of the near misses ``B`` (N, D), projected onto the agents' boxes."""
    return projected(geo, X, [one_more_feature(X, B, Sc)])


def lifted(geo: WorldGeometry, X: np.ndarray, near: np.ndarray, Sc: np.ndarray | Callable[[slice], np.ndarray],
           asked: np.ndarray, rows: int, below: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """(N, rows, D) every near miss of ``near`` (N, k, D) lifted by each screen of ``Sc`` (N, Q, D), or of
    ``Sc(agents)`` for a block of agents (a slice), never asked before (``asked``: ``rows.row_keys`` of every
    row scored), nearer than ``below`` (N,), nearest first and spread over the nearness ranks
    (``rows.nearest_first``), at most ``caps`` (N,) per agent."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    for lo in range(0, len(X), LIFT_BLOCK):
        a = slice(lo, lo + LIFT_BLOCK)
        if not (caps[a] > 0).any() or np.isnan(near[a]).all():
            continue
        screens = Sc(a) if callable(Sc) else Sc[a]
        L = np.concatenate([lift_rows(geo, X[a], near[a, j], screens) for j in range(near.shape[1])], axis=1)
        out[a] = nearest_first(geo, X[a], fresh(L, asked[a]), rows, below[a], caps[a])
    return out
