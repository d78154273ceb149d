"""Row bookkeeping for ``budget_search``'s rounds: each agent's candidate rows cut to its own count nearest
first (``nearest_first``), packed (``compact``), and kept only where new (``fresh``): a row asked twice
is a row of the budget spent for nothing (issue 56)."""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry

__all__ = ["compact", "fresh", "nearest_first", "projected", "repeats", "row_keys"]


def row_keys(C: np.ndarray) -> np.ndarray:
    """(...) each row of ``C`` (..., D) as one opaque value of its bytes: equal rows, equal keys, exactly
    (a float projection would differ in its last bits between two matrix products of the same row)."""
    C = np.ascontiguousarray(C, float)
    return C.view(np.dtype((np.void, 8 * C.shape[-1])))[..., 0]


def take_rows(A: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(N, k, ...) each agent's rows ``idx`` (N, k) of ``A`` (N, Q, ...): ``np.take_along_axis`` along axis 1
    without its broadcast index arrays (6x faster on an agent's (Q, D) rows)."""
    return A[np.arange(len(A))[:, None], idx]


def nan_as_zero(a: np.ndarray) -> np.ndarray:
    """``a`` with NaN read as 0 (where a row's unused entries are NaN): ``np.nan_to_num`` in 2 passes, not 6;
    an infinite entry stays infinite (the searches' rows hold none)."""
    a = np.asarray(a, float)
    return np.where(np.isnan(a), 0.0, a)


_MIX = np.random.default_rng(56).integers(1, 2**63, size=(2, 4096), dtype=np.uint64) | np.uint64(1)  # odd multipliers


def word_hashes(words: np.ndarray) -> np.ndarray:
    """(...) a 64-bit hash of each row of 8-byte ``words`` (..., D), D up to 4096: integer arithmetic modulo
    2^64, so a row has the same hash in any batch and any order of summing."""
    D = words.shape[-1]
    v = words * _MIX[0, :D]  # (wraps modulo 2^64)
    v ^= v >> np.uint64(29)  # not linear: sign bits flipped in two columns must not cancel
    return v @ _MIX[1, :D]


def repeats(keys: np.ndarray) -> np.ndarray:
    """(N, Q) bool: each of ``keys`` (N, Q) (``row_keys``, or any keys of 8-byte words) equals an earlier
    one of its agent's, bit for bit. Sorted by a 64-bit hash of the row's words (sorting the raw bytes compares them byte by byte: 4 times
    slower here); rows whose hashes meet are compared whole, and a collision of unequal rows (odds about
    2^-64 a pair) falls back to sorting the bytes themselves."""
    N, Q = keys.shape
    D = keys.dtype.itemsize // 8
    if D > _MIX.shape[1] or not Q:
        return _repeats_by_bytes(keys)
    words = np.ascontiguousarray(keys).view(np.uint64).reshape(N, Q, D)
    h = word_hashes(words)
    order = np.argsort(h, axis=1, kind="stable")  # equal hashes together, in their original order
    s = np.take_along_axis(h, order, 1)
    meet = np.zeros((N, Q), bool)
    meet[:, 1:] = s[:, 1:] == s[:, :-1]
    n_i, q_i = np.nonzero(meet)
    if len(n_i) and not (words[n_i, order[n_i, q_i]] == words[n_i, order[n_i, q_i - 1]]).all():
        return _repeats_by_bytes(keys)
    repeat = np.zeros((N, Q), bool)
    np.put_along_axis(repeat, order, meet, 1)
    return repeat


def _repeats_by_bytes(keys: np.ndarray) -> np.ndarray:
    """:func:`repeats` by sorting the rows' bytes."""
    order = np.argsort(keys, axis=1, kind="stable")  # equal keys together, in their original order
    s = np.take_along_axis(keys, order, 1)
    repeat_sorted = np.zeros(s.shape, bool)
    repeat_sorted[:, 1:] = s[:, 1:] == s[:, :-1]
    repeat = np.zeros_like(repeat_sorted)
    np.put_along_axis(repeat, order, repeat_sorted, 1)
    return repeat


def fresh(M: np.ndarray, asked: np.ndarray | None = None) -> np.ndarray:
    """``M`` (N, Q, D) with every row that repeats an earlier row of ``M`` or one of ``asked`` (N, A) (the
    ``row_keys`` of the rows already scored; none where None) set to NaN, the rest packed to the front in order
    (compiled: ``row_kernels.fresh_kernel``, the rows of ``_fresh_numpy``)."""
    from learners.tabular.row_kernels import fresh_kernel

    N, Q, D = M.shape
    M = np.ascontiguousarray(M, float)
    A = 0 if asked is None else asked.shape[1]
    if D > _MIX.shape[1] or (A and asked.dtype.itemsize != 8 * D):
        return _fresh_numpy(M, asked)
    words = np.zeros((N, 0, D), np.uint64) if not A else np.ascontiguousarray(asked).view(np.uint64).reshape(N, A, D)
    out, ok = fresh_kernel(M, M.view(np.uint64), words, _MIX[0, :D], _MIX[1, :D])
    return out if ok else _fresh_numpy(M, asked)


def _fresh_numpy(M: np.ndarray, asked: np.ndarray | None = None) -> np.ndarray:
    """:func:`fresh` by numpy steps: ``repeats`` over the asked rows and ``M``, then ``compact``."""
    N, Q, _ = M.shape
    if asked is None:
        asked = row_keys(np.zeros((N, 0, M.shape[2])))
    both = np.concatenate([asked, row_keys(M)], axis=1)  # the asked rows first: a repeat of one of them goes
    repeat = repeats(both)
    out = M.copy()
    out[repeat[:, asked.shape[1]:]] = np.nan  # (a NaN row repeating a NaN row stays NaN)
    return compact(out, Q)


def nearest_first(geo: WorldGeometry, X: np.ndarray, C: np.ndarray, rows: int, below: np.ndarray,
                   caps: np.ndarray | None = None) -> np.ndarray:
    """``C`` (N, Q, D) cut to ``rows`` distinct rows per agent that are nearer than ``below`` (N,) and keep the
    world's rules, nearest first; where an agent has more, they are spread evenly over its nearness ranks
    (the boldest shrink to the mildest: the nearest alone are mostly rejected, and a row within 1% of the
    optimum is often a mild one); the rest NaN (the ranking compiled: ``row_kernels.nearest_first_kernel``)."""
    from learners.tabular.row_kernels import nearest_first_kernel

    N, Q, D = C.shape
    d = np.full((N, Q), np.inf)
    n_i, q_i = np.nonzero(~np.isnan(C).any(-1))  # the real rows (the rest are NaN padding): measured alone
    d[n_i, q_i] = geo.distance(X[n_i], C[n_i, q_i])
    d[d >= below[:, None] - 1e-15] = np.inf
    if geo.gate is not None:  # the rules, on the rows still in the running only (one agent: its side once)
        n_i, q_i = np.nonzero(np.isfinite(d))
        d[n_i, q_i] = np.where(geo.keeps(X[:1] if N == 1 else X[n_i], C[n_i, q_i]), d[n_i, q_i], np.inf)
    k = np.full(N, rows) if caps is None else np.clip(np.asarray(caps, np.int64), 0, rows)  # each agent's own rows
    return nearest_first_kernel(np.ascontiguousarray(C, float), d, int(rows), k.astype(np.int64))


def packed_rows(live: np.ndarray, rows: int, A: np.ndarray, fill: float = np.nan) -> np.ndarray:
    """(N, rows, ...) each agent's entries of ``A`` (N, Q, ...) where ``live`` (N, Q), in order, then ``fill``."""
    pos = np.cumsum(live, 1) - 1  # each live entry's place among its agent's
    n_i, q_i = np.nonzero(live & (pos < rows))
    out = np.full((len(A), rows, *A.shape[2:]), fill)
    out[n_i, pos[n_i, q_i]] = A[n_i, q_i]
    return out


def compact(C: np.ndarray, rows: int) -> np.ndarray:
    """(N, rows, D) each agent's first ``rows`` finite rows of ``C`` (N, Q, D), in order (NaN padded; compiled:
    ``row_kernels.compact_kernel``, the rows of ``packed_rows``)."""
    from learners.tabular.row_kernels import compact_kernel

    return compact_kernel(np.ascontiguousarray(C, float), int(rows))


def projected(geo: WorldGeometry, X: np.ndarray, parts: list[np.ndarray], packed: bool = False) -> np.ndarray:
    """The rows ``parts`` (each (N, Q_i, D)) side by side, projected onto the agents' boxes; NaN rows stay NaN
    (``packed``: each agent's real rows first, in order, and only as many rows as the most an agent has)."""
    C = np.concatenate(parts, axis=1)
    live = ~np.isnan(C).any(-1)
    n_live = live.sum(1)
    if live.all():  # no NaN row to skip (one agent's full rows do not make another's NaN rows real)
        return geo.project(X, C)
    K = int(n_live.max(initial=0))
    if packed:
        out = geo.project(X, compact(C, max(K, 1)))
        out[np.arange(max(K, 1))[None, :] >= n_live[:, None]] = np.nan
        return out
    out = np.full(C.shape, np.nan)
    if K:  # only the real rows projected (most moves of a step model are NaN): packed to the front, in order
        out[live] = geo.project(X, compact(C, K))[np.arange(K)[None, :] < n_live[:, None]]
    return out


def ahead_of_nearest(P: np.ndarray, M: np.ndarray, rows: int) -> np.ndarray:
    """(N, rows, D) each agent's distinct rows of ``P`` (N, Q, D) first, in place of as many of the first rows of
    ``M`` (N, R, D), a spread nearest first (its nearest rows are the likeliest refused), then the rest of ``M``."""
    P = fresh(P)
    n = (~np.isnan(P).any(-1)).sum(1)
    M = np.array(M, float)
    M[np.arange(M.shape[1])[None, :] < n[:, None]] = np.nan
    return compact(fresh(np.concatenate([P, M], axis=1)), rows)
