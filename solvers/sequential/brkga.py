"""The CSCF sequencer: a multi-objective biased random-key genetic algorithm (CSCF section 4).

Genotype: 2·|A| random keys in [0, 1]. The first |A| order the actions (argsort; a key > 0.5
makes its action inactive), the second |A| pick each action's value: key k of an action with a
value grid of n values decodes to grid position floor(k · n) (CSCF interpolates into a range; the
grid makes the sequencer, the exact search and the RL environment share one discretization).

Objectives, all minimized (Eq. 3): the sequence cost C_S (discounted, c = b · g), the Gower
distance between x_0 and x_T, and how often each raw feature is changed (o_{2+h}; features no
action touches are left out, they are constant). Feasible: every pre/post condition held, the
classifier accepts x_T (and at most ``max_length`` actions when set).

Generation loop (CSCF's settings are the defaults): the elites are the first non-dominated front
of the feasible individuals (pymoo's non-dominated sorting), duplicates (same decoded sequence)
removed; with no feasible individual, the front of (constraint violation, cost), which walks
the search toward acceptance. Then 400 offspring by biased crossover (an elite and a non-elite
parent, each key from the elite with probability 0.7) and 100 fresh random mutants; no mutation
operator. Every generation decodes and evaluates all new individuals at once: one batched
rollout through the world and one batched classifier call over the distinct decoded sequences
(children equal to an elite reuse its result; CSCF decoded one individual at a time, about 100 s
per Adult instance). After the last generation, unless ``polish=0``, the batched local search of
:mod:`solvers.sequential.polish` refines the cheapest sequence of the 10 cheapest action orders
(a departure from CSCF that closes the value-tuning gap; see ``docs/sequential.md``).

This is a heuristic: its cheapest sequence is not certified optimal (``Recourse.optimal`` is
None). :class:`~solvers.sequential.exact.ExactSequenceSearch` measures the gap on the grid.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from envs.recourse import Recourse
from envs.sequential import SequentialWorld
from solvers.base import Solver
from solvers.sequential._blas import blas_limit
from solvers.sequential.polish import descend


@dataclass
class Population:
    """Genotypes and their decoded, evaluated phenotypes (all arrays share the first axis)."""

    keys: np.ndarray  # (P, 2A) genotypes
    actions: np.ndarray  # (P, A) action ids in order, -1 after the last active one
    value_index: np.ndarray  # (P, A) grid position of each step's value, -1 where no step
    F: np.ndarray  # (P, 2 + H) objectives: cost, Gower, tweak counts of the touched features
    violation: np.ndarray  # (P,) 0 iff feasible

    @property
    def feasible(self) -> np.ndarray:
        return self.violation == 0

    def take(self, idx: np.ndarray) -> Population:
        return Population(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    @staticmethod
    def concat(parts: list[Population]) -> Population:
        return Population(*(np.concatenate([getattr(p, f) for p in parts]) for f in Population.__dataclass_fields__))


def decode(world: SequentialWorld, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Genotypes (P, 2A) -> ordered action ids (P, A; -1 = inactive, actives first) and the grid
    position of each step's value (-1 where no step)."""
    A = world.n_actions
    keys = np.atleast_2d(keys)
    if keys.shape[1] != 2 * A:
        raise ValueError(f"keys: expected 2 x {A} = {2 * A} random keys per individual, got {keys.shape[1]}")
    order = np.argsort(keys[:, :A], axis=1, kind="stable")
    active = np.take_along_axis(keys[:, :A], order, axis=1) <= 0.5
    index = np.minimum((keys[:, A:] * world.grid_sizes).astype(np.int64), world.grid_sizes - 1)  # per action id
    return np.where(active, order, -1), np.where(active, np.take_along_axis(index, order, axis=1), -1)


def encode(world: SequentialWorld, actions: np.ndarray, index: np.ndarray) -> np.ndarray:
    """A genotype of each sequence (the inverse of :func:`decode`): step t's action gets key
    t / (2A), inactive actions 0.75, and each value key is the middle of its grid cell."""
    P, A = actions.shape
    keys = np.full((P, 2 * A), 0.75)
    rows, pos = np.nonzero(actions >= 0)
    a = actions[rows, pos]
    keys[rows, a] = pos / (2 * A)
    keys[rows, A + a] = (index[rows, pos] + 0.5) / world.grid_sizes[a]
    return keys


def step_values(world: SequentialWorld, actions: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Each step's value in raw units (NaN where no step or an assign action)."""
    return np.where(actions >= 0, world.grid_values[np.maximum(actions, 0), np.maximum(index, 0)], np.nan)


class BRKGASequencer(Solver):
    """Multi-objective BRKGA over ordered (action, value) sequences; returns the final Pareto front."""

    name = "brkga"
    exact = False

    def __init__(self, pop_size: int = 500, n_offspring: int = 400, n_mutants: int = 100, bias: float = 0.7,
                 n_generations: int = 150, max_elites: int | None = None, max_length: int | None = None,
                 polish: int = 10, seed: int | None = 0, blas_threads: int | None = 1):
        self.pop_size = pop_size  # size of the random initial population (CSCF: 500)
        self.n_offspring = n_offspring  # biased-crossover children per generation (CSCF: 400)
        self.n_mutants = n_mutants  # fresh random individuals per generation (CSCF: 100)
        self.bias = bias  # probability that a child's key comes from its elite parent (CSCF: 0.7)
        self.n_generations = n_generations  # generations after the initial population (CSCF: 150)
        self.max_elites = max_elites  # keep at most this many (cheapest) front members as elites; None: all
        self.max_length = max_length  # longer sequences are infeasible; None: any length up to |A| (CSCF)
        self.polish = polish  # local search from the cheapest sequence of this many action orders (0: CSCF alone)
        self.seed = seed  # seed of the random keys (None: fresh entropy)
        self.blas_threads = blas_threads  # BLAS threads while solving: 1 is ~20x faster on 500-row batches

    def _check(self) -> None:
        for k in ("pop_size", "n_offspring", "n_generations"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k}: must be >= 1, got {getattr(self, k)}")
        if self.n_mutants < 0:
            raise ValueError(f"n_mutants: must be >= 0, got {self.n_mutants}")
        if not 0.0 <= self.bias <= 1.0:
            raise ValueError(f"bias: must be in [0, 1], got {self.bias}")
        if self.max_elites is not None and self.max_elites < 1:
            raise ValueError(f"max_elites: must be >= 1 or None, got {self.max_elites}")
        if self.polish < 0:
            raise ValueError(f"polish: must be >= 0, got {self.polish}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length: must be >= 1 or None, got {self.max_length}")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, world: SequentialWorld, x0: np.ndarray, keys: np.ndarray, touched: np.ndarray,
                 actions: np.ndarray | None = None, index: np.ndarray | None = None,
                 known: Population | None = None) -> Population:
        """Decode (unless the phenotypes are given) and evaluate a whole population at once.

        Each distinct decoded sequence is evaluated once (one rollout, one classifier call for all
        of them); sequences equal to one in ``known`` (the elites carried over) reuse its result.
        """
        if actions is None or index is None:
            actions, index = decode(world, keys)
        E = 0 if known is None else len(known.keys)
        seqs = np.concatenate([actions, index], axis=1)
        if E:
            seqs = np.concatenate([np.concatenate([known.actions, known.value_index], axis=1), seqs])
        _, first, inverse = np.unique(seqs, axis=0, return_index=True, return_inverse=True)
        todo = first >= E  # distinct sequences no known individual has
        rows = first[todo] - E
        F_new, v_new = self._objectives(world, x0, actions[rows], index[rows], touched)
        F = np.empty((len(first), F_new.shape[1]))
        violation = np.empty(len(first))
        F[todo], violation[todo] = F_new, v_new
        if E:
            F[~todo], violation[~todo] = known.F[first[~todo]], known.violation[first[~todo]]
        inverse = inverse.reshape(-1)[E:]
        return Population(keys, actions, index, F[inverse], violation[inverse])

    def _objectives(self, world: SequentialWorld, x0: np.ndarray, actions: np.ndarray, index: np.ndarray,
                    touched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(objectives, constraint violation) of distinct sequences: one rollout, one model call."""
        r = world.rollout(np.broadcast_to(x0, (len(actions), len(x0))), actions, step_values(world, actions, index))
        score = world.score(r.final)
        length = (actions >= 0).sum(axis=1)
        too_long = 0 if self.max_length is None else np.maximum(length - self.max_length, 0)
        with np.errstate(over="ignore"):
            rejected = np.where(score > 0, 0.0, 1.0 + 1.0 / (1.0 + np.exp(score)))  # in [1.5, 2), falls with score
        violation = r.failed + too_long + rejected
        cost = np.where(np.isfinite(r.cost), r.cost, np.inf)
        F = np.column_stack([cost, world.gower(x0, r.final), world.tweak_counts(actions)[:, touched]])
        return F, violation.astype(float)

    def elites(self, pop: Population) -> np.ndarray:
        """Indices of the elites: the first front of the feasible individuals (or, with none
        feasible, of (violation, cost)), one per distinct decoded sequence."""
        feasible = np.flatnonzero(pop.feasible)
        if len(feasible):
            idx = feasible[NonDominatedSorting().do(pop.F[feasible], only_non_dominated_front=True)]
        else:
            pts = np.column_stack([pop.violation, np.nan_to_num(pop.F[:, 0], posinf=1e300)])
            idx = NonDominatedSorting().do(pts, only_non_dominated_front=True)
        idx = np.asarray(idx, dtype=np.int64)
        seq = np.concatenate([pop.actions[idx], pop.value_index[idx]], axis=1)
        _, first = np.unique(seq, axis=0, return_index=True)
        idx = idx[np.sort(first)]
        if self.max_elites is not None and len(idx) > self.max_elites:
            idx = idx[np.argsort(pop.F[idx, 0], kind="stable")[: self.max_elites]]
        return idx

    # ------------------------------------------------------------------ the loop
    def run(self, world: SequentialWorld, x0: np.ndarray) -> tuple[Population, dict[str, Any]]:
        """The evolved final population and run statistics (no checks; see :meth:`solve`)."""
        self._check()
        rng = np.random.default_rng(self.seed)
        A = world.n_actions
        touched = world.affected.any(axis=0)
        pop = self.evaluate(world, x0, rng.random((self.pop_size, 2 * A)), touched)
        n_eval = len(pop.keys)
        for _ in range(self.n_generations):
            elite_idx = self.elites(pop)
            rest = np.setdiff1d(np.arange(len(pop.keys)), elite_idx, assume_unique=True)
            if len(rest) == 0:
                rest = np.arange(len(pop.keys))
            e = pop.keys[elite_idx[rng.integers(len(elite_idx), size=self.n_offspring)]]
            o = pop.keys[rest[rng.integers(len(rest), size=self.n_offspring)]]
            children = np.where(rng.random(e.shape) < self.bias, e, o)
            new = np.concatenate([children, rng.random((self.n_mutants, 2 * A))])
            elites = pop.take(elite_idx)
            pop = Population.concat([elites, self.evaluate(world, x0, new, touched, known=elites)])
            n_eval += len(new)
        stats = {"evaluations": n_eval, "generations": self.n_generations, "polish_rounds": 0}
        feasible = np.flatnonzero(pop.feasible)
        if self.polish and len(feasible):
            # multi-start: the cheapest feasible member of each distinct ordered action tuple
            by_cost = feasible[np.argsort(pop.F[feasible, 0], kind="stable")]
            _, first = np.unique(pop.actions[by_cost], axis=0, return_index=True)
            top = by_cost[np.sort(first)[: self.polish]]
            counted = [0]

            def cost_of(actions: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                q = self.evaluate(world, x0, encode(world, actions, index), touched, actions, index)
                counted[0] += len(actions)
                return q.F[:, 0], q.feasible

            acts, idx, stats["polish_rounds"] = descend(world, x0, pop.actions[top], pop.value_index[top], pop.F[top, 0],
                                                        cost_of, self.max_length)
            pop = Population.concat([pop, self.evaluate(world, x0, encode(world, acts, idx), touched, acts, idx)])
            stats["evaluations"] += counted[0] + len(acts)
        return pop, stats

    def solve(self, world: SequentialWorld, x: np.ndarray, **options: Any) -> list[Recourse]:
        """The final Pareto front, cheapest first (ties: smaller Gower distance); one
        ``Recourse.none`` (status ``unknown``: a heuristic proves nothing) when no feasible sequence
        was found."""
        with blas_limit(self.blas_threads):
            return self._solve(world, x)

    def _solve(self, world: SequentialWorld, x: np.ndarray) -> list[Recourse]:
        t0 = time.perf_counter()
        X = world.validate(x)
        if len(X) != 1:
            raise ValueError(f"x: expected one agent, got {len(X)} rows")
        x0 = X[0]
        if world.accepts(x0)[0]:
            return [world.evaluate(x0, [], method=self.name, runtime=time.perf_counter() - t0,
                                   already_accepted=True)]
        pop, stats = self.run(world, x0)
        front = [i for i in self.elites(pop) if pop.feasible[i]]
        runtime = time.perf_counter() - t0
        if not front:
            return [Recourse.none(self.name, status="unknown", runtime=runtime,
                                  reason=f"no feasible sequence after {stats['evaluations']} evaluations")]
        front.sort(key=lambda i: (pop.F[i, 0], pop.F[i, 1]))
        out = []
        for i in front:
            steps = [(int(a), None if np.isnan(v) else float(v))
                     for a, v in zip(pop.actions[i], step_values(world, pop.actions[i:i + 1], pop.value_index[i:i + 1])[0],
                                     strict=True) if a >= 0]
            out.append(world.evaluate(x0, steps, method=self.name, runtime=runtime, front_size=len(front),
                                      objectives=pop.F[i].tolist(), **stats))
        return out
