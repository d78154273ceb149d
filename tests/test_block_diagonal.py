"""Block-diagonal layers (``envs.block_diagonal``): an ensemble of networks run as one network is multiplied a
block at a time, the same function as the dense product (issue 56: three surrogates averaged cost about 9 times
one in their white-box search before)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import block_diag

from envs.block_diagonal import block_matmul, blocks_of, diagonal_blocks, split_blocks
from envs.models import MLPModel, _interval_layers
from learners.tabular.change_net import forward_layers
from learners.tabular.surrogate import average_layers


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 5), a=st.integers(1, 9), b=st.integers(1, 9), n=st.integers(1, 40), seed=st.integers(0, 999))
def test_blocks_are_found_and_multiplied_as_the_dense_product(k, a, b, n, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=(a, b)) for _ in range(k)]
    W = block_diag(*parts)
    found = diagonal_blocks(W)
    assert found % k == 0 or k == 1  # k blocks, or finer ones where the parts happen to split (one row or column)
    if a > 1 and b > 1:
        assert found == k
    B = split_blocks(W, found)
    A = np.maximum(rng.normal(size=(n, k * a)), 0.0)
    for rowwise in (False, True):
        np.testing.assert_allclose(block_matmul(A, B, rowwise), A @ W, rtol=1e-12, atol=1e-12)
    full = block_matmul(A, B, rowwise=True)  # a row alone: the same bits as in the batch
    for i in range(n):
        assert np.array_equal(block_matmul(A[i:i + 1], B, rowwise=True)[0], full[i])


def test_a_matrix_with_one_entry_off_its_blocks_is_dense():
    rng = np.random.default_rng(0)
    W = block_diag(*[rng.normal(size=(4, 4)) for _ in range(3)])
    assert diagonal_blocks(W) == 3
    W[5, 9] = 1e-300  # one entry of block 1's row in block 2's columns
    assert diagonal_blocks(W) == 1
    assert diagonal_blocks(rng.normal(size=(12, 12))) == 1 and diagonal_blocks(rng.normal(size=(12, 1))) == 1


def _ensemble(rng, D=10, h=16, k=3):
    """An MLP as ``average_layers`` folds ``k`` members: first layers side by side, hidden block-diagonal, mean."""
    nets = []
    for _ in range(k):
        nets.append([("linear", rng.normal(0, 1, (D, h)) / np.sqrt(D), rng.normal(0, 0.3, h)), ("relu", None, None),
                     ("linear", rng.normal(0, 1, (h, h)) / np.sqrt(h), rng.normal(0, 0.3, h)), ("relu", None, None),
                     ("linear", rng.normal(0, 1, (h, 1)) / np.sqrt(h), rng.normal(0, 0.3, 1))])
    return nets, average_layers(nets)


def test_an_ensemble_model_scores_its_rows_variants_and_bounds_as_the_dense_network():
    """``MLPModel`` finds the ensemble's hidden block and scores by blocks: rows, variant rows (the compiled
    kernel's blocks) and interval bounds equal the dense computation up to rounding; a variant row alone gets the
    same bits as in its batch."""
    rng = np.random.default_rng(3)
    _, layers = _ensemble(rng)
    W = [a for kind, a, _ in layers if kind == "linear"]
    b = [c for kind, _, c in layers if kind == "linear"]
    model = MLPModel(W, b, blocks=True, rowwise=True)
    assert [None if B is None else B.shape for B in model.layer_blocks()] == [None, (3, 16, 16), None]
    X = rng.normal(size=(40, 10))
    dense = np.maximum(np.maximum(X @ W[0] + b[0], 0.0) @ W[1] + b[1], 0.0) @ W[2] + b[2]
    np.testing.assert_allclose(model.score(X), dense[:, 0], rtol=1e-10, atol=1e-10)
    base, index = X[:4], np.arange(40) % 4
    cols = np.tile(np.arange(3), (40, 1))
    vals = X[:, :3] + rng.normal(size=(40, 3))
    rows = base[index].copy()
    rows[:, :3] = vals
    got = model.score_variants(base, index, cols, vals)
    np.testing.assert_allclose(got, model.score(rows), rtol=1e-9, atol=1e-9)
    for i in (0, 17, 39):
        assert model.score_variants(base, index[i:i + 1], cols[i:i + 1], vals[i:i + 1])[0] == got[i]
    lo, hi = vals - 0.5, vals + 0.5
    bound = model.score_bounds(base[index], cols, lo, hi)
    np.testing.assert_allclose(bound, _interval_layers(W, b, base[index], cols, lo, hi), rtol=1e-10, atol=1e-10)
    assert (bound >= model.score(rows) - 1e-9).all()  # still a bound of the rows inside the box


def test_the_loop_kernel_reads_a_block_diagonal_layer_by_its_blocks_with_the_dense_loops_bits():
    """``mlp_scores_variants`` (the exact kernel) on a block-diagonal layer packed by its blocks gives the bits of
    the dense row-by-row loop: the weights it skips are zeros, whose products add nothing."""
    from test_variants import _mlp_row_by_row

    from envs.block_diagonal import packed_layers
    from envs.tree_kernels import mlp_scores_variants

    rng = np.random.default_rng(6)
    _, layers = _ensemble(rng)
    W = [a for kind, a, _ in layers if kind == "linear"]
    b = [c for kind, _, c in layers if kind == "linear"]
    model = MLPModel(W, b)
    base = rng.normal(size=(5, 10))
    T = 37
    index, cols, vals = rng.integers(0, 5, T), np.tile(np.arange(2), (T, 1)), rng.normal(size=(T, 2))
    Z0 = np.ascontiguousarray(base @ W[0] + b[0])
    head = (Z0, base, index.astype(np.int64), cols.astype(np.int64), vals, W[0])
    by_blocks = mlp_scores_variants(*head, *packed_layers(W[1:], b[1:], model.layer_blocks()[1:]))
    dense = (np.array([w.shape[1] for w in W[1:]], np.int64), np.concatenate([w.reshape(-1) for w in W[1:]]),
             np.concatenate(b[1:]))
    np.testing.assert_array_equal(by_blocks, _mlp_row_by_row(*head, *dense))
    np.testing.assert_array_equal(model.score_variants(base, index, cols, vals), by_blocks)


def test_a_surrogates_members_are_run_by_blocks_as_the_dense_layers():
    """The float32 forward pass of ``Surrogate.logit`` with the blocks equals the dense layers' (float32 rounding)."""
    rng = np.random.default_rng(4)
    nets, layers = _ensemble(rng, D=8, h=12)
    layers = [(kind, None if a is None else a.astype(np.float32), None if c is None else c.astype(np.float32))
              for kind, a, c in layers]
    blocks = blocks_of([a if kind == "linear" else None for kind, a, _ in layers])
    assert sum(B is not None for B in blocks) == 1
    h = rng.normal(size=(25, 8)).astype(np.float32)
    np.testing.assert_allclose(forward_layers(layers, h, blocks), forward_layers(layers, h), rtol=1e-5, atol=1e-5)
    members = np.mean([forward_layers(net, h.astype(float)) for net in nets], axis=0)
    np.testing.assert_allclose(forward_layers(layers, h, blocks), members, rtol=1e-4, atol=1e-4)
