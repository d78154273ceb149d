"""Full-action (FA) CFE generators (learning-CFE paper, section 3.2).

The decision-maker knows the effects (capability vectors) of the actions that appear in training
CFEs, and nothing of the others. A generator emits action vectors; each is mapped to the known
action it matches (or the nearest one, by Hamming distance). Two models share that decoding:

- ``FullActionSeqGenerator``: the encoder-decoder of Figure 2. An MLP encodes x into the initial
  state of a GRU that emits one action vector (n sigmoid bits) plus a stop logit per step, fed its
  previous action (teacher forcing in training; at inference the known action it decoded).
- ``FullActionMultiLabelGenerator``: a multi-label MLP over the padded vectors (max_len + 1 slots
  of n action bits plus a stop bit), trained like the named-action generator.

Targets come from ``data_gen.encodings.full_action`` in canonical (ascending id) order.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from data_gen.dataset import Split
from data_gen.encodings import full_action
from learners.base import FitContext, Generator, Prediction, register
from learners.named_action import NamedActionParams, log_bernoulli, weighted_bce_l1
from learners.torch_training import (
    check_agents,
    mlp,
    predict_batched,
    seed_everything,
    train_val,
)


def nearest_action(p: torch.Tensor, vectors: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """Index of the known action vector nearest to each emitted vector ``p`` (..., n) of bit
    probabilities: smallest Hamming distance of the thresholded bits, ties broken by the L1
    distance to the probabilities (an exact match has Hamming distance 0)."""
    bits = (p > threshold).to(vectors.dtype)
    v1 = vectors.T
    hamming = bits @ (1 - v1) + (1 - bits) @ v1
    soft = p @ (1 - v1) + (1 - p) @ v1
    return (hamming * (vectors.shape[1] + 1) + soft).argmin(-1)


def canonical_sets(ids: np.ndarray) -> np.ndarray:
    """Rows of action ids (-1 = none) as ascending sets without repeats, padded with -1."""
    big = np.iinfo(np.int64).max
    s = np.sort(np.where(ids >= 0, ids, big), axis=1)
    s[:, 1:][s[:, 1:] == s[:, :-1]] = big
    s = np.sort(s, axis=1)
    return np.where(s == big, -1, s)


@dataclass
class FullActionMultiLabelParams(NamedActionParams):
    """Hyperparameters of the multi-label full-action generator (``threshold`` binarizes bits).
    Defaults: 0.913 exact-set accuracy on the 20-feature ``all`` test split in ~4-5 CPU minutes."""

    hidden: tuple[int, ...] = (512, 512)  # widths of the hidden layers of the MLP


@dataclass
class FullActionSeqParams(NamedActionParams):
    """Hyperparameters of the sequential (encoder-decoder) full-action generator. Defaults: 0.846
    exact-set accuracy on the 20-feature ``all`` test split in ~6 CPU minutes (paper FA: 0.839)."""

    hidden: tuple[int, ...] = (256,)  # widths of the encoder MLP's hidden layers
    state_size: int = 256  # GRU decoder state size (the encoder's output width)
    max_epochs: int = 25  # training epochs (the one-cycle schedule spans all of them)


class _FullActionGenerator(Generator):
    """Shared fitting, decoding and persistence of the full-action generators."""

    @abstractmethod
    def _build(self) -> nn.Module:
        """The network for ``n_features_`` and ``max_len_``."""

    @abstractmethod
    def _loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Training loss of a batch ``(x, target)``, target (B, max_len + 1, n + 1)."""

    @abstractmethod
    def _emit(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Emitted probabilities (B, max_len + 1, n + 1) of a batch of agents."""

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> _FullActionGenerator:
        if ctx.action_vectors is None:
            raise ValueError(f"{self.method}: ctx.action_vectors is required (the vectors of the actions in CFEs)")
        vectors = np.asarray(ctx.action_vectors, dtype=np.uint8)
        self.known_ids_ = np.unique(train.sets[train.sets >= 0]).astype(np.int64)
        if not len(self.known_ids_):
            raise ValueError(f"{self.method}: train has no CFE with an action")
        # Only the actions that occur in training CFEs are known to the full-action setting.
        self.known_vectors_ = vectors[self.known_ids_]
        self.n_features_, self.max_len_ = ctx.n_features, ctx.max_len
        train, val = train_val(train, val, self.params.val_fraction, ctx.seed)
        seed_everything(ctx.seed)
        self.model_ = self._build()
        from learners.lightning_fit import fit_lightning  # Lightning only where a network trains

        self.fit_info_ = fit_lightning(self.model_, self._loss, self._tensors(train, vectors),
                                       self._tensors(val, vectors), self.params, ctx)
        return self

    def _tensors(self, s: Split, vectors: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.as_tensor(s.X, dtype=torch.float32),
                torch.as_tensor(full_action(s.sets, vectors, self.max_len_)))

    @property
    def _vectors_t(self) -> torch.Tensor:
        return torch.as_tensor(self.known_vectors_, dtype=torch.float32)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Emitted bit probabilities (B, max_len + 1, n + 1); the last column is the stop bit."""
        X = check_agents(X, self.n_features_, self.method)
        return predict_batched(self.model_, X, self._emit, num_threads=self.params.num_threads)

    def predict(self, X: np.ndarray) -> Prediction:
        """The CFE ends at the first slot k >= 1 whose stop bit exceeds 0.5 (else at max_len);
        slots before it map to known actions. Confidence: the probability of the emitted answer,
        i.e. the product over its slots of the Bernoulli probabilities of the decoded actions'
        bits and of not stopping, times the probability of stopping at slot k."""
        P = self.predict_proba(X)
        n, B, L = self.n_features_, len(P), self.max_len_
        slots = torch.as_tensor(P[..., :n])
        idx = nearest_action(slots, self._vectors_t, self.params.threshold).numpy()  # (B, L + 1)
        stop = P[:, 1:L, n] > 0.5
        length = np.where(stop.any(1), stop.argmax(1) + 1, L)
        slot = np.arange(L + 1)
        acting = slot[None] < length[:, None]
        ids = np.where(acting, self.known_ids_[idx], -1)[:, :L]
        logp = np.where(acting, log_bernoulli(P[..., :n], self.known_vectors_[idx].astype(bool)).sum(-1), 0.0)
        logp += np.where(slot[None] <= length[:, None], log_bernoulli(P[..., n], slot[None] == length[:, None]), 0.0)
        return Prediction(canonical_sets(ids.reshape(B, L)), np.exp(logp.sum(1)))

    def _save_state(self, path: Path) -> dict[str, Any]:
        torch.save(self.model_.state_dict(), path / "weights.pt")
        return {"n_features": self.n_features_, "max_len": self.max_len_, "known_ids": self.known_ids_.tolist(),
                "known_vectors": self.known_vectors_.tolist(), "fit": self.fit_info_}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.n_features_, self.max_len_, self.fit_info_ = meta["n_features"], meta["max_len"], meta["fit"]
        self.known_ids_ = np.asarray(meta["known_ids"], dtype=np.int64)
        self.known_vectors_ = np.asarray(meta["known_vectors"], dtype=np.uint8).reshape(len(self.known_ids_), -1)
        self.model_ = self._build()
        self.model_.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        self.model_.eval()


@register
class FullActionMultiLabelGenerator(_FullActionGenerator):
    """Multi-label MLP over the padded full-action encoding, with the named-action loss."""

    method = "full_action_multilabel"
    Params = FullActionMultiLabelParams

    def _build(self) -> nn.Module:
        p, n = self.params, self.n_features_
        return mlp(n, p.hidden, (self.max_len_ + 1) * (n + 1), p.batch_norm, p.dropout)

    def _loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, target = batch
        return weighted_bce_l1(model(x), target.flatten(1), self.params.p_w, self.params.alpha)

    def _emit(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(model(x)).view(len(x), self.max_len_ + 1, self.n_features_ + 1)


class Seq2Seq(nn.Module):
    """Encoder MLP -> initial GRU state; each decoder step reads the agent's state after the
    actions emitted so far (x' = max(x, a_1, ..., a_t): the FA setting knows action effects) and
    the previous action (n bits, stop bit, start bit), and emits n action logits and a stop logit."""

    def __init__(self, n_features: int, hidden: tuple[int, ...], state_size: int, batch_norm: bool, dropout: float):
        super().__init__()
        self.encoder = mlp(n_features, hidden, state_size, batch_norm, dropout)
        self.gru = nn.GRU(2 * n_features + 2, state_size, batch_first=True)
        self.head = nn.Linear(state_size, n_features + 1)

    def initial(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.encoder(x))[None]

    def step(self, state: torch.Tensor, prev: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, n + 1) for agent states (B, T, n) and previous actions ``prev`` (B, T, n + 2)."""
        out, h = self.gru(torch.cat([state, prev], dim=-1), h)
        return self.head(out), h

    @staticmethod
    def start(batch: int, n_features: int, device: torch.device | None = None) -> torch.Tensor:
        tok = torch.zeros(batch, 1, n_features + 2, device=device)
        tok[..., -1] = 1.0
        return tok


@register
class FullActionSeqGenerator(_FullActionGenerator):
    """Sequential encoder-decoder (paper Figure 2): one action vector per step until stop."""

    method = "full_action_seq"
    Params = FullActionSeqParams

    def _build(self) -> nn.Module:
        p = self.params
        return Seq2Seq(self.n_features_, p.hidden, p.state_size, p.batch_norm, p.dropout)

    def _loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, target = batch
        n = self.n_features_
        prev = torch.cat([Seq2Seq.start(len(x), n, x.device), nn.functional.pad(target[:, :-1], (0, 1))], dim=1)
        state = torch.maximum(x[:, None], torch.cummax(prev[..., :n], dim=1).values)
        logits, _ = model.step(state, prev, model.initial(x))
        length = (target[..., n].argmax(1))[:, None]  # slot of the stop symbol
        slot = torch.arange(target.shape[1], device=x.device)[None]
        mask = torch.cat([(slot < length)[..., None].expand(-1, -1, n), (slot <= length)[..., None]], dim=-1)
        return weighted_bce_l1(logits, target, self.params.p_w, self.params.alpha, mask.float())

    def _emit(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Greedy decoding; each step is fed the known action it decoded (a real action vector)."""
        n, vectors = self.n_features_, self._vectors_t
        h, prev, state, out = model.initial(x), Seq2Seq.start(len(x), n), x[:, None], []
        for _ in range(self.max_len_ + 1):
            logits, h = model.step(state, prev, h)
            p = torch.sigmoid(logits)
            out.append(p)
            chosen = vectors[nearest_action(p[..., :n], vectors, self.params.threshold)]
            prev, state = nn.functional.pad(chosen, (0, 2)), torch.maximum(state, chosen)
        return torch.cat(out, dim=1)
