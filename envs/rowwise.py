"""Matrix products whose rows do not depend on the batch (issue 56): the same agent answered alone or among
others must get the same bits, or a gate, a ranking or a threshold on a near tie flips between a served
request and the benchmark's batch. A plain ``A @ B`` of one row goes to BLAS's matrix-vector kernel and of
several rows to its matrix-matrix kernel, which sum in another order."""

from __future__ import annotations

import numpy as np

__all__ = ["rowwise_matmul"]


def rowwise_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B`` (N, K) x (K, H) with each row's product computed alone (one matrix-vector product per row):
    the same bits whatever else is in the batch, by construction. About a plain product's speed where N
    is the agents of a request; slower (2-6x) on wide layers over many rows. (Padding one row to two
    does not do: BLAS's matrix-matrix kernel also sums a row in an order that depends on the rows around it.)"""
    return (A[:, None, :] @ B)[:, 0]
