"""The shared base of the RL policies: a policy is a generator (a greedy deterministic rollout).

The family is :class:`~envs.setcover_env.SetCoverEnv` over the training agents (``train.X`` and
their hidden ``train.groups``) of the world in ``FitContext.world``: each episode draws an agent,
an action adds capabilities at cost ``b_i * g_i(x)`` (order matters with consequential
discounts), and the episode ends when the classifier accepts. The methods (``method`` in a
config's ``policies:``) each have a module of this package: ``maskable_ppo``, ``bc`` and
``bc_ppo`` (:mod:`~learners.policies.ppo`, behaviour cloning in :mod:`~learners.policies.bc`),
``dqn`` (:mod:`~learners.policies.dqn`) and the no-learning ``lookahead`` baseline
(:mod:`~learners.policies.lookahead`); their networks are in :mod:`~learners.policies.networks`.

This module holds what they share: the hyperparameters (:class:`RolloutParams`,
:class:`PolicyParams`), the batched greedy rollout, held-out model selection, the serving and
persistence of a policy (:class:`PolicyGenerator`) and the sb3 training loop
(:class:`SB3PolicyGenerator`).

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
without sb3 and loaded with ``weights_only=True``), ``world.json`` (``world.to_dict()``) and,
for the sb3-trained methods, ``sb3_model.zip``, the full sb3 model to resume training. **sb3
zips contain pickles: load them only from trusted files** (:meth:`SB3PolicyGenerator.load_sb3`);
serving never reads them.
"""

from __future__ import annotations

import copy
import json
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from data_gen.dataset import Split
from envs.capability import CapabilityWorld
from learners.base import FitContext, Generator, Prediction, require_at_least
from learners.policies.networks import (
    ACTIVATIONS,
    MASKED_LOGIT,
    ActionScoringPolicy,
    CapabilityFeatures,
    build_net,
    export_net,
)
from learners.torch_training import torch_threads

ENV_ID = "recourse/SetCover-v0"
_ROLLOUT_CHUNK = 2048  # agents per forward pass in a rollout step (bounds the per-action tensors)


# ---------------------------------------------------------------------------- hyperparameters
@dataclass
class RolloutParams:
    """What serving any policy needs (the whole of the no-learning ``lookahead`` baseline's)."""

    max_steps: int | None = None  # step budget per episode and per rollout; None: the number of actions
    num_threads: int = 1  # torch intra-op threads in fit and predict (0: leave torch's setting; small nets: 1)

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps: must be >= 1 or None, got {self.max_steps}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads: must be >= 0, got {self.num_threads}")


@dataclass
class PolicyParams(RolloutParams):
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
    eval_freq: int = 10_000  # environment steps between evaluations on held-out agents (0: none)
    n_eval_episodes: int = 100  # episodes of each sb3 EvalCallback evaluation
    checkpoint_freq: int = 50_000  # environment steps between sb3 checkpoints under run_dir (0: none)
    val_fraction: float = 0.05  # share of training agents held out for model selection (no val split)
    max_val_agents: int = 1000  # at most this many held-out agents
    keep_best: bool = True  # end with the weights best on the held-out agents (validity, mean cost)

    def __post_init__(self) -> None:
        super().__post_init__()
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
        require_at_least(self, 0, "total_timesteps", "eval_freq", "checkpoint_freq")
        require_at_least(self, 1, "n_envs", "n_eval_episodes", "max_val_agents")
        if not 0.0 < self.learning_rate:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma: must be in (0, 1], got {self.gamma}")
        if self.reward_scale is not None and not self.reward_scale > 0:
            raise ValueError(f"reward_scale: must be > 0 or None, got {self.reward_scale}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction: must be in (0, 1), got {self.val_fraction}")


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
        logits = torch.where(mask, scores.float(), torch.tensor(MASKED_LOGIT))
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
def world_of(ctx: FitContext, method: str) -> CapabilityWorld:
    """The world a policy acts in, or a ValueError saying how to provide it."""
    if not isinstance(ctx.world, CapabilityWorld):
        raise ValueError(f"ctx.world: {method} acts in the world; build the context with "
                         "FitContext.from_world(world, ...)")
    return ctx.world


class PolicyGenerator(Generator):
    """A policy served as a greedy batched rollout of a network in its world (see the module doc).

    A fitted policy holds ``world_``, the serving network ``net_`` (rebuilt by
    :func:`~learners.policies.networks.build_net` from ``net_cfg_``), ``reward_scale_`` and
    ``fit_info_``; this class serves and persists them, subclasses say how ``fit`` makes them."""

    params: RolloutParams

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


class SB3PolicyGenerator(PolicyGenerator):
    """A policy trained by a stable-baselines3 algorithm in SetCoverEnv (subclasses name the
    algorithm and its arguments); the full sb3 model is kept to resume training."""

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
        """SetCoverEnv's arguments for a family of agents."""
        return {"world": world, "agents": X, "groups": groups, "max_steps": self.params.max_steps,
                "reward_scale": self.reward_scale_, "render_mode": None}

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

    def _warm_start(self, model: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None,
                    sets: np.ndarray, heldout: HeldOut, ctx: FitContext) -> dict[str, Any] | None:
        """Train the fresh sb3 model before RL (behaviour cloning); returns its facts, or None."""
        return None

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> SB3PolicyGenerator:
        from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.logger import configure
        from stable_baselines3.common.utils import set_random_seed
        from stable_baselines3.common.vec_env import DummyVecEnv

        import envs  # noqa: F401  (registers recourse/SetCover-v0)

        world = world_of(ctx, self.method)
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
            warm = self._warm_start(model, world, Xt, gt, train.sets[rows], heldout, ctx)
            if warm is not None:
                info["bc"] = warm
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

    # ------------------------------------------------------------------ persistence
    def _save_state(self, path: Path) -> dict[str, Any]:
        meta = super()._save_state(path)
        zip_path = path / "sb3_model.zip"
        if getattr(self, "model_", None) is not None:
            self.model_.save(zip_path)
        elif self._sb3_source is not None and self._sb3_source.exists() and self._sb3_source != zip_path:
            zip_path.write_bytes(self._sb3_source.read_bytes())
        return meta

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        super()._load_state(path, meta)
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
