"""The uniform solver interface.

Every solver follows the scikit-learn convention: ``__init__`` only stores its (typed,
documented) parameters; work happens in ``solve(world, x)``, which returns a list of
:class:`~envs.recourse.Recourse` (best first; more than one where the method returns a diverse
set or a Pareto front), and ``solve_batch(world, X)``, which returns the best recourse per agent.

Set-cover solvers additionally implement ``label_batch``, the array-valued fast path that data
generation uses: optimal cost, optimal action set, and whether that optimum is unique.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from envs.capability import CapabilityWorld
from envs.recourse import Recourse


class Solver(ABC):
    """Base class of every per-agent method."""

    name: ClassVar[str] = "solver"
    exact: ClassVar[bool] = False  # does the method certify optimality?

    def get_params(self) -> dict[str, Any]:
        return dict(vars(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    @abstractmethod
    def solve(self, world: Any, x: np.ndarray, **options: Any) -> list[Recourse]:
        """Recourse for one agent, best first; ``[Recourse.none(...)]`` when there is none."""

    def solve_batch(self, world: Any, X: np.ndarray, **options: Any) -> list[Recourse]:
        """Best recourse per agent (override where batching pays)."""
        return [self.solve(world, x, **options)[0] for x in np.atleast_2d(X)]


@dataclass
class CoverLabels:
    """Array results of a set-cover solver over a batch of agents.

    ``actions`` holds each optimal set as ascending action ids padded with -1; ``n_optimal`` is
    0 when the agent has no cover, 1 when the optimum is unique and 2 when there are at least
    two optimal sets (or when uniqueness was not checked, -1).
    """

    cost: np.ndarray  # (B,) optimal cost, inf when no cover
    actions: np.ndarray  # (B, L) int, padded with -1
    n_optimal: np.ndarray  # (B,) int8
    runtime: np.ndarray  # (B,) seconds spent on each agent (batch time shared evenly)

    @property
    def length(self) -> np.ndarray:
        return (self.actions >= 0).sum(axis=1)

    @property
    def has_cover(self) -> np.ndarray:
        return np.isfinite(self.cost)

    @staticmethod
    def pack(sets: list[tuple[int, ...]]) -> np.ndarray:
        width = max([len(s) for s in sets], default=0) or 1
        out = np.full((len(sets), width), -1, dtype=np.int64)
        for i, s in enumerate(sets):
            out[i, : len(s)] = sorted(s)
        return out


class SetCoverSolver(Solver):
    """A solver of the capability world's weighted set cover (order-blind costs)."""

    exact = True

    @abstractmethod
    def label_batch(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None) -> CoverLabels:
        """Optimal cover, its cost and its uniqueness for every agent of a batch."""

    def solve(self, world: CapabilityWorld, x: np.ndarray, group: int | None = None, **options: Any) -> list[Recourse]:
        return self.solve_batch(world, np.atleast_2d(x), None if group is None else np.array([group]))[:1]

    def solve_batch(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None,
                    **options: Any) -> list[Recourse]:
        X, groups = world.validate_agents(X, groups)
        t0 = time.perf_counter()
        labels = self.label_batch(world, X, groups)
        elapsed = time.perf_counter() - t0
        final, priced, valid = world.rollout(X, labels.actions, groups)
        out = []
        for i in range(len(X)):
            rt = float(labels.runtime[i]) if labels.runtime is not None else elapsed / len(X)
            if not labels.has_cover[i]:
                out.append(Recourse.none(self.name, runtime=rt, reason="no set of allowed actions covers the deficit"))
                continue
            ids = tuple(int(a) for a in labels.actions[i] if a >= 0)
            # With consequential discounts the set is priced in the order returned and is not
            # certified optimal: the ILP is order-blind (use the uniform-cost search there).
            out.append(Recourse(tuple((world.action_names[a], None) for a in ids), ids, final[i],
                                float(priced[i]), bool(valid[i]), self.name, runtime=rt,
                                optimal=not world.order_matters,
                                extra={"unique": bool(labels.n_optimal[i] == 1) if labels.n_optimal[i] >= 0 else None}))
        return out
