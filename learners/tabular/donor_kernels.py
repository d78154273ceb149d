"""Compiled kernels of the donors (numba): the nearest training agents of each agent and the
candidates their MACE answers lend it (``TabularGenerator._neighbours`` and ``._lend`` in
``learners/tabular/base.py``; ``ChangeValueGenerator._donors``, the nearest with a given subset).

Each kernel is one loop over agents, so an agent's result never depends on the other agents of its
batch. Each replaced a numpy step, kept in ``tests/test_donor_kernels.py`` as the reference it must
equal bit for bit:

- ``smallest_k``: ``np.argsort(d, kind="stable")[:, :k]`` (ties in index order, NaN last);
  ``test_smallest_k_is_the_stable_sort_prefix``.
- ``donors_kernel``: the stable argsort of each subset's members' distances;
  ``test_donors_are_the_nearest_with_the_same_subset``.
- ``lend_kernel``: the numpy absolute, relative and pushed rows of ``_lend``;
  ``test_lent_candidates_are_the_numpy_ones``.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def smallest_k(d, k):
    """(N, k) per row of ``d`` (N, M) the indices of its k smallest entries, smallest first, ties in
    index order (NaN last): one pass with a sorted insertion buffer of k (numpy's partition of all M
    per row cost 10x more for the few neighbours a generator asks for)."""
    N, M = d.shape
    k = min(k, M)
    out = np.empty((N, k), np.int64)
    vals = np.empty(k, d.dtype)
    for n in range(N):
        m = 0
        for j in range(M):
            v = d[n, j]
            if v != v:  # NaN: after every number
                continue
            if m < k:
                pos = m
                m += 1
            elif v < vals[k - 1]:
                pos = k - 1  # the largest kept one makes room
            else:
                continue
            while pos > 0 and v < vals[pos - 1]:  # after the equal ones: ties stay in index order
                vals[pos] = vals[pos - 1]
                out[n, pos] = out[n, pos - 1]
                pos -= 1
            vals[pos] = v
            out[n, pos] = j
        j = 0
        while m < k:  # fewer numbers than k: the NaN entries, in index order
            if d[n, j] != d[n, j]:
                out[n, m] = j
                m += 1
            j += 1
    return out


@nb.njit(cache=True)
def donors_kernel(d, keys, sorted_keys, order, q):
    """(N, S, q) per agent n and subset s, the ``q`` training agents nearest by ``d[n]`` (N, M) among
    those whose key is ``keys[n, s]`` (``order``: the training agents sorted by key, stably, so in
    ascending index within a key; ``sorted_keys``: their keys), nearest first, ties to the lower
    index; -1 where fewer have the key. What ``np.argsort(d[n, members], kind="stable")[:q]`` gives."""
    N, S = keys.shape
    out = np.full((N, S, q), -1, np.int64)
    best = np.empty(q)
    for n in range(N):
        for s in range(S):
            lo = np.searchsorted(sorted_keys, keys[n, s])
            hi = np.searchsorted(sorted_keys, keys[n, s], side="right")
            k = 0
            for p in range(lo, hi):  # insertion into the sorted buffer of the q nearest so far
                member = order[p]
                v = d[n, member]
                if k == q and not v < best[q - 1]:
                    continue
                i = min(k, q - 1)
                while i > 0 and v < best[i - 1]:  # strictly nearer moves ahead: ties keep index order
                    best[i] = best[i - 1]
                    out[n, s, i] = out[n, s, i - 1]
                    i -= 1
                best[i] = v
                out[n, s, i] = member
                k = min(k + 1, q)
    return out


@nb.njit(cache=True)
def lend_kernel(X, donors, X_train, CF_train, col_changed, numeric, lo, hi):
    """(N, 3k, D) candidates lent by each agent's k donors (``donors`` (N, k), -1: none, which lends
    the agent itself): for donor j, row j takes the donor's new values where its answer changed
    the column's raw feature (``col_changed`` (M, D)), row k + j adds the donor's change to the
    agent's value instead (numeric columns), row 2k + j pushes that change to the agent's bound
    ``lo``/``hi`` (N, D) in its direction; elsewhere the agent's value."""
    N, D = X.shape
    k = donors.shape[1]
    out = np.empty((N, 3 * k, D))
    for i in range(N):
        for j in range(k):
            m = donors[i, j]
            for c in range(D):
                x = X[i, c]
                if m < 0:
                    out[i, j, c] = x
                    out[i, k + j, c] = x
                    out[i, 2 * k + j, c] = x
                    continue
                if col_changed[m, c]:
                    new = CF_train[m, c]
                    if numeric[c]:
                        step = CF_train[m, c] - X_train[m, c]
                        out[i, j, c] = new
                        out[i, k + j, c] = x + step
                        out[i, 2 * k + j, c] = hi[i, c] if step > 0 else (lo[i, c] if step < 0 else x)
                    else:
                        out[i, j, c] = new
                        out[i, k + j, c] = new
                        out[i, 2 * k + j, c] = new
                else:
                    out[i, j, c] = x
                    out[i, k + j, c] = x
                    out[i, 2 * k + j, c] = x
    return out
