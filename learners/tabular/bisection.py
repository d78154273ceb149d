"""The answer's changed columns bisected between it and the refused rows on their lines: the refinement rounds of
``budget_search`` on a model that answers in steps (issue 56).

A forest's optimum puts each changed column just past one of its split thresholds. The search's moves take their
values from the labels' vocabulary (the values MACE's answers move a column to), and a threshold none of the labels
crossed is not in it: the answer then stops at a vocabulary value or a fraction past the edge (Credit forest at
8 x 2,000, fresh real agents: 7 of the 29 misses had MACE's changed set, 1.0-4.8% farther). Where a refused row
already asked brackets one of the answer's changed columns (nearer the agent on it, and on every other column equal
to the answer or further the same way), the edge lies between the two where the model is monotone there: ``PROBES``
values evenly inside that bracket find it to an eighth of the bracket per round, as a black box allows (every
value is asked). ``budget_search`` asks them in the last round of a search of three round trips or more only:
earlier, polishing one answer crowds out the rows that find a nearer changed set (German forest at 8 x 2,000), and
at two round trips round two's rows do more in the spread (Credit forest at 2 x 256)."""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry

PROBES = 7  # values per bracketed column and round, evenly inside its bracket
BLOCK = 64  # agents whose brackets are found at a time


def line_brackets(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(N, D) per agent and numeric column its answer ``B`` (N, D) changed, the largest fraction f in [0, 1) of that
    change at which a refused row of ``R`` (N, Q, D; NaN rows: none) brackets it: a row with that column nearer the
    agent (f of the answer's change) and every other column as the answer's (on its line: a bracket on any model)
    or, where no such row is, further the same way (the answer's line would be refused there too where the model is
    monotone: an earlier answer's refused rows keep bracketing a column when a later round shortens another); NaN
    where none does."""
    N, D = X.shape
    out = np.full((N, D), np.nan)
    if not R.shape[1]:
        return out
    if N > BLOCK:  # a block of agents at a time (memory: N x Q x D per array)
        for lo in range(0, N, BLOCK):
            out[lo:lo + BLOCK] = line_brackets(geo, X[lo:lo + BLOCK], B[lo:lo + BLOCK], R[lo:lo + BLOCK])
        return out
    live = ~np.isnan(R).any(-1) & ~np.isnan(B).any(-1)[:, None]  # (N, Q)
    dB, dR = (B - X)[:, None, :], R - X[:, None, :]
    same = np.abs(dR - dB) <= 1e-9 * (1.0 + np.abs(B))[:, None, :]
    num = geo.numeric[None, None, :]
    outside = num & ~same & (dR * dB > 0) & (np.abs(dR) > np.abs(dB))
    inside = num & ~same & (np.abs(dB) > 1e-12) & (dR * dB >= 0) & (np.abs(dR) < np.abs(dB))
    one = live & (same | outside | inside).all(-1) & (inside.sum(-1) == 1)
    exact = np.full((N, D), np.nan)  # rows on the answer's line itself: a bracket that holds on any model
    for keep, dest in ((one, out), (one & ~outside.any(-1), exact)):
        n, q = np.nonzero(keep)
        c = np.argmax(inside[n, q], axis=-1)
        np.fmax.at(dest, (n, c), dR[n, q, c] / dB[n, 0, c])
    return np.where(np.isnan(exact), out, exact)


def edge_bisection(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, R: np.ndarray, probes: int = PROBES
                   ) -> np.ndarray:
    """(N, Q, D) rows: per agent the answer ``B`` (N, D) with one bracketed column (``line_brackets`` against the
    refused rows ``R``) at ``probes`` values evenly inside its bracket (an integer column at whole values, rounded
    toward the answer; a value equal to the answer's dropped); NaN padded, none where nothing is bracketed."""
    N, D = X.shape
    lo = line_brackets(geo, X, B, R)
    n, c = np.nonzero(~np.isnan(lo))
    if not len(n):
        return np.full((N, 0, D), np.nan)
    t = lo[n, c][:, None] + (1.0 - lo[n, c])[:, None] * (np.arange(1, probes + 1) / (probes + 1))[None, :]
    x, b = X[n, c][:, None], B[n, c][:, None]
    v = x + t * (b - x)  # (L, P)
    whole = geo.rounded[c][:, None]
    v = np.where(whole, np.where(b > x, np.ceil(v - 1e-9), np.floor(v + 1e-9)), v)
    v[np.abs(v - b) <= 1e-12] = np.nan
    v[:, 1:][v[:, 1:] == v[:, :-1]] = np.nan  # an integer column's probes rounded onto the same value: each once
    # each agent's bracketed columns side by side: the k-th of agent n fills its slots k * probes ...
    first = np.searchsorted(n, n)  # n comes sorted: the index of each agent's first bracketed column
    k = np.arange(len(n)) - first
    out = np.full((N, int(k.max() + 1) * probes, D), np.nan)
    slot = (k * probes)[:, None] + np.arange(probes)[None, :]  # (L, P)
    rows = np.repeat(B[n][:, None, :], probes, axis=1)  # (L, P, D)
    rows[np.arange(len(n))[:, None], np.arange(probes)[None, :], c[:, None]] = v
    rows[np.isnan(v)] = np.nan
    out[n[:, None], slot] = rows
    return out
