"""Behaviour cloning from exact labels: the warm start of the MaskablePPO network (``bc_epochs``
of :class:`~learners.policies.ppo.MaskablePPOParams`; the whole of the ``bc`` method, the first
phase of ``bc_ppo``).

The label of an agent is its optimal recourse as an action sequence: without discounts the
dataset's optimal set (unique, from the exact set cover) in canonical ascending order; with
discounts (``world.order_matters``) the exact :class:`~solvers.ucs.UniformCostSearch` sequence,
computed for at most ``bc_label_agents`` training agents (default 8000; about 20 ms each at 20
features and 100 actions: the bound keeps labelling to minutes; the rest are not cloned, RL
fine-tuning still sees them).

The loss is the cross-entropy of the masked action logits on every (state, next optimal action)
pair along the label, trained directly on the sb3 policy's network, plus ``bc_value_coef`` times
the squared error of the value head on the label's return-to-go (so that PPO fine-tuning starts
with a fitted critic). A label often admits several optimal next actions: without discounts
every remaining action of the optimal set, with discounts every action that starts a cheapest
ordering of the label's remaining actions (all orderings are priced). ``bc_target="set"``
(default) maximises the probability of choosing any of them; ``"sequence"`` is the plain
cross-entropy on the label's next action.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from data_gen.progress import progress_bar
from envs.capability import CapabilityWorld
from learners.policies.base import HeldOut
from learners.policies.networks import MASKED_LOGIT


class CloningParams(Protocol):
    """What behaviour cloning reads of a policy's hyperparameters (``MaskablePPOParams`` has them all)."""

    bc_epochs: int
    bc_batch_size: int
    bc_learning_rate: float
    bc_label_agents: int
    bc_target: str
    bc_value_coef: float
    gamma: float
    keep_best: bool

_MAX_PERMUTED = 6  # optimal_first_actions: longer remainders are not permuted (6! = 720 orders)


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
    from solvers.ucs import UniformCostSearch

    ucs = UniformCostSearch()
    rows, seqs = [], []
    for i in progress_bar(range(min(limit, len(X))), desc="UCS labels", enabled=progress, leave=False):
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


def behaviour_clone(model: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None,
                    sets: np.ndarray, heldout: HeldOut, p: CloningParams, reward_scale: float, seed: int,
                    progress: bool = False, method: str = "bc") -> dict[str, Any]:
    """Clone the exact labels of agents ``X`` (their optimal ``sets``) into the sb3 MaskablePPO
    ``model``, in place: supervised cross-entropy of the masked action logits on (state, next
    optimal action) pairs, plus the value head's return-to-go regression, for ``p.bc_epochs``
    epochs, each followed by a held-out evaluation (the best weights are kept with
    ``p.keep_best``). Returns JSON-able facts (label agents, pairs, per-epoch loss, seconds)."""
    t0 = time.perf_counter()
    rows, seqs = expert_sequences(world, X, groups, sets, p.bc_label_agents, progress)
    label_seconds = time.perf_counter() - t0
    if len(rows) == 0:
        raise ValueError(f"{method}: no training agent has an exact label to clone")
    data = expert_pairs(world, X[rows], None if groups is None else groups[rows], seqs, p.gamma, reward_scale)
    # "set": every action that starts a cheapest ordering of the label's remaining actions is
    # a correct next action (without discounts, any of them); "sequence": the label's next.
    target = data["optimal_next"] if p.bc_target == "set" else F.one_hot(data["action"], world.n_actions).bool()
    policy = model.policy
    if not policy.share_features_extractor:
        raise ValueError(f"{method}: behaviour cloning expects a shared features extractor")
    with torch.no_grad():  # the features have no weights: computed once
        feats = torch.cat([policy.extract_features(data["obs"][i : i + 4096])
                           for i in range(0, len(data["obs"]), 4096)])
    heldout.evaluate(model, 0, "bc")  # the initial policy (with lookahead: the prior) competes too
    policy.set_training_mode(True)
    opt = torch.optim.Adam(policy.parameters(), lr=p.bc_learning_rate)
    gen = torch.Generator().manual_seed(seed)
    n = len(feats)
    losses = []
    for epoch in range(p.bc_epochs):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for i in range(0, n, p.bc_batch_size):
            b = perm[i : i + p.bc_batch_size]
            latent_pi, latent_vf = policy.mlp_extractor(feats[b])
            logits = torch.where(data["mask"][b], policy.action_net(latent_pi), torch.tensor(MASKED_LOGIT))
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
