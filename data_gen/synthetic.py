"""Synthetic capability worlds and agent populations (learning-CFE paper, section 4.1)."""

from __future__ import annotations

import numpy as np

from data_gen.config import MIX_VARIANTS, SyntheticDatasetConfig
from envs.capability import CapabilityWorld


def threshold_variant(name: str, n: int) -> np.ndarray:
    """The classifier variants of the paper: which capabilities are required."""
    t = np.zeros(n, dtype=np.uint8)
    if name == "all_ones":
        t[:] = 1
    elif name == "first5":
        t[:5] = 1
    elif name == "last5":
        t[-5:] = 1
    elif name == "first10":
        t[:10] = 1
    elif name == "last10":
        t[-10:] = 1
    elif name == "mid5":
        start = (n - 5) // 2
        t[start : start + 5] = 1
    else:
        raise ValueError(f"classifier: unknown variant {name!r}")
    return t


def _draw_actions(rng: np.random.Generator, count: int, n: int, pa: float) -> np.ndarray:
    """Bernoulli(pa) action rows, redrawing empty ones (an action must do something)."""
    acts = rng.random((count, n)) < pa
    while True:
        empty = ~acts.any(axis=1)
        if not empty.any():
            return acts
        if pa == 0.0:
            raise ValueError("pa: with pa = 0 every action is empty")
        acts[empty] = rng.random((empty.sum(), n)) < pa


def make_world(cfg: SyntheticDatasetConfig, rng: np.random.Generator) -> CapabilityWorld:
    """Draw the actions, their costs, the thresholds and the group access of a world."""
    n = cfg.n_features
    coord_cost = rng.integers(1, (cfg.max_coordinate_cost or n) + 1, size=n)
    access = None
    if cfg.groups == "probabilistic":
        acts = np.concatenate([_draw_actions(rng, cfg.n_actions, n, p) for p in cfg.group_pa])
        access = np.kron(np.eye(cfg.n_groups, dtype=bool), np.ones(cfg.n_actions, dtype=bool))
        names = [f"g{g}a{i}" for g in range(cfg.n_groups) for i in range(cfg.n_actions)]
    else:
        acts = _draw_actions(rng, cfg.n_actions, n, cfg.pa)
        names = [f"a{i}" for i in range(cfg.n_actions)]
        if cfg.groups == "manual":
            k = max(1, round(cfg.manual_fraction * cfg.n_actions))
            access = np.zeros((cfg.n_groups, cfg.n_actions), dtype=bool)
            for g in range(cfg.n_groups):
                access[g, rng.choice(cfg.n_actions, size=k, replace=False)] = True
    if cfg.classifier == "mix":
        thresholds = np.stack([threshold_variant(v, n) for v in MIX_VARIANTS])
    else:
        thresholds = threshold_variant(cfg.classifier, n)
    edges = []
    if cfg.n_discount_edges:
        pairs = np.array([(k, h) for k in range(n) for h in range(n) if k != h])
        pick = rng.choice(len(pairs), size=cfg.n_discount_edges, replace=False)
        factors = rng.uniform(*cfg.discount_range, size=cfg.n_discount_edges).round(3)
        edges = [(int(k), int(h), float(f)) for (k, h), f in zip(pairs[pick], factors, strict=True)]
    return CapabilityWorld(acts.astype(np.uint8), (acts @ coord_cost).astype(float), thresholds, access,
                           edges or None, names)


def sample_agents(cfg: SyntheticDatasetConfig, world: CapabilityWorld, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """Agents with each capability held with probability pf, and their hidden group."""
    X = (rng.random((cfg.n_agents, cfg.n_features)) < cfg.pf).astype(np.uint8)
    groups = rng.integers(0, world.n_groups, size=cfg.n_agents) if world.n_groups > 1 else None
    return X, groups
