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

**Code**: the rollout and its result in :mod:`~learners.policies.sequential_rollout`, the network
in :mod:`~learners.policies.sequential_net`, the imitation experts and training agents in
:mod:`~learners.policies.sequential_experts`; this module holds the hyperparameters and the
generators.

**Persistence**: ``weights.pt`` (state_dict of the scorer, ``weights_only=True``), ``world.json``
and ``config.json``; no pickles (the sb3 model is not saved: it is not needed to serve).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from envs.sequential import SequentialWorld
from envs.sequential_candidates import FlatGrid, candidates, observations
from learners.base import FitContext, Generator, register
from learners.policies.sequential_experts import expert_answers, expert_targets, heldout_split
from learners.policies.sequential_net import SequentialScorer, net_chooser, sb3_policy_class
from learners.policies.sequential_params import (
    SequentialBCParams,
    SequentialBCPPOParams,
    SequentialLookaheadParams,
    SequentialPolicyParams,
    SequentialRolloutParams,
)
from learners.policies.sequential_rollout import (
    MASKED_LOGIT,
    SequencePrediction,
    finish_prediction,
    lookahead_choose,
    masked_log_softmax,
    rollout,
)
from learners.policies.sequential_search import Nodes, beam_search
from learners.torch_training import torch_threads


def _scorer_kwargs(world: SequentialWorld, p: SequentialPolicyParams) -> dict[str, Any]:
    grid = FlatGrid.of(world)
    n = np.maximum(world.grid_sizes[grid.action] - 1, 1)
    return {"n_features": world.n_features, "n_actions": world.n_actions, "grid_action": grid.action.tolist(),
            "grid_position": (grid.position / n).tolist(), "hidden": tuple(p.hidden), "context_dim": p.context_dim,
            "embed_dim": p.embed_dim, "prior_scale": p.prior_scale}


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
        return finish_prediction(self.world_, X0, A, V, np.ones(len(X0)), t0, c0, stats)

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
                r = rollout(world, net_chooser(world, self.net_, self._max_steps()), Xv, self._max_steps(),
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
        return MaskablePPO(sb3_policy_class(), env, learning_rate=p.learning_rate, n_steps=p.n_steps,
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
                rollout(world, net_chooser(world, self.net_, T), X, T, p.rollout_chunk, record=record)
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
        return net_chooser(self.world_, self.net_, self._max_steps())

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
