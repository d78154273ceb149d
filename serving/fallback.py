"""Verified answers with an exact fallback: the generator proposes, the world checks, the exact
solver replaces what fails.

:class:`VerifiedRecommender` answers a batch of validated agents in two steps, so that the HTTP
layer can run the fast one on the event loop and only the waiting one on a worker thread:

- :meth:`~VerifiedRecommender.first_pass` (never waits): an agent the classifier already
  accepts gets status ``already_positive``; an agent whose deficit no allowed action set can
  cover gets ``no_recourse`` (exact: the union of the allowed actions misses a needed
  capability); every other agent gets the generator's set, checked with ``world.rollout``
  (accepted at the end, every action allowed to the agent's group, none twice) and priced there;
- :meth:`~VerifiedRecommender.complete` (waits at most the budget): an invalid generated set is
  replaced by the exact branch and bound (:class:`FallbackSolver`). Agents the solver has not
  reached within the budget get status ``unknown`` with ``budget_exceeded`` set, instead of a
  hung request; the solver's unfinished chunk completes in the background into a cache, so a
  retry is usually instant.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from envs.capability import CapabilityWorld
from learners.base import Generator
from solvers.setcover_fast import FastSetCover

log = logging.getLogger("recourse_gym.serve")

Status = Literal["ok", "no_recourse", "already_positive", "unknown"]
WORLD_METHOD = "world"  # answered by the world model alone (already accepted, or provably no cover)

# numba's parallel kernels must not be entered from two threads at once (the workqueue threading
# layer aborts), so every fallback solve in the process goes through this single thread.
_SOLVER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="setcover-fallback")
FALLBACK_CHUNK = 256  # agents per solver call: the unit of progress within the budget
CACHE_SIZE = 100_000  # (group, deficit) patterns whose exact answer is kept


class BackgroundCache:
    """Answers of slow solver jobs, kept in an LRU cache by key, with the jobs run on one thread.

    A request submits a job for the keys it misses and waits for it at most until its deadline;
    a job it gave up on still finishes on the worker thread and its answers go into the cache
    (the done callback runs whether or not anyone still waits), so a retry of the same request
    is answered from the cache. A key whose job is still running is not submitted twice: a second
    request waits on the same job. Used by the capability world's exact fallback and by the
    tabular worlds' GeCo -> MACE chain (:mod:`serving.tabular`).
    """

    def __init__(self, executor: ThreadPoolExecutor, size: int = CACHE_SIZE):
        self.executor, self.size = executor, size
        self.cache: OrderedDict[Hashable, Any] = OrderedDict()
        self.running: dict[Hashable, Future] = {}
        self.lock = threading.Lock()

    def get(self, keys: list[Hashable]) -> list[Any]:
        """The cached answer per key (None where there is none yet)."""
        with self.lock:
            return [self.cache.get(k) for k in keys]

    def put(self, keys: list[Hashable], values: list[Any]) -> None:
        with self.lock:
            for key, v in zip(keys, values, strict=True):
                self.cache[key] = v
                self.cache.move_to_end(key)
                self.running.pop(key, None)
            while len(self.cache) > self.size:
                self.cache.popitem(last=False)

    def submit(self, keys: list[Hashable], fn: Callable[..., Any], *args: Any,
               split: Callable[[Any], list[Any]] = lambda r: [r]) -> Future:
        """Run ``fn(*args)`` on the worker thread; ``split(result)`` gives one answer per key, cached
        when the job finishes (a failed job caches nothing). A one-key job whose key is already
        running is joined instead of submitted again."""
        with self.lock:
            if len(keys) == 1 and keys[0] in self.running:
                return self.running[keys[0]]
            fut = self.executor.submit(fn, *args)
            if len(keys) == 1:
                self.running[keys[0]] = fut

        def store(f: Future) -> None:
            if f.cancelled() or f.exception() is not None:
                with self.lock:
                    if len(keys) == 1 and self.running.get(keys[0]) is f:
                        del self.running[keys[0]]
                return
            self.put(keys, split(f.result()))

        fut.add_done_callback(store)
        return fut

    @staticmethod
    def wait(fut: Future, t_end: float, drop_queued: bool = True) -> tuple[bool, Any]:
        """``(True, result)`` if the job finishes before ``t_end`` (perf_counter time; inf: no
        limit), else ``(False, None)``: a job still running finishes into the cache, one still
        queued is dropped (``drop_queued``) or left to run later. A job that raised gives
        ``(False, None)`` too (logged)."""
        left = t_end - time.perf_counter()
        if left <= 0 and not fut.done():
            if drop_queued:
                fut.cancel()
            return False, None
        try:
            return True, fut.result(timeout=None if math.isinf(left) else max(left, 0.0))
        except FutureTimeout:
            if drop_queued:
                fut.cancel()  # still queued: dropped; already running: finishes into the cache
            return False, None
        except CancelledError:
            return False, None
        except Exception:  # a solver failure leaves these agents "unknown" rather than failing the request
            log.exception("background solver job failed")
            return False, None


class FallbackSolver:
    """Exact set cover for invalid generated answers, within a time budget, with an LRU cache."""

    def __init__(self, world: CapabilityWorld):
        self.world = world
        self.solver = FastSetCover()
        self.jobs = BackgroundCache(_SOLVER_THREAD, CACHE_SIZE)

    @property
    def cache(self) -> OrderedDict:
        return self.jobs.cache

    @property
    def method(self) -> str:
        """The ``method`` of the answers it gives."""
        return f"fallback:{self.solver.name}"

    def warm_up(self) -> None:
        """Compile the branch and bound now rather than in the first request's budget."""
        g = None if self.world.n_groups == 1 else np.zeros(1, dtype=np.int64)
        _SOLVER_THREAD.submit(self.solver.label_batch, self.world, np.zeros((1, self.world.n_features), np.uint8),
                              g).result()

    def _keys(self, X: np.ndarray, groups: np.ndarray | None) -> list[bytes]:
        packed = np.packbits(self.world.deficits(X, groups), axis=1)
        g = np.zeros(len(X), np.int64) if groups is None else groups
        return [int(gi).to_bytes(4, "little") + row.tobytes() for gi, row in zip(g, packed, strict=True)]

    @staticmethod
    def _answers(labels: Any) -> list[tuple[tuple[int, ...], bool]]:
        return [(tuple(int(a) for a in labels.actions[i] if a >= 0), bool(labels.has_cover[i]))
                for i in range(len(labels.actions))]

    def solve(self, X: np.ndarray, groups: np.ndarray | None, budget_s: float | None
              ) -> list[tuple[tuple[int, ...], bool] | None]:
        """Per agent: (optimal set, has cover), or None where the budget ran out first."""
        t_end = math.inf if budget_s is None else time.perf_counter() + budget_s
        keys = self._keys(X, groups)
        out = self.jobs.get(keys)
        todo = [i for i, r in enumerate(out) if r is None]
        for start in range(0, len(todo), FALLBACK_CHUNK):
            if t_end - time.perf_counter() <= 0:
                break
            idx = np.array(todo[start: start + FALLBACK_CHUNK])
            fut = self.jobs.submit([keys[i] for i in idx], self.solver.label_batch, self.world, X[idx],
                                   None if groups is None else groups[idx], split=self._answers)
            done, labels = self.jobs.wait(fut, t_end)
            if not done:
                break
            for i, r in zip(idx, self._answers(labels), strict=True):
                out[i] = r
        return out


@dataclass
class Answers:
    """Recommendations for a batch (arrays, one row per agent)."""

    status: np.ndarray  # (B,) object: ok / no_recourse / already_positive / unknown
    sets: list[tuple[int, ...]]  # action ids in the order they are taken
    cost: np.ndarray  # (B,) float, NaN where there is no recommendation
    confidence: np.ndarray  # (B,) float, NaN where not given by the generator
    verified: np.ndarray  # (B,) bool
    method: np.ndarray  # (B,) object
    optimal: list[bool | None]  # True: the exact solver's optimum; None: not certified
    budget_exceeded: np.ndarray  # (B,) bool


@dataclass
class Pending:
    """A batch after the first pass: answers so far and the agents that still need the fallback."""

    answers: Answers
    X: np.ndarray
    groups: np.ndarray | None
    generated: int  # agents the generator answered
    bad: np.ndarray  # indices whose generated answer was invalid


class VerifiedRecommender:
    """A generator's answers verified against its world, the invalid ones replaced by the exact
    solver within ``budget_s`` seconds (None: no limit)."""

    def __init__(self, world: CapabilityWorld, generator: Generator, budget_s: float | None, name: str = ""):
        self.world, self.generator, self.budget_s = world, generator, budget_s
        self.name = name or generator.method  # for the log
        allowed = np.ones((1, world.n_actions), bool) if world.access is None else np.asarray(world.access, bool)
        self.reach = (allowed.astype(np.int64) @ world.actions.astype(np.int64)) > 0  # (G, n): gettable at all
        self.fallback = FallbackSolver(world)
        self.fallback.warm_up()

    def first_pass(self, X: np.ndarray, groups: np.ndarray | None = None) -> Pending:
        """World checks and the verified generator answers (fast, never waits)."""
        w = self.world
        B = len(X)
        ans = Answers(np.full(B, "ok", dtype=object), [()] * B, np.full(B, np.nan), np.full(B, np.nan),
                      np.zeros(B, bool), np.full(B, WORLD_METHOD, dtype=object), [None] * B, np.zeros(B, bool))
        deficits = w.deficits(X, groups)
        accepted = ~deficits.any(1)
        reach = self.reach[0 if groups is None or len(self.reach) == 1 else groups]
        coverable = ~(deficits & ~reach).any(1)
        ans.status[accepted] = "already_positive"
        ans.status[~accepted & ~coverable] = "no_recourse"
        ans.verified[accepted | ~coverable] = True
        ans.cost[accepted] = 0.0
        todo = np.flatnonzero(~accepted & coverable)
        bad = todo
        if len(todo):
            gen_sets, gen_conf = self._generate(X[todo])
            _, priced, valid = w.rollout(X[todo], gen_sets, None if groups is None else groups[todo])
            good = todo[valid]
            for i, row in zip(good, gen_sets[valid], strict=True):
                ans.sets[i] = tuple(int(a) for a in row if a >= 0)
            ans.method[good] = f"generator:{self.generator.method}"
            ans.cost[good], ans.confidence[good], ans.verified[good] = priced[valid], gen_conf[valid], True
            bad = todo[~valid]
        return Pending(ans, X, groups, len(todo), bad)

    def complete(self, p: Pending) -> Answers:
        """The exact fallback for the invalid generated answers (waits at most the budget)."""
        ans, bad, w = p.answers, p.bad, self.world
        if not len(bad):
            return ans
        solved = self.fallback.solve(p.X[bad], None if p.groups is None else p.groups[bad], self.budget_s)
        for i, r in zip(bad, solved, strict=True):
            if r is None:
                ans.status[i], ans.budget_exceeded[i] = "unknown", True
            elif not r[1]:  # cannot happen after the coverage check; kept exact anyway
                ans.status[i], ans.method[i], ans.verified[i] = "no_recourse", self.fallback.method, True
            else:
                ans.sets[i], ans.method[i] = r[0], self.fallback.method
                ans.optimal[i] = not w.order_matters  # priced in the returned order otherwise
        idx = np.array([i for i, r in zip(bad, solved, strict=True) if r is not None and r[1]], np.int64)
        if len(idx):
            width = max(len(ans.sets[i]) for i in idx)
            S = np.array([list(ans.sets[i]) + [-1] * (width - len(ans.sets[i])) for i in idx], dtype=np.int64)
            _, priced, valid = w.rollout(p.X[idx], S, None if p.groups is None else p.groups[idx])
            ans.cost[idx], ans.verified[idx] = priced, valid
        return ans

    def _generate(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The generator's sets (ids checked; an impossible row becomes empty, i.e. invalid) and confidences.

        A generator that fails on a batch is logged and every agent of it goes to the fallback.
        """
        B = len(X)
        try:
            pred = self.generator.predict(X)
            S = np.asarray(pred.sets)
            conf = np.asarray(pred.confidence, dtype=float).reshape(-1)
            if S.ndim != 2 or len(S) != B or len(conf) != B or not np.issubdtype(S.dtype, np.integer):
                raise ValueError(f"predict returned sets {S.shape} {S.dtype} and confidence {conf.shape} for {B} agents")
        except Exception:
            log.exception("generator %s failed on a batch of %d agents; using the fallback", self.name, B)
            return np.full((B, 1), -1, np.int64), np.full(B, np.nan)
        S = S.astype(np.int64)
        broken = ((S >= self.world.n_actions) | (S < -1)).any(1)
        S[broken] = -1
        if S.shape[1] == 0:
            S = np.full((B, 1), -1, np.int64)
        return S, conf
