"""The change-and-value network (``learners/tabular/change_value.py``): one MLP trunk with two heads,
its torch module for training and loading, and its numpy form for answering (a request's one or two
rows cost microseconds in numpy, not torch's dispatch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.block_diagonal import block_matmul
from envs.rowwise import rowwise_matmul


def change_value_net(n_columns: int, n_raw: int, hidden: tuple[int, ...], dropout: float):
    """One MLP trunk, two heads: a logit per raw feature (does it change?) and the change of each
    encoded column in spans of the column (tanh; for a one-hot group the largest new column wins)."""
    from torch import nn

    from learners.torch_training import mlp

    class ChangeValueNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = mlp(n_columns, hidden[:-1], hidden[-1], batch_norm=True, dropout=dropout)
            self.change = nn.Linear(hidden[-1], n_raw)
            self.value = nn.Linear(hidden[-1], n_columns)

        def forward(self, x):
            h = nn.functional.relu(self.trunk(x))
            return self.change(h), self.value(h)

    return ChangeValueNet()


def sequential_layers(modules: Any) -> list[tuple[str, Any, Any]]:
    """An ``mlp`` (Linear, BatchNorm1d, ReLU; Dropout skipped) as float32 numpy layers, batch norm folded
    into an affine (its eval-mode form)."""
    import torch

    layers: list[tuple[str, Any, Any]] = []
    with torch.no_grad():
        for m in modules:
            if isinstance(m, torch.nn.Linear):
                layers.append(("linear", m.weight.T.numpy().copy(), m.bias.numpy().copy()))
            elif isinstance(m, torch.nn.BatchNorm1d):
                scale = m.weight / torch.sqrt(m.running_var + m.eps)
                layers.append(("affine", scale.numpy().copy(), (m.bias - m.running_mean * scale).numpy().copy()))
            elif isinstance(m, torch.nn.ReLU):
                layers.append(("relu", None, None))
    return layers


def forward_layers(layers: list[tuple[str, Any, Any]], h: np.ndarray,
                   blocks: list[np.ndarray | None] | None = None) -> np.ndarray:
    """``h`` through ``sequential_layers``' layers, each row alone (``rowwise_matmul``: an agent's bits do not
    depend on its batch). ``blocks``: per layer, its diagonal blocks where it is block-diagonal
    (``envs.block_diagonal``: an ensemble run as one network), multiplied a block at a time."""
    for i, (kind, p, q) in enumerate(layers):
        if kind == "linear" and blocks is not None and blocks[i] is not None:
            h = block_matmul(h, blocks[i], rowwise=True) + q
        elif kind == "linear":
            h = rowwise_matmul(h, p) + q
        elif kind == "affine":  # batch norm in eval mode
            h = h * p + q
        else:
            h = np.maximum(h, 0.0)
    return h


def numpy_layers(net: Any) -> tuple[list[tuple[str, Any, Any]], np.ndarray, np.ndarray]:
    """The trained network as float32 numpy layers (trunk: linear, affine batch norm, ReLU; the
    two heads as one matrix)."""
    import torch

    layers = sequential_layers(net.trunk)
    with torch.no_grad():
        W = torch.cat([net.change.weight, net.value.weight]).T.numpy().copy()
        b = torch.cat([net.change.bias, net.value.bias]).numpy().copy()
    return layers, W, b


def numpy_forward(layers: list[tuple[str, Any, Any]], W: np.ndarray, b: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The network's two heads' outputs (N, J + D) on scaled rows ``h`` (N, D), from ``numpy_layers``."""
    return rowwise_matmul(np.maximum(forward_layers(layers, h), 0.0), W) + b
