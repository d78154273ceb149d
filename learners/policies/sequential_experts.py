"""Training data of the sequential policies: imitation experts, their targets, model-selection agents.

The experts are the greedy lookaheads' rollouts or the exact grid reference
(:func:`expert_answers`); :func:`expert_targets` takes the cheaper of a label and the expert's
answer and adds recombined agents (:func:`recombined_agents`); :func:`heldout_split` sets the
agents that pick the best weights aside.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from envs.sequential import SequentialWorld
from envs.sequential_candidates import FlatGrid
from learners.base import FitContext
from learners.policies.sequential_params import ExpertParams
from learners.policies.sequential_rollout import lookahead_choose, rollout


def pad_to(a: np.ndarray, width: int, fill: float = -1) -> np.ndarray:
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
        A, V = pad_to(A, w), pad_to(V, w, np.nan)
        A[better], V[better] = pad_to(EA, w)[better], pad_to(EV, w, np.nan)[better]
        info["relabelled_by_expert"] = int(better.sum())
    if augment:
        Xs = recombined_agents(world, X, augment, rng)
        ok, EA, EV = answers(Xs)
        w = max(A.shape[1], EA.shape[1])
        X = np.concatenate([X, Xs[ok]])
        A = np.concatenate([pad_to(A, w), pad_to(EA[ok], w)])
        V = np.concatenate([pad_to(V, w, np.nan), pad_to(EV[ok], w, np.nan)])
        info["augmented_agents"] = int(ok.sum())
    return X, A, V, info
