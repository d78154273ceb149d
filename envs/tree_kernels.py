"""Compiled descent of a stacked tree ensemble (``TreeEnsemble``): every row through every tree,
bit for bit as scikit-learn (a float32 input against a float64 threshold, compared in float64;
tree probabilities summed in estimator order). An ensemble with float64 splits (an imported model,
``envs.imported_trees``) passes float64 rows: the same kernels, another numba specialization.

Branch-free: a leaf points to itself on both sides, so each row takes exactly ``depth`` steps in
every tree, the trees' steps interleaved (independent chains the CPU overlaps, no mispredicted
branches): about 3x the numpy level-by-level descent. Not parallel: a server calls the model from
several threads at once, and numba's workqueue threading layer must not be entered twice."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _descend_all(x, nodes, offsets, left, right, feature, threshold, depth):
    for t in range(offsets.shape[0]):
        nodes[t] = offsets[t]
    for _ in range(depth):
        for t in range(offsets.shape[0]):
            k = nodes[t]
            go_left = np.float64(x[feature[k]]) <= threshold[k]
            nodes[t] = right[k] + go_left * (left[k] - right[k])


@nb.njit(cache=True, inline="always")
def _leaf_sums(nodes, p0, p1):
    """The sums over the trees, in estimator order, of the reached leaves' P(0) and P(1), in the leaf
    values' dtype (float64; float32 for XGBoost, which sums its margin so)."""
    a, b = p0[0] - p0[0], p1[0] - p1[0]  # +0.0 of that dtype
    for t in range(nodes.shape[0]):
        a += p0[nodes[t]]
        b += p1[nodes[t]]
    return a, b


@nb.njit(cache=True)
def forest_leaves(X, offsets, left, right, feature, threshold, depth):
    """(rows, trees) stacked node id of each row's leaf in each tree (``left``/``right``: a leaf
    points to itself)."""
    out = np.empty((X.shape[0], offsets.shape[0]), np.int64)
    for i in range(X.shape[0]):
        _descend_all(X[i], out[i], offsets, left, right, feature, threshold, depth)
    return out


@nb.njit(cache=True, nogil=True)  # a helper thread descends while the main thread works
def forest_sums(X, offsets, left, right, feature, threshold, depth, p0, p1):
    """Per row, the sums over the trees (in estimator order) of the leaf's P(0) and P(1)."""
    s0 = np.zeros(X.shape[0])
    s1 = np.zeros(X.shape[0])
    nodes = np.empty(offsets.shape[0], np.int64)
    for i in range(X.shape[0]):
        _descend_all(X[i], nodes, offsets, left, right, feature, threshold, depth)
        s0[i], s1[i] = _leaf_sums(nodes, p0, p1)
    return s0, s1


@nb.njit(cache=True, inline="always")
def _load_base(x, base, b, cur):
    """Row buffer ``x``: base row ``b`` where it holds another (``cur``); returns b. Variants of one
    base come in runs: a base row is copied once per run, then each variant's changes set and undone."""
    if b != cur:
        for d in range(base.shape[1]):
            x[d] = base[b, d]
    return b


@nb.njit(cache=True, inline="always")
def _set_changes(x, cols, vals, i, base, b):
    """Row buffer ``x`` holds base row ``b``: set variant i's changed columns (``vals`` None: undo them)."""
    for j in range(cols.shape[1]):
        c = cols[i, j]
        if c >= 0:
            x[c] = vals[i, j] if vals is not None else base[b, c]


@nb.njit(cache=True)
def forest_sums_variants(base, index, cols, vals, offsets, left, right, feature, threshold, depth, p0, p1):
    """``forest_sums`` of variant rows: row t is ``base[index[t]]`` with column ``cols[t, i]`` (>= 0)
    set to ``vals[t, i]`` (the dtype of ``base``); each row is assembled in one buffer, never stored."""
    T, D = index.shape[0], base.shape[1]
    s0 = np.zeros(T)
    s1 = np.zeros(T)
    nodes = np.empty(offsets.shape[0], np.int64)
    x = np.empty(D, base.dtype)  # the row type of the splits (float32 or float64)
    cur = -1
    for i in range(T):
        b = index[i]
        cur = _load_base(x, base, b, cur)
        _set_changes(x, cols, vals, i, base, b)
        _descend_all(x, nodes, offsets, left, right, feature, threshold, depth)
        _set_changes(x, cols, None, i, base, b)
        s0[i], s1[i] = _leaf_sums(nodes, p0, p1)
    return s0, s1


@nb.njit(cache=True, inline="always")
def _complete_sums(x, nodes, feature, threshold, depth, q0, q1):
    """One row's sums of P(0) and P(1) over complete trees (``complete_layout``): tree t's node k at
    ``t * (2**depth - 1) + k``, its children 2k + 1 and 2k + 2 (no child id to load), its leaves'
    P(0), P(1) at ``t * 2**depth + leaf``; the trees' steps interleaved, summed in estimator order."""
    inner = (1 << depth) - 1
    for t in range(nodes.shape[0]):
        nodes[t] = 0
    for _ in range(depth):
        for t in range(nodes.shape[0]):
            k = nodes[t]
            go_left = np.float64(x[feature[t * inner + k]]) <= threshold[t * inner + k]
            nodes[t] = 2 * k + 2 - go_left
    a, b = q0[0] - q0[0], q1[0] - q1[0]  # +0.0 in the leaf values' dtype, as ``_leaf_sums``
    for t in range(nodes.shape[0]):
        leaf = t * (inner + 1) + nodes[t] - inner
        a += q0[leaf]
        b += q1[leaf]
    return a, b


ROWS_BLOCK = 256  # rows descended together through a chunk of trees (``complete_sums``)
TREES_BLOCK = 8  # and trees a chunk: its top levels stay in cache for the block's rows


@nb.njit(cache=True, nogil=True)  # a helper thread descends while the main thread works
def complete_sums(X, n_trees, feature, threshold, depth, q0, q1):
    """``forest_sums`` on the complete layout: the same sums, bit for bit. A block of rows goes through a chunk of
    trees at a time, each row's sums added tree by tree in estimator order as one row alone would (a deep
    ensemble's nodes do not fit a core's cache: 400 trees of depth 10, 12.5 -> 9-10 us a row)."""
    inner = (1 << depth) - 1
    N = X.shape[0]
    s0 = np.zeros(N, q0.dtype)
    s1 = np.zeros(N, q1.dtype)
    nodes = np.empty(TREES_BLOCK, np.int64)
    for r0 in range(0, N, ROWS_BLOCK):
        for t0 in range(0, n_trees, TREES_BLOCK):
            nt = min(n_trees, t0 + TREES_BLOCK) - t0
            for i in range(r0, min(N, r0 + ROWS_BLOCK)):
                for t in range(nt):
                    nodes[t] = 0
                for _ in range(depth):
                    for t in range(nt):
                        k = nodes[t]
                        g = (t0 + t) * inner + k
                        go_left = np.float64(X[i, feature[g]]) <= threshold[g]
                        nodes[t] = 2 * k + 2 - go_left
                a, b = s0[i], s1[i]
                for t in range(nt):
                    leaf = (t0 + t) * (inner + 1) + nodes[t] - inner
                    a += q0[leaf]
                    b += q1[leaf]
                s0[i], s1[i] = a, b
    return s0.astype(np.float64), s1.astype(np.float64)


@nb.njit(cache=True)
def complete_sums_variants(base, index, cols, vals, n_trees, feature, threshold, depth, q0, q1):
    """``forest_sums_variants`` on the complete layout: the same sums, bit for bit. A kernel of its
    own: one kernel branching per row on the layout made both layouts slower (200 and 182 ns a
    row on Credit forest against 162 and 147)."""
    T, D = index.shape[0], base.shape[1]
    s0 = np.zeros(T)
    s1 = np.zeros(T)
    nodes = np.empty(n_trees, np.int64)
    x = np.empty(D, base.dtype)  # the row type of the splits (float32 or float64)
    cur = -1
    for i in range(T):
        b = index[i]
        cur = _load_base(x, base, b, cur)
        _set_changes(x, cols, vals, i, base, b)
        s0[i], s1[i] = _complete_sums(x, nodes, feature, threshold, depth, q0, q1)
        _set_changes(x, cols, None, i, base, b)
    return s0, s1


def complete_layout(offsets: np.ndarray, left: np.ndarray, right: np.ndarray, feature: np.ndarray,
                    threshold: np.ndarray, depth: int, p0: np.ndarray, p1: np.ndarray) -> tuple[np.ndarray, ...]:
    """The linked layout (``TreeEnsemble._stacked``) as complete trees of the deepest leaf's depth:
    (n_trees, feature, threshold, depth, q0, q1) for ``complete_sums``. A leaf above the bottom is
    padded with tests that lead, either way, to copies of it (threshold +inf). The children are
    implied, so a step loads no child id: about 10% faster on the benchmark forests (depth 8)."""
    T, inner = len(offsets), (1 << int(depth)) - 1
    feat = np.zeros((T, inner), np.int64)
    thr = np.full((T, inner), np.inf)
    q0, q1 = np.zeros((T, inner + 1), p0.dtype), np.zeros((T, inner + 1), p1.dtype)
    for t in range(T):
        orig = np.zeros(2 * inner + 1, np.int64)  # the linked node each complete node stands for
        orig[0] = offsets[t]
        for j in range(inner):  # breadth first: a parent before its children
            o = orig[j]
            if left[o] != o:
                feat[t, j], thr[t, j] = feature[o], threshold[o]
                orig[2 * j + 1], orig[2 * j + 2] = left[o], right[o]
            else:
                orig[2 * j + 1] = orig[2 * j + 2] = o
        q0[t], q1[t] = p0[orig[inner:]], p1[orig[inner:]]
    return np.int64(T), feat.ravel(), thr.ravel(), np.int64(depth), q0.ravel(), q1.ravel()


@nb.njit(cache=True, error_model="numpy")
def _first_layer_row(dest, Z0, base, b, cols, vals, W0):
    """One variant row's first-layer pre-activations into ``dest`` (H1,): base ``b``'s product ``Z0[b]`` and a
    rank-one update per changed column (``cols`` -1: none), in the same order for every caller."""
    for u in range(dest.shape[0]):
        dest[u] = Z0[b, u]
    for j in range(cols.shape[0]):
        c = cols[j]
        if c >= 0:
            delta = vals[j] - base[b, c]
            for u in range(dest.shape[0]):
                dest[u] += delta * W0[c, u]


ROWS = 8  # rows per block of the MLP kernel: its later layers run across a block's rows (SIMD lanes)


@nb.njit(cache=True, error_model="numpy")
def mlp_scores_variants(Z0, base, index, cols, vals, W0, dims, diag, weights, biases):
    """A ReLU MLP's output score of variant rows (see ``forest_sums_variants``): the first layer from
    the base rows' products ``Z0`` (B, H1) and a rank-k update per changed column, the later layers
    (``dims``: their widths, ending in 1; ``weights`` and ``biases`` flattened in order, a layer with ``diag``
    k > 1 as its k diagonal blocks: ``envs.block_diagonal.packed_layers``) for ``ROWS`` rows at a time, one
    unit's eight sums in eight local accumulators (the compiler keeps them in vector registers: 1.6x the loop
    over an accumulator array, which it kept in memory); each row's sums in the same order as row by row, so
    the scores are the same bits. A block's unit sums only its block's inputs (the others' weights are zeros,
    whose products add nothing). No (rows, features) matrix and no (rows, width) temporary is built."""
    T, H1 = index.shape[0], Z0.shape[1]
    width = H1
    for w in dims:
        width = max(width, w)
    out = np.empty(T)
    h = np.zeros((width, ROWS))  # unit u of row r at [u, r]
    g = np.empty((width, ROWS))
    for start in range(0, T, ROWS):
        n_rows = min(ROWS, T - start)  # a last, short block computes stale lanes too, never returned
        for r in range(n_rows):
            _first_layer_row(h[:H1, r], Z0, base, index[start + r], cols[start + r], vals[start + r], W0)
        n_in, w_off, b_off = H1, 0, 0
        for layer in range(dims.shape[0]):
            for u in range(n_in):  # ReLU of the layer below
                for r in range(ROWS):
                    h[u, r] = max(h[u, r], 0.0)
            n_out, k = dims[layer], diag[layer]
            a, b = n_in // k, n_out // k
            for j in range(k):
                W = weights[w_off + j * a * b:w_off + (j + 1) * a * b].reshape((a, b))  # row-major, as sklearn's coefs_
                for vv in range(b):
                    v = j * b + vv
                    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = biases[b_off + v]  # one per row of the block (ROWS)
                    for uu in range(a):  # unit v's inputs in order, as row by row
                        u = j * a + uu
                        w = W[uu, vv]
                        a0 += h[u, 0] * w
                        a1 += h[u, 1] * w
                        a2 += h[u, 2] * w
                        a3 += h[u, 3] * w
                        a4 += h[u, 4] * w
                        a5 += h[u, 5] * w
                        a6 += h[u, 6] * w
                        a7 += h[u, 7] * w
                    g[v, 0], g[v, 1], g[v, 2], g[v, 3] = a0, a1, a2, a3
                    g[v, 4], g[v, 5], g[v, 6], g[v, 7] = a4, a5, a6, a7
            for v in range(n_out):
                for r in range(ROWS):
                    h[v, r] = g[v, r]
            w_off += k * a * b
            b_off += n_out
            n_in = n_out
        for r in range(n_rows):
            out[start + r] = h[0, r]
    return out


BLOCK_ROWS = 64  # rows per BLAS block (``mlp_scores_blocks``): every product has this shape, whatever the batch


@nb.njit(cache=True, error_model="numpy")
def mlp_scores_blocks(Z0, base, index, cols, vals, W0, dims, diag, weights, biases):
    """``mlp_scores_variants`` (the same arguments, and ``diag``) with the later layers as BLAS products of
    ``BLOCK_ROWS``-row blocks, the last padded with zero rows: 2-4x faster on a 64 x 64 MLP. Every product has the
    same shape, so a row's score is the same bits alone, in any batch and at any place in it; not the loop's bits
    (the sums run in BLAS's order), equal to them up to rounding. A later layer with ``diag`` k > 1 is k blocks on
    its diagonal (``envs.block_diagonal``: an ensemble as one network), packed in ``weights`` one block after another
    and multiplied a block at a time (k times less work than the dense product). Each block's arrays are small (a
    few pages): (rows, width) temporaries freed and touched afresh each call cost more in page faults than the
    products. The products run in ``Z0``'s dtype: float32 ``Z0``, ``W0``, ``weights`` and ``biases`` (a surrogate's
    float32-trained weights: ``learners.tabular.surrogate.SurrogateMLP``) take BLAS's float32 path, 1.5x faster."""
    T, H1 = index.shape[0], Z0.shape[1]
    out = np.empty(T)
    h = np.empty((BLOCK_ROWS, H1), Z0.dtype)
    for start in range(0, T, BLOCK_ROWS):
        n_rows = min(BLOCK_ROWS, T - start)
        for r in range(BLOCK_ROWS):
            if r >= n_rows:
                h[r, :] = 0.0
                continue
            _first_layer_row(h[r], Z0, base, index[start + r], cols[start + r], vals[start + r], W0)
        x = h
        n_in, w_off, b_off = H1, 0, 0
        for layer in range(dims.shape[0]):
            n_out, k = dims[layer], diag[layer]
            a, b = n_in // k, n_out // k
            relu = x  # the ReLU in place (x is this block's own), in x's dtype (np.maximum(x, 0.0) would cast to float64)
            for r in range(BLOCK_ROWS):
                for u in range(n_in):
                    if relu[r, u] < 0.0:
                        relu[r, u] = 0.0
            if k == 1:
                W = weights[w_off:w_off + n_in * n_out].reshape((n_in, n_out))  # row-major, as sklearn's coefs_
                x = np.dot(relu, W) + biases[b_off:b_off + n_out]
            else:
                y = np.empty((BLOCK_ROWS, n_out), Z0.dtype)
                for j in range(k):
                    W = weights[w_off + j * a * b:w_off + (j + 1) * a * b].reshape((a, b))
                    y[:, j * b:(j + 1) * b] = np.dot(np.ascontiguousarray(relu[:, j * a:(j + 1) * a]), W)
                x = y + biases[b_off:b_off + n_out]
            w_off += k * a * b
            b_off += n_out
            n_in = n_out
        for r in range(n_rows):
            out[start + r] = x[r, 0]
    return out


@nb.njit(cache=True)
def forest_box_bounds(base, cols, lo, hi, offsets, left, right, feature, threshold, q):
    """Per item i, the sum over the trees of the largest leaf value ``q`` (P(1) - P(0)) among the
    leaves a row can reach when it is ``base[i]`` (float32, or float64 for float64 splits) but for
    column ``cols[i, j]`` (-1: none) anywhere in [``lo[i, j]``, ``hi[i, j]``] (cast as the descent
    casts, so the interval holds every cast value): an upper bound of the summed score over that box, by a depth-first walk
    that takes both sides of a split only where the interval straddles it."""
    n, k = cols.shape
    out = np.empty(n)
    stack = np.empty(left.shape[0] + 1, np.int64)
    for i in range(n):
        total = 0.0
        for t in range(offsets.shape[0]):
            best = -np.inf
            top = 1
            stack[0] = offsets[t]
            while top > 0:
                top -= 1
                node = stack[top]
                if left[node] == node:  # a leaf
                    best = max(best, q[node])
                    continue
                f = feature[node]
                j = -1
                for m in range(k):
                    if cols[i, m] == f:
                        j = m
                if j < 0:
                    stack[top] = left[node] if np.float64(base[i, f]) <= threshold[node] else right[node]
                    top += 1
                else:
                    if np.float64(lo[i, j]) <= threshold[node]:
                        stack[top] = left[node]
                        top += 1
                    if np.float64(hi[i, j]) > threshold[node]:
                        stack[top] = right[node]
                        top += 1
            total += best
        out[i] = total
    return out
