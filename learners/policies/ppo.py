"""MaskablePPO policies (sb3-contrib) with the env's action masks, and the two presets that
warm-start the same network by behaviour cloning (:mod:`~learners.policies.bc`):

- ``maskable_ppo``: MaskablePPO with ``SetCoverEnv.action_masks()`` (RL only by default;
  ``bc_epochs`` > 0 clones exact labels first);
- ``bc``: behaviour cloning of the MaskablePPO policy network from exact labels, no RL;
- ``bc_ppo``: ``bc``, then MaskablePPO fine-tuning from those weights (same network).

The three are one class with different defaults: ``bc`` is ``total_timesteps=0``,
``maskable_ppo`` is ``bc_epochs=0``. The presets live here, beside the class they configure,
because ``maskable_ppo`` itself clones when asked (so this module builds on ``bc``'s algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.capability import CapabilityWorld
from learners.base import FitContext, register, require_at_least
from learners.policies.base import HeldOut, PolicyParams, SB3PolicyGenerator
from learners.policies.bc import behaviour_clone


# ---------------------------------------------------------------------------- hyperparameters
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
        require_at_least(self, 1, "n_steps", "batch_size", "n_epochs", "bc_batch_size", "bc_label_agents")
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


# ---------------------------------------------------------------------------- methods
@register
class MaskablePPOPolicy(SB3PolicyGenerator):
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

    def _warm_start(self, model: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None,
                    sets: np.ndarray, heldout: HeldOut, ctx: FitContext) -> dict[str, Any] | None:
        """Behaviour cloning of the exact labels when ``bc_epochs`` > 0 (see :mod:`learners.policies.bc`)."""
        if not self.params.bc_epochs:
            return None
        return behaviour_clone(model, world, X, groups, sets, heldout, self.params, self.reward_scale_, ctx.seed,
                               ctx.progress, self.method)


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
