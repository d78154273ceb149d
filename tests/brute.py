"""Reference brute force for small capability worlds (tests only; A <= ~12 actions).

Deliberately naive and independent of the solvers it checks: every subset (or every ordering of
every covering subset) of the agent's allowed actions is enumerated and priced by the world.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from envs.capability import CapabilityWorld

REL_TOL = 1e-9
_CHUNK = 1 << 16  # sequences per rollout call


def _agent(world: CapabilityWorld, x: np.ndarray, group: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The agent's deficit (n,) bool and its allowed action ids (K,)."""
    groups = None if group is None else np.array([group])
    deficit = world.deficits(np.asarray(x)[None], groups)[0]
    return deficit, np.flatnonzero(world.allowed(group))


def _covering_subsets(world: CapabilityWorld, deficit: np.ndarray, ids: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Every subset of ``ids`` whose union covers ``deficit``: (m, K) bool masks and their (m,) costs."""
    k = len(ids)
    masks = ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1).astype(bool)  # (2^K, K)
    gives = world.actions[ids][:, deficit].astype(np.int64)  # (K, |deficit|)
    covers = (masks.astype(np.int64) @ gives >= 1).all(axis=1)
    masks = masks[covers]
    return masks, masks.astype(float) @ world.costs[ids]


def brute_force_covers(world: CapabilityWorld, x: np.ndarray, group: int | None = None
                       ) -> tuple[float, list[tuple[int, ...]]]:
    """Optimal order-blind cover cost and ALL optimal covers (sorted id tuples, sorted list).

    ``(0.0, [()])`` when the agent is already accepted, ``(inf, [])`` when no cover exists.
    """
    deficit, ids = _agent(world, x, group)
    if not deficit.any():
        return 0.0, [()]
    masks, costs = _covering_subsets(world, deficit, ids)
    if len(costs) == 0:
        return math.inf, []
    best = float(costs.min())
    tied = masks[costs <= best * (1.0 + REL_TOL)]
    return best, sorted(tuple(int(a) for a in ids[row]) for row in tied)


def brute_force_sequence(world: CapabilityWorld, x: np.ndarray, group: int | None = None,
                         max_len: int | None = None, *, max_sequences: int = 10**7
                         ) -> tuple[float, tuple[int, ...] | None]:
    """The cheapest ordered sequence of distinct allowed actions that gets the agent accepted.

    Sequences are priced by :meth:`CapabilityWorld.rollout` (consequential discounts step by
    step). Only orderings of covering subsets are tried: the final state ``x | union`` does not
    depend on the order, so no other sequence can be valid. That is sum |S|! sequences over the
    covering subsets S; more than ``max_sequences`` raises (pass ``max_len`` on bigger worlds).
    ``(0.0, ())`` when already accepted, ``(inf, None)`` when no sequence of at most ``max_len``
    actions works.
    """
    deficit, ids = _agent(world, x, group)
    if not deficit.any():
        return 0.0, ()
    masks, _ = _covering_subsets(world, deficit, ids)
    sizes = masks.sum(axis=1)
    if max_len is not None:
        masks, sizes = masks[sizes <= max_len], sizes[sizes <= max_len]
    total = sum(math.factorial(int(k)) for k in sizes)
    if total > max_sequences:
        raise ValueError(f"brute_force_sequence: {total} orderings to try (> max_sequences={max_sequences}); "
                         "pass a smaller max_len")
    x = np.asarray(x, dtype=np.uint8)
    best_cost, best_seq = math.inf, None
    for size in np.unique(sizes):
        subsets = np.stack([ids[row] for row in masks[sizes == size]])  # (m, size)
        step = max(1, _CHUNK // len(subsets))
        perms = itertools.permutations(range(int(size)))
        while block := list(itertools.islice(perms, step)):
            for start in range(0, len(subsets), _CHUNK):
                seqs = subsets[start:start + _CHUNK][:, np.array(block)].reshape(-1, int(size))
                groups = None if group is None else np.full(len(seqs), group)
                _, cost, ok = world.rollout(np.broadcast_to(x, (len(seqs), len(x))), seqs, groups)
                cost = np.where(ok, cost, math.inf)
                i = int(np.argmin(cost))
                if cost[i] < best_cost:
                    best_cost, best_seq = float(cost[i]), tuple(int(a) for a in seqs[i])
    return best_cost, best_seq
