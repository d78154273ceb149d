"""Products with block-diagonal weight matrices (issue 56): an ensemble of k networks run as one network
(``learners.tabular.surrogate.average_layers``: the members side by side) has hidden layers that are k blocks
on the diagonal and exact zeros elsewhere. Multiplied densely, a (k h, k h) layer costs k^2 products of
(h, h) where k are needed: three 64-wide members made a surrogate's white-box search about 9 times the work
of one. ``diagonal_blocks`` finds the blocks of a matrix (exact zeros only, so the product is the same
function of the inputs); ``block_matmul`` multiplies by each block alone. The sums then run over one block's
inputs, not over every input: equal to the dense product up to rounding, not bit for bit."""

from __future__ import annotations

import numpy as np

from envs.rowwise import rowwise_matmul

__all__ = ["block_matmul", "blocks_of", "diagonal_blocks", "packed_layers", "split_blocks"]


def diagonal_blocks(W: np.ndarray) -> int:
    """The most k >= 1 equal blocks that ``W`` (n_in, n_out) holds on its diagonal, every entry off them
    exactly zero; 1 for a dense matrix (and for a column or a row: one block)."""
    W = np.asarray(W)
    if W.ndim != 2:
        return 1
    n_in, n_out = W.shape
    nonzero = W != 0

    def holds(k: int) -> bool:
        a, b = n_in // k, n_out // k
        on_block = np.arange(n_in)[:, None] // a == np.arange(n_out)[None, :] // b
        return not (nonzero & ~on_block).any()

    if n_in < 2 or n_out < 2 or nonzero[0, -1] or nonzero[-1, 0]:  # corners off every split's blocks: dense
        return 1
    return next((k for k in range(min(n_in, n_out), 1, -1) if n_in % k == 0 and n_out % k == 0 and holds(k)), 1)


def split_blocks(W: np.ndarray, k: int) -> np.ndarray:
    """(k, n_in / k, n_out / k) the diagonal blocks of ``W`` (``diagonal_blocks``' k), each contiguous."""
    n_in, n_out = W.shape
    a, b = n_in // k, n_out // k
    return np.ascontiguousarray(np.stack([W[j * a:(j + 1) * a, j * b:(j + 1) * b] for j in range(k)]))


def blocks_of(matrices: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """Per matrix of ``matrices`` (a network's layers; None: a layer without weights), its diagonal blocks
    (``split_blocks``) where it has more than one, else None."""
    return [None if W is None or (k := diagonal_blocks(W)) == 1 else split_blocks(W, k) for W in matrices]


def block_matmul(A: np.ndarray, blocks: np.ndarray, rowwise: bool = False) -> np.ndarray:
    """``A @ W`` (N, n_in) for the block-diagonal W whose blocks are ``blocks`` (k, a, b) (``split_blocks``):
    each block's product alone, (N, k b). ``rowwise``: each row's (and block's) product computed alone
    (``envs.rowwise``): the same bits whatever else is in the batch."""
    k, a, b = blocks.shape
    if k == 1:
        return rowwise_matmul(A, blocks[0]) if rowwise else A @ blocks[0]
    N = A.shape[0]
    if rowwise:  # (N, k, 1, a) @ (k, a, b): one matrix-vector product per row and block
        return (A.reshape(N, k, 1, a) @ blocks)[:, :, 0].reshape(N, k * b)
    return (A.reshape(N, k, a).transpose(1, 0, 2) @ blocks).transpose(1, 0, 2).reshape(N, k * b)


def packed_layers(weights: list[np.ndarray], biases: list[np.ndarray], blocks: list[np.ndarray | None]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An MLP's layers flattened for the compiled kernels (``envs.tree_kernels.mlp_scores_variants`` and
    ``mlp_scores_blocks``): (widths, blocks per layer k, weights, biases); a layer with ``blocks`` (k, a, b) is
    packed as its k blocks one after another (row-major each), any other as its whole matrix (row-major)."""
    dims = np.array([W.shape[1] for W in weights], np.int64)
    diag = np.array([1 if B is None else B.shape[0] for B in blocks], np.int64)
    flat = [W.reshape(-1) if B is None else B.reshape(-1) for W, B in zip(weights, blocks, strict=True)]
    return dims, diag, np.concatenate(flat), np.concatenate(biases)
