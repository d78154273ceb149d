"""Data augmentation with worse-off agents (learning-CFE paper, Algorithm 1, AG1 and AG2).

A CFE "does more than required" on feature j of agent x when x already holds j and the CFE
provides it again, or when j is not required at all (x_j + sum_{a in I} a_j > t_j in the
paper's additive notation). Dropping any subset of those capabilities gives a worse-off agent
for which the same CFE still reaches acceptance; the augment is kept only when the exact solver
confirms that this CFE is still its *unique* optimum. Candidates are drawn at random among the
2^num subsets (enumerating all of them is exponential), verified in batch, and deduplicated
against each other and the training agents.

- AG1 adds up to ``per_agent`` verified augments for every training agent (more data for
  every CFE, in proportion).
- AG2 raises every CFE with fewer than ``min_count`` training agents toward ``min_count``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from data_gen.dataset import Split
from envs.capability import CapabilityWorld


def doing_more_than_required(world: CapabilityWorld, X: np.ndarray, sets: np.ndarray,
                             groups: np.ndarray | None) -> np.ndarray:
    """(B, n) bool: capabilities the agent holds that its CFE provides again or that are not needed."""
    provided = np.zeros(X.shape, dtype=bool)
    for col in range(sets.shape[1]):
        a = sets[:, col]
        provided[a >= 0] |= world.actions[a[a >= 0]]
    held = X.astype(bool)
    return held & (provided | ~world.thresholds_of(groups))


def _candidates(world, X, sets, groups, sources, draws, rng):
    src = np.repeat(sources, draws)
    ids = doing_more_than_required(world, X[src], sets[src], None if groups is None else groups[src])
    drop = ids & (rng.random(ids.shape) < rng.uniform(0.2, 0.8, (len(src), 1)))
    empty = ~drop.any(1) & ids.any(1)
    if empty.any():  # make sure each candidate drops something
        pick = np.argmax(ids[empty] * rng.random((empty.sum(), ids.shape[1])), axis=1)
        drop[np.flatnonzero(empty), pick] = True
    keep = drop.any(1)
    return (X[src[keep]] & ~drop[keep]).astype(np.uint8), src[keep]


def _verified(world, cand, src, sets, groups, solver):
    from data_gen.encodings import set_keys

    g = None if groups is None else groups[src]
    labels = solver.label_batch(world, cand, g if world.n_groups > 1 else None)
    width = sets.shape[1]
    found = labels.actions[:, :width] if labels.actions.shape[1] >= width else np.pad(
        labels.actions, ((0, 0), (0, width - labels.actions.shape[1])), constant_values=-1)
    same = (labels.n_optimal == 1) & (labels.length <= width)
    same &= set_keys(found, world.n_actions) == set_keys(sets[src], world.n_actions)
    return same


def augment(world: CapabilityWorld, train: Split, *, per_agent: int = 0, min_count: int = 0, draws: int = 4,
            rounds: int = 3, seed: int = 0, solver=None) -> tuple[Split, dict]:
    """Return the training split with verified worse-off augments added, and statistics."""
    if solver is None:
        from solvers.setcover_fast import FastSetCover

        solver = FastSetCover()
    rng = np.random.default_rng(seed)
    groups = train.groups if world.n_groups > 1 else None
    seen = {r.tobytes() for r in np.packbits(train.X, axis=1)}
    new_X, new_src = [], []

    def take(cand, src, quota_by_src=None, quota_by_class=None):
        ok = _verified(world, cand, src, train.sets, groups, solver)
        cand, src = cand[ok], src[ok]
        packed = np.packbits(cand, axis=1)
        taken = []
        used_src: dict[int, int] = {}
        used_cls: dict[int, int] = {}
        for i in range(len(cand)):  # bookkeeping over verified candidates only (few thousand)
            key = packed[i].tobytes()
            s = int(src[i])
            c = int(train.class_ids[s])
            if key in seen:
                continue
            if quota_by_src is not None and used_src.get(s, 0) >= quota_by_src:
                continue
            if quota_by_class is not None and used_cls.get(c, 0) >= quota_by_class.get(c, 0):
                continue
            seen.add(key)
            used_src[s] = used_src.get(s, 0) + 1
            used_cls[c] = used_cls.get(c, 0) + 1
            taken.append(i)
        return cand[taken], src[taken], used_cls

    stats = {"ag1_added": 0, "ag2_added": 0}
    if per_agent > 0:
        cand, src = _candidates(world, train.X, train.sets, groups, np.arange(len(train)), per_agent * draws, rng)
        c, s, _ = take(cand, src, quota_by_src=per_agent)
        new_X.append(c)
        new_src.append(s)
        stats["ag1_added"] = len(c)
    if min_count > 0:
        cls_all = np.concatenate([train.class_ids] + [train.class_ids[s] for s in new_src])
        counts = np.bincount(cls_all, minlength=int(train.class_ids.max(initial=-1)) + 1)
        stats["ag2_rare_cfes_before"] = int(((counts > 0) & (counts < min_count)).sum())
        for _ in range(rounds):
            need = {int(c): int(min_count - counts[c]) for c in np.flatnonzero((counts > 0) & (counts < min_count))}
            if not need:
                break
            sources = np.flatnonzero(np.isin(train.class_ids, list(need)))
            mult = max(1, min(64, int(np.ceil(draws * min_count / max(1, np.median(counts[list(need)]))))))
            cand, src = _candidates(world, train.X, train.sets, groups, sources, mult, rng)
            c, s, used = take(cand, src, quota_by_class=need)
            for k, v in used.items():
                counts[k] += v
            new_X.append(c)
            new_src.append(s)
            stats["ag2_added"] += len(c)
        stats["ag2_rare_cfes_after"] = int(((counts > 0) & (counts < min_count)).sum())
    if not new_X:
        return train, stats
    Xa = np.concatenate(new_X)
    src = np.concatenate(new_src)
    out = Split(np.concatenate([train.X, Xa]), np.concatenate([train.groups, train.groups[src]]),
                np.concatenate([train.sets, train.sets[src]]), np.concatenate([train.cost, train.cost[src]]),
                np.concatenate([train.class_ids, train.class_ids[src]]),
                np.concatenate([train.runtime, np.zeros(len(src))]))
    stats["train_before"], stats["train_after"] = len(train), len(out)
    return replace(out), stats
