"""Torch machinery shared by every torch generator: the hyperparameters, an MLP builder, seeding, thread
control and batched inference. The training loop itself (Lightning) is ``learners.lightning_fit``, imported
only where a network is trained: Lightning's import takes seconds (6 s on a 2-core machine), and a process
that only answers (a server, its batch worker, a Ray replica) never needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from data_gen.dataset import Split
from learners.base import require_at_least

LossFn = Callable[[nn.Module, Sequence[torch.Tensor]], torch.Tensor]
SCHEDULES = ("onecycle", "constant")
ACCELERATORS = ("cpu", "gpu", "auto")
WARMUP_FRACTION = 0.2  # share of the one-cycle schedule with a rising learning rate


@dataclass
class TorchParams:
    """Hyperparameters common to the torch generators (each method's ``Params`` extends them)."""

    hidden: tuple[int, ...] = (512, 512)  # widths of the hidden layers of the MLP
    batch_norm: bool = True  # batch normalization after each hidden linear layer
    dropout: float = 0.1  # dropout probability after each hidden layer
    lr: float = 1e-2  # Adam learning rate (the peak rate under the one-cycle schedule)
    schedule: str = "onecycle"  # learning-rate schedule over max_epochs: "onecycle" or "constant"
    weight_decay: float = 1e-6  # L2 penalty (Adam weight_decay)
    batch_size: int = 512  # training batch size
    max_epochs: int = 15  # training epochs (the one-cycle schedule spans all of them)
    patience: int = 10  # early stopping: epochs without a better validation loss, counted after the warm-up
    val_fraction: float = 0.1  # share of train held out for validation when no val split is given
    num_threads: int = 1  # torch CPU threads in fit and predict (0: torch's default; 1 is fastest on busy cores)
    accelerator: str = "cpu"  # Lightning accelerator for fit: "cpu", "gpu" or "auto" (predict runs on the CPU)

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)  # JSON gives a list back
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden: layer widths must be >= 1, got {self.hidden}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction: must be in (0, 1), got {self.val_fraction}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {SCHEDULES}, got {self.schedule!r}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads: must be >= 0, got {self.num_threads}")
        if self.accelerator not in ACCELERATORS:
            raise ValueError(f"accelerator: expected one of {ACCELERATORS}, got {self.accelerator!r}")
        require_at_least(self, 1, "batch_size", "max_epochs", "patience")


def mlp(n_in: int, hidden: Sequence[int], n_out: int, batch_norm: bool = True, dropout: float = 0.0) -> nn.Sequential:
    """Linear -> [BatchNorm] -> ReLU -> [Dropout] per hidden width, then a linear output layer."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers.append(nn.Linear(n_in, width))
        if batch_norm:
            layers.append(nn.BatchNorm1d(width))
        layers.append(nn.ReLU())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def warmup_epochs(params: TorchParams) -> int:
    """Epochs of rising learning rate (one-cycle's 20% warm-up; none under a constant rate)."""
    return int(np.ceil(WARMUP_FRACTION * params.max_epochs)) if params.schedule == "onecycle" else 0


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` intra-op torch threads (0: leave the setting alone)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (call before building a model so that its init is repeatable)."""
    import lightning as L  # here, not at the top: see the module's docstring

    L.seed_everything(seed, workers=True, verbose=False)


def take(split: Split, idx: np.ndarray) -> Split:
    """The rows ``idx`` of a split."""
    return Split(*(getattr(split, f.name)[idx] for f in dataclasses.fields(Split)))


def train_val(train: Split, val: Split | None, fraction: float, seed: int) -> tuple[Split, Split]:
    """``(train, val)``; without a val split, a seeded random ``fraction`` of train is held out."""
    if val is not None and len(val):
        return train, val
    if len(train) < 2:
        raise ValueError(f"train: need at least 2 agents to hold out a validation split, got {len(train)}")
    perm = np.random.default_rng(seed).permutation(len(train))
    n_val = min(len(train) - 1, max(1, round(fraction * len(train))))
    return take(train, np.sort(perm[n_val:])), take(train, np.sort(perm[:n_val]))


def check_agents(X: Any, n_features: int, method: str) -> np.ndarray:
    """Agents as a (B, n) float32 array, or a ValueError naming the problem."""
    arr = np.asarray(X, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(f"{method}: X must have shape (B, {n_features}), got {np.shape(X)}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{method}: X contains NaN or inf")
    return arr


@torch.no_grad()
def predict_batched(model: nn.Module, X: np.ndarray, fn: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
                    batch_size: int = 16384, num_threads: int = 1) -> np.ndarray:
    """``fn(model, x_batch)`` (default ``model(x_batch)``) over ``X`` in eval mode, as one numpy array."""
    model.eval()
    fn = fn or (lambda m, xb: m(xb))
    X = torch.as_tensor(np.asarray(X, dtype=np.float32))
    with torch_threads(num_threads):
        return torch.cat([fn(model, X[i : i + batch_size]) for i in range(0, max(len(X), 1), batch_size)]).numpy()
