"""Inference of the sequential policies: the batched greedy rollout and what it returns.

:func:`rollout` answers every agent of a batch with an ordered (action, value) sequence: at each
step the candidates of all agents still rejected are computed at once
(:func:`envs.sequential_env.candidates`), a ``choose`` function picks one per agent (a network's
argmax, :func:`learners.policies.sequential_net.net_chooser`, or the no-learning
:func:`lookahead_choose`), and :func:`finish_prediction` prices the sequences by the world.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from envs.sequential import SequentialWorld
from envs.sequential_candidates import FlatGrid, candidates
from learners.base import Prediction
from learners.policies.sequential_twostep import two_step_best

MASKED_LOGIT = -1e8


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


def finish_prediction(world: SequentialWorld, X0: np.ndarray, A: np.ndarray, V: np.ndarray, conf: np.ndarray,
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
    return finish_prediction(world, X0, A, V, conf, t0, c0,
                   {"nodes_per_agent": n_nodes / max(B, 1), "scored_per_agent": n_nodes * grid.size / max(B, 1)})


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
