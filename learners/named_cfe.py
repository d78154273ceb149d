"""Named CFE generators (learning-CFE paper, section 3.3): only the names of whole CFEs are
known, so a CFE is a class of a vocabulary built from the training sets.

- ``NamedCfeGenerator``: multi-class MLP with softmax and cross-entropy (the paper's MC model).
  With ``output="factored"`` a class's logit is not a free output unit but the dot product of an
  agent embedding with an embedding computed from the class's action set (plus a free bias), so
  a rare CFE shares what its actions teach (an extension, not the paper's model).
- ``HammingKnnGenerator``: the baseline; majority CFE of the k training agents nearest in
  Hamming distance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from data_gen.dataset import Split
from data_gen.encodings import CfeVocabulary, named_action
from learners.base import FitContext, Generator, Prediction, register
from learners.torch_training import (
    TorchParams,
    check_agents,
    mlp,
    predict_batched,
    seed_everything,
    torch_threads,
    train_val,
)


def _vocabulary(train: Split, ctx: FitContext) -> CfeVocabulary:
    names = ctx.action_names or [f"a{i}" for i in range(ctx.n_actions)]
    return CfeVocabulary(train.sets, names)


@dataclass
class NamedCfeParams(TorchParams):
    """Hyperparameters of the multi-class named CFE generator. Defaults: 0.969 exact-set accuracy
    on the 20-feature ``all`` test split in ~3 CPU minutes (paper: 0.969)."""

    hidden: tuple[int, ...] = (512, 512)  # widths of the hidden layers (paper: 2 x 2000)
    dropout: float = 0.3  # dropout probability after each hidden layer
    max_epochs: int = 20  # training epochs (the one-cycle schedule spans all of them)
    output: str = "softmax"  # "softmax": one free output unit per CFE class (paper); "factored": see FactoredLogits
    embed_dim: int = 128  # factored output: width of the agent and action-set embeddings
    set_hidden: tuple[int, ...] = (256,)  # factored output: hidden widths of the action-set encoder

    def __post_init__(self) -> None:
        super().__post_init__()
        self.set_hidden = tuple(int(h) for h in self.set_hidden)
        if self.output not in OUTPUTS:
            raise ValueError(f"output: expected one of {OUTPUTS}, got {self.output!r}")
        if self.embed_dim < 1 or any(h < 1 for h in self.set_hidden):
            raise ValueError(f"embed_dim, set_hidden: widths must be >= 1, got {self.embed_dim}, {self.set_hidden}")


OUTPUTS = ("softmax", "factored")


class FactoredLogits(nn.Module):
    """Class logits ``f(x) . g(s_c) + b_c``: ``f`` is an MLP of the agent, ``g`` an MLP of class c's
    multi-hot action set ``s_c`` and ``b_c`` a free bias. The optimal set cover of an ``all_ones``
    world is of this form exactly (``f(x) = 1 - x``; ``g(s)`` the features ``s`` leaves uncovered,
    one ReLU layer; ``b_c`` minus the cost), so what is learned for one CFE carries to every CFE
    that shares its actions."""

    def __init__(self, agent_encoder: nn.Module, set_encoder: nn.Module, class_sets: torch.Tensor):
        super().__init__()
        self.agent_encoder, self.set_encoder = agent_encoder, set_encoder
        self.bias = nn.Parameter(torch.zeros(len(class_sets)))
        self.register_buffer("class_sets", class_sets, persistent=False)  # (C, A) multi-hot, rebuilt on load

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.agent_encoder(x) @ self.set_encoder(self.class_sets).T + self.bias


@register
class NamedCfeGenerator(Generator):
    """Softmax over the CFE classes seen in training; confidence is the top class probability."""

    method = "named_cfe"
    Params = NamedCfeParams

    def _build(self) -> nn.Module:
        p = self.params
        if p.output == "softmax":
            return mlp(self.n_features_, p.hidden, len(self.classes_), p.batch_norm, p.dropout)
        multi_hot = torch.as_tensor(named_action(self.classes_, self.n_actions_), dtype=torch.float32)
        return FactoredLogits(mlp(self.n_features_, p.hidden, p.embed_dim, p.batch_norm, p.dropout),
                              mlp(self.n_actions_, p.set_hidden, p.embed_dim, batch_norm=False), multi_hot)

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> NamedCfeGenerator:
        vocab = _vocabulary(train, ctx)
        self.classes_, self.n_features_, self.n_actions_ = vocab.sets_.astype(np.int64), ctx.n_features, ctx.n_actions
        train, val = train_val(train, val, self.params.val_fraction, ctx.seed)
        seed_everything(ctx.seed)
        self.model_ = self._build()

        def tensors(s: Split) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.as_tensor(s.X, dtype=torch.float32), torch.as_tensor(vocab.encode(s.sets))

        def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
            x, y = batch  # a validation CFE never seen in training (-1) is left out
            return F.cross_entropy(model(x), y, ignore_index=-1)

        from learners.lightning_fit import fit_lightning  # Lightning only where a network trains

        self.fit_info_ = fit_lightning(self.model_, loss, tensors(train), tensors(val), self.params, ctx)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (B, C) over ``classes_``."""
        X = check_agents(X, self.n_features_, self.method)
        return predict_batched(self.model_, X, lambda m, xb: torch.softmax(m(xb), dim=-1),
                               num_threads=self.params.num_threads)

    def predict(self, X: np.ndarray) -> Prediction:
        P = self.predict_proba(X)
        best = P.argmax(1)
        return Prediction(self.classes_[best], P[np.arange(len(P)), best].astype(np.float64))

    def _save_state(self, path: Path) -> dict[str, Any]:
        torch.save(self.model_.state_dict(), path / "weights.pt")
        np.savez(path / "classes.npz", sets=self.classes_)
        return {"n_features": self.n_features_, "n_actions": self.n_actions_, "n_classes": len(self.classes_),
                "fit": self.fit_info_}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.n_features_, self.fit_info_ = meta["n_features"], meta["fit"]
        self.n_actions_ = meta.get("n_actions", 0)  # models saved before the factored output lack it
        with np.load(path / "classes.npz", allow_pickle=False) as z:
            self.classes_ = z["sets"].astype(np.int64)
        self.model_ = self._build()
        self.model_.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        self.model_.eval()


@dataclass
class HammingKnnParams:
    """Hyperparameters of the Hamming-distance k-NN named CFE generator."""

    k: int = 5  # neighbours that vote (paper: 5, 10, 15 for 20, 50, 100 features)
    query_batch: int = 512  # agents per distance block (memory: query_batch x train size floats)
    num_threads: int = 1  # torch CPU threads in predict (0: torch's default)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k: must be >= 1, got {self.k}")
        if self.query_batch < 1:
            raise ValueError(f"query_batch: must be >= 1, got {self.query_batch}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads: must be >= 0, got {self.num_threads}")


@register
class HammingKnnGenerator(Generator):
    """Majority CFE class among the k nearest training agents (Hamming distance); a tied vote
    goes to the class of the nearest voter. Confidence is the winning vote share."""

    method = "hamming_knn"
    Params = HammingKnnParams

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> HammingKnnGenerator:
        if not len(train):
            raise ValueError(f"{self.method}: train is empty")
        vocab = _vocabulary(train, ctx)
        self._set_state(np.asarray(train.X, dtype=np.uint8), vocab.encode(train.sets), vocab.sets_)
        return self

    def _set_state(self, X: np.ndarray, labels: np.ndarray, classes: np.ndarray) -> None:
        self.X_, self.labels_, self.classes_ = X, labels.astype(np.int64), classes.astype(np.int64)
        self._YT = torch.as_tensor(X, dtype=torch.float32).T.contiguous()
        self._Ynorm = self._YT.sum(0)[None]

    def predict(self, X: np.ndarray) -> Prediction:
        Q = torch.as_tensor(check_agents(X, self.X_.shape[1], self.method))
        k = min(self.params.k, len(self.X_))
        labels_t = torch.as_tensor(self.labels_)
        out = []
        with torch_threads(self.params.num_threads):
            for i in range(0, max(len(Q), 1), self.params.query_batch):
                # Hamming distance |q| + |y| - 2 q.y, less |q| (the same for a whole row).
                dist = torch.addmm(self._Ynorm, Q[i : i + self.params.query_batch], self._YT, alpha=-2.0)
                out.append(labels_t[torch.topk(dist, k, dim=1, largest=False, sorted=True).indices])
        votes = torch.cat(out).numpy()  # (B, k), nearest first
        counts = (votes[:, :, None] == votes[:, None, :]).sum(2)
        winner = counts.argmax(1)  # first maximum = nearest among tied classes
        rows = np.arange(len(votes))
        return Prediction(self.classes_[votes[rows, winner]], counts[rows, winner] / k)

    def _save_state(self, path: Path) -> dict[str, Any]:
        np.savez(path / "arrays.npz", X=self.X_, labels=self.labels_, classes=self.classes_)
        return {"n_train": len(self.X_)}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            self._set_state(z["X"], z["labels"], z["classes"])
