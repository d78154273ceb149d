"""Inline helpers of the tabular searches' compiled kernels (numba), shared by the themed kernel
modules beside their callers (``scan_kernels``, ``trade_kernels``, ``polish_kernels``,
``geometry_kernels``): one row's or one value's step, compiled into each kernel that calls it.

Each is the numpy step of one row that the kernels replaced, the same operations in the same order
(so the same bits), and is held to it through the kernels that inline it:

- ``_away``: an integer column rounded away from the agent (``WorldGeometry.project``'s rounding);
  ``tests/test_geometry_kernels.py::test_compiled_projection_is_the_numpy_one_bit_for_bit``.
- ``_crossing``: the value just across one split from the agent (``polish.crossings``, one entry);
  ``tests/test_polish_kernels.py::test_split_walks_match_the_sorted_crossings``.
- ``_variant_into``: one row of ``geometry.Variants.rows``;
  ``tests/test_geometry_kernels.py::test_nearest_accepted_kernel_is_the_numpy_ranking``.
- ``_pairwise_sum``, ``_row_deltas``, ``_row_distance``: ``ndarray.sum`` (numpy's pairwise summation),
  ``WorldGeometry.deltas`` and MACE's Eq. 3 ``WorldGeometry.distance`` of one row;
  ``tests/test_geometry_kernels.py::test_compiled_distance_is_the_numpy_formula_bit_for_bit``.

numba keys a cached kernel by its own source file only, so a kernel of another module keeps the
code of these helpers it was compiled with: each module whose kernels call them ends with
``drop_stale_caches(globals())``, which empties the on-disk cache of its kernels where this file is
newer than it (numba then compiles them again, once). See ``learners/tabular/compile.py``.
"""

from __future__ import annotations

import os
from typing import Any

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _away(v, x):
    """An integer column's value: the first integer at least as far from the agent's ``x`` as ``v``
    (rounded away from it; ``WorldGeometry.project``'s rounding, the same bits)."""
    g = v - x
    return x + np.sign(g) * np.ceil(np.abs(g) - 1e-9)


@nb.njit(cache=True, inline="always")
def _crossing(t, u, lft, col, j, xv):
    """The value just across split j of column ``col`` from ``xv`` (``polish.crossings``, one entry)."""
    return lft[col, j] if t[col, j] >= xv else u[col, j]


@nb.njit(cache=True, inline="always")
def _variant_into(row, base_row, cols, vals, t):
    """``row`` := ``base_row`` with variant t's columns ``cols[t]`` (-1: none) set to ``vals[t]``."""
    for d in range(row.shape[0]):
        row[d] = base_row[d]
    for j in range(cols.shape[1]):
        if cols[t, j] >= 0:
            row[cols[t, j]] = vals[t, j]


@nb.njit(cache=True, inline="always")
def _pairwise_sum(a):
    """``a.sum()`` as numpy adds a contiguous row (its pairwise summation: eight running sums from
    eight entries on, for fewer than 128), so the same bits."""
    n = a.shape[0]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    i = 8
    while i < n - n % 8:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


@nb.njit(cache=True, inline="always")
def _row_deltas(x, c, numeric, span, raw_of_column, out):
    """One row's per-raw-feature normalized deltas into ``out`` (``WorldGeometry.deltas``)."""
    out[:] = 0.0
    for d in range(x.shape[0]):
        diff = np.abs(c[d] - x[d])
        if numeric[d]:
            v = diff / span[d]
            if v != v:
                v = 0.0
            elif v == np.inf:
                v = 1.7976931348623157e308  # np.nan_to_num's
            out[raw_of_column[d]] = v
        elif diff > 1e-9:  # a discrete raw feature moved where any of its columns moved
            out[raw_of_column[d]] = 1.0


@nb.njit(cache=True, inline="always")
def _row_distance(x, c, numeric, span, raw_of_column, buf, a, b, g):
    """One row's MACE Eq. 3 distance (``distance_kernel``'s, the same bits; ``buf``: (n_raw,) scratch)."""
    _row_deltas(x, c, numeric, span, raw_of_column, buf)
    nnz, top = 0, 0.0
    for j in range(buf.shape[0]):
        nnz += buf[j] > 1e-12
        top = max(top, buf[j])
    return a * nnz + b * _pairwise_sum(buf) + g * top


@nb.njit(cache=True, inline="always")
def _row_distance_weighted(x, c, numeric, span, raw_of_column, buf, a, b, g, cost, dir_col):
    """One row's Eq. 3 distance under the rules' cost weights (``WorldGeometry._weighted``'s, up to the
    order of the sums): each raw feature's delta and change count times the weight of the direction
    it moved (``cost`` (n_raw, 2): up, down; ``dir_col``: the column that tells the direction, -1 for a
    category, which always takes the first)."""
    _row_deltas(x, c, numeric, span, raw_of_column, buf)
    cnt, tot, top = 0.0, 0.0, 0.0
    for j in range(buf.shape[0]):
        k = dir_col[j]
        w = cost[j, 1] if k >= 0 and c[k] < x[k] else cost[j, 0]
        wd = buf[j] * w
        cnt += w if buf[j] > 1e-12 else 0.0
        tot += wd
        top = max(top, wd)
    return a * cnt + b * tot + g * top


@nb.njit(cache=True, inline="always")
def _row_distance_rules(x, c, numeric, span, raw_of_column, buf, a, b, g, cost, dir_col):
    """``_row_distance_weighted`` where the world has cost weights (``cost`` has rows), else ``_row_distance``."""
    if cost.shape[0]:
        return _row_distance_weighted(x, c, numeric, span, raw_of_column, buf, a, b, g, cost, dir_col)
    return _row_distance(x, c, numeric, span, raw_of_column, buf, a, b, g)


def drop_stale_caches(namespace: dict[str, Any]) -> None:
    """Empty the on-disk numba cache of the kernels defined in ``namespace`` (a module's ``globals()``)
    where it is older than this file: numba tracks only a kernel's own file, not the helpers above
    it inlines. Errors (a read-only cache) leave the cache as it is."""
    try:
        stamp = os.stat(__file__).st_mtime
    except OSError:
        return
    for obj in list(namespace.values()):
        cache = getattr(obj, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        if index is None or getattr(getattr(obj, "py_func", None), "__module__", None) != namespace.get("__name__"):
            continue
        try:
            if os.stat(index).st_mtime < stamp:
                cache.flush()
        except OSError:
            continue
