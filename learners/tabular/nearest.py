"""``nearest_cfe``: no learning, the baseline. The k nearest training agents (Euclidean on the
schema-scaled rows) lend their MACE counterfactual."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.base import TabularGenerator, TabularLabels
from learners.tabular.geometry import WorldGeometry


@dataclass
class NearestCfeParams:
    """Hyperparameters of the k-nearest-neighbour baseline."""

    k: int = 10  # training agents that lend their counterfactual (2k candidates: absolute and relative)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; a forest: one round of the joint scale, then its exact split sweep; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)

    def __post_init__(self) -> None:
        if int(self.k) < 1:
            raise ValueError(f"k: must be >= 1, got {self.k}")


class NearestCfeGenerator(TabularGenerator):
    """No learning: the nearest training agents' MACE answers, transplanted and verified."""

    method = "nearest_cfe"
    Params = NearestCfeParams

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> NearestCfeGenerator:
        self._store(world, labels)
        return self

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        return self._lend(WorldGeometry.of(world), X, self._neighbours(X, int(self.params.k)))
