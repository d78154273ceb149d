"""The full-action encoder-decoder for the sequential CSCF worlds (``seq_encoder_decoder``).

The sequence model of the learning-CFE paper's full-action generator (Figure 2), on the
(action, value) grid of a :class:`envs.sequential.SequentialWorld`: an MLP **encodes** the
rejected agent's state x into the initial state of a GRU that **decodes** one (action, value)
token per step. Each decoder step reads the agent's state after the steps decoded so far (the
world's transitions are known, as the capability vectors are in the FA setting), its decision
score there (how far it still is from acceptance), the actions used and the previous token, and emits one logit per grid token; tokens the world does not allow there
(pre-conditions, used actions, values outside the domain) are masked. Decoding stops when the
world's classifier accepts the state (the MDP's termination) or after ``max_steps``.

Unlike :class:`learners.policies.sequential.SequentialScorer`, the decoder never sees the
classifier's scores of the candidate steps (only the current state's): it generates the sequence
the way the capability world's full-action generator does, and every answer is then priced and
decided by the world.

Training is teacher-forced cross-entropy on the sequencer's cheapest sequences (optionally with
the greedy lookahead's or the exact reference's sequences of recombined agents, :func:`expert_targets`); the held-out
share of the training agents (plus ``val_augment`` recombined agents) selects the epoch (validity,
then mean cost of the greedy decode, or of the beam of width ``select_width``).
Decoding: greedy (``beam_width`` 1: the raw rollout) or the verified beam search of
:mod:`learners.policies.sequential_search` ranked by the decoder's summed log-probabilities.

**Persistence**: ``weights.pt`` (state_dict, ``weights_only=True``), ``world.json``, ``config.json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from envs.sequential import SequentialWorld
from envs.sequential_candidates import OBS_CLIP, FlatGrid, candidates, scale_states
from learners.base import FitContext, register, require_at_least
from learners.policies.sequential import _SequentialGenerator
from learners.policies.sequential_experts import expert_answers, expert_targets, heldout_split
from learners.policies.sequential_net import mlp_layers
from learners.policies.sequential_params import ExpertParams, SequentialRolloutParams
from learners.policies.sequential_rollout import (
    MASKED_LOGIT,
    SequencePrediction,
    finish_prediction,
    masked_log_softmax,
)
from learners.policies.sequential_search import Nodes, beam_search
from learners.torch_training import torch_threads


@dataclass
class SequentialSeq2SeqParams(SequentialRolloutParams, ExpertParams):
    """Hyperparameters of the full-action encoder-decoder."""

    hidden: tuple[int, ...] = (128,)  # widths of the encoder MLP (x -> initial GRU state)
    state_size: int = 128  # GRU state width
    embed_dim: int = 16  # width of the previous-token and action embeddings
    head_dim: int = 64  # width of the factored output layer (shared by all tokens)
    epochs: int = 300  # passes over the training sequences
    learning_rate: float = 2e-3  # Adam learning rate
    cosine_decay: bool = False  # anneal the learning rate to 0 over the epochs (cosine), for a steadier end
    weight_decay: float = 1e-5  # Adam weight decay
    batch_size: int = 64  # sequences per minibatch
    eval_every: int = 10  # epochs between held-out decodes (model selection)
    val_fraction: float = 0.1  # share of training agents held out for model selection
    val_augment: int = 0  # extra model-selection agents recombined from the training agents (never trained on)
    select_width: int = 1  # beam width of the held-out decodes that select the epoch (1: the greedy decode)
    keep_best: bool = True  # end with the held-out best weights (validity, mean cost)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.hidden = tuple(int(h) for h in self.hidden)
        require_at_least(self, 1, "state_size", "embed_dim", "head_dim", "epochs", "batch_size", "eval_every", "select_width")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden: expected positive widths, got {self.hidden}")
        if not self.learning_rate > 0 or self.weight_decay < 0:
            raise ValueError("learning_rate: must be > 0; weight_decay: must be >= 0")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction: must be in (0, 1), got {self.val_fraction}")
        self.check_expert()
        require_at_least(self, 0, "val_augment")


def decoder_state(world: SequentialWorld, X: np.ndarray) -> np.ndarray:
    """The decoder's view of states ``X``: scaled features and the clipped decision score."""
    score = np.clip(world.score(X), -OBS_CLIP, OBS_CLIP)[:, None]
    return np.concatenate([scale_states(world, X), score], 1).astype(np.float32)


class SequenceEncoderDecoder(nn.Module):
    """Encoder MLP -> GRU initial state; decoder GRU cell over [scaled state, its clipped decision
    score, used actions, previous-token embedding] -> one logit per grid token (factored head)."""

    def __init__(self, n_features: int, n_actions: int, grid_action: list[int], grid_position: list[float],
                 hidden: tuple[int, ...] = (128,), state_size: int = 128, embed_dim: int = 16, head_dim: int = 64):
        super().__init__()
        self.n_tokens = n_tokens = len(grid_action)
        self.register_buffer("grid_action", torch.as_tensor(grid_action, dtype=torch.long))
        self.register_buffer("grid_position", torch.as_tensor(grid_position, dtype=torch.float32))
        self.encoder = mlp_layers(n_features, hidden, state_size)
        self.embed = nn.Embedding(n_tokens + 1, embed_dim)  # the last row is the start token
        self.cell = nn.GRUCell(n_features + 1 + n_actions + embed_dim, state_size)
        # factored output: a token's logit is an MLP of (GRU state, its action's embedding, its
        # position in the action's grid), shared by all tokens, so the values of one action share
        # what they learn (a threshold in the value) instead of one output unit each
        self.action_embed = nn.Embedding(n_actions, embed_dim)
        self.from_state = nn.Linear(state_size, head_dim)
        self.from_token = nn.Linear(embed_dim + 1, head_dim, bias=False)
        self.out = nn.Linear(head_dim, 1)
        self._token: torch.Tensor | None = None  # the tokens' head input, cached while in eval mode

    def train(self, mode: bool = True) -> SequenceEncoderDecoder:
        self._token = None
        return super().train(mode)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        self._token = None
        return super().load_state_dict(*args, **kwargs)

    def token_part(self) -> torch.Tensor:
        """(K, head_dim): each token's share of the head's input (its action and grid position);
        computed once in eval mode, where the weights do not change."""
        if self._token is not None and not torch.is_grad_enabled():
            return self._token
        token = self.from_token(torch.cat([self.action_embed(self.grid_action), self.grid_position[:, None]], 1))
        if not self.training and not torch.is_grad_enabled():
            self._token = token
        return token

    def initial(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.encoder(x))

    def step(self, h: torch.Tensor, state: torch.Tensor, used: torch.Tensor, prev: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, K), new GRU state) of one decoder step; ``prev`` -1 is the start token."""
        tok = torch.where(prev < 0, torch.full_like(prev, self.n_tokens), prev)
        h = self.cell(torch.cat([state, used, self.embed(tok)], 1), h)
        return self.head(self.from_state(h)), h

    def head(self, state_part: torch.Tensor, rows: int = 16) -> torch.Tensor:
        """(B, K) token logits from the states' share of the head's input. Without autograd the
        (B, K, head_dim) hidden layer is formed ``rows`` states at a time, in place: it is most of
        the decoder's inference time, and small blocks stay in the CPU's cache."""
        token = self.token_part()
        if torch.is_grad_enabled():
            return self.out(torch.relu(state_part[:, None, :] + token[None])).squeeze(-1)
        out = torch.empty(len(state_part), len(token))
        for s in range(0, len(state_part), rows):
            z = state_part[s: s + rows, None, :] + token[None]
            out[s: s + rows] = self.out(z.relu_()).squeeze(-1)
        return out


@register
class SequentialEncoderDecoder(_SequentialGenerator):
    """Full-action encoder-decoder trained on the sequencer's sequences (see the module doc)."""

    method = "seq_encoder_decoder"
    Params = SequentialSeq2SeqParams
    params: SequentialSeq2SeqParams
    scores_children: ClassVar[bool] = False  # it generates from x alone: no classifier scores of candidates

    def _build(self) -> SequenceEncoderDecoder:
        p, w = self.params, self.world_
        grid = FlatGrid.of(w)
        position = grid.position / np.maximum(w.grid_sizes[grid.action] - 1, 1)
        return SequenceEncoderDecoder(w.n_features, w.n_actions, grid.action.tolist(), position.tolist(), p.hidden,
                                      p.state_size, p.embed_dim, p.head_dim)

    # ------------------------------------------------------------------ training
    def fit(self, train: Any, val: Any, ctx: FitContext) -> SequentialEncoderDecoder:
        """``train``: agents ``train.X`` with the sequencer's labels (``actions``, ``values``,
        ``ok``/``cost``); ``ctx.world`` the world; ``val`` (optional) held-out agents."""
        world = self._set_world(ctx)
        for need in ("X", "actions", "values"):
            if not hasattr(train, need):
                raise ValueError(f"{self.method}: training needs the sequencer's labels (train.{need})")
        p = self.params
        t0 = time.perf_counter()
        X = world.validate(train.X, name="train.X")
        ok = np.asarray(train.ok if hasattr(train, "ok") else np.isfinite(train.cost), dtype=bool)
        rows = np.flatnonzero(ok & ~world.accepts(X))
        if len(rows) < 2:
            raise ValueError(f"train: {len(rows)} rejected agents with a label; need at least 2")
        rng = p.data_rng(ctx.seed)
        Xv, rows = heldout_split(world, X, rows, val, p.val_fraction, rng, p.val_augment, ctx.seed + 7919)
        T = self._max_steps()
        Xt, A, V, info = expert_targets(world, expert_answers(world, p, ctx, T, p.rollout_chunk), X[rows],
                                        train.actions[rows], train.values[rows], relabel=p.expert_relabel,
                                        augment=p.augment_agents, rng=rng)
        torch.manual_seed(ctx.seed)
        with torch_threads(p.num_threads):
            self.net_ = self._build()
            batch = self._teacher_tensors(Xt, A, V)
            info.update(self._train(batch, Xv, ctx.seed))
        info.update({"train_agents": int(len(Xt)), "heldout_agents": int(len(Xv)),
                     "fit_seconds": round(time.perf_counter() - t0, 2)})
        self.fit_info_ = info
        return self

    def _teacher_tensors(self, X: np.ndarray, A: np.ndarray, V: np.ndarray) -> dict[str, torch.Tensor]:
        """The teacher-forced inputs along every label: per step the scaled state, used actions,
        previous token, target token and the allowed-token mask (from the world)."""
        world, grid = self.world_, FlatGrid.of(self.world_)
        N, T = len(X), min(A.shape[1], self._max_steps())
        K = grid.size
        state = np.zeros((N, T, world.n_features + 1), np.float32)
        used_t = np.zeros((N, T, world.n_actions), np.float32)
        prev = np.full((N, T), -1, np.int64)
        target = np.full((N, T), -1, np.int64)
        mask = np.zeros((N, T, K), bool)
        Xc, used = X.astype(float).copy(), np.zeros((N, world.n_actions), bool)
        for t in range(T):
            idx = np.flatnonzero(A[:, t] >= 0)
            if len(idx) == 0:
                break
            k = np.array([grid.index(world, int(a), v) for a, v in zip(A[idx, t], V[idx, t], strict=True)])
            state[idx, t], used_t[idx, t] = decoder_state(world, Xc[idx]), used[idx]
            mask[idx, t] = candidates(world, grid, Xc[idx], used[idx], score=False).mask
            target[idx, t] = k
            if t + 1 < T:
                prev[idx, t + 1] = k
            Xc[idx] = world.apply(Xc[idx], A[idx, t], grid.value[k]).states
            used[idx, A[idx, t]] = True
        # a label step the candidate mask leaves out (one that leaves the state unchanged) is no
        # target: the decoder could never emit it (the scorer's BC drops such pairs too)
        on = target >= 0
        target[on] = np.where(mask[on, target[on]], target[on], -1)
        self.skipped_steps_ = int(on.sum() - (target >= 0).sum())
        return {"x": torch.as_tensor(scale_states(world, X).astype(np.float32)), "state": torch.as_tensor(state),
                "used": torch.as_tensor(used_t), "prev": torch.as_tensor(prev), "target": torch.as_tensor(target),
                "mask": torch.as_tensor(mask)}

    def _loss(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        net = self.net_
        h = net.initial(b["x"])
        total, count = torch.zeros(()), 0
        for t in range(b["target"].shape[1]):
            on = b["target"][:, t] >= 0
            if not on.any():
                continue
            logits, h_new = net.step(h, b["state"][:, t], b["used"][:, t], b["prev"][:, t])
            h = torch.where(on[:, None], h_new, h)
            logits = torch.where(b["mask"][:, t], logits, torch.tensor(MASKED_LOGIT))
            total = total + F.cross_entropy(logits[on], b["target"][on, t], reduction="sum")
            count += int(on.sum())
        return total / max(count, 1)

    def _train(self, batch: dict[str, torch.Tensor], Xv: np.ndarray, seed: int) -> dict[str, Any]:
        p = self.params
        opt = torch.optim.Adam(self.net_.parameters(), lr=p.learning_rate, weight_decay=p.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, p.epochs) if p.cosine_decay else None
        gen = torch.Generator().manual_seed(seed)
        n = len(batch["x"])
        history, best_score, best_state = [], None, None
        for epoch in range(1, p.epochs + 1):
            self.net_.train()
            perm = torch.randperm(n, generator=gen)
            total = 0.0
            for s in range(0, n, p.batch_size):
                b = {k: v[perm[s: s + p.batch_size]] for k, v in batch.items()}
                loss = self._loss(b)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(b["x"])
            if sched is not None:
                sched.step()
            if epoch % p.eval_every == 0 or epoch == p.epochs:
                self.net_.eval()
                r = self._greedy(Xv) if p.select_width == 1 else self._beam(Xv, p.select_width)
                mean_cost = float(r.cost[r.accepted].mean()) if r.accepted.any() else float("inf")
                score = (float(r.accepted.mean()), -mean_cost)
                rec = {"phase": "epoch", "step": epoch, "loss": round(total / n, 5), "validity": score[0],
                       "mean_cost": mean_cost,
                       "best": best_score is None or score > best_score}
                if rec["best"]:
                    best_score = score
                    best_state = {k: v.detach().clone() for k, v in self.net_.state_dict().items()}
                history.append(rec)
        if p.keep_best and best_state is not None:
            self.net_.load_state_dict(best_state)
        self.net_.eval()
        return {"heldout": history, "kept": next((r for r in reversed(history) if r["best"]), None)}

    # ------------------------------------------------------------------ decoding
    def _initial_memory(self, X: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self.net_.initial(torch.as_tensor(scale_states(self.world_, X).astype(np.float32))).numpy()

    def _expand(self) -> Any:
        """Beam key: the path's summed log-probability under the decoder; memory: its GRU state."""
        world, net = self.world_, self.net_

        def expand(nodes: Nodes, cand: Any) -> tuple[np.ndarray, np.ndarray]:
            with torch.inference_mode():
                logits, h = net.step(torch.as_tensor(nodes.memory),
                                     torch.as_tensor(decoder_state(world, nodes.states)),
                                     torch.as_tensor(nodes.used.astype(np.float32)), torch.as_tensor(nodes.prev))
                logp = masked_log_softmax(logits, cand.mask)
            return nodes.key[:, None] + logp, h.numpy()
        return expand

    def _greedy(self, X: np.ndarray) -> SequencePrediction:
        """The raw decode: the most likely allowed token per step until accepted (no fallback)."""
        t0, c0 = time.perf_counter(), time.process_time()
        X0 = self.world_.validate(X, name="X")
        A, V, _, stats = beam_search(self.world_, self._expand(), X0, width=1, max_steps=self._max_steps(),
                                     chunk=self.params.rollout_chunk, score_children=False,
                                     memory=self._initial_memory(X0))
        return finish_prediction(self.world_, X0, A, V, np.ones(len(X0)), t0, c0, stats)

    def _chooser(self) -> Any:  # decoding goes through _greedy / _beam, not a per-step chooser
        raise NotImplementedError
