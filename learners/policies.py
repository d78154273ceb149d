"""RL policies on the recourse MDP family: a policy is a generator (a greedy deterministic rollout).

The family is :class:`~envs.setcover_env.SetCoverEnv` over the training agents (``train.X`` and
their hidden ``train.groups``) of the world in ``FitContext.world``: each episode draws an agent,
an action adds capabilities at cost ``b_i * g_i(x)`` (order matters with consequential
discounts), and the episode ends when the classifier accepts. Methods (``method`` in a config's
``policies:``):

- ``maskable_ppo``: sb3-contrib MaskablePPO with the env's ``action_masks()``.
- ``dqn``: stable-baselines3 DQN. DQN cannot use masks while training: it learns to avoid invalid
  actions only from the env's ``invalid_action_penalty`` (an invalid action leaves the state
  unchanged, costs a step and is rewarded ``-penalty``). The served rollout masks anyway.
- ``bc``: behaviour cloning of the MaskablePPO policy network from exact labels, no RL. The
  label of an agent is its optimal recourse as an action sequence: without discounts the
  dataset's optimal set (unique, from the exact set cover) in canonical ascending order; with
  discounts (``world.order_matters``) the exact :class:`~solvers.ucs.UniformCostSearch`
  sequence, computed for at most ``bc_label_agents`` training agents (default 8000; about 20 ms
  each at 20 features and 100 actions: the bound keeps labelling to minutes; the rest are not
  cloned, RL fine-tuning still sees them).
  The loss is the cross-entropy of the masked action logits on every (state, next optimal
  action) pair along the label, trained directly on the sb3 policy's network, plus
  ``bc_value_coef`` times the squared error of the value head on the label's return-to-go (so
  that PPO fine-tuning starts with a fitted critic). A label often admits several optimal next
  actions: without discounts every remaining action of the optimal set, with discounts every
  action that starts a cheapest ordering of the label's remaining actions (all orderings are
  priced). ``bc_target="set"`` (default) maximises the probability of choosing any of them;
  ``"sequence"`` is the plain cross-entropy on the label's next action.
- ``bc_ppo``: ``bc``, then MaskablePPO fine-tuning from those weights (same network).

The three MaskablePPO methods are one class with different defaults: ``bc`` is
``total_timesteps=0``, ``maskable_ppo`` is ``bc_epochs=0``.

**Network.** The input is the env's observation ``(x, used)`` passed through
:class:`CapabilityFeatures` (``features``): per action, the share of the deficit it provides,
whether it provides all, its step cost at the current state, and (``"lookahead"``, default) the
cheapest completion with at most one more action, priced in order. These features have no
weights; they are computed from the world (saved with the policy). The head (``head``) is a
:class:`PerActionScorer` (default): one small MLP shared by all actions scores each action
from its features, a learned action embedding and the agent context; or a plain MLP over all
features (``"mlp"``; DQN's Q-network). With lookahead features the scorer's logits are a
residual on the greedy two-step lookahead (``lookahead_prior``, default): training starts from
that heuristic, and the held-out selection keeps it when learning does not beat it. A plain MLP on the raw observation (``features="raw",
head="mlp"``) is available; on the 20-feature benchmark it clones the exact labels far worse
(about 75% optimal after 80 BC epochs, against 98-99% for the default): the shared scorer
compares actions by their features instead of memorising one output unit per action.

**Model selection.** A share of the training agents (``val_fraction``, at most
``max_val_agents``; or the ``val`` split when given) is held out of the training family. After
every evaluation (``eval_freq`` steps; every BC epoch) the batched greedy rollout is run on all
of them and the weights with the best (validity, mean cost) are kept (``keep_best``); the
starting point of fine-tuning counts, so ``bc_ppo`` is never worse than its BC weights on those
agents. sb3's ``MaskableEvalCallback``/``EvalCallback`` (episodes on the held-out agents,
``evaluations.npz``, ``best_model.zip``) and ``CheckpointCallback`` write under
``ctx.run_dir``; sb3's logger writes ``progress.csv`` there.

**Prediction.** :meth:`PolicyGenerator.predict_sequences` rolls out every agent of a batch at
once in torch: one forward pass per step on the agents still rejected, masks and observations
computed for the whole batch, argmax of the masked action distribution (as sb3's
``deterministic=True``). An agent stops when the classifier accepts, when no valid action is
left, or after ``max_steps`` actions. With ``max_steps=None`` (the number of actions) a
rollout of an agent that has any recourse always ends accepted: every valid action adds a
capability, and while a needed capability is missing some unused allowed action provides it.
A rollout that ends without acceptance is reported as such (``accepted`` False, invalid in the
metrics), never completed silently. Confidence is the product of the chosen actions'
probabilities under the masked distribution (DQN: the softmax of the masked Q-values, a
Boltzmann pseudo-probability).

**Persistence.** ``save(dir)`` writes ``weights.pt`` (the state_dict of the serving network:
the actor (features + head), or DQN's Q-network, rebuilt from ``config.json`` and the world
without sb3 and loaded with ``weights_only=True``), ``world.json`` (``world.to_dict()``) and ``sb3_model.zip``, the full
sb3 model to resume training. **sb3 zips contain pickles: load them only from trusted files**
(:meth:`PolicyGenerator.load_sb3`); serving never reads them.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from data_gen.dataset import Split
from envs.capability import CapabilityWorld
from learners.base import FitContext, Generator, Prediction, register
from learners.torch_training import torch_threads

try:  # the "rl" extra; without it policies can still be loaded and served (weights.pt)
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
except ImportError:  # pragma: no cover
    MaskableActorCriticPolicy = None

ENV_ID = "recourse/SetCover-v0"
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
_MASKED = -1e8  # logit of a masked action (as sb3-contrib's MaskableCategorical)
_MAX_PERMUTED = 6  # optimal_first_actions: longer remainders are not permuted (6! = 720 orders)
_ROLLOUT_CHUNK = 2048  # agents per forward pass in a rollout step (bounds the per-action tensors)


# ---------------------------------------------------------------------------- hyperparameters
@dataclass
class PolicyParams:
    """Hyperparameters shared by every RL policy."""

    total_timesteps: int = 200_000  # environment steps of RL training (0: no RL)
    n_envs: int = 8  # parallel environments of the DummyVecEnv
    learning_rate: float = 3e-4  # Adam learning rate of the RL algorithm
    net_arch: tuple[int, ...] = (64, 64)  # hidden widths of the scorer (per_action) or MLP, and of the critic
    activation: str = "relu"  # hidden activation: "relu" or "tanh"
    features: str = "lookahead"  # network input: "raw" observation, CapabilityFeatures "capability" or "lookahead"
    head: str = "per_action"  # policy head: "per_action" (PerActionScorer, MaskablePPO only) or "mlp"
    lookahead_prior: bool = True  # per_action + lookahead: logits are a residual on the two-step lookahead
    gamma: float = 1.0  # discount of the RL return (1: the episode's raw total cost)
    reward_scale: float | None = None  # rewards are -cost / this; None: the mean action effort
    max_steps: int | None = None  # step budget per episode and per rollout; None: the number of actions
    eval_freq: int = 10_000  # environment steps between evaluations on held-out agents (0: none)
    n_eval_episodes: int = 100  # episodes of each sb3 EvalCallback evaluation
    checkpoint_freq: int = 50_000  # environment steps between sb3 checkpoints under run_dir (0: none)
    val_fraction: float = 0.05  # share of training agents held out for model selection (no val split)
    max_val_agents: int = 1000  # at most this many held-out agents
    keep_best: bool = True  # end with the weights best on the held-out agents (validity, mean cost)
    num_threads: int = 1  # torch intra-op threads in fit and predict (0: leave torch's setting; small nets: 1)

    def __post_init__(self) -> None:
        self.net_arch = tuple(int(h) for h in self.net_arch)  # JSON gives a list back
        if not self.net_arch or any(h < 1 for h in self.net_arch):
            raise ValueError(f"net_arch: expected positive layer widths, got {self.net_arch}")
        if self.features not in ("raw", "capability", "lookahead"):
            raise ValueError(f"features: expected 'raw', 'capability' or 'lookahead', got {self.features!r}")
        if self.head not in ("per_action", "mlp"):
            raise ValueError(f"head: expected 'per_action' or 'mlp', got {self.head!r}")
        if self.head == "per_action" and self.features == "raw":
            raise ValueError("head: 'per_action' needs features 'capability' or 'lookahead'")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        for name in ("total_timesteps", "eval_freq", "checkpoint_freq", "num_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        for name in ("n_envs", "n_eval_episodes", "max_val_agents"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.learning_rate:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma: must be in (0, 1], got {self.gamma}")
        if self.reward_scale is not None and not self.reward_scale > 0:
            raise ValueError(f"reward_scale: must be > 0 or None, got {self.reward_scale}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps: must be >= 1 or None, got {self.max_steps}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction: must be in (0, 1), got {self.val_fraction}")


@dataclass
class MaskablePPOParams(PolicyParams):
    """MaskablePPO with optional behaviour-cloning warm start (``bc_epochs`` > 0)."""

    learning_rate: float = 1e-3  # Adam learning rate of PPO
    n_steps: int = 256  # rollout steps per environment between PPO updates
    batch_size: int = 256  # PPO minibatch size
    n_epochs: int = 4  # PPO epochs per update
    gae_lambda: float = 0.95  # GAE lambda
    clip_range: float = 0.2  # PPO clipping
    ent_coef: float = 0.01  # entropy bonus
    vf_coef: float = 0.5  # value loss weight
    bc_epochs: int = 0  # behaviour-cloning epochs before RL (0: none)
    bc_learning_rate: float = 1e-3  # Adam learning rate of behaviour cloning
    bc_batch_size: int = 256  # behaviour-cloning minibatch of (state, next action) pairs
    bc_value_coef: float = 0.5  # weight of the value head's return-to-go regression in BC
    bc_label_agents: int = 8000  # with discounts: training agents labelled by uniform-cost search
    bc_target: str = "set"  # "set": any action starting a cheapest order of the label's rest; "sequence": the next

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("n_steps", "batch_size", "n_epochs", "bc_batch_size", "bc_label_agents"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.bc_target not in ("set", "sequence"):
            raise ValueError(f"bc_target: expected 'set' or 'sequence', got {self.bc_target!r}")
        if self.bc_epochs < 0 or self.bc_value_coef < 0:
            raise ValueError("bc_epochs, bc_value_coef: must be >= 0")
        if self.bc_epochs == 0 and self.total_timesteps == 0:
            raise ValueError("total_timesteps, bc_epochs: both 0, nothing would be trained")


@dataclass
class BCParams(MaskablePPOParams):
    """Behaviour cloning only (the MaskablePPO network, no RL)."""

    total_timesteps: int = 0  # environment steps of RL training (0: BC only)
    bc_epochs: int = 30  # behaviour-cloning epochs


@dataclass
class BCPPOParams(MaskablePPOParams):
    """Behaviour cloning, then MaskablePPO fine-tuning from the cloned weights."""

    total_timesteps: int = 50_000  # environment steps of PPO fine-tuning
    bc_epochs: int = 30  # behaviour-cloning epochs
    learning_rate: float = 1e-4  # small: fine-tuning must not undo the cloned policy
    ent_coef: float = 0.0  # no entropy bonus: the cloned policy is already near-deterministic
    clip_range: float = 0.1  # conservative updates


@dataclass
class DQNParams(PolicyParams):
    """DQN (no action masks while training; see the module docstring)."""

    head: str = "mlp"  # policy head: DQN's Q-network is an MLP ("mlp" only)
    buffer_size: int = 100_000  # replay buffer size
    learning_starts: int = 2_000  # steps of random play before learning
    batch_size: int = 128  # replay minibatch
    train_freq: int = 4  # environment steps (per env) between gradient steps
    target_update_interval: int = 2_000  # steps between target-network updates
    exploration_fraction: float = 0.3  # share of training over which epsilon decays
    exploration_final_eps: float = 0.05  # final epsilon
    invalid_action_penalty: float | None = None  # env penalty of a masked action; None: the largest effort

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.total_timesteps < 1:
            raise ValueError(f"total_timesteps: DQN needs > 0 steps, got {self.total_timesteps}")
        if self.head != "mlp":
            raise ValueError(f"head: DQN's Q-network is an MLP; expected 'mlp', got {self.head!r}")
        for name in ("buffer_size", "batch_size", "train_freq", "target_update_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")


# ---------------------------------------------------------------------------- serving network
class CapabilityFeatures(nn.Module):
    """Observation features that give the policy the world's structure (no learned weights).

    From SetCoverEnv's observation ``(x, used)`` it computes, for every action ``a``: the share
    of the agent's deficit it provides, whether it provides all of it, and its step cost
    ``c_a(x) = b_a * g_a(x) / reward_scale`` (the consequence graph of the capability world is
    linear in ``x``: ``tau_kh = 1 - (1 - f_kh) x_k``, averaged as CSCF Eq. 1 and 2). With
    ``lookahead`` also a two-step completion: whether ``a`` followed by at most one more action
    gets the agent accepted, the cheapest such cost ``c_a(x) + min_b c_b(x | a)`` priced in
    order, and its gap to the cheapest over all actions (0 where no completion exists).
    Output ``[x, used, share, full, cost (, done2, cost2, gap2)]``, each block ``A`` wide.
    Thresholds of a world with several hidden groups are averaged and every action is
    considered (the group is not observed). Also an sb3 features extractor: it takes the
    observation space first and exposes ``features_dim``.
    """

    _CHUNK = 512  # rows per lookahead block (memory: CHUNK x A x A floats)

    def __init__(self, observation_space: Any = None, world: dict[str, Any] | None = None,
                 reward_scale: float = 1.0, lookahead: bool = False):
        super().__init__()
        if world is None:
            raise ValueError("world: CapabilityFeatures needs the world (world.to_dict())")
        w = CapabilityWorld.from_dict(world)
        n, A = w.n_features, w.n_actions
        # step costs c(x) = b * (1 - x @ M): exact for the capability graph (binary tau).
        M = np.zeros((n, A))
        if w.discount_edges:
            indeg = np.bincount([int(h) for _, h, _ in w.discount_edges], minlength=n).astype(float)
            W = np.zeros((n, n))
            for k, h, f in w.discount_edges:
                W[int(k), int(h)] += (1.0 - float(f)) / indeg[int(h)]
            influenced = w.actions & (indeg > 0)
            counts = influenced.sum(1)
            avg = np.where(counts[:, None] > 0, influenced / np.maximum(counts, 1)[:, None], 0.0)  # (A, n)
            M = W @ avg.T
        self.n_features, self.n_actions, self.lookahead = n, A, bool(lookahead)
        self.discounted = bool(w.discount_edges)
        self.features_dim = n + A * (7 if lookahead else 4)
        t = torch.as_tensor(w.classifier.thresholds, dtype=torch.float32).mean(0)
        self.register_buffer("need", t, persistent=False)
        self.register_buffer("acts", torch.as_tensor(w.actions, dtype=torch.float32), persistent=False)
        self.register_buffer("b", torch.as_tensor(w.costs / reward_scale, dtype=torch.float32), persistent=False)
        self.register_buffer("m", torch.as_tensor(M * w.costs / reward_scale, dtype=torch.float32), persistent=False)

    def _two_step(self, x: torch.Tensor, deficit: torch.Tensor, cost: torch.Tensor, full: torch.Tensor
                  ) -> torch.Tensor:
        # uncovered[r, a, b]: needed capabilities still missing after a then b
        rest = deficit[:, None, :] * (1.0 - self.acts)[None]  # (R, A, n)
        uncovered = rest @ (1.0 - self.acts).T  # (R, A, A)
        if self.discounted:  # c_b(x | a) = b - (x + a (1 - x)) @ m, (R, A, A)
            gained = self.acts[None] * (1.0 - x[:, None, :])
            second = (self.b - x @ self.m)[:, None, :] - gained @ self.m
        else:
            second = self.b.expand(len(x), self.n_actions, self.n_actions)
        second = torch.where(uncovered < 0.5, second, torch.tensor(torch.inf))
        best = cost + torch.where(full > 0.5, torch.zeros_like(cost), second.min(2).values)
        done = torch.isfinite(best)
        gap = best - best.min(1, keepdim=True).values
        zero = torch.zeros_like(best)
        return torch.cat([done.float(), torch.where(done, best, zero), torch.where(done, gap, zero)], 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs[:, : self.n_features]
        deficit = self.need * (1.0 - x)
        size = deficit.sum(1, keepdim=True)
        cover = deficit @ self.acts.T
        share = cover / size.clamp(min=1e-6)
        full = (cover >= size - 1e-6).float()
        cost = self.b - x @ self.m
        parts = [obs, share, full, cost]
        if self.lookahead:
            parts.append(torch.cat([self._two_step(x[i : i + self._CHUNK], deficit[i : i + self._CHUNK],
                                                   cost[i : i + self._CHUNK], full[i : i + self._CHUNK])
                                    for i in range(0, len(x), self._CHUNK)]))
        return torch.cat(parts, 1)


def mlp(n_in: int, widths: tuple[int, ...] | list[int], n_out: int | None, activation: str) -> nn.Sequential:
    """Linear -> activation per hidden width (sb3's layout), then a linear output when ``n_out``."""
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(n_in, int(width)), ACTIVATIONS[activation]()]
        n_in = int(width)
    if n_out is not None:
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class PerActionScorer(nn.Module):
    """Policy head that scores every action with one shared MLP (weights shared across actions).

    Input: :class:`CapabilityFeatures` output ``[x, then C blocks A wide]``. The token of action
    ``a`` is its ``C`` channels, a learned embedding of ``a`` (id-specific preferences), and the
    agent context (``x`` and the mean and min of every channel over actions). Output: ``(B, A)``
    logits. Sharing the scorer across actions is the inductive bias that lets a policy learned
    from ~10^4 agents compare actions by their features rather than memorize 100 output units.

    With the lookahead channels (``C = 7``) and ``prior`` the logits are a residual on a prior: the MLP's
    output minus ``k * gap2`` (``k`` learned, starting at ``PRIOR_SCALE``; an action with no
    two-step completion counts a gap of one mean action effort). With the MLP's last layer
    initialised near zero, training starts from the greedy two-step lookahead and learns where
    and how to depart from it (residual policy learning).
    """

    PRIOR_SCALE = 50.0  # initial k: a gap of 2% of a mean effort is a logit difference of 1
    _DONE2, _GAP2 = 4, 6  # lookahead channels (CapabilityFeatures order)

    def __init__(self, n_features: int, n_actions: int, channels: int, widths: tuple[int, ...] | list[int],
                 activation: str, embedding: int = 16, prior: bool = True):
        super().__init__()
        self.n_features, self.n_actions, self.channels = n_features, n_actions, channels
        self.embedding = nn.Parameter(0.1 * torch.randn(n_actions, embedding))
        self.mlp = mlp(channels + embedding + n_features + 2 * channels, widths, 1, activation)
        self.prior_log_scale = (nn.Parameter(torch.tensor(float(np.log(self.PRIOR_SCALE))))
                                if prior and channels == 7 else None)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        B, n, A, C = len(f), self.n_features, self.n_actions, self.channels
        tok = f[:, n:].reshape(B, C, A).transpose(1, 2)  # (B, A, C)
        ctx = torch.cat([f[:, :n], tok.mean(1), tok.min(1).values], 1)
        # The first layer on [token, embedding, context], computed by blocks: the embedding part
        # once per action and the context part once per agent (same result, far fewer flops).
        first = self.mlp[0]
        w_tok, w_emb, w_ctx = first.weight.split([C, self.embedding.shape[1], ctx.shape[1]], dim=1)
        h = tok @ w_tok.T + (self.embedding @ w_emb.T)[None] + (ctx @ w_ctx.T + first.bias)[:, None]
        out = self.mlp[1:](h).squeeze(2)
        if self.prior_log_scale is None:
            return out
        gap = torch.where(tok[..., self._DONE2] > 0.5, tok[..., self._GAP2], torch.ones_like(out))
        return out - self.prior_log_scale.exp() * gap


class ActionScorerExtractor(nn.Module):
    """sb3 ``mlp_extractor`` of :class:`ActionScoringPolicy`: the actor is a
    :class:`PerActionScorer` (its latent *is* the logits), the critic an MLP on the features."""

    def __init__(self, features: CapabilityFeatures, pi: list[int], vf: list[int], activation: str,
                 prior: bool = True):
        super().__init__()
        channels = (features.features_dim - features.n_features) // features.n_actions
        self.actor = PerActionScorer(features.n_features, features.n_actions, channels, pi, activation,
                                     prior=prior)
        self.critic = mlp(features.features_dim, vf, None, activation)
        self.latent_dim_pi = features.n_actions
        self.latent_dim_vf = vf[-1] if vf else features.features_dim

    def forward(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(f), self.critic(f)

    def forward_actor(self, f: torch.Tensor) -> torch.Tensor:
        return self.actor(f)

    def forward_critic(self, f: torch.Tensor) -> torch.Tensor:
        return self.critic(f)


if MaskableActorCriticPolicy is not None:

    class ActionScoringPolicy(MaskableActorCriticPolicy):
        """MaskablePPO policy whose actor is a :class:`PerActionScorer` (needs CapabilityFeatures)."""

        def __init__(self, *args: Any, lookahead_prior: bool = True, **kwargs: Any):
            self.lookahead_prior = lookahead_prior  # read by _build_mlp_extractor during __init__
            super().__init__(*args, **kwargs)

        def _get_constructor_parameters(self) -> dict[str, Any]:
            return {**super()._get_constructor_parameters(), "lookahead_prior": self.lookahead_prior}

        def _build_mlp_extractor(self) -> None:
            if not isinstance(self.features_extractor, CapabilityFeatures):
                raise ValueError("head: 'per_action' needs features 'capability' or 'lookahead'")
            arch = self.net_arch if isinstance(self.net_arch, dict) else {"pi": self.net_arch, "vf": self.net_arch}
            act = next(k for k, v in ACTIVATIONS.items() if v is self.activation_fn)
            self.mlp_extractor = ActionScorerExtractor(self.features_extractor, list(arch["pi"]), list(arch["vf"]), act,
                                                       prior=self.lookahead_prior)

        def _build(self, lr_schedule: Any) -> None:
            super()._build(lr_schedule)
            self.action_net = nn.Identity()  # the scorer's output is already one logit per action
            last = self.mlp_extractor.actor.mlp[-1]
            nn.init.orthogonal_(last.weight, gain=0.01)  # small initial logits, as sb3's action_net
            nn.init.zeros_(last.bias)
            self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


def build_net(cfg: dict[str, Any], world: CapabilityWorld) -> nn.Sequential:
    """The serving network ``Sequential(features, head)``: features ``cfg["features"]`` ("raw"
    observation, or :class:`CapabilityFeatures` "capability"/"lookahead"), head ``cfg["head"]``
    ("mlp": Linear -> activation per hidden width, then a linear layer with one score per
    action; "per_action": :class:`PerActionScorer`). Scores are logits (Q-values for DQN)."""
    if cfg["features"] in ("capability", "lookahead"):
        features: nn.Module = CapabilityFeatures(None, world.to_dict(), cfg["reward_scale"],
                                                 cfg["features"] == "lookahead")
        n_in = features.features_dim
    elif cfg["features"] == "raw":
        features, n_in = nn.Flatten(), cfg["obs_dim"]
    else:
        raise ValueError(f"features: expected 'raw', 'capability' or 'lookahead', got {cfg['features']!r}")
    if cfg["head"] == "per_action":
        if not isinstance(features, CapabilityFeatures):
            raise ValueError("head: 'per_action' needs features 'capability' or 'lookahead'")
        channels = (n_in - features.n_features) // features.n_actions
        head: nn.Module = PerActionScorer(features.n_features, features.n_actions, channels, cfg["net_arch"],
                                          cfg["activation"], prior=cfg.get("lookahead_prior", True))
    else:
        head = mlp(n_in, cfg["net_arch"], cfg["n_actions"], cfg["activation"])
    return nn.Sequential(features, head)


def export_net(model: Any, net_cfg: dict[str, Any], world: CapabilityWorld) -> nn.Sequential:
    """Copy an sb3 model's action path into a plain :func:`build_net` network (no sb3 needed to serve)."""
    net = build_net(net_cfg, world)
    policy = model.policy
    if net_cfg["head"] == "per_action":
        net[1].load_state_dict(policy.mlp_extractor.actor.state_dict())
        return net.eval()
    if hasattr(policy, "q_net"):  # DQN: features extractor -> q_net
        body = list(policy.q_net.q_net)
    else:  # actor-critic: features extractor -> mlp_extractor.policy_net -> action_net
        body = [*policy.mlp_extractor.policy_net, policy.action_net]
    src = [m for m in body if isinstance(m, nn.Linear)]
    dst = [m for m in net[1] if isinstance(m, nn.Linear)]
    if len(src) != len(dst):
        raise RuntimeError(f"export: sb3 network has {len(src)} linear layers, expected {len(dst)}")
    with torch.no_grad():
        for a, b in zip(src, dst, strict=True):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
    return net.eval()


# ---------------------------------------------------------------------------- batched rollout
@dataclass
class PolicyRollout:
    """Greedy rollouts of a batch of agents."""

    sequences: np.ndarray  # (B, L) action ids in the order taken, -1 padded
    confidence: np.ndarray  # (B,) product of the chosen actions' probabilities
    accepted: np.ndarray  # (B,) bool: the classifier accepts the final state
    steps: np.ndarray  # (B,) actions taken
    cost: np.ndarray  # (B,) cost of the sequence priced in its order (consequential discounts)
    stuck: np.ndarray  # (B,) bool: stopped because no valid action was left (no recourse)


def _masks(x: torch.Tensor, used: torch.Tensor, allowed: torch.Tensor, acts_f: torch.Tensor) -> torch.Tensor:
    """Valid actions (as SetCoverEnv.action_masks) for a batch: allowed, unused, adding a capability."""
    return allowed & ~used & (((~x).float() @ acts_f.T) > 0)


@torch.inference_mode()
def greedy_rollout(world: CapabilityWorld, net: nn.Module, X: Any, groups: Any = None,
                   max_steps: int | None = None) -> PolicyRollout:
    """Roll out ``net`` (observation -> action scores) greedily on every agent of a batch at once.

    The observation is SetCoverEnv's (capabilities, then the used-action indicator); masked
    actions get a logit of -1e8 and the chosen action is the argmax of the softmax, as
    sb3-contrib's deterministic MaskablePPO.predict.
    """
    X0, g = world.validate_agents(X, groups, name="X")
    B, n, A = len(X0), world.n_features, world.n_actions
    steps_max = A if max_steps is None else int(max_steps)
    acts = torch.as_tensor(world.actions)
    acts_f = acts.float()
    x = torch.as_tensor(X0.astype(bool))
    need = torch.as_tensor(np.broadcast_to(world.thresholds_of(g), (B, n)).copy())
    allowed = torch.as_tensor(np.broadcast_to(world.allowed(g), (B, A)).copy())
    used = torch.zeros((B, A), dtype=torch.bool)
    seq = torch.full((B, steps_max), -1, dtype=torch.long)
    conf = torch.ones(B, dtype=torch.float64)
    stuck = torch.zeros(B, dtype=torch.bool)
    active = (need & ~x).any(1)
    width = 0
    for t in range(steps_max):
        idx = active.nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        xs, us = x[idx], used[idx]
        mask = _masks(xs, us, allowed[idx], acts_f)
        none = ~mask.any(1)
        if none.any():  # no valid action left while rejected: no recourse from here
            stuck[idx[none]] = True
            active[idx[none]] = False
            keep = ~none
            idx, xs, us, mask = idx[keep], xs[keep], us[keep], mask[keep]
            if idx.numel() == 0:
                break
        obs = torch.cat([xs, us], 1).float()
        scores = torch.cat([net(obs[i : i + _ROLLOUT_CHUNK]) for i in range(0, len(obs), _ROLLOUT_CHUNK)])
        logits = torch.where(mask, scores.float(), torch.tensor(_MASKED))
        probs = torch.softmax(logits - logits.logsumexp(1, keepdim=True), 1)
        a = probs.argmax(1)
        conf[idx] *= probs[torch.arange(len(a)), a].double()
        xs = xs | acts[a]
        x[idx] = xs
        used[idx, a] = True
        seq[idx, t] = a
        width = t + 1
        active[idx] = (need[idx] & ~xs).any(1)
    S = seq[:, : max(width, 1)].numpy()
    _, cost, valid = world.rollout(X0, S, g)
    return PolicyRollout(S, conf.numpy(), valid, (S >= 0).sum(1), cost, stuck.numpy())


# ---------------------------------------------------------------------------- expert labels
def expert_sequences(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, sets: np.ndarray,
                     limit: int, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Optimal action sequences of agents, ``(rows, sequences)``: which agents got one, and the
    sequences (-1 padded). Without discounts, the given optimal ``sets`` in canonical (ascending)
    order for every agent; with discounts, the exact uniform-cost search sequence for the first
    ``limit`` agents (the others are not labelled)."""
    if not world.order_matters:
        S = np.sort(np.where(sets < 0, np.iinfo(np.int64).max, sets), axis=1)
        S[S == np.iinfo(np.int64).max] = -1
        return np.arange(len(X)), S.astype(np.int64)
    from tqdm.auto import tqdm

    from solvers.ucs import UniformCostSearch

    ucs = UniformCostSearch()
    rows, seqs = [], []
    for i in tqdm(range(min(limit, len(X))), desc="UCS labels", disable=not progress, leave=False):
        r = ucs.solve(world, X[i], None if groups is None else int(groups[i]))[0]
        if r.valid:
            rows.append(i)
            seqs.append(r.action_ids)
    width = max([len(s) for s in seqs], default=1) or 1
    S = np.full((len(seqs), width), -1, dtype=np.int64)
    for k, s in enumerate(seqs):
        S[k, : len(s)] = s
    return np.asarray(rows, dtype=np.int64), S


def optimal_first_actions(world: CapabilityWorld, states: np.ndarray, groups: np.ndarray | None,
                          rest: np.ndarray) -> np.ndarray:
    """For each state and set of actions still to take (``rest``, (P, A) bool), which actions
    start a cheapest ordering of that set from that state (every permutation priced in batch;
    sets of more than ``_MAX_PERMUTED`` actions: none marked)."""
    out = np.zeros_like(rest, dtype=bool)
    sizes = rest.sum(1)
    for m in np.unique(sizes):
        rows = np.flatnonzero(sizes == m)
        if m == 0 or m > _MAX_PERMUTED:
            continue
        R = np.nonzero(rest[rows])[1].reshape(len(rows), m)
        g = None if groups is None else groups[rows]
        perms = list(itertools.permutations(range(int(m))))
        cost = np.stack([np.where(ok, c, np.inf) for _, c, ok in
                         (world.rollout(states[rows], R[:, list(p)], g) for p in perms)])  # (perms, rows)
        best = cost.min(0)
        for p, c in zip(perms, cost, strict=True):
            tie = c <= best * (1.0 + 1e-9) + 1e-9
            out[rows[tie], R[tie, p[0]]] = True
    return out


def expert_pairs(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, sequences: np.ndarray,
                 gamma: float, reward_scale: float) -> dict[str, torch.Tensor]:
    """(observation, mask, next action, optimal next actions, return-to-go) for every step of
    every label sequence.

    ``optimal_next`` (pairs, A) marks every action that starts a cheapest ordering of the
    label's remaining actions (the label's next action always does): without discounts every
    remaining action, with discounts those whose best ordering of the rest ties with the label.
    The return-to-go is the discounted sum of ``-step cost / reward_scale`` from that state on,
    priced in order (the value the critic should predict under the expert)."""
    B, L = sequences.shape
    x = np.atleast_2d(X).astype(bool).copy()
    allowed = np.broadcast_to(world.allowed(groups) if groups is not None else world.allowed(np.zeros(B, int)),
                              (B, world.n_actions))
    used = np.zeros((B, world.n_actions), dtype=bool)
    rows = np.arange(B)
    obs, masks, acts, rest, costs, live = [], [], [], [], np.zeros((B, L)), np.zeros((B, L), dtype=bool)
    remaining = np.zeros((B, world.n_actions), dtype=bool)
    for k in range(L):
        remaining[rows[sequences[:, k] >= 0], sequences[sequences[:, k] >= 0, k]] = True
    for k in range(L):
        a = sequences[:, k]
        act = a >= 0
        ai = np.maximum(a, 0)
        mask = allowed & ~used & ((~x).astype(np.float32) @ world.actions.T.astype(np.float32) > 0)
        ok = act & mask[rows, ai]
        costs[:, k] = np.where(act, world.step_costs(x)[rows, ai], 0.0)
        live[:, k] = ok
        obs.append(np.concatenate([x, used], 1)[ok])
        masks.append(mask[ok])
        acts.append(a[ok])
        rest.append(remaining[ok])
        x[act] |= world.actions[ai[act]]
        used[rows[act], ai[act]] = True
        remaining[rows[act], ai[act]] = False
    ret = np.zeros((B, L))
    run = np.zeros(B)
    for k in range(L - 1, -1, -1):
        run = -costs[:, k] / reward_scale + gamma * run
        ret[:, k] = run
    obs_all, action = np.concatenate(obs), np.concatenate(acts)
    pair_groups = None if groups is None else np.concatenate([groups[live[:, k]] for k in range(L)])
    best_next = optimal_first_actions(world, obs_all[:, : world.n_features], pair_groups, np.concatenate(rest))
    best_next[np.arange(len(action)), action] = True
    return {"obs": torch.as_tensor(obs_all, dtype=torch.float32),
            "mask": torch.as_tensor(np.concatenate(masks)),
            "action": torch.as_tensor(action, dtype=torch.long),
            "optimal_next": torch.as_tensor(best_next),
            "ret": torch.as_tensor(ret.T[live.T], dtype=torch.float32)}


# ---------------------------------------------------------------------------- model selection
class HeldOut:
    """Greedy rollouts on the held-out agents; remembers the best weights by (validity, -mean cost)."""

    def __init__(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, net_cfg: dict[str, Any],
                 max_steps: int | None):
        self.world, self.X, self.groups, self.net_cfg, self.max_steps = world, X, groups, net_cfg, max_steps
        self.history: list[dict[str, Any]] = []
        self.best_score: tuple[float, float] | None = None
        self.best_state: dict[str, torch.Tensor] | None = None

    def evaluate(self, model: Any, step: int, phase: str) -> dict[str, Any]:
        r = greedy_rollout(self.world, export_net(model, self.net_cfg, self.world), self.X, self.groups, self.max_steps)
        rec = {"phase": phase, "step": int(step), "validity": float(r.accepted.mean()),
               "mean_cost": float(r.cost[r.accepted].mean()) if r.accepted.any() else float("nan"),
               "mean_steps": float(r.steps.mean())}
        score = (rec["validity"], -rec["mean_cost"] if r.accepted.any() else -np.inf)
        rec["best"] = self.best_score is None or score >= self.best_score  # ties: the later weights
        if rec["best"]:
            self.best_score = score
            self.best_state = copy.deepcopy(model.policy.state_dict())
        self.history.append(rec)
        return rec


def _heldout_callback(heldout: HeldOut) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class HeldOutRolloutCallback(BaseCallback):
        """Runs after each sb3 evaluation: batched greedy rollout on every held-out agent."""

        def _on_step(self) -> bool:
            rec = heldout.evaluate(self.model, self.num_timesteps, "rl")
            for k in ("validity", "mean_cost", "mean_steps"):
                self.logger.record(f"heldout/{k}", rec[k])
            return True

    return HeldOutRolloutCallback()


# ---------------------------------------------------------------------------- generators
class PolicyGenerator(Generator):
    """A policy trained in SetCoverEnv and served as a greedy batched rollout (see the module doc)."""

    params: PolicyParams
    output: ClassVar[str] = "logits"  # what the serving network outputs: "logits" or "q_values"
    masked_training: ClassVar[bool] = True  # whether the algorithm sees the action masks while training

    @abstractmethod
    def _algorithm(self) -> type:
        """The sb3 algorithm class."""

    @abstractmethod
    def _algorithm_kwargs(self) -> dict[str, Any]:
        """Its constructor arguments from ``self.params``."""

    # ------------------------------------------------------------------ training
    def _policy_kwargs(self) -> dict[str, Any]:
        """sb3 policy arguments shared by the algorithms: activation and features extractor."""
        kw: dict[str, Any] = {"activation_fn": ACTIVATIONS[self.params.activation]}
        if self.params.features != "raw":
            kw["features_extractor_class"] = CapabilityFeatures
            kw["features_extractor_kwargs"] = {"world": self.world_.to_dict(), "reward_scale": self.reward_scale_,
                                               "lookahead": self.params.features == "lookahead"}
        return kw

    def _env_kwargs(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None) -> dict[str, Any]:
        kw: dict[str, Any] = {"world": world, "agents": X, "groups": groups, "max_steps": self.params.max_steps,
                              "reward_scale": self.reward_scale_, "render_mode": None}
        if isinstance(self.params, DQNParams):
            kw["invalid_action_penalty"] = self.params.invalid_action_penalty
        return kw

    def _split(self, train: Split, val: Split | None, world: CapabilityWorld, seed: int
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]:
        """Training family, held-out agents and the training rows (into ``train``) kept."""
        grouped = world.n_groups > 1
        X, g = world.validate_agents(train.X, train.groups if grouped else None, name="train.X")
        rows = np.flatnonzero(~world.accepts(X, g))  # an accepted agent needs no recourse
        if len(rows) == 0:
            raise ValueError("train: no agent is rejected by the classifier; nothing to learn")
        if val is not None and len(val):
            Xv, gv = world.validate_agents(val.X, val.groups if grouped else None, name="val.X")
            keep = ~world.accepts(Xv, gv)
            Xv, gv = Xv[keep], None if gv is None else gv[keep]
        else:
            if len(rows) < 2:
                raise ValueError(f"train: need at least 2 rejected agents to hold some out, got {len(rows)}")
            perm = np.random.default_rng(seed).permutation(rows)
            n_val = min(self.params.max_val_agents, len(rows) - 1, max(1, round(self.params.val_fraction * len(rows))))
            held, rows = np.sort(perm[:n_val]), np.sort(perm[n_val:])
            Xv, gv = X[held], None if g is None else g[held]
        return X[rows], None if g is None else g[rows], Xv, gv, rows

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> PolicyGenerator:
        from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.logger import configure
        from stable_baselines3.common.utils import set_random_seed
        from stable_baselines3.common.vec_env import DummyVecEnv

        import envs  # noqa: F401  (registers recourse/SetCover-v0)

        world = ctx.world
        if not isinstance(world, CapabilityWorld):
            raise ValueError(f"ctx.world: {self.method} acts in the world; build the context with "
                             "FitContext.from_world(world, ...)")
        p = self.params
        t0 = time.perf_counter()
        with torch_threads(p.num_threads):
            self.world_ = world
            self.reward_scale_ = float(np.mean(world.costs)) if p.reward_scale is None else float(p.reward_scale)
            Xt, gt, Xv, gv, rows = self._split(train, val, world, ctx.seed)
            self.net_cfg_ = {"obs_dim": world.n_features + world.n_actions, "n_actions": world.n_actions,
                             "features": p.features, "head": p.head, "lookahead_prior": p.lookahead_prior,
                             "reward_scale": self.reward_scale_,
                             "net_arch": list(p.net_arch), "activation": p.activation, "output": self.output}
            set_random_seed(ctx.seed)
            env = make_vec_env(ENV_ID, n_envs=p.n_envs, seed=ctx.seed, vec_env_cls=DummyVecEnv,
                               env_kwargs=self._env_kwargs(world, Xt, gt))
            policy_class = ActionScoringPolicy if p.head == "per_action" else "MlpPolicy"
            model = self._algorithm()(policy_class, env, seed=ctx.seed, device="cpu", verbose=0,
                                      **self._algorithm_kwargs())
            run_dir = Path(ctx.run_dir) if ctx.run_dir is not None else None
            if run_dir is not None:
                run_dir.mkdir(parents=True, exist_ok=True)
                model.set_logger(configure(str(run_dir / "logs"), ["csv"]))
            heldout = HeldOut(world, Xv, gv, self.net_cfg_, p.max_steps)
            info: dict[str, Any] = {"train_agents": int(len(Xt)), "heldout_agents": int(len(Xv)),
                                    "reward_scale": self.reward_scale_}
            bc_epochs = getattr(p, "bc_epochs", 0)
            if bc_epochs:
                info["bc"] = self._behaviour_clone(model, world, Xt, gt, train.sets[rows], heldout, ctx)
            if p.total_timesteps:
                heldout.evaluate(model, 0, "start")
                callbacks = []
                if p.eval_freq:
                    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=ctx.seed + 10_000, vec_env_cls=DummyVecEnv,
                                            env_kwargs=self._env_kwargs(world, Xv, gv))
                    callbacks.append(self._eval_callback(eval_env, run_dir, _heldout_callback(heldout)))
                if p.checkpoint_freq and run_dir is not None:
                    callbacks.append(CheckpointCallback(max(p.checkpoint_freq // p.n_envs, 1),
                                                        str(run_dir / "checkpoints"), name_prefix=self.method))
                t1 = time.perf_counter()
                model.learn(p.total_timesteps, callback=CallbackList(callbacks))
                info["rl_seconds"] = round(time.perf_counter() - t1, 3)
                heldout.evaluate(model, model.num_timesteps, "end")
            if p.keep_best and heldout.best_state is not None and not heldout.history[-1]["best"]:
                model.policy.load_state_dict(heldout.best_state)
                info["kept"] = next(r for r in reversed(heldout.history) if r["best"])
            info["heldout"] = heldout.history
            info["fit_seconds"] = round(time.perf_counter() - t0, 3)
            self.model_ = model
            self.net_ = export_net(model, self.net_cfg_, world)
            self.fit_info_ = info
            self._sb3_source: Path | None = None
            env.close()
        return self

    def _eval_callback(self, eval_env: Any, run_dir: Path | None, after: Any) -> Any:
        from stable_baselines3.common.callbacks import EvalCallback

        kw = {"n_eval_episodes": self.params.n_eval_episodes, "eval_freq": max(self.params.eval_freq // self.params.n_envs, 1),
              "deterministic": True, "callback_after_eval": after, "verbose": 0,
              "log_path": None if run_dir is None else str(run_dir / "eval"),
              "best_model_save_path": None if run_dir is None else str(run_dir / "eval")}
        if self.masked_training:
            from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

            return MaskableEvalCallback(eval_env, **kw)
        return EvalCallback(eval_env, **kw)

    def _behaviour_clone(self, model: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None,
                         sets: np.ndarray, heldout: HeldOut, ctx: FitContext) -> dict[str, Any]:
        raise ValueError(f"{self.method}: behaviour cloning needs the MaskablePPO network")

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "net_"):
            raise RuntimeError(f"{self.method}: not fitted; call fit() or load() first")

    def predict_sequences(self, X: Any, groups: Any = None) -> PolicyRollout:
        """Greedy batched rollout: the ordered action sequence of every agent, with its cost,
        acceptance and confidence (``groups``: each agent's hidden group, in grouped worlds)."""
        self._check_fitted()
        with torch_threads(self.params.num_threads):
            return greedy_rollout(self.world_, self.net_, X, groups, self.params.max_steps)

    def predict(self, X: Any, groups: Any = None) -> Prediction:
        """``sets`` holds the actions in the order taken (-1 padded); metrics compare them as sets."""
        r = self.predict_sequences(X, groups)
        return Prediction(r.sequences, r.confidence)

    # ------------------------------------------------------------------ persistence
    def _save_state(self, path: Path) -> dict[str, Any]:
        self._check_fitted()
        torch.save(self.net_.state_dict(), path / "weights.pt")
        (path / "world.json").write_text(json.dumps(self.world_.to_dict()))
        zip_path = path / "sb3_model.zip"
        if getattr(self, "model_", None) is not None:
            self.model_.save(zip_path)
        elif self._sb3_source is not None and self._sb3_source.exists() and self._sb3_source != zip_path:
            zip_path.write_bytes(self._sb3_source.read_bytes())
        return {"net": self.net_cfg_, "world_fingerprint": self.world_.fingerprint(),
                "reward_scale": self.reward_scale_, "fit": self.fit_info_}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.world_ = CapabilityWorld.from_dict(json.loads((path / "world.json").read_text()))
        if self.world_.fingerprint() != meta["world_fingerprint"]:
            raise ValueError(f"{path / 'world.json'}: does not match the saved world fingerprint")
        self.net_cfg_, self.reward_scale_, self.fit_info_ = meta["net"], meta["reward_scale"], meta["fit"]
        self.net_ = build_net(self.net_cfg_, self.world_)
        self.net_.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        self.net_.eval()
        self.model_ = None
        self._sb3_source = path / "sb3_model.zip"

    def load_sb3(self, path: str | Path | None = None, env: Any = None) -> Any:
        """Load the full sb3 model (``sb3_model.zip``) to resume training, e.g.
        ``policy.load_sb3(run).learn(10_000)`` then :meth:`sync` to refresh the serving network.

        **The zip holds pickles: only load files you trust** (serving uses ``weights.pt``)."""
        self._check_fitted()
        src = Path(path) / "sb3_model.zip" if path is not None else self._sb3_source
        if src is None or not src.exists():
            raise FileNotFoundError(f"{self.method}: no sb3_model.zip at {src}")
        self.model_ = self._algorithm().load(src, env=env, device="cpu")
        return self.model_

    def sync(self) -> None:
        """Re-export the serving network from the sb3 model (after resumed training)."""
        if getattr(self, "model_", None) is None:
            raise RuntimeError(f"{self.method}: no sb3 model loaded; call load_sb3() first")
        self.net_ = export_net(self.model_, self.net_cfg_, self.world_)


@register
class MaskablePPOPolicy(PolicyGenerator):
    """sb3-contrib MaskablePPO, optionally warm-started by behaviour cloning (``bc_epochs``)."""

    method = "maskable_ppo"
    Params = MaskablePPOParams
    params: MaskablePPOParams

    def _algorithm(self) -> type:
        from sb3_contrib import MaskablePPO

        return MaskablePPO

    def _algorithm_kwargs(self) -> dict[str, Any]:
        p = self.params
        arch = list(p.net_arch)
        return {"learning_rate": p.learning_rate, "n_steps": p.n_steps, "batch_size": p.batch_size,
                "n_epochs": p.n_epochs, "gamma": p.gamma, "gae_lambda": p.gae_lambda, "clip_range": p.clip_range,
                "ent_coef": p.ent_coef, "vf_coef": p.vf_coef,
                "policy_kwargs": {"net_arch": {"pi": arch, "vf": arch}, **self._policy_kwargs(),
                                  **({"lookahead_prior": p.lookahead_prior} if p.head == "per_action" else {})}}

    def _behaviour_clone(self, model: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None,
                         sets: np.ndarray, heldout: HeldOut, ctx: FitContext) -> dict[str, Any]:
        """Supervised cross-entropy of the masked action logits on (state, next optimal action)
        pairs, plus the value head's return-to-go regression, on the sb3 policy itself."""
        p = self.params
        t0 = time.perf_counter()
        rows, seqs = expert_sequences(world, X, groups, sets, p.bc_label_agents, ctx.progress)
        label_seconds = time.perf_counter() - t0
        if len(rows) == 0:
            raise ValueError(f"{self.method}: no training agent has an exact label to clone")
        data = expert_pairs(world, X[rows], None if groups is None else groups[rows], seqs, p.gamma,
                            self.reward_scale_)
        # "set": every action that starts a cheapest ordering of the label's remaining actions is
        # a correct next action (without discounts, any of them); "sequence": the label's next.
        target = data["optimal_next"] if p.bc_target == "set" else F.one_hot(data["action"], world.n_actions).bool()
        policy = model.policy
        if not policy.share_features_extractor:
            raise ValueError(f"{self.method}: behaviour cloning expects a shared features extractor")
        with torch.no_grad():  # the features have no weights: computed once
            feats = torch.cat([policy.extract_features(data["obs"][i : i + 4096])
                               for i in range(0, len(data["obs"]), 4096)])
        heldout.evaluate(model, 0, "bc")  # the initial policy (with lookahead: the prior) competes too
        policy.set_training_mode(True)
        opt = torch.optim.Adam(policy.parameters(), lr=p.bc_learning_rate)
        gen = torch.Generator().manual_seed(ctx.seed)
        n = len(feats)
        losses = []
        for epoch in range(p.bc_epochs):
            perm = torch.randperm(n, generator=gen)
            total = 0.0
            for i in range(0, n, p.bc_batch_size):
                b = perm[i : i + p.bc_batch_size]
                latent_pi, latent_vf = policy.mlp_extractor(feats[b])
                logits = torch.where(data["mask"][b], policy.action_net(latent_pi), torch.tensor(_MASKED))
                logp = logits.log_softmax(1)
                nll = -torch.where(target[b], logp, torch.tensor(-torch.inf)).logsumexp(1)
                values = policy.value_net(latent_vf).flatten()
                loss = nll.mean() + p.bc_value_coef * F.mse_loss(values, data["ret"][b])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(b)
            losses.append(total / n)
            heldout.evaluate(model, epoch + 1, "bc")
        policy.set_training_mode(False)
        if p.keep_best and heldout.best_state is not None:
            policy.load_state_dict(heldout.best_state)
        return {"label_agents": int(len(rows)), "label": "ucs" if world.order_matters else "set cover (ascending)",
                "target": p.bc_target, "mean_optimal_next": float(target.sum(1).float().mean()),
                "label_seconds": round(label_seconds, 3), "pairs": int(n), "epoch_loss": losses,
                "seconds": round(time.perf_counter() - t0, 3)}


@register
class BCPolicy(MaskablePPOPolicy):
    """Behaviour cloning of the MaskablePPO network from exact labels (no RL)."""

    method = "bc"
    Params = BCParams


@register
class BCPPOPolicy(MaskablePPOPolicy):
    """Behaviour cloning, then MaskablePPO fine-tuning from the cloned weights."""

    method = "bc_ppo"
    Params = BCPPOParams


@register
class DQNPolicy(PolicyGenerator):
    """stable-baselines3 DQN: trained without masks (the env's invalid-action penalty teaches it),
    served with masks; confidence is the softmax of the masked Q-values."""

    method = "dqn"
    Params = DQNParams
    params: DQNParams
    output = "q_values"
    masked_training = False

    def _algorithm(self) -> type:
        from stable_baselines3 import DQN

        return DQN

    def _algorithm_kwargs(self) -> dict[str, Any]:
        p = self.params
        return {"learning_rate": p.learning_rate, "buffer_size": p.buffer_size, "learning_starts": p.learning_starts,
                "batch_size": p.batch_size, "gamma": p.gamma, "train_freq": p.train_freq,
                "target_update_interval": p.target_update_interval,
                "exploration_fraction": p.exploration_fraction, "exploration_final_eps": p.exploration_final_eps,
                "policy_kwargs": {"net_arch": list(p.net_arch), **self._policy_kwargs()}}
