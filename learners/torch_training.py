"""Training machinery shared by every torch generator: an MLP builder, a LightningModule that
wraps any loss, one ``fit_lightning`` (Adam with L2, early stopping with best-weights restoration,
checkpoints, CSV metrics, seeded; CPU unless ``accelerator`` says otherwise) and batched inference.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from data_gen.dataset import Split
from data_gen.progress import interactive
from learners.base import FitContext, require_at_least

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


class LossModule(L.LightningModule):
    """Trains ``model`` on ``loss_fn(model, batch)``; logs ``train_loss`` and ``val_loss`` per epoch."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, lr: float, weight_decay: float, schedule: str):
        super().__init__()
        self.model, self.loss_fn, self.lr, self.weight_decay, self.schedule = model, loss_fn, lr, weight_decay, schedule

    def _step(self, batch: Sequence[torch.Tensor], name: str) -> torch.Tensor:
        loss = self.loss_fn(self.model, batch)
        self.log(name, loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(batch[0]))
        return loss

    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train_loss")

    def validation_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val_loss")

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        if self.schedule == "constant":
            return opt
        # One-cycle (warm-up, then cosine annealing) over every step that max_epochs allows.
        # At least 10 steps: below that the 20% warm-up phase is empty and OneCycleLR divides by zero
        # (tiny training sets); a run shorter than the schedule just ends before the annealing does.
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, pct_start=WARMUP_FRACTION,
                                                    total_steps=max(10, int(self.trainer.estimated_stepping_batches)))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class WarmupEarlyStopping(EarlyStopping):
    """Early stopping that starts counting after ``start_epoch``. Under the one-cycle schedule the
    learning rate rises for the first 20% of the epochs, and the validation loss may rise with it;
    counting those epochs stopped long runs (80 epochs: 16 of warm-up) before the rate came down.
    Lightning's own ``min_epochs`` would not do: it lets the count run during the warm-up and stops
    the moment the warm-up ends. (Overrides a private hook; tests/test_generators.py pins it.)"""

    def __init__(self, start_epoch: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.start_epoch = start_epoch

    def _run_early_stopping_check(self, trainer: L.Trainer) -> None:
        if trainer.current_epoch >= self.start_epoch:
            super()._run_early_stopping_check(trainer)


class EpochLines(Callback):
    """One line per epoch on stderr (epoch, logged losses, seconds): Lightning's progress bar off a
    terminal, where its redraws would fill a log (see :mod:`data_gen.progress`)."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Runs after the epoch's validation, so the metrics hold this epoch's val_loss too.
        metrics = "".join(f", {k} {float(v):.4g}" for k, v in sorted(trainer.callback_metrics.items()))
        print(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}{metrics} "
              f"({time.perf_counter() - self._t0:.1f}s)", file=sys.stderr, flush=True)


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


def _loader(tensors: Sequence[torch.Tensor], batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    """Whole-batch indexing (one gather per batch, not one per row)."""
    ds = TensorDataset(*tensors)
    sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed)) if shuffle else SequentialSampler(ds)
    drop_last = shuffle and len(ds) > batch_size  # a batch of one breaks batch norm
    return DataLoader(ds, sampler=BatchSampler(sampler, batch_size, drop_last=drop_last), batch_size=None)


def fit_lightning(model: nn.Module, loss_fn: LossFn, train_tensors: Sequence[torch.Tensor],
                  val_tensors: Sequence[torch.Tensor], params: TorchParams, ctx: FitContext) -> dict[str, Any]:
    """Train ``model`` in place and restore its best-validation weights; returns JSON-able facts
    (epochs run, best validation loss, seconds). Checkpoints and ``metrics.csv`` go under
    ``ctx.run_dir`` when given, else under a temporary directory removed afterwards."""
    seed_everything(ctx.seed)
    lit = LossModule(model, loss_fn, params.lr, params.weight_decay, params.schedule)
    t0 = time.perf_counter()
    with ExitStack() as stack:
        root = Path(ctx.run_dir) if ctx.run_dir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        stack.enter_context(torch_threads(params.num_threads))
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message=".*(does not have many workers|LeafSpec).*")
        for name in ("lightning.pytorch", "lightning.pytorch.utilities.rank_zero", "lightning.fabric"):
            quiet = logging.getLogger(name)
            stack.callback(quiet.setLevel, quiet.level)
            quiet.setLevel(logging.WARNING)
        ckpt = ModelCheckpoint(dirpath=root / "checkpoints", filename="best", monitor="val_loss", mode="min",
                               save_top_k=1, save_weights_only=True, enable_version_counter=False)
        bars = ctx.progress and interactive()  # off a terminal: a line per epoch instead of bar redraws
        trainer = L.Trainer(
            accelerator=params.accelerator, devices=1, max_epochs=params.max_epochs, default_root_dir=root,
            callbacks=[WarmupEarlyStopping(warmup_epochs(params), monitor="val_loss", mode="min",
                                           patience=params.patience), ckpt,
                       *([EpochLines()] if ctx.progress and not bars else [])],
            logger=CSVLogger(root, name="logs", version=""), enable_progress_bar=bars,
            enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1)
        trainer.fit(lit, _loader(train_tensors, params.batch_size, True, ctx.seed),
                    _loader(val_tensors, max(params.batch_size, 8192), False, ctx.seed))
        if not ckpt.best_model_path:
            raise ValueError("val: the validation loss was never finite (no usable validation rows?)")
        best = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
        lit.load_state_dict(best)
    model.cpu().eval()  # predict and save run on the CPU, whichever accelerator trained
    return {"epochs": int(trainer.current_epoch), "best_val_loss": float(ckpt.best_model_score),
            "fit_seconds": round(time.perf_counter() - t0, 3)}


@torch.no_grad()
def predict_batched(model: nn.Module, X: np.ndarray, fn: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
                    batch_size: int = 16384, num_threads: int = 1) -> np.ndarray:
    """``fn(model, x_batch)`` (default ``model(x_batch)``) over ``X`` in eval mode, as one numpy array."""
    model.eval()
    fn = fn or (lambda m, xb: m(xb))
    X = torch.as_tensor(np.asarray(X, dtype=np.float32))
    with torch_threads(num_threads):
        return torch.cat([fn(model, X[i : i + batch_size]) for i in range(0, max(len(X), 1), batch_size)]).numpy()
