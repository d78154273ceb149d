"""Policies over rejected agents of the sequential CSCF worlds (``recourse/Sequential-v0``).

A policy answers an agent with an ordered (action, value) sequence by a greedy deterministic
rollout in the world, batched: at every step the (action, value) candidates of all agents still
rejected are computed at once (:func:`envs.sequential_env.candidates`: one vectorized transition
per action, one classifier call for every child), the network scores them in one forward pass,
and each agent takes its best allowed step. Methods (``method`` in a sequential config):

- ``seq_maskable_ppo``: sb3-contrib MaskablePPO from scratch in ``SequentialEnv`` with candidate
  features and action masks;
- ``seq_bc``: behaviour cloning of the sequencer's cheapest sequences (labels of
  :mod:`data_gen.sequence_labels`), no RL;
- ``seq_bc_ppo``: ``seq_bc``, then MaskablePPO fine-tuning from the cloned weights;
- ``seq_lookahead1`` / ``seq_lookahead2``: the no-learning baselines, greedy one- and two-step
  lookahead over the same grid, priced the same way (:class:`SequentialLookahead`; the two-step
  search is batched over agents in :mod:`learners.policies.sequential_twostep`).

Every policy here (and the encoder-decoder of :mod:`learners.policies.sequential_seq2seq`) can
also answer with ``beam_width`` > 1: the verified beam search of
:mod:`learners.policies.sequential_search`, ranked by the policy's summed log-probabilities (the
lookahead: by the estimated total cost), every completion judged by the world.

**Network** (:class:`SequentialScorer`): one small MLP shared by all K (action, value) candidates
scores each from its features (allowed, log cost, child's decision score, accepted; plus two
weightless relational features: its log cost above the cheapest accepted candidate and its score
below the best candidate), a learned embedding of its action, its position in the action's grid
and an encoding of the agent's state; the critic is an MLP on the state and a pooled summary.
Sharing the scorer across candidates lets ~500 labelled agents teach a rule ("the cheapest step
that is accepted, else the step the sequencer takes here") rather than one output unit per value.

**Model selection**: a share of the training agents is held out; after BC and every
``eval_freq`` PPO steps the greedy rollout runs on them and the weights with the best (validity,
mean cost) are kept, the cloned weights included, so fine-tuning never ends worse than BC there.

**Persistence**: ``weights.pt`` (state_dict of the scorer, ``weights_only=True``), ``world.json``
and ``config.json``; no pickles (the sb3 model is not saved: it is not needed to serve).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from envs.sequential import SequentialWorld
from envs.sequential_env import CANDIDATE_CHANNELS, FlatGrid, candidates, observations
from learners.base import FitContext, Generator, Prediction, register, require_at_least
from learners.policies.sequential_search import Nodes, beam_search
from learners.policies.sequential_twostep import two_step_best
from learners.torch_training import torch_threads

MASKED_LOGIT = -1e8
_NO_ACCEPTED = 10.0  # relational feature of a candidate when no candidate is accepted
_RELATIONAL = 4  # weightless relational features per candidate (see SequentialScorer._parts)


# ---------------------------------------------------------------------------- results
@dataclass
class SequencePrediction(Prediction):
    """Generated sequences: ``sets`` are the action ids in order (-1 padded), with their values."""

    values: np.ndarray  # (B, L) raw values (NaN: no step / assign action)
    cost: np.ndarray  # (B,) price of the sequence in the world (consequences and discounts in order)
    accepted: np.ndarray  # (B,) the classifier accepts the final state and every condition held
    seconds: float = 0.0  # wall time of the batched rollout
    cpu_seconds: float = 0.0  # CPU time of this process during it (not inflated by a busy machine)
    search: dict[str, Any] = field(default_factory=dict)  # search statistics: states expanded, children scored


def masked_log_softmax(logits: torch.Tensor, mask: np.ndarray) -> np.ndarray:
    """(B, K) float64 log-probabilities of the allowed candidates (``MASKED_LOGIT`` elsewhere)."""
    logits = torch.where(torch.as_tensor(mask), logits, torch.tensor(MASKED_LOGIT))
    return torch.log_softmax(logits, 1).double().numpy()


# ---------------------------------------------------------------------------- hyperparameters
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


# ---------------------------------------------------------------------------- the network
def _mlp(n_in: int, widths: tuple[int, ...], n_out: int | None) -> nn.Sequential:
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
        self.context = _mlp(self.n_context, (context_dim,), None)
        self.embed = nn.Embedding(n_actions, embed_dim)
        n_in = CANDIDATE_CHANNELS + _RELATIONAL + embed_dim + 1 + context_dim
        self.scorer = _mlp(n_in, hidden, 1)
        self.critic = _mlp(self.n_context + 2, hidden, None)
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


def _scorer_kwargs(world: SequentialWorld, p: SequentialPolicyParams) -> dict[str, Any]:
    grid = FlatGrid.of(world)
    n = np.maximum(world.grid_sizes[grid.action] - 1, 1)
    return {"n_features": world.n_features, "n_actions": world.n_actions, "grid_action": grid.action.tolist(),
            "grid_position": (grid.position / n).tolist(), "hidden": tuple(p.hidden), "context_dim": p.context_dim,
            "embed_dim": p.embed_dim, "prior_scale": p.prior_scale}


def _sb3_policy_class() -> type:
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


# ---------------------------------------------------------------------------- batched rollouts
def _finish(world: SequentialWorld, X0: np.ndarray, A: np.ndarray, V: np.ndarray, conf: np.ndarray,
            t0: float, c0: float, search: dict[str, Any]) -> SequencePrediction:
    """Price the chosen sequences by the world (``world.rollout``: consequences and discounts in
    order) and decide validity by its classifier; ``search``: the search's statistics."""
    width = max(int((A >= 0).sum(1).max(initial=0)), 1)
    A, V = A[:, :width], V[:, :width]
    r = world.rollout(X0, A, V)
    accepted = r.ok & world.accepts(r.final)
    return SequencePrediction(A, conf, V, r.cost, accepted, time.perf_counter() - t0, time.process_time() - c0,
                              search)


def rollout(world: SequentialWorld, choose: Any, X: np.ndarray, max_steps: int | None, chunk: int,
            need_scores: bool = True, record: Any = None) -> SequencePrediction:
    """Greedy batched rollout: ``choose(X, used, steps, cand) -> (flat index, confidence)`` picks one
    step for every active agent (all of them at once: one candidate computation and one ``choose``
    call, i.e. one network forward, per step for the whole batch); an agent stops when accepted,
    when no step is allowed, or after ``max_steps`` steps. ``record(X, used, steps, cand)``, when
    given, sees every batch of states before its step is chosen (DAgger)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    X0 = world.validate(X, name="X")
    grid = FlatGrid.of(world)
    B, T = len(X0), world.n_actions if max_steps is None else int(max_steps)
    Xc = X0.copy()
    used = np.zeros((B, world.n_actions), dtype=bool)
    A, V = np.full((B, T), -1, np.int64), np.full((B, T), np.nan)
    conf = np.ones(B)
    active = ~world.accepts(Xc)
    n_nodes = 0  # states whose children were computed
    for t in range(T):
        for s in range(0, B, chunk):
            idx = np.flatnonzero(active[s: s + chunk]) + s
            if len(idx) == 0:
                continue
            cand = candidates(world, grid, Xc[idx], used[idx], score=need_scores)
            n_nodes += len(idx)
            has = cand.mask.any(1)
            if not has.all():
                active[idx[~has]] = False
                idx = idx[has]
                cand = type(cand)(cand.mask[has], cand.cost[has], cand.score[has])
                if len(idx) == 0:
                    continue
            if record is not None:
                record(Xc[idx], used[idx], np.full(len(idx), t), cand)
            k, p = choose(Xc[idx], used[idx], np.full(len(idx), t), cand)
            a = grid.action[k]
            Xc[idx] = world.apply(Xc[idx], a, grid.value[k]).states
            used[idx, a] = True
            A[idx, t], V[idx, t], conf[idx] = a, grid.value[k], conf[idx] * p
            active[idx] = ~world.accepts(Xc[idx])
        if not active.any():
            break
    return _finish(world, X0, A, V, conf, t0, c0,
                   {"nodes_per_agent": n_nodes / max(B, 1), "scored_per_agent": n_nodes * grid.size / max(B, 1)})


def _net_chooser(world: SequentialWorld, net: SequentialScorer, max_steps: int) -> Any:
    def choose(X: np.ndarray, used: np.ndarray, steps: np.ndarray, cand: Any) -> tuple[np.ndarray, np.ndarray]:
        obs = torch.as_tensor(observations(world, X, used, steps, max_steps, cand))
        with torch.inference_mode():
            logits = net.forward_actor(obs)
        logits = torch.where(torch.as_tensor(cand.mask), logits, torch.tensor(MASKED_LOGIT))
        probs = torch.softmax(logits, 1)
        k = probs.argmax(1)
        return k.numpy(), probs[torch.arange(len(k)), k].double().numpy()
    return choose


def _pad_to(a: np.ndarray, width: int, fill: float = -1) -> np.ndarray:
    """Right-pad (or keep) the columns of a padded sequence array to ``width``."""
    if a.shape[1] >= width:
        return a
    return np.concatenate([a, np.full((len(a), width - a.shape[1]), fill, dtype=a.dtype)], axis=1)


def recombined_agents(world: SequentialWorld, X: np.ndarray, n: int, rng: np.random.Generator,
                      swap: float = 0.3, max_rounds: int = 50) -> np.ndarray:
    """``n`` new rejected agents recombined from the agents ``X``: each starts as a random row of
    ``X`` and takes each raw feature (a one-hot group as a whole) from another random row with
    probability ``swap``, so every value is one a real agent has; duplicates of a row of ``X``
    and rows the classifier accepts are dropped (fewer than ``n`` if they run out)."""
    X = world.validate(X, name="X")
    seen = {r.tobytes() for r in X}
    out: list[np.ndarray] = []
    for _ in range(max_rounds):
        m = max(2 * (n - len(out)), 16)
        Y = X[rng.integers(len(X), size=m)].copy()
        for r in range(len(world.raw_names)):
            cols = np.flatnonzero(world.column_raw == r)
            take = rng.random(m) < swap
            Y[np.ix_(take, cols)] = X[rng.integers(len(X), size=int(take.sum()))][:, cols]
        Y = Y[~world.accepts(Y)]
        for y in Y:
            if y.tobytes() not in seen:
                seen.add(y.tobytes())
                out.append(y)
        if len(out) >= n:
            break
    return np.array(out[:n]).reshape(-1, X.shape[1])


def heldout_split(world: SequentialWorld, X: np.ndarray, rows: np.ndarray, val: Any, fraction: float,
                  rng: np.random.Generator, augment: int = 0, augment_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Model-selection agents and the training rows left: the rejected agents of ``val`` when given
    (rows unchanged), else a random ``fraction`` (at least one) of ``rows`` of ``X`` taken out.
    ``augment`` > 0 adds that many agents recombined from all rejected agents of ``X``
    (:func:`recombined_agents`, own rng from ``augment_seed``): a larger selection set, never
    trained on, when the real held-out agents are few."""
    if val is not None:
        Xv = world.validate(getattr(val, "X", val), name="val.X")
        Xv = Xv[~world.accepts(Xv)]
    else:
        perm = rng.permutation(rows)
        n_val = max(1, round(fraction * len(rows)))
        Xv, rows = X[np.sort(perm[:n_val])], np.sort(perm[n_val:])
    if augment:
        Xv = np.concatenate([Xv, recombined_agents(world, X[~world.accepts(X)], augment,
                                                   np.random.default_rng(augment_seed))])
    return Xv, rows


def expert_answers(world: SequentialWorld, p: ExpertParams, ctx: FitContext, max_steps: int, chunk: int
                   ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The teacher ``p.expert`` as a function of agents ``X`` -> (accepted, actions, values): the
    greedy lookahead's batched rollouts, or the exact grid reference (``ExactSequenceSearch`` of
    <= ``p.expert_max_length`` steps, 0.4-1 s per German agent on one core) labelling on ``p.expert_jobs``
    processes through :func:`data_gen.sequence_labels.label_sequences`. Its chunks are kept under
    ``ctx.run_dir/expert_labels/<key of the world, agents and length>``: an interrupted fit resumes
    there, and another seed or model with the same agents (same ``data_seed``) reuses them."""
    if p.expert != "exact":
        choose = lookahead_choose(world, FlatGrid.of(world), 1 if p.expert == "lookahead1" else 2)

        def lookahead(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            r = rollout(world, choose, X, max_steps, chunk)
            return r.accepted, r.sets, r.values
        return lookahead

    def exact(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from data_gen.sequence_labels import label_sequences
        from solvers.sequential import ExactSequenceSearch

        X = np.ascontiguousarray(X, dtype=float)
        key = hashlib.sha256(f"{world.fingerprint()}|{p.expert_max_length}|{X.shape}".encode() + X.tobytes())
        with (contextlib.nullcontext(ctx.run_dir) if ctx.run_dir is not None else tempfile.TemporaryDirectory()) as root:
            labels = label_sequences(world, X, Path(root) / "expert_labels" / key.hexdigest()[:16],
                                     ExactSequenceSearch(max_length=p.expert_max_length), n_jobs=p.expert_jobs,
                                     progress=ctx.progress)
        return labels.ok, labels.actions, labels.values
    return exact


def expert_targets(world: SequentialWorld, answers: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
                   X: np.ndarray, A: np.ndarray, V: np.ndarray, *, relabel: bool, augment: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """Imitation targets from the sequencer's labels ``(X, A, V)`` and an expert's ``answers``
    (:func:`expert_answers`): with ``relabel`` each agent's target is the cheaper of its label and
    the expert's answer (both priced by the world); ``augment`` adds that many agents recombined
    from ``X`` (:func:`recombined_agents`) with the expert's accepted answers as targets."""
    info: dict[str, int] = {}
    A, V = A.copy(), V.copy()
    if relabel:
        ok, EA, EV = answers(X)
        better = ok & (world.rollout(X, EA, EV).cost < world.rollout(X, A, V).cost - 1e-12)
        w = max(A.shape[1], EA.shape[1])
        A, V = _pad_to(A, w), _pad_to(V, w, np.nan)
        A[better], V[better] = _pad_to(EA, w)[better], _pad_to(EV, w, np.nan)[better]
        info["relabelled_by_expert"] = int(better.sum())
    if augment:
        Xs = recombined_agents(world, X, augment, rng)
        ok, EA, EV = answers(Xs)
        w = max(A.shape[1], EA.shape[1])
        X = np.concatenate([X, Xs[ok]])
        A = np.concatenate([_pad_to(A, w), _pad_to(EA[ok], w)])
        V = np.concatenate([_pad_to(V, w, np.nan), _pad_to(EV[ok], w, np.nan)])
        info["augmented_agents"] = int(ok.sum())
    return X, A, V, info


# ---------------------------------------------------------------------------- the generators
class _SequentialGenerator(Generator):
    """Shared serving and persistence of the sequential policies."""

    params: SequentialRolloutParams
    uses_world: ClassVar[bool] = True
    #: whether the policy reads the candidates' classifier scores (the beam then also takes free completions)
    scores_children: ClassVar[bool] = True

    def _set_world(self, ctx: FitContext) -> SequentialWorld:
        """Take ``ctx.world`` as the fitted world (``world_``), or a ValueError if it is not a
        :class:`SequentialWorld`."""
        if not isinstance(ctx.world, SequentialWorld):
            raise ValueError(f"{self.method}: ctx.world must be a SequentialWorld, got {type(ctx.world).__name__}")
        self.world_ = ctx.world
        return ctx.world

    def _check_fitted(self) -> None:
        if getattr(self, "world_", None) is None:
            raise RuntimeError(f"{self.method}: not fitted; call fit() or load() first")

    def _max_steps(self) -> int:
        return self.world_.n_actions if self.params.max_steps is None else self.params.max_steps

    def predict_sequences(self, X: np.ndarray, beam_width: int | None = None) -> SequencePrediction:
        """The answers to agents ``X``: the raw greedy rollout (``beam_width`` 1), or the cheapest
        accepted sequence of a verified beam search ranked by this policy (``beam_width`` > 1;
        None: ``params.beam_width``)."""
        self._check_fitted()
        width = self.params.beam_width if beam_width is None else int(beam_width)
        if width < 1:
            raise ValueError(f"beam_width: must be >= 1, got {width}")
        with torch_threads(self.params.num_threads):
            return self._greedy(X) if width == 1 else self._beam(X, width)

    def _greedy(self, X: np.ndarray) -> SequencePrediction:
        return rollout(self.world_, self._chooser(), X, self._max_steps(), self.params.rollout_chunk)

    def _beam(self, X: np.ndarray, width: int) -> SequencePrediction:
        t0, c0 = time.perf_counter(), time.process_time()
        X0 = self.world_.validate(X, name="X")

        def fallback(Xm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            r = self._greedy(Xm)
            return r.sets, r.values, r.accepted

        A, V, _, stats = beam_search(self.world_, self._expand(), X0, width=width, max_steps=self._max_steps(),
                                     chunk=self.params.rollout_chunk, score_children=self.scores_children,
                                     memory=self._initial_memory(X0), fallback=fallback)
        return _finish(self.world_, X0, A, V, np.ones(len(X0)), t0, c0, stats)

    def _initial_memory(self, X: np.ndarray) -> np.ndarray | None:
        return None

    def _expand(self) -> Any:
        """The beam's ranking: (nodes, candidates) -> (child keys (N, K), memory)."""
        raise NotImplementedError

    def predict(self, X: np.ndarray) -> SequencePrediction:
        return self.predict_sequences(X)

    def steps(self, pred: SequencePrediction, i: int) -> list[tuple[str, float | None]]:
        """Agent ``i``'s answer as readable ``(action name, value)`` steps."""
        return [(self.world_.actions[a].name, None if np.isnan(v) else float(v))
                for a, v in zip(pred.sets[i], pred.values[i], strict=True) if a >= 0]

    def _build(self) -> nn.Module | None:
        """The policy's network for this world and params (None: no weights, as the lookahead)."""
        return None

    def _save_state(self, path: Path) -> dict[str, Any]:
        """``world.json`` and, for a learned policy, ``weights.pt`` (its state_dict)."""
        self._check_fitted()
        if getattr(self, "net_", None) is not None:
            torch.save(self.net_.state_dict(), path / "weights.pt")
        (path / "world.json").write_text(json.dumps(self.world_.to_dict()))
        return {"world_fingerprint": self.world_.fingerprint(), "fit": getattr(self, "fit_info_", {})}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.world_ = SequentialWorld.load(path / "world.json", fingerprint=meta["world_fingerprint"])
        self.fit_info_ = meta.get("fit", {})
        net = self._build()
        if net is not None:  # weights only (no pickles)
            net.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
            self.net_ = net.eval()


class SequentialPolicy(_SequentialGenerator):
    """A learned sequential policy (MaskablePPO and/or BC on :class:`SequentialScorer`)."""

    Params = SequentialPolicyParams
    params: SequentialPolicyParams

    # ------------------------------------------------------------------ training
    def fit(self, train: Any, val: Any, ctx: FitContext) -> SequentialPolicy:
        """``train``: the training agents (``train.X``) and, for BC, the sequencer's labels
        (``train.actions``/``train.values``/``train.ok``, e.g. a ``SequenceLabelSet``);
        ``ctx.world`` the :class:`SequentialWorld`. ``val`` (optional) are held-out agents."""
        world = self._set_world(ctx)
        p = self.params
        t0 = time.perf_counter()
        X = world.validate(train.X, name="train.X")
        rows = np.flatnonzero(~world.accepts(X))
        rng = p.data_rng(ctx.seed)
        Xv, rows = heldout_split(world, X, rows, val, p.val_fraction, rng, p.val_augment, ctx.seed + 7919)
        if len(rows) == 0:
            raise ValueError("train: no rejected agent to learn from")
        torch.manual_seed(ctx.seed)
        info: dict[str, Any] = {"train_agents": int(len(rows)), "heldout_agents": int(len(Xv)), "heldout": []}
        with torch_threads(p.num_threads):
            model = self._sb3_model(X[rows], ctx.seed)
            self.net_ = model.policy.mlp_extractor
            best: dict[str, Any] = {"score": None, "state": None}

            def heldout(step: int, phase: str) -> None:
                r = rollout(world, _net_chooser(world, self.net_, self._max_steps()), Xv, self._max_steps(),
                            p.rollout_chunk)
                rec = {"phase": phase, "step": step, "validity": float(r.accepted.mean()),
                       "mean_cost": float(r.cost[r.accepted].mean()) if r.accepted.any() else float("nan")}
                score = (rec["validity"], -rec["mean_cost"] if r.accepted.any() else -np.inf)
                rec["best"] = best["score"] is None or score >= best["score"]
                if rec["best"]:
                    best["score"], best["state"] = score, {k: v.clone() for k, v in model.policy.state_dict().items()}
                info["heldout"].append(rec)

            if p.bc_epochs:
                if p.prior_scale:
                    heldout(0, "prior")  # the untrained residual policy (= the estimated two-step lookahead)
                info["bc"] = self._clone(model, train, rows, ctx, heldout)
            if p.total_timesteps:
                from stable_baselines3.common.callbacks import BaseCallback

                class _Eval(BaseCallback):
                    def _on_step(inner) -> bool:  # noqa: N805
                        if p.eval_freq and inner.num_timesteps % max(p.eval_freq // p.n_envs * p.n_envs, 1) < p.n_envs:
                            heldout(int(inner.num_timesteps), "ppo")
                        return True

                if not p.bc_epochs:
                    heldout(0, "start")
                t1 = time.perf_counter()
                model.learn(p.total_timesteps, callback=_Eval())
                info["rl_seconds"] = round(time.perf_counter() - t1, 2)
                heldout(int(model.num_timesteps), "end")
            if p.keep_best and best["state"] is not None and not info["heldout"][-1]["best"]:
                model.policy.load_state_dict(best["state"])
                info["kept"] = next(r for r in reversed(info["heldout"]) if r["best"])
            self.net_ = model.policy.mlp_extractor.eval()
            model.env.close()
        info["fit_seconds"] = round(time.perf_counter() - t0, 2)
        self.fit_info_ = info
        return self

    def _sb3_model(self, X: np.ndarray, seed: int) -> Any:
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv

        from envs.sequential_env import SequentialEnv

        p = self.params
        env = make_vec_env(SequentialEnv, n_envs=p.n_envs, seed=seed, vec_env_cls=DummyVecEnv,
                           env_kwargs={"world": self.world_, "agents": X, "max_steps": p.max_steps,
                                       "reward_scale": p.reward_scale, "candidate_features": True})
        return MaskablePPO(_sb3_policy_class(), env, learning_rate=p.learning_rate, n_steps=p.n_steps,
                           batch_size=p.batch_size, n_epochs=p.n_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda,
                           clip_range=p.clip_range, ent_coef=p.ent_coef, vf_coef=p.vf_coef, seed=seed, device="cpu",
                           verbose=0, policy_kwargs={"scorer_kwargs": _scorer_kwargs(self.world_, p)})

    def _clone(self, model: Any, labels: Any, rows: np.ndarray, ctx: FitContext, heldout: Any) -> dict[str, Any]:
        """Behaviour cloning: cross-entropy of the masked logits on every (state, next label step)
        pair of the sequencer's cheapest sequences, plus the critic on the return-to-go.

        With ``expert_relabel`` an agent's target is the cheaper of its label and the expert's
        (``expert``: the greedy lookahead) rollout; ``augment_agents`` adds agents recombined from
        the training agents (:func:`recombined_agents`) with the expert's rollouts as targets;
        ``dagger_iters`` rounds of DAgger then roll the policy out on all of them, label every
        state it visits with the expert's step there and retrain on the aggregate. ``heldout``
        evaluates and keeps the best weights after the first fit and after every round."""
        for need in ("actions", "values"):
            if not hasattr(labels, need):
                raise ValueError(f"{self.method}: behaviour cloning needs the sequencer's labels (train.{need})")
        p, world = self.params, self.world_
        T = self._max_steps()
        ok = np.asarray(labels.ok if hasattr(labels, "ok") else np.isfinite(labels.cost), dtype=bool)
        rows = rows[ok[rows]]
        X, A, V = labels.X[rows], labels.actions[rows].copy(), labels.values[rows].copy()
        info: dict[str, Any] = {"agents": int(len(rows))}
        rng = p.data_rng(ctx.seed)
        t0 = time.perf_counter()
        X, A, V, more = expert_targets(world, expert_answers(world, p, ctx, T, p.rollout_chunk), X, A, V,
                                       relabel=p.expert_relabel, augment=p.augment_agents, rng=rng)
        info.update(more)
        info["expert_seconds"] = round(time.perf_counter() - t0, 2)
        obs, tgt, masks, ret = self._pairs(X, A, V)
        losses = self._fit_pairs(model, obs, tgt, masks, ret, p.bc_epochs, ctx.seed)
        info.update({"pairs": int(len(obs)), "epochs": p.bc_epochs, "final_loss": round(losses[-1], 5)})
        heldout(0, "bc")
        expert = lookahead_choose(world, FlatGrid.of(world), 1 if p.expert == "lookahead1" else 2)  # DAgger's
        seen: list[tuple[np.ndarray, ...]] = []

        def record(Xb: np.ndarray, used: np.ndarray, steps: np.ndarray, cand: Any) -> None:
            k, _ = expert(Xb, used, steps, cand)
            seen.append((observations(world, Xb, used, steps, T, cand), k, cand.mask.copy()))

        for it in range(p.dagger_iters):
            t1 = time.perf_counter()
            seen.clear()

            with torch.no_grad():
                rollout(world, _net_chooser(world, self.net_, T), X, T, p.rollout_chunk, record=record)
            o2, k2, m2 = (np.concatenate(z) for z in zip(*seen, strict=True))
            onehot = np.zeros(m2.shape, dtype=bool)
            onehot[np.arange(len(k2)), k2] = True
            obs, tgt, masks = np.concatenate([obs, o2]), np.concatenate([tgt, onehot]), np.concatenate([masks, m2])
            ret = np.concatenate([ret, np.full(len(o2), np.nan, np.float32)])
            losses = self._fit_pairs(model, obs, tgt, masks, ret, p.dagger_epochs, ctx.seed + it + 1)
            info.setdefault("dagger", []).append({"states": int(len(o2)), "pairs": int(len(obs)),
                                                  "final_loss": round(losses[-1], 5),
                                                  "seconds": round(time.perf_counter() - t1, 2)})
            heldout(it + 1, "dagger")
        info["seconds"] = round(time.perf_counter() - t0, 2)
        return info

    def _fit_pairs(self, model: Any, obs: np.ndarray, tgt: np.ndarray, masks: np.ndarray, ret: np.ndarray,
                   epochs: int, seed: int) -> list[float]:
        """Minibatch Adam on the masked cross-entropy (plus the critic where the return is known)."""
        p = self.params
        policy = model.policy
        opt = torch.optim.Adam(policy.parameters(), lr=p.bc_learning_rate)
        gen = torch.Generator().manual_seed(seed)
        Ob, Tg, Mk, Rt = (torch.as_tensor(a) for a in (obs, tgt, masks, ret))
        losses = []
        for _ in range(epochs):
            perm = torch.randperm(len(Ob), generator=gen)
            total = 0.0
            for s in range(0, len(Ob), p.bc_batch_size):
                b = perm[s: s + p.bc_batch_size]
                logits, latent_vf = policy.mlp_extractor(Ob[b])
                logits = torch.where(Mk[b], logits, torch.tensor(MASKED_LOGIT))
                # -log of the probability of the target set (one target: the cross-entropy)
                loss = (torch.logsumexp(logits, 1)
                        - torch.logsumexp(torch.where(Tg[b], logits, torch.tensor(MASKED_LOGIT)), 1)).mean()
                known = torch.isfinite(Rt[b])
                if known.any():
                    value = policy.value_net(latent_vf).squeeze(-1)
                    loss = loss + 0.5 * F.mse_loss(value[known], Rt[b][known])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(b)
            losses.append(total / len(Ob))
        return losses

    def _pairs(self, X: np.ndarray, A: np.ndarray, V: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(observation, targets (N, K) bool, mask, return-to-go) along every label, batched per
        step. The target is the label's next step; with ``bc_any_order`` also every later step of
        the label that, taken next (the rest in the label's order), gives a valid sequence no
        dearer than the label's: the order of equally priced steps is the sequencer's accident, and
        a single target would teach the policy to guess it."""
        world, grid = self.world_, FlatGrid.of(self.world_)
        T = self._max_steps()
        K = grid.size
        Xc, used = X.astype(float).copy(), np.zeros((len(X), world.n_actions), bool)
        step_cost = np.zeros(A.shape)
        out: list[tuple[np.ndarray, ...]] = []
        flat = np.full(A.shape, -1, dtype=np.int64)
        for i, j in zip(*np.nonzero(A >= 0), strict=True):
            flat[i, j] = grid.index(world, int(A[i, j]), V[i, j])
        for t in range(min(A.shape[1], T)):
            idx = np.flatnonzero(A[:, t] >= 0)
            if len(idx) == 0:
                break
            cand = candidates(world, grid, Xc[idx], used[idx])
            k = flat[idx, t]
            fine = cand.mask[np.arange(len(idx)), k]
            targets = np.zeros((len(idx), K), dtype=bool)
            targets[np.arange(len(idx)), k] = True
            if self.params.bc_any_order and t + 1 < A.shape[1]:
                own = world.rollout(Xc[idx], A[idx, t:], V[idx, t:]).cost
                for j in range(t + 1, A.shape[1]):
                    rows = np.flatnonzero(A[idx, j] >= 0)
                    if len(rows) == 0:
                        continue
                    order = [j - t, *(c for c in range(A.shape[1] - t) if c != j - t)]
                    r = world.rollout(Xc[idx[rows]], A[idx[rows], t:][:, order], V[idx[rows], t:][:, order])
                    kj = flat[idx[rows], j]
                    good = r.ok & world.accepts(r.final) & (r.cost <= own[rows] + 1e-9) & cand.mask[rows, kj]
                    targets[rows[good], kj[good]] = True
            obs = observations(world, Xc[idx], used[idx], np.full(len(idx), t), T, cand)
            tr = world.apply(Xc[idx], A[idx, t], grid.value[k])
            step_cost[idx, t] = tr.cost
            out.append((obs[fine], targets[fine], cand.mask[fine], idx[fine], np.full(int(fine.sum()), t)))
            Xc[idx], used[idx, A[idx, t]] = tr.states, True
        togo = np.cumsum(step_cost[:, ::-1], axis=1)[:, ::-1] / self.params.reward_scale
        obs, tgt, masks, who, when = (np.concatenate(z) for z in zip(*out, strict=True))
        return obs, tgt, masks, (-togo[who, when]).astype(np.float32)

    # ------------------------------------------------------------------ serving, persistence
    def _chooser(self) -> Any:
        return _net_chooser(self.world_, self.net_, self._max_steps())

    def _expand(self) -> Any:
        """Beam key: the path's summed log-probability under the policy."""
        world, net, T = self.world_, self.net_, self._max_steps()

        def expand(nodes: Nodes, cand: Any) -> tuple[np.ndarray, None]:
            obs = torch.as_tensor(observations(world, nodes.states, nodes.used, nodes.steps, T, cand))
            with torch.inference_mode():
                logits = net.forward_actor(obs)
            return nodes.key[:, None] + masked_log_softmax(logits, cand.mask), None
        return expand

    def _build(self) -> SequentialScorer:
        return SequentialScorer(**_scorer_kwargs(self.world_, self.params))


@register
class SequentialPPO(SequentialPolicy):
    """MaskablePPO from scratch in ``recourse/Sequential-v0``."""

    method = "seq_maskable_ppo"


@register
class SequentialBC(SequentialPolicy):
    """Behaviour cloning of the sequencer's cheapest sequences."""

    method = "seq_bc"
    Params = SequentialBCParams


@register
class SequentialBCPPO(SequentialPolicy):
    """Behaviour cloning, then MaskablePPO fine-tuning."""

    method = "seq_bc_ppo"
    Params = SequentialBCPPOParams


# ---------------------------------------------------------------------------- no-learning baseline
def lookahead_choose(world: SequentialWorld, grid: FlatGrid, depth: int, estimate: bool = False) -> Any:
    """The greedy lookahead's step choice (see :class:`SequentialLookahead`)."""
    def choose(X: np.ndarray, used: np.ndarray, steps: np.ndarray, cand: Any) -> tuple[np.ndarray, np.ndarray]:
        B = len(X)
        base = world.score(X)
        acc_cost = np.where(cand.accepted, cand.cost, np.inf)
        best = acc_cost.min(1)
        pick = acc_cost.argmin(1)
        if depth == 2 and estimate:
            two = np.where(cand.two_step_checked, cand.two_step, np.inf)
            better = two.min(1) < best
            best, pick = np.where(better, two.min(1), best), np.where(better, two.argmin(1), pick)
        elif depth == 2:  # every (rejected step, accepting step) pair, batched over agents
            two, first = two_step_best(world, grid, X, used, cand, best)
            better = first >= 0  # strictly cheaper than the one-step best
            best, pick = np.where(better, two, best), np.where(better, first, pick)
        # no completion within the horizon: the best gain of decision score per unit cost
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(cand.mask, (cand.score - base[:, None]) / np.maximum(cand.cost, 1e-9), -np.inf)
        fallback = ~np.isfinite(best)
        pick[fallback] = gain[fallback].argmax(1)
        return pick, np.ones(B)
    return choose


@register
class SequentialLookahead(_SequentialGenerator):
    """Greedy lookahead over the same (action, value) grid, priced by the world: at each step,
    depth 1 takes the cheapest step that gets the agent accepted; depth 2 the first step of the
    cheapest completion with at most two steps (one step, or a rejected step and an accepting
    one; a search: every child's candidates); with ``estimate`` depth 2 uses instead the
    candidates' estimated two-step costs whose pair checks as accepted
    (:func:`envs.sequential_env.two_step_estimate`: no search, the speed of depth 1); where none
    exists, the step with the largest gain of the classifier's decision score per unit cost. No
    weights: ``fit`` only takes the world."""

    method = "seq_lookahead"
    Params = SequentialLookaheadParams
    params: SequentialLookaheadParams

    def fit(self, train: Any, val: Any, ctx: FitContext) -> SequentialLookahead:
        self._set_world(ctx)
        self.fit_info_ = {}
        return self

    def _chooser(self) -> Any:
        return lookahead_choose(self.world_, FlatGrid.of(self.world_), self.params.depth, self.params.estimate)

    def _expand(self) -> Any:
        """Beam key without learning: minus the path's estimated total cost (its price so far plus
        the candidate's pair-checked two-step estimate); steps with no estimate rank after those,
        by gain of decision score per unit cost."""
        world = self.world_

        def expand(nodes: Nodes, cand: Any) -> tuple[np.ndarray, None]:
            two = np.where(cand.two_step_checked, cand.two_step, np.inf)
            with np.errstate(invalid="ignore", divide="ignore"):
                gain = (cand.score - world.score(nodes.states)[:, None]) / np.maximum(cand.cost, 1e-9)
            est = -(nodes.cost[:, None] + two)
            return np.where(np.isfinite(est), est, -1e9 + np.clip(np.nan_to_num(gain, nan=-1e6), -1e6, 1e6)), None
        return expand


def sequential_context(world: SequentialWorld, seed: int = 0, run_dir: Path | None = None,
                       progress: bool = False) -> FitContext:
    """The :class:`FitContext` of a sequential world (``world`` is what the policies read; ``run_dir``
    keeps the exact expert's labels, ``progress`` shows their progress bar)."""
    return FitContext(world.n_features, world.n_actions, world.n_actions, action_names=world.action_names,
                      seed=seed, run_dir=run_dir, progress=progress, world=world)  # type: ignore[arg-type]
