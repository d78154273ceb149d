"""The network of the sequential policies (:class:`SequentialScorer`) and its sb3 wrapper.

One small MLP shared by all (action, value) candidates scores each from its features, its
action's embedding, its grid position and the agent's state; the critic reads the state and a
pooled summary (see :mod:`learners.policies.sequential`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from envs.sequential import SequentialWorld
from envs.sequential_candidates import CANDIDATE_CHANNELS, observations
from learners.policies.sequential_rollout import MASKED_LOGIT

_NO_ACCEPTED = 10.0  # relational feature of a candidate when no candidate is accepted


_RELATIONAL = 4  # weightless relational features per candidate (see SequentialScorer._parts)


def mlp_layers(n_in: int, widths: tuple[int, ...], n_out: int | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for w in widths:
        layers += [nn.Linear(n_in, w), nn.ReLU()]
        n_in = w
    if n_out is not None:
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class SequentialScorer(nn.Module):
    """Actor (one logit per (action, value) candidate) and critic on ``SequentialEnv``'s
    observation with candidate features (see the module doc)."""

    def __init__(self, n_features: int, n_actions: int, grid_action: list[int], grid_position: list[float],
                 hidden: tuple[int, ...] = (64, 64), context_dim: int = 32, embed_dim: int = 8,
                 prior_scale: float = 0.0):
        super().__init__()
        self.n_context = n_features + n_actions + 1
        self.n_candidates = len(grid_action)
        self.register_buffer("grid_action", torch.as_tensor(grid_action, dtype=torch.long))
        self.register_buffer("grid_position", torch.as_tensor(grid_position, dtype=torch.float32))
        self.context = mlp_layers(self.n_context, (context_dim,), None)
        self.embed = nn.Embedding(n_actions, embed_dim)
        n_in = CANDIDATE_CHANNELS + _RELATIONAL + embed_dim + 1 + context_dim
        self.scorer = mlp_layers(n_in, hidden, 1)
        self.critic = mlp_layers(self.n_context + 2, hidden, None)
        self.latent_dim_pi, self.latent_dim_vf = self.n_candidates, hidden[-1]
        last = self.scorer[-1]
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        # a learned linear term on the relational features, added to the scorer's logit; with
        # prior_scale > 0 it starts as the estimated two-step lookahead (-prior_scale x the gap to
        # the cheapest pair-checked completion) and the network learns corrections (a residual policy)
        self.prior = nn.Parameter(torch.tensor([0.0] * (_RELATIONAL - 1) + [-float(prior_scale)]))

    def _parts(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ctx = obs[:, : self.n_context]
        cand = obs[:, self.n_context:].reshape(len(obs), self.n_candidates, CANDIDATE_CHANNELS)
        valid, logc, score, acc, has2, log2, chk = cand.unbind(-1)
        big = torch.tensor(1e4, dtype=obs.dtype)
        min_acc = torch.where(acc > 0.5, logc, big).min(1, keepdim=True).values
        has_acc = min_acc < big
        gap = torch.where(has_acc, (logc - min_acc).clamp(max=_NO_ACCEPTED), torch.full_like(logc, _NO_ACCEPTED))
        best = torch.where(valid > 0.5, score, -big).max(1, keepdim=True).values
        behind = torch.where(valid > 0.5, (best - score).clamp(max=_NO_ACCEPTED), torch.full_like(score, _NO_ACCEPTED))
        min2 = torch.where(has2 > 0.5, log2, big).min(1, keepdim=True).values
        gap2 = torch.where((has2 > 0.5) & (min2 < big), (log2 - min2).clamp(max=_NO_ACCEPTED),
                           torch.full_like(log2, _NO_ACCEPTED))
        min3 = torch.where(chk > 0.5, log2, big).min(1, keepdim=True).values
        gap3 = torch.where((chk > 0.5) & (min3 < big), (log2 - min3).clamp(max=_NO_ACCEPTED),
                           torch.full_like(log2, _NO_ACCEPTED))
        summary = torch.cat([has_acc.float(), torch.where(has_acc, min_acc, torch.zeros_like(min_acc))], 1)
        rel = torch.stack([gap, behind, gap2, gap3], -1)
        return ctx, torch.cat([cand, rel], -1), summary

    def forward_actor(self, obs: torch.Tensor) -> torch.Tensor:
        """One logit per candidate: ``scorer([candidate features, action embedding, grid position,
        state encoding])``, with the first layer split by input block (the same function as the
        concatenation, cheaper: the embedding and position part is computed once per candidate,
        the state part once per agent, only the 6 candidate features once per (agent, candidate))."""
        ctx, cand, _ = self._parts(obs)
        first = self.scorer[0]
        W = first.weight
        nc = cand.shape[-1]
        static = torch.cat([self.embed(self.grid_action), self.grid_position[:, None]], 1)
        ns = static.shape[1]
        per_k = static @ W[:, nc: nc + ns].T + first.bias  # (K, H)
        per_b = self.context(ctx) @ W[:, nc + ns:].T  # (B, H)
        if torch.is_grad_enabled():
            h = torch.relu(cand @ W[:, :nc].T + per_k[None] + per_b[:, None])
            return self.scorer[2:](h).squeeze(-1) + cand[..., -_RELATIONAL:] @ self.prior
        # inference: the same arithmetic in place (no (B, K, H) temporaries)
        h = cand @ W[:, :nc].T
        h += per_k[None]
        h += per_b[:, None]
        h.relu_()
        for layer in self.scorer[2:]:
            h = layer(h) if not isinstance(layer, nn.ReLU) else h.relu_()
        out = h.squeeze(-1)
        out += cand[..., -_RELATIONAL:] @ self.prior
        return out

    def forward_critic(self, obs: torch.Tensor) -> torch.Tensor:
        ctx, _, summary = self._parts(obs)
        return self.critic(torch.cat([ctx, summary], 1))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(obs), self.forward_critic(obs)


def net_chooser(world: SequentialWorld, net: SequentialScorer, max_steps: int) -> Any:
    def choose(X: np.ndarray, used: np.ndarray, steps: np.ndarray, cand: Any) -> tuple[np.ndarray, np.ndarray]:
        obs = torch.as_tensor(observations(world, X, used, steps, max_steps, cand))
        with torch.inference_mode():
            logits = net.forward_actor(obs)
        logits = torch.where(torch.as_tensor(cand.mask), logits, torch.tensor(MASKED_LOGIT))
        probs = torch.softmax(logits, 1)
        k = probs.argmax(1)
        return k.numpy(), probs[torch.arange(len(k)), k].double().numpy()
    return choose


def sb3_policy_class() -> type:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    class SequentialActorCriticPolicy(MaskableActorCriticPolicy):
        """MaskablePPO policy whose actor/critic are a :class:`SequentialScorer`."""

        def __init__(self, *args: Any, scorer_kwargs: dict[str, Any] | None = None, **kwargs: Any):
            self.scorer_kwargs = scorer_kwargs or {}
            super().__init__(*args, **kwargs)

        def _get_constructor_parameters(self) -> dict[str, Any]:
            return {**super()._get_constructor_parameters(), "scorer_kwargs": self.scorer_kwargs}

        def _build_mlp_extractor(self) -> None:
            self.mlp_extractor = SequentialScorer(**self.scorer_kwargs)

        def _build(self, lr_schedule: Any) -> None:
            super()._build(lr_schedule)
            self.action_net = nn.Identity()
            self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    return SequentialActorCriticPolicy
