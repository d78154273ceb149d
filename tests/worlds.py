"""Small random capability worlds shared by the tests."""

from __future__ import annotations

import numpy as np

from envs.capability import CapabilityWorld


def random_world(seed: int, n: int = 6, A: int = 8, groups: int = 1, discounts: int = 0,
                 pa: float = 0.4) -> CapabilityWorld:
    rng = np.random.default_rng(seed)
    acts = rng.random((A, n)) < pa
    acts[~acts.any(1), rng.integers(0, n)] = True
    costs = rng.integers(1, 10, A).astype(float)
    access = rng.random((groups, A)) < 0.7 if groups > 1 else None
    edges = None
    if discounts:
        pairs = [(k, h) for k in range(n) for h in range(n) if k != h]
        pick = rng.choice(len(pairs), size=discounts, replace=False)
        edges = [(pairs[i][0], pairs[i][1], float(rng.uniform(0.2, 0.9))) for i in pick]
    return CapabilityWorld(acts.astype(np.uint8), costs, np.ones(n), access, edges)


def synthetic_world(n: int, A: int = 100, seed: int = 0) -> CapabilityWorld:
    """The paper's generator: Bernoulli(0.5) actions, integer coordinate costs in [1, n]."""
    rng = np.random.default_rng(seed)
    acts = rng.random((A, n)) < 0.5
    return CapabilityWorld(acts.astype(np.uint8), (acts @ rng.integers(1, n + 1, n)).astype(float), np.ones(n))
