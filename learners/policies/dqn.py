"""stable-baselines3 DQN on SetCoverEnv (``dqn``).

DQN cannot use masks while training: it learns to avoid invalid actions only from the env's
``invalid_action_penalty`` (an invalid action leaves the state unchanged, costs a step and is
rewarded ``-penalty``). The served rollout masks anyway. Its Q-network is a plain MLP
(``head="mlp"``) on the chosen features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.capability import CapabilityWorld
from learners.base import register, require_at_least
from learners.policies.base import PolicyParams, SB3PolicyGenerator


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
        require_at_least(self, 1, "buffer_size", "batch_size", "train_freq", "target_update_interval")


@register
class DQNPolicy(SB3PolicyGenerator):
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

    def _env_kwargs(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None) -> dict[str, Any]:
        return {**super()._env_kwargs(world, X, groups), "invalid_action_penalty": self.params.invalid_action_penalty}
