"""Hyperparameters of the sequential policies (typed, checked at construction, one line each)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learners.base import require_at_least


@dataclass
class SequentialRolloutParams:
    """What serving any sequential policy needs."""

    max_steps: int | None = None  # step budget per rollout; None: the number of actions
    num_threads: int = 1  # torch intra-op threads in fit and predict
    rollout_chunk: int = 1024  # agents (beam nodes) whose candidates are computed at once (bounds memory)
    beam_width: int = 1  # 1: the raw greedy rollout; > 1: verified beam search of this width (sequential_search)

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps: must be >= 1 or None, got {self.max_steps}")
        if self.beam_width < 1:
            raise ValueError(f"beam_width: must be >= 1, got {self.beam_width}")
        if self.num_threads < 0 or self.rollout_chunk < 1:
            raise ValueError("num_threads: must be >= 0; rollout_chunk: must be >= 1")


#: Teachers of the imitation targets: the greedy lookaheads' rollouts, or the exact grid reference.
EXPERTS = ("lookahead2", "lookahead1", "exact")


@dataclass
class ExpertParams:
    """Where the imitation targets come from (the BC policies and the encoder-decoder)."""

    expert: str = "lookahead2"  # teacher of the extra targets below: one of EXPERTS ("exact": ExactSequenceSearch)
    expert_relabel: bool = False  # target per training agent: the cheaper of its label and the expert's answer
    augment_agents: int = 0  # extra training agents recombined from the training agents, labelled by the expert
    expert_max_length: int = 3  # "exact": the longest sequence the exact expert searches
    expert_jobs: int = 2  # "exact": processes labelling (chunks kept under the run dir: a rerun resumes)
    data_seed: int | None = None  # seed of the model-selection split and the recombined agents (None: the fit's)

    def check_expert(self) -> None:
        if self.expert not in EXPERTS:
            raise ValueError(f"expert: expected one of {EXPERTS}, got {self.expert!r}")
        require_at_least(self, 0, "augment_agents")
        require_at_least(self, 1, "expert_max_length", "expert_jobs")

    def data_rng(self, fit_seed: int) -> np.random.Generator:
        """The generator of the model-selection split and the recombined agents."""
        return np.random.default_rng(fit_seed if self.data_seed is None else self.data_seed)


@dataclass
class SequentialPolicyParams(SequentialRolloutParams, ExpertParams):
    """Hyperparameters of the learned sequential policies (MaskablePPO and BC)."""

    total_timesteps: int = 20_000  # environment steps of PPO (0: no RL)
    n_envs: int = 4  # parallel environments (DummyVecEnv)
    learning_rate: float = 3e-4  # Adam learning rate of PPO
    n_steps: int = 128  # rollout steps per environment between PPO updates
    batch_size: int = 128  # PPO minibatch size
    n_epochs: int = 4  # PPO epochs per update
    gamma: float = 1.0  # discount of the return (1: the episode's total cost)
    gae_lambda: float = 0.95  # GAE lambda
    clip_range: float = 0.2  # PPO clipping
    ent_coef: float = 0.01  # entropy bonus
    vf_coef: float = 0.5  # value loss weight
    reward_scale: float = 1.0  # rewards are -cost / this
    hidden: tuple[int, ...] = (64, 64)  # widths of the shared candidate scorer and of the critic
    context_dim: int = 32  # width of the agent-state encoding fed to the scorer
    embed_dim: int = 8  # width of the learned action embedding
    prior_scale: float = 0.0  # > 0: start the logits at the estimated two-step lookahead (see SequentialScorer)
    bc_epochs: int = 0  # behaviour-cloning epochs on the sequencer's labels before RL (0: none)
    bc_learning_rate: float = 1e-3  # Adam learning rate of behaviour cloning
    bc_batch_size: int = 128  # (state, next step) pairs per BC minibatch
    bc_any_order: bool = True  # BC target: any next label step that keeps the label valid and as cheap
    eval_freq: int = 2_000  # PPO steps between held-out evaluations (0: only at the start and end)
    val_fraction: float = 0.1  # share of training agents held out for model selection
    keep_best: bool = True  # end with the held-out best weights (validity, mean cost)
    val_augment: int = 0  # extra model-selection agents recombined from the training agents (never trained on)
    dagger_iters: int = 0  # DAgger rounds: label the states the policy visits with the expert's step, retrain
    dagger_epochs: int = 20  # BC epochs on the aggregated data after each DAgger round

    def __post_init__(self) -> None:
        super().__post_init__()
        self.hidden = tuple(int(h) for h in self.hidden)
        require_at_least(self, 1, "n_envs", "n_steps", "batch_size", "n_epochs", "bc_batch_size", "context_dim", "embed_dim")
        require_at_least(self, 0, "total_timesteps", "bc_epochs", "eval_freq")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden: expected positive widths, got {self.hidden}")
        if self.total_timesteps == 0 and self.bc_epochs == 0:
            raise ValueError("total_timesteps, bc_epochs: both 0, nothing would be trained")
        if not 0 < self.gamma <= 1 or not 0 < self.val_fraction < 1 or not self.reward_scale > 0:
            raise ValueError("gamma: in (0, 1]; val_fraction: in (0, 1); reward_scale: > 0")
        self.check_expert()
        require_at_least(self, 0, "dagger_iters", "dagger_epochs", "val_augment")
        if (self.augment_agents or self.dagger_iters or self.expert_relabel) and not self.bc_epochs:
            raise ValueError("augment_agents, dagger_iters, expert_relabel: need bc_epochs > 0")
        if self.dagger_iters and self.expert == "exact":
            raise ValueError("dagger_iters: DAgger needs a step expert ('lookahead1' or 'lookahead2'), not 'exact'")


@dataclass
class SequentialBCParams(SequentialPolicyParams):
    """Behaviour cloning of the sequencer's labels only."""

    total_timesteps: int = 0  # no RL
    bc_epochs: int = 60  # behaviour-cloning epochs


@dataclass
class SequentialBCPPOParams(SequentialPolicyParams):
    """Behaviour cloning, then MaskablePPO fine-tuning."""

    bc_epochs: int = 60  # behaviour-cloning epochs
    total_timesteps: int = 10_000  # PPO fine-tuning steps
    learning_rate: float = 5e-5  # small: fine-tuning must not undo the clone
    ent_coef: float = 0.0  # the clone is already near-deterministic
    clip_range: float = 0.1  # conservative updates


@dataclass
class SequentialLookaheadParams(SequentialRolloutParams):
    """The no-learning greedy lookahead."""

    depth: int = 2  # 1: cheapest accepting step, else best score gain per cost; 2: cheapest <= 2-step completion
    estimate: bool = False  # depth 2 from the candidates' estimated, pair-checked two-step costs (no search)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.depth not in (1, 2):
            raise ValueError(f"depth: expected 1 or 2, got {self.depth}")
        if self.estimate and self.depth != 2:
            raise ValueError("estimate: only with depth 2")
