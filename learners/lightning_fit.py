"""The training loop every torch generator shares: a LightningModule that wraps any loss and one
``fit_lightning`` (Adam with L2, one-cycle or constant rate, early stopping with best-weights restoration,
checkpoints, CSV metrics, seeded; CPU unless ``accelerator`` says otherwise).

Apart from ``learners.torch_training`` so that Lightning (seconds to import) is imported only by a process
that trains: import this module inside the function that fits, not at a module's top.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from data_gen.progress import interactive
from learners.base import FitContext
from learners.torch_training import (
    WARMUP_FRACTION,
    LossFn,
    TorchParams,
    seed_everything,
    torch_threads,
    warmup_epochs,
)


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
