"""GeCo (Schleich et al., "GeCo: Quality Counterfactual Explanations in Real Time"), Algorithm 1.

``GeCo(...).fit(world, D)`` computes the feature groups' active domains in the data set D once;
``solve(world, x)`` then grounds the PLAF program on the agent, builds the initial population by
mutating x (``m_init`` values per group), and repeats crossover + mutation (``m_mut`` values per
group of each candidate) + ``actionCascade``, keeping the ``q`` fittest by Eq. 11
(``dist`` for counterfactuals, ``dist + 1 + (1 - p)`` otherwise; dist is Eq. 2 in MACE's
normalization), until the top ``k`` are counterfactuals that survived a generation unchanged.

The model is seen only through batched ``predict_proba`` (one call per generation) unless
``partial_eval`` is on and the model is one of the project's white-box classes; the population is
stored in the Δ-representation or the naive listing (``representation``). GeCo is a heuristic:
it carries no optimality certificate (use MACE for one).

Beyond the paper, ``refine`` (on by default) finishes with a black-box line search on each changed
numeric feature of the answers, between the agent's value and the answer's, in batched rounds:
it finds the decision boundary between data values (the paper's active domain is coarse on
amounts), may leave that domain on numeric columns (never the schema's range, integrality or a
PLAF rule), and is the paper's ``selectiveMutate`` idea made exhaustive. ``polish`` (on by default,
with ``refine``; issue 34) then searches the plane of every pair of numeric features: one on a grid
of levels, the other bisected to the decision boundary, which meets the optima that trade two
features (an MLP's boundary, integer steps). ``refine=False`` is the paper's algorithm. Those
searches are :mod:`solvers.geco.refine`; this module is the genetic search.

A world with rules (``envs.rules``, issue 55; ``world.compiled_rules()``): ``fit`` adds them to the PLAF
program (``plaf.with_rules``: their PLAF statements, so the feasible space and the action cascade respect
them; a statement GeCo's PLAF cannot order is enforced by the shared checker on the candidates), the
refinement stays in the box the one-column rules leave the agent and checks every probe
(``AgentSpace.keeps``), distances take the rules' cost weights, and every answer passes the shared
checker. Under rules a last step fills the numeric features by their log-odds slopes
(``solvers.geco.fill``; ``fill=True`` turns it on for any world).
"""

from __future__ import annotations

import time
from itertools import groupby
from typing import Any, Literal

import numpy as np

from envs.recourse import Recourse
from solvers.base import Solver
from solvers.blackbox import CountingModel, check_agent, point_recourse
from solvers.geco.fill import filled
from solvers.geco.partial_eval import BlackBox, Evaluator, model_code
from solvers.geco.plaf import Plaf, default_program, loop_checker, with_rules
from solvers.geco.population import REPRESENTATIONS, Population, row_ids
from solvers.geco.refine import Refinement
from solvers.geco.space import PAD, AgentSpace, FeasibleSpace

Representation = Literal["delta", "listing"]


def sample_without_replacement(rng: np.random.Generator, weights: np.ndarray, n: int, m: int) -> np.ndarray:
    """(n, min(m, len(weights))) indices: per row, m distinct draws weighted by ``weights`` (Gumbel top-m).

    When there are at most m values, every row takes all of them (no draw).
    """
    k = len(weights)
    if k <= m:
        return np.broadcast_to(np.arange(k), (n, k))
    keys = np.log1p(-rng.random((n, k), dtype=np.float32)) / weights.astype(np.float32)  # Efraimidis-Spirakis
    return np.argpartition(keys, k - m, axis=1)[:, k - m:]


class GeCo(Solver):
    """Genetic search for the nearest plausible, feasible counterfactuals of a black-box classifier."""

    name = "geco"
    exact = False

    def __init__(self, plaf: Plaf | None = None, n_diverse: int = 5, population_size: int | None = None,
                 m_init: int = 20, m_mut: int = 5, alpha: float = 0.0, beta: float = 1.0, gamma: float = 0.0,
                 max_generations: int = 100, mutate_top: int | None = None,
                 representation: Representation = "delta", partial_eval: bool = True,
                 refine: bool = True, refine_deltas: int = 20, refine_samples: int = 16, refine_rounds: int = 40,
                 threshold: float = 0.5, polish: bool = True, polish_splits: int = 16, polish_rounds: int = 24,
                 combine_depth: int = 4, combine_cap: int = 60000, max_cells: int = 1 << 24, seed: int = 0,
                 fill: bool | None = None) -> None:
        self.plaf = plaf  # PLAF program; None: the world's Appendix A.1 program (Adult, Credit), else none
        self.n_diverse = n_diverse  # k: counterfactuals returned, and the stopping rule's top-k
        self.population_size = population_size  # q: candidates kept per generation; None: 100, 300 under rules
        self.m_init = m_init  # values sampled per group for the initial population
        self.m_mut = m_mut  # values sampled per group and candidate in each mutation
        self.alpha = alpha  # Eq. 2 weight of l0 / n
        self.beta = beta  # Eq. 2 weight of l1 / n (the paper's experiments: l1 only)
        self.gamma = gamma  # Eq. 2 weight of linf
        self.max_generations = max_generations  # give up (status "unknown") after this many generations
        self.mutate_top = mutate_top  # mutate only the best this many candidates of each Δ' (§4.6); None: all
        self.representation = representation  # "delta" (Δ-representation) or "listing" (naive full rows)
        self.partial_eval = partial_eval  # specialise white-box models to the agent (else: black box)
        self.refine = refine  # line-search the answers' numeric changes towards x (black-box, batched)
        self.refine_deltas = refine_deltas  # refine the best candidate of this many distinct Δ'
        self.refine_samples = refine_samples  # probes per changed feature and refinement round
        self.refine_rounds = refine_rounds  # refinement rounds at most (one model call each)
        self.threshold = threshold  # counterfactual iff P(accept) > threshold
        self.polish = polish  # two-feature boundary search after the refinement (``polished``; needs refine)
        self.polish_splits = polish_splits  # levels of the first feature of each pair in the polish
        self.polish_rounds = polish_rounds  # bisection rounds of the polish (one batched call each)
        self.combine_depth = combine_depth  # moves per combination below the best answer (``combinations``; 0: off)
        self.combine_cap = combine_cap  # combinations scored per number of moves at most (the cheapest)
        self.max_cells = max_cells  # rows x columns per black-box call at most (memory bound)
        self.seed = seed  # random seed of the search
        self.fill = fill  # the knapsack on the numeric features (``solvers.geco.fill``); None: on under the world's rules

    # ----------------------------------------------------------------------------------- fitting

    def _check_params(self) -> None:
        for name in ("n_diverse", "m_init", "m_mut", "max_generations", "refine_deltas",
                     "refine_samples", "refine_rounds", "polish_splits", "polish_rounds", "combine_cap"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if int(self.combine_depth) < 0:
            raise ValueError(f"combine_depth: must be >= 0, got {self.combine_depth!r}")
        if self.mutate_top is not None and int(self.mutate_top) < 1:
            raise ValueError(f"mutate_top: must be >= 1 or None, got {self.mutate_top!r}")
        if self.population_size is not None and int(self.population_size) < 1:
            raise ValueError(f"population_size: must be >= 1 or None, got {self.population_size!r}")
        if int(self.n_diverse) > int(self.population_size or 100):
            raise ValueError(f"n_diverse: k = {self.n_diverse} must not exceed population_size q = "
                             f"{self.population_size or 100}")
        if self.representation not in REPRESENTATIONS:
            raise ValueError(f"representation: expected one of {sorted(REPRESENTATIONS)}, got {self.representation!r}")
        if not 0.0 <= float(self.threshold) < 1.0:
            raise ValueError(f"threshold: must be in [0, 1), got {self.threshold!r}")
        w = (self.alpha, self.beta, self.gamma)
        if min(w) < 0 or abs(sum(w) - 1.0) > 1e-9:
            raise ValueError(f"alpha, beta, gamma: must be >= 0 and sum to 1 (Eq. 2), got {w}")

    def fit(self, world: Any, data: np.ndarray) -> GeCo:
        """Compile the PLAF program on the world's schema, with the world's rules (``world.compiled_rules()``,
        ``with_rules``), and compute the active domains of ``data`` (D)."""
        self._check_params()
        plaf = default_program(getattr(world, "name", "")) if self.plaf is None else self.plaf
        rules = world.compiled_rules() if callable(getattr(world, "compiled_rules", None)) else None
        self.program_, self.checked_only_ = with_rules(plaf, world.schema, rules)
        self.checker_ = rules  # every answer passes it
        self.loop_checker_ = loop_checker(rules, self.checked_only_, world.schema)  # the candidates: what the program misses
        self.cost_ = rules.cost if rules is not None and rules.weighted else None
        # Rules link columns (education moves age) and box them, so an optimum often needs three coordinated
        # changes the paper's q = 100 rarely holds at once; q = 300 under rules (benchmarks/mace.py --rules --geco)
        self.q_ = int(self.population_size or (300 if rules is not None else 100))
        self.space_ = FeasibleSpace.build(self.program_, data)
        self.world_ = world
        self.code_ = model_code(world.model)
        return self

    def _check_world(self, world: Any) -> None:
        if not hasattr(self, "space_"):
            raise ValueError("GeCo: not fitted; call fit(world, data) first (it needs the data's active domains)")
        if world.schema != self.world_.schema or world.model is not self.world_.model:
            raise ValueError(f"world: GeCo was fitted on {getattr(self.world_, 'name', '?')!r}; "
                             f"fit it on {getattr(world, 'name', '?')!r} first")

    # ----------------------------------------------------------------------------------- solving

    def solve(self, world: Any, x: np.ndarray, **options: Any) -> list[Recourse]:
        self._check_params()
        self._check_world(world)
        t0 = time.perf_counter()
        x = check_agent(world.schema, x)
        model = CountingModel(world.model, self.threshold)
        agent = self.space_.ground(x, (self.alpha, self.beta, self.gamma), self.loop_checker_, self.cost_)
        method = self.name
        if model.predict_proba(x[None])[0] > self.threshold:
            return [point_recourse(world.schema, self.program_.raws, x, x, method=method, distance=0.0, valid=True,
                                   runtime=time.perf_counter() - t0,
                                   extra={"reason": "already_positive", "model_calls": model.calls})]
        if self.checker_ is not None:  # the box the world's one-column rules leave this agent (the refinement's)
            lo, hi = (np.asarray(b, float) for b in world.schema.bounds())
            ground = self.checker_.ground(x)
            lo, hi, dead = ground.box(lo, hi, np.where(hi > lo, hi - lo, 1.0))
            dead = ground.unsatisfiable or dead
            if dead is not None:
                return [Recourse.none(method, status="no_recourse", runtime=time.perf_counter() - t0,
                                      reason=f"no counterfactual keeps rule {dead!r} for this agent")]
            agent.box = (lo, hi)
        specialised = self.code_.specialize(agent) if (self.partial_eval and self.code_ is not None) else None
        run = _Run(self, agent, specialised or BlackBox(model, self.max_cells), model)
        answers, status = run.search()
        extra = {"model_calls": model.calls, "model_rows": model.rows, "generations": run.generations,
                 "explored": run.explored, "partial_eval": specialised is not None,
                 "specialised_calls": specialised.calls if specialised else 0,
                 "representation": self.representation, "refine_rounds": run.refine_rounds,
                 "seconds": {k: round(v, 6) for k, v in run.seconds.items()}}
        runtime = time.perf_counter() - t0
        X, proba, dist = answers
        if status != "ok":
            reason = ("no counterfactual in the search space (the data's active domain under the PLAF rules)"
                      if status == "no_recourse" else f"no counterfactual within {self.max_generations} generations")
            return [Recourse.none(method, status=status, runtime=runtime, reason=reason)]
        return [point_recourse(world.schema, self.program_.raws, x, X[i], method=method, distance=dist[i],
                               valid=bool(proba[i] > self.threshold), runtime=runtime,
                               extra={"proba": float(proba[i]), "rank": i, **extra}) for i in range(len(X))]


class _Run(Refinement):
    """One execution of Algorithm 1 for one agent (its answers refined by :class:`Refinement`)."""

    def __init__(self, geco: GeCo, agent: AgentSpace, evaluator: Evaluator, model: CountingModel) -> None:
        self.p, self.agent, self.evaluator, self.model = geco, agent, evaluator, model
        self.rng = np.random.default_rng(geco.seed)
        self.pop_class = REPRESENTATIONS[geco.representation]
        self.groups = agent.mutable_groups()
        self.generations = self.explored = self.refine_rounds = 0
        self.seconds = {"mutate": 0.0, "crossover": 0.0, "cascade": 0.0, "select": 0.0, "refine": 0.0, "polish": 0.0,
                        "fill": 0.0, "combine": 0.0}

    def _timed(self, part: str, t0: float) -> None:
        self.seconds[part] += time.perf_counter() - t0

    # ------------------------------------------------------------------------------ operators

    def mutate(self, pop: Population, m: int, born: int, top: int | None = None) -> list[Population]:
        """Algorithm 2: m values of every group a candidate has not changed yet, per candidate.

        With ``top``, only the ``top`` fittest candidates of each Δ' are mutated (§4.6).
        """
        t0 = time.perf_counter()
        if top is not None:
            key, _ = pop.delta_keys()
            rank = np.zeros(len(pop), np.int64)
            for k in np.unique(key):  # pop is sorted by fitness: rank within each Δ'
                rows = np.flatnonzero(key == k)
                rank[rows] = np.arange(len(rows))
            pop = pop.take(np.flatnonzero(rank < top))
        parts = []
        for g in self.groups:
            parents = np.flatnonzero(~pop.has_group(g))
            if not len(parents):
                continue
            opts = self.agent.options(g)
            picks = sample_without_replacement(self.rng, self.agent.space.count[opts], len(parents), m)
            parts.append(pop.take(np.repeat(parents, picks.shape[1])).with_group(g, opts[picks.ravel()], born))
        self._timed("mutate", t0)
        return parts

    def local(self, start: Population) -> list[Population]:
        L = int(getattr(self.p, "local_values", 0))
        if L <= 0:
            return []
        parts = []
        ranks = (1 << np.arange(L)) - 1
        for g in self.groups:
            if not self._ordered(g):
                continue
            opts = self.agent.options(g)
            c = int(self.agent.space.program.group_cols[g][0])
            v = self.agent.space.values[opts, 0]
            picks = []
            for side in (v > self.agent.x[c], v < self.agent.x[c]):
                o = opts[side][np.argsort(np.abs(v[side] - self.agent.x[c]), kind="stable")]
                picks.append(o[ranks[ranks < len(o)]])
            picks = np.concatenate(picks)
            if len(picks):
                parts.append(start.take(np.zeros(len(picks), np.int64)).with_group(g, picks, 0))
        return parts

    def corners(self, start: Population) -> list[Population]:
        """Two candidates beyond the paper, tried when the search found no valid one: every ordered
        group at its largest, then at its smallest value of the active domain. Where only the far
        corner of the box is accepted (a P(accept) that is flat elsewhere gives the genetic search
        no direction), the refinement then brings the answer back toward x."""
        parts = []
        for pick in (np.argmax, np.argmin):
            cand = start.take(np.zeros(1, np.int64))
            moved = False
            for g in self.groups:
                if not self._ordered(g):
                    continue
                opts = self.agent.options(g)
                if not len(opts):
                    continue
                c = int(self.agent.space.program.group_cols[g][0])
                v = self.agent.space.values[opts, 0]
                k = int(pick(v))
                if v[k] != self.agent.x[c]:
                    cand = cand.with_group(g, opts[k:k + 1], 0)
                    moved = True
            if moved:
                parts.append(cand)
        return parts

    def crossover(self, pop: Population, born: int) -> list[Population]:
        """Algorithm 3: the fittest candidate of each distinct Δ' crossed with that of every other Δ'."""
        t0 = time.perf_counter()
        _, first = pop.delta_keys()  # pop is sorted by fitness: first row of a Δ' is its best
        if len(first) < 2:
            return []
        a, b = np.triu_indices(len(first), 1)
        take_j = self.rng.random((len(a), self.agent.space.n_groups)) < 0.5
        out = pop.crossover(first[a], first[b], take_j, born)
        self._timed("crossover", t0)
        return [out]

    def cascade(self, pop: Population) -> Population:
        """actionCascade: repair every rule over several groups, in topological order, by resampling its group."""
        t0 = time.perf_counter()
        prog, rules = self.agent.space.program, self.agent.rules.rules
        for target, ids in groupby(prog.cascade, key=lambda i: prog.raw_group(prog.rules[i].defines)):
            grounded = [rules[i] for i in ids]
            need = np.zeros(len(pop), bool)
            for r in grounded:
                t = r.atoms(pop.column_values(r.cols))
                need |= t[:, :-1].all(axis=1) & ~t[:, -1]
            if need.any():
                keep = pop.take(np.flatnonzero(~need))
                pop = type(pop).concat([keep, self._repair(pop.take(np.flatnonzero(need)), target, grounded)])
        self._timed("cascade", t0)
        return pop

    def _repair(self, pop: Population, target: int, grounded: list) -> Population:
        """Set group ``target`` to a value (or back to x's) that satisfies every rule defining it."""
        sp, a = self.agent.space, self.agent
        cols_g = sp.program.group_cols[target]
        opts = a.options(target)
        values = sp.values[opts, :len(cols_g)]
        weights = sp.count[opts]
        if a.own_ok[target]:  # going back to x's value is a repair too
            opts = np.append(opts, PAD)
            values = np.vstack([values, a.x[cols_g]])
            weights = np.append(weights, sp.count[a.own[target]] if a.own[target] >= 0 else 1.0)
        ok = np.ones((len(pop), len(opts)), bool)
        for r in grounded:
            V = np.repeat(pop.column_values(r.cols)[:, None, :], len(opts), axis=1)  # (n, options, k)
            mine = sp.program.col_group[r.cols] == target
            V[:, :, mine] = values[:, sp.col_offset[r.cols[mine]]][None]
            t = r.atoms(V.reshape(-1, len(r.cols))).reshape(len(pop), len(opts), -1)
            ok &= ~t[..., :-1].all(axis=2) | t[..., -1]
        keys = np.where(ok, np.log(weights) - np.log(-np.log(self.rng.random(ok.shape))), -np.inf)
        fixable = ok.any(axis=1)
        choice = opts[keys.argmax(axis=1)]
        return pop.take(np.flatnonzero(fixable)).with_group(target, choice[fixable], int(pop.born.max(initial=0)))

    def feasible(self, pop: Population) -> Population:
        """Drop candidates that break a rule (a safeguard: sampling and the cascade already respect the
        program's; the world's rules, ``envs.rules``, by the shared checker on the candidates' rows)."""
        a = self.agent
        ok = pop.sizes() > 0
        for g in np.flatnonzero(~a.own_ok):  # x's own value of g breaks g's unary rules: g must change
            ok &= pop.has_group(g)
        for i in (*a.space.program.cascade, *a.space.program.constant):
            r = a.rules.rules[i]
            ok &= r.holds(pop.column_values(r.cols))
        if a.checker is not None and ok.any():
            idx = np.flatnonzero(ok)
            ok[idx] = a.checker.holds(a.x, pop.take(idx).rows())
        return pop.take(np.flatnonzero(ok))

    def select(self, pop: Population) -> Population:
        """selectFittest: score the new candidates (one batched call), sort by Eq. 11, keep the q best."""
        t0 = time.perf_counter()
        new = np.flatnonzero(np.isnan(pop.proba))
        if len(new):
            pop.proba[new] = self.evaluator.proba(pop.take(new))
            self.explored += len(new)
        valid = pop.proba > self.p.threshold
        score = pop.distance() + np.where(valid, 0.0, 2.0 - pop.proba)
        out = pop.take(np.argsort(score, kind="stable")[: self.p.q_])
        self._timed("select", t0)
        return out

    def unique(self, pop: Population) -> Population:
        _, first = row_ids(pop.identity())
        return pop.take(np.sort(first))

    # -------------------------------------------------------------------------------- the loop

    def search(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], str]:
        """(rows, P(accept), distances) of the answers, best first, and the status."""
        p, k = self.p, int(self.p.n_diverse)
        start = self.pop_class.start(self.agent)
        none = (np.zeros((0, len(self.agent.x))), np.zeros(0), np.zeros(0))
        if not len(self.groups):
            return none, "no_recourse"
        pop = self._next(start, self.mutate(start, int(p.m_init), 0) + self.local(start))
        exhausted = False
        for gen in range(1, int(p.max_generations) + 1):
            self.generations = gen
            cand = self.crossover(pop, gen) + self.mutate(pop, int(p.m_mut), gen, p.mutate_top)
            before = self.explored
            pop = self._next(pop, cand)
            top = pop.take(np.arange(min(k, len(pop))))
            if self.explored == before:
                exhausted = True
                break
            if len(top) == k and np.all(top.proba > p.threshold) and np.all(top.born < gen - int(getattr(p, "patience", 0))):
                break
        valid = np.flatnonzero(pop.proba > p.threshold)
        if not len(valid):  # a last resort before giving up: the far corners of the box
            pop = self._next(pop, self.corners(start))
            valid = np.flatnonzero(pop.proba > p.threshold)
        if not len(valid):
            return none, "no_recourse" if exhausted else "unknown"
        found = self.answers(pop.take(valid))
        return found, "ok" if len(found[0]) else "unknown"

    def _next(self, pop: Population, cand: list[Population]) -> Population:
        """POP := selectFittest(POP ∪ CAND) with CAND cascaded, made feasible and new."""
        if cand:
            fresh = self.feasible(self.cascade(self.pop_class.concat(cand)))
            pop = self.unique(self.pop_class.concat([pop, fresh]))  # POP first: a known candidate stays old
            pop = pop.take(np.flatnonzero(pop.sizes() > 0))
        return self.select(pop)

    # ----------------------------------------------------------------------------- the answers

    def answers(self, pop: Population) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The k best counterfactuals, re-scored by the black box, best first, distinct Δ' first.

        With ``refine``, the best candidate of each of the ``refine_deltas`` fittest distinct Δ' is
        line-searched towards x first (different Δ' reach different local optima).
        """
        k = int(self.p.n_diverse)
        X = pop.rows()
        if self.p.refine:
            t0 = time.perf_counter()
            _, heads = pop.delta_keys()  # pop is sorted: the first row of a Δ' is its fittest
            heads = heads[: int(self.p.refine_deltas)]
            seeds = self.ascent()
            X = np.vstack([self.refined(np.vstack([X[heads], seeds])), np.delete(X, heads, axis=0)])
            self._timed("refine", t0)
        if self.p.refine and self.p.polish and len(X):
            t0 = time.perf_counter()
            P = self.polished(X)
            if len(P):
                X = np.vstack([self.refined(P), X])
            self._timed("polish", t0)
        fill = self.p.fill if self.p.fill is not None else self.p.checker_ is not None
        if self.p.refine and self.p.polish and fill and len(X):
            t0 = time.perf_counter()
            F = filled(self, X)  # a knapsack on the numeric features' log-odds slopes (``solvers.geco.fill``)
            if len(F):
                X = np.vstack([self.refined(F), X])
            self._timed("fill", t0)
        if self.p.refine and self.p.polish and self.p.combine_depth > 0 and len(X):
            t0 = time.perf_counter()
            C = self.combinations(float(self.distance(X).min()), int(self.p.combine_depth), int(self.p.combine_cap))
            if len(C):
                X = np.vstack([self.refined(C), X])
            self._timed("combine", t0)
        _, first = row_ids(X)
        X = X[np.sort(first)]
        X = X[np.argsort(self.distance(X), kind="stable")]
        _, distinct = row_ids(self.changed_groups(X))  # the nearest row of each Δ', nearest first
        X = X[np.concatenate([np.sort(distinct), np.setdiff1d(np.arange(len(X)), distinct)])[:k]]
        X = X[np.argsort(self.distance(X), kind="stable")]
        proba = self.model.predict_proba(X)  # the black box has the last word
        bad = self.agent.rules.violations(X)
        if bad.any():
            raise AssertionError(f"GeCo produced a counterfactual breaking {self.agent.rules.broken(X[bad > 0][:1])}")
        # the world's rules by the shared checker (the search kept them: this is the answers' own check)
        kept = np.ones(len(X), bool) if self.p.checker_ is None else self.p.checker_.holds(self.agent.x, X)
        keep = np.flatnonzero((proba > self.p.threshold) & kept)  # a specialised model may round the other way
        return X[keep], proba[keep], self.distance(X)[keep]
