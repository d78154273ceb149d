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
features (an MLP's boundary, integer steps). ``refine=False`` is the paper's algorithm.
"""

from __future__ import annotations

import time
from itertools import groupby
from typing import Any, Literal

import numpy as np

from envs.recourse import Recourse
from solvers.base import Solver
from solvers.blackbox import CountingModel, check_agent, point_recourse
from solvers.geco.partial_eval import BlackBox, Evaluator, model_code
from solvers.geco.plaf import Plaf, default_program
from solvers.geco.population import REPRESENTATIONS, Population, row_ids
from solvers.geco.space import PAD, AgentSpace, FeasibleSpace
from solvers.mace.distance import deltas, mix

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

    def __init__(self, plaf: Plaf | None = None, n_diverse: int = 5, population_size: int = 100,
                 m_init: int = 20, m_mut: int = 5, alpha: float = 0.0, beta: float = 1.0, gamma: float = 0.0,
                 max_generations: int = 100, mutate_top: int | None = None,
                 representation: Representation = "delta", partial_eval: bool = True,
                 refine: bool = True, refine_deltas: int = 20, refine_samples: int = 16, refine_rounds: int = 40,
                 threshold: float = 0.5, polish: bool = True, polish_splits: int = 16, polish_rounds: int = 24,
                 max_cells: int = 1 << 24, seed: int = 0) -> None:
        self.plaf = plaf  # PLAF program; None: the world's Appendix A.1 program (Adult, Credit), else none
        self.n_diverse = n_diverse  # k: counterfactuals returned, and the stopping rule's top-k
        self.population_size = population_size  # q: candidates kept per generation
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
        self.max_cells = max_cells  # rows x columns per black-box call at most (memory bound)
        self.seed = seed  # random seed of the search

    # ----------------------------------------------------------------------------------- fitting

    def _check_params(self) -> None:
        for name in ("n_diverse", "population_size", "m_init", "m_mut", "max_generations", "refine_deltas",
                     "refine_samples", "refine_rounds", "polish_splits", "polish_rounds"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if self.mutate_top is not None and int(self.mutate_top) < 1:
            raise ValueError(f"mutate_top: must be >= 1 or None, got {self.mutate_top!r}")
        if int(self.n_diverse) > int(self.population_size):
            raise ValueError(f"n_diverse: k = {self.n_diverse} must not exceed population_size q = "
                             f"{self.population_size}")
        if self.representation not in REPRESENTATIONS:
            raise ValueError(f"representation: expected one of {sorted(REPRESENTATIONS)}, got {self.representation!r}")
        if not 0.0 <= float(self.threshold) < 1.0:
            raise ValueError(f"threshold: must be in [0, 1), got {self.threshold!r}")
        w = (self.alpha, self.beta, self.gamma)
        if min(w) < 0 or abs(sum(w) - 1.0) > 1e-9:
            raise ValueError(f"alpha, beta, gamma: must be >= 0 and sum to 1 (Eq. 2), got {w}")

    def fit(self, world: Any, data: np.ndarray) -> GeCo:
        """Compile the PLAF program on the world's schema and compute the active domains of ``data`` (D)."""
        self._check_params()
        plaf = default_program(getattr(world, "name", "")) if self.plaf is None else self.plaf
        self.program_ = plaf.compile(world.schema)
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
        agent = self.space_.ground(x, (self.alpha, self.beta, self.gamma))
        method = self.name
        if model.predict_proba(x[None])[0] > self.threshold:
            return [point_recourse(world.schema, self.program_.raws, x, x, method=method, distance=0.0, valid=True,
                                   runtime=time.perf_counter() - t0,
                                   extra={"reason": "already_positive", "model_calls": model.calls})]
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


class _Run:
    """One execution of Algorithm 1 for one agent."""

    def __init__(self, geco: GeCo, agent: AgentSpace, evaluator: Evaluator, model: CountingModel) -> None:
        self.p, self.agent, self.evaluator, self.model = geco, agent, evaluator, model
        self.rng = np.random.default_rng(geco.seed)
        self.pop_class = REPRESENTATIONS[geco.representation]
        self.groups = agent.mutable_groups()
        self.generations = self.explored = self.refine_rounds = 0
        self.seconds = {"mutate": 0.0, "crossover": 0.0, "cascade": 0.0, "select": 0.0, "refine": 0.0, "polish": 0.0}

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
        """Drop candidates that break a rule (a safeguard: sampling and the cascade already respect them)."""
        a = self.agent
        ok = pop.sizes() > 0
        for g in np.flatnonzero(~a.own_ok):  # x's own value of g breaks g's unary rules: g must change
            ok &= pop.has_group(g)
        for i in (*a.space.program.cascade, *a.space.program.constant):
            r = a.rules.rules[i]
            ok &= r.holds(pop.column_values(r.cols))
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
        out = pop.take(np.argsort(score, kind="stable")[: int(self.p.population_size)])
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

    def distance(self, X: np.ndarray) -> np.ndarray:
        a = self.agent
        return mix(deltas(a.space.program.raws, a.x, X), a.weights)

    def changed_groups(self, X: np.ndarray) -> np.ndarray:
        """(n, G) bool: the groups each full row changes."""
        a = self.agent
        return np.column_stack([(X[:, c] != a.x[c]).any(axis=1) for c in a.space.program.group_cols])

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
        keep = np.flatnonzero(proba > self.p.threshold)  # a specialised model may round the other way
        return X[keep], proba[keep], self.distance(X)[keep]

    def polished(self, X: np.ndarray, bases: int = 1) -> np.ndarray:
        """Line searches toward the decision boundary in the plane of two numeric features.

        Beyond the paper (issue 34). From x, and from the ``bases`` nearest answers with their
        numeric changes undone (their categorical changes kept): for every ordered pair (i, j) of
        ordered single-column groups and every direction the schema's mutability allows, feature i
        is set to ``polish_splits`` levels between x_i and the largest change the best distance
        affords (every integer step where there are that few), and feature j is scanned (16 fractions
        of its room) and then bisected (``polish_rounds`` batched black-box calls) for the nearest
        value the model accepts (integer columns round away from x). On a boundary where the optimum trades two features (an
        MLP's, or an integer step of one of them), coordinate moves toward x stop one step short of
        the trade; this search meets it. Returns the best valid point of each base that beats the
        answers (the caller line-searches them once more).
        """
        a, sp = self.agent, self.agent.space
        prog, schema = sp.program, sp.program.schema
        dist = self.distance(X)
        order = np.argsort(dist, kind="stable")
        best = float(dist[order[0]])
        cols = [int(prog.group_cols[g][0]) for g in self.groups if self._ordered(g)]
        if not cols or best <= 0:
            return np.zeros((0, len(a.x)))
        lo, hi = schema.bounds()
        integer = {c: bool(schema.features[c].integer or schema.features[c].kind == "ordinal") for c in cols}
        w = a.weights[1] + a.weights[2]  # cost per unit normalized change of one feature (l1 and linf terms)
        dirs = []  # (column, sign, room): allowed directions and the raw change the best distance affords
        for c in cols:
            f, span = schema.features[c], float(hi[c] - lo[c])
            if not (np.isfinite(span) and span > 0):
                continue
            for sgn in (1.0, -1.0):
                if (f.mutability == "increase" and sgn < 0) or (f.mutability == "decrease" and sgn > 0):
                    continue
                room = (hi[c] - a.x[c]) if sgn > 0 else (a.x[c] - lo[c])
                room = min(room, best / w * span) if w > 0 else room
                if room > 0:
                    dirs.append((c, sgn, float(room)))
        if not dirs:
            return np.zeros((0, len(a.x)))
        m = int(self.p.polish_splits)
        base_rows = [a.x.copy()]
        for i in order[:bases]:
            r = X[i].copy()
            r[cols] = a.x[cols]
            base_rows.append(r)
        B0 = np.unique(np.array(base_rows), axis=0)
        rows, jcol, jsgn, jtop = [], [], [], []
        for ci, si, ri in dirs:
            if integer[ci] and ri <= m:
                lv = np.arange(0.0, np.floor(ri + 1e-9) + 1.0)
            else:
                lv = np.linspace(0.0, ri, m + 1)
                lv = np.unique(np.round(lv)) if integer[ci] else lv
            for cj, sj, rj in dirs:
                if cj == ci:
                    continue
                for B in B0:
                    R = np.repeat(B[None], len(lv), axis=0)
                    R[:, ci] = a.x[ci] + si * lv
                    rows.append(R)
                    jcol.append(np.full(len(lv), cj))
                    jsgn.append(np.full(len(lv), sj))
                    jtop.append(np.full(len(lv), rj))
        if not rows:
            return np.zeros((0, len(a.x)))
        R, jc, js, hi_s = np.vstack(rows), np.concatenate(jcol), np.concatenate(jsgn), np.concatenate(jtop)
        is_int = np.array([integer[c] for c in jc])
        n = np.arange(len(R))

        def points(step: np.ndarray) -> np.ndarray:
            P = R.copy()
            step = np.where(is_int, np.ceil(step - 1e-9), step)
            P[n, jc] = np.clip(a.x[jc] + js * step, lo[jc], hi[jc])
            return P

        def valid(P: np.ndarray) -> np.ndarray:
            ok = a.rules.violations(P) == 0
            if ok.any():
                ok[ok] = self.model.predict_proba(P[ok]) > self.p.threshold
            return ok

        cheap = self.distance(points(np.zeros(len(R)))) < best  # the level alone leaves room to gain
        R, jc, js, hi_s, is_int = R[cheap], jc[cheap], js[cheap], hi_s[cheap], is_int[cheap]
        n = np.arange(len(R))
        # A coarse scan along j (even and geometric fractions of its room) brackets the nearest valid
        # step; validity need not hold beyond it (a tree accepts on an interval).
        fr = np.unique(np.concatenate([np.linspace(0.0, 1.0, 9), np.exp2(-np.arange(1.0, 9.0))]))
        found = np.full(len(R), np.nan)
        below = np.zeros(len(R))
        for f in fr[1:]:
            todo = np.isnan(found)
            if not todo.any():
                break
            ok = valid(points(f * hi_s)) & todo
            self.refine_rounds += 1
            found[ok] = f * hi_s[ok]
            below[todo & ~ok] = f * hi_s[todo & ~ok]
        keep = ~np.isnan(found)
        R, jc, js, is_int = R[keep], jc[keep], js[keep], is_int[keep]
        hi_s, lo_s, n = found[keep], below[keep], np.arange(int(keep.sum()))
        if not len(R):
            return np.zeros((0, len(a.x)))
        for _ in range(int(self.p.polish_rounds)):
            mid = (lo_s + hi_s) / 2
            ok = valid(points(mid))
            self.refine_rounds += 1
            hi_s, lo_s = np.where(ok, mid, hi_s), np.where(ok, lo_s, mid)
            if np.all(hi_s - lo_s <= np.where(is_int, 0.5, 0.0)):
                break
        P = points(hi_s)
        d = self.distance(P)
        k = int(np.argmin(d))
        return P[k][None] if d[k] < best - 1e-15 else np.zeros((0, len(a.x)))

    def ascent(self, beam: int = 16, depth: int = 6, keep: int = 5) -> np.ndarray:
        """Counterfactuals built from x by small moves: a beam search that adds one group's move at a
        time (an ordered group to a data value near x, see ``_local``; another group to one of its
        cheapest values), keeping the ``beam`` rows of highest P(accept), one batched call per depth.
        Returns the ``keep`` nearest counterfactuals met. Trees cut features at thresholds between data
        values, so an optimum of a forest is often several such small moves together, which the
        genetic search, sampling by frequency, rarely assembles."""
        a, sp = self.agent, self.agent.space
        prog, m = sp.program, int(self.p.refine_samples)
        moves = []  # (columns, (n, |columns|) values) per group
        edges = self.edges() if self.p.polish else {}
        for g in self.groups:
            cols = prog.group_cols[g]
            if self._ordered(g):
                vals = np.concatenate([self._local(g, side) for side in (-1.0, 1.0)] + [edges.get(g, np.zeros(0))])
                vals = np.unique(vals)[:, None]
            else:
                opts = a.options(g)
                vals = sp.values[opts[np.argsort(a.entry_cost(opts), kind="stable")][:m], :len(cols)]
            moves.append((cols, vals))
        rows = a.x[None].copy()
        p0 = float(self.model.predict_proba(rows)[0])
        found = [np.zeros((0, len(a.x)))]
        for _ in range(depth):
            blocks = []
            for cols, vals in moves:
                free = rows[np.all(rows[:, cols] == a.x[cols], axis=1)]
                T = np.repeat(free, len(vals), axis=0)
                T[:, cols] = np.tile(vals, (len(free), 1))
                blocks.append(T)
            T = np.vstack(blocks)
            _, first = row_ids(T)
            T = T[np.sort(first)]
            T = T[a.rules.violations(T) == 0]
            if not len(T):
                break
            p = self.model.predict_proba(T)
            self.refine_rounds += 1
            ok = p > self.p.threshold
            found.append(T[ok])
            rest = np.flatnonzero(~ok)  # the beam: highest P(accept), and highest gain per distance,
            gain = (p[rest] - p0) / np.maximum(self.distance(T[rest]), 1e-300)  # one row per Δ' each
            pick = []
            for order, n in ((np.argsort(-p[rest], kind="stable"), beam // 2),
                             (np.argsort(-gain, kind="stable"), beam - beam // 2)):
                _, heads = row_ids(self.changed_groups(T[rest[order]]))
                pick.append(rest[order[np.sort(heads)[:n]]])
            rows = T[np.unique(np.concatenate(pick))]
            if not len(rows):
                break
        F = np.vstack(found)
        return F[np.argsort(self.distance(F), kind="stable")[:keep]]

    def refined(self, X: np.ndarray) -> np.ndarray:
        """Local search of the answers towards x, one batched black-box call per round.

        Each round, every answer tries (i) x's value for each changed group; (ii) for numeric and
        ordinal single-column groups, ``refine_samples`` probes on the segment between its value
        and the nearest value known to fail (initially x's own), integers on integer columns, down
        to 1e-6 of the range; for other groups, the cheapest data values; and, once no segment of
        the answer is open, (iii) data values across x (the other direction, spread by rank) and
        trades: one changed group back to x's value while a numeric one moves further (a geometric
        ladder of steps), which reach optima that moves towards x cannot. The answer takes the probe that lowers its distance most; the
        search stops when a round learns nothing.
        """
        a = self.agent
        X = X.copy()
        lo: dict[tuple[int, int], float] = {}  # (answer, column) -> value on x's side known to fail
        tried: dict[int, bytes] = {}  # answer -> the row whose trades were probed (not again)
        for _ in range(int(self.p.refine_rounds)):
            blocks, owner = self._probes(X, lo, tried)
            if not blocks:
                break
            self.refine_rounds += 1
            P = np.vstack(blocks)
            who, col, val = (np.concatenate(o) for o in zip(*owner, strict=True))
            ok = a.rules.violations(P) == 0
            valid = np.zeros(len(P), bool)
            valid[ok] = self.model.predict_proba(P[ok]) > self.p.threshold
            dist, base = self.distance(P), self.distance(X)
            better = np.flatnonzero(valid & (dist < base[who] - 1e-15))
            best: dict[int, int] = {}  # answer -> its best probe (the nearest; the first of equals)
            for n in better[np.lexsort((better, dist[better]))]:
                best.setdefault(int(who[n]), int(n))
            learned = False
            segs: dict[tuple[int, int], list[tuple[float, bool]]] = {}
            for n in np.flatnonzero(col >= 0):
                segs.setdefault((int(who[n]), int(col[n])), []).append((float(val[n]), bool(valid[n])))
            for (i, c), seen in segs.items():  # the failing probe nearest the first passing one
                gap = [abs(v - a.x[c]) for v, passed in seen if passed]
                limit = min(gap) if gap else abs(X[i, c] - a.x[c])
                failing = [v for v, passed in seen if not passed and abs(v - a.x[c]) < limit]
                if failing:
                    lo[(i, c)] = max(failing, key=lambda v, c=c: abs(v - a.x[c]))
                    learned = True
            for i, n in best.items():  # a bound holds for the row it was learned on: others start afresh
                X[i] = P[n]
                for key in [key for key in lo if key[0] == i and key[1] != col[n]]:
                    del lo[key]
            if not best and not learned:
                break
        return X

    def _probes(self, X: np.ndarray, lo: dict[tuple[int, int], float],
                tried: dict[int, bytes]) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:
        """The probe rows of one refinement round, in blocks, and per block the (answer, segment
        column or -1, value) of each row."""
        a, sp = self.agent, self.agent.space
        prog, schema, m = sp.program, sp.program.schema, int(self.p.refine_samples)
        blocks: list[np.ndarray] = []
        owner: list[tuple[np.ndarray, ...]] = []

        def add(i: int, T: np.ndarray, c: int = -1, v: np.ndarray | None = None) -> None:
            if len(T):
                blocks.append(T)
                owner.append((np.full(len(T), i), np.full(len(T), c), np.full(len(T), np.nan) if v is None else v))

        rank = np.empty(len(X), np.int64)
        rank[np.argsort(self.distance(X), kind="stable")] = np.arange(len(X))
        for i, (row, moved) in enumerate(zip(X, self.changed_groups(X), strict=True)):
            if tried.get(i) == row.tobytes():  # converged and traded: every probe of it is known
                continue
            changed = [int(g) for g in np.flatnonzero(moved)]
            ordered = {g: int(prog.group_cols[g][0]) for g in changed if self._ordered(g)}
            reverted = {}
            for g in changed:
                reverted[g] = row.copy()
                reverted[g][prog.group_cols[g]] = a.x[prog.group_cols[g]]
            add(i, np.array([reverted[g] for g in changed]).reshape(-1, len(row)))
            bound = {c: lo.get((i, c), a.x[c]) for c in ordered.values()}
            bound = {c: w if (w - a.x[c]) * (row[c] - a.x[c]) >= 0 else a.x[c] for c, w in bound.items()}  # flipped
            segments = {g: self._segment(schema.features[c], bound[c], row[c], m, sp.values[sp.entries(g), 0])
                        for g, c in ordered.items()}
            for g, c in ordered.items():
                T = np.repeat(row[None], len(segments[g]), axis=0)
                T[:, c] = segments[g]
                add(i, T, c, segments[g])
            for g in set(changed) - set(ordered):
                cols, opts = prog.group_cols[g], a.options(g)
                now = self.distance(row[None])[0] - self.distance(reverted[g][None])[0]
                cost = a.entry_cost(opts)
                e = opts[np.argsort(cost, kind="stable")][:m][np.sort(cost)[:m] < now - 1e-12]
                T = np.repeat(row[None], len(e), axis=0)
                T[:, cols] = sp.values[e, :len(cols)]
                add(i, T)
            if not any(len(v) for v in segments.values()) and rank[i] < int(self.p.n_diverse):
                tried[i] = row.tobytes()  # converged, and among the k nearest: the other side of x, and trades
                for g, c in ordered.items():
                    known = sp.values[sp.entries(g), 0]
                    other = known[(known - a.x[c]) * (row[c] - a.x[c]) < 0]  # sorted; spread by rank
                    v = np.unique(other[np.linspace(0, len(other) - 1, min(m, len(other))).astype(int)])
                    T = np.repeat(row[None], len(v), axis=0)
                    T[:, c] = v
                    add(i, T)
                for T in self._trades(row, changed, ordered):
                    add(i, T)
        return blocks, owner

    def _trades(self, row: np.ndarray, changed: list[int], ordered: dict[int, int]) -> list[np.ndarray]:
        """Trades of a converged answer: one changed group g moves part or all of the way back to x
        (ordered groups: 0, 1/4, 1/2 and 3/4 of its change left; others: x's value) while one other
        group h moves: a changed ordered h further from x (a geometric ladder of steps), an unchanged
        ordered h to the data values nearest x on either side (ranks 1, 2, 4, ..., where a tree's
        thresholds lie), any other h to its cheapest data values. These reach the optima that moves
        towards x cannot: a different mix of features on the same decision boundary."""
        a, sp = self.agent, self.agent.space
        prog, schema, m = sp.program, sp.program.schema, int(self.p.refine_samples)
        out = []
        moves: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # h -> (columns, (n, |columns|) values)
        for h in self.groups:
            cols = prog.group_cols[h]
            if h in ordered:
                c = ordered[h]
                f = schema.features[c]
                if h in changed:
                    vals = self._ladder(f, a.x[c], row[c], m)
                else:
                    vals = np.concatenate([self._local(h, side) for side in (-1.0, 1.0)])
                moves[h] = (cols, vals[:, None])
            else:
                opts = a.options(h)
                opts = opts[np.argsort(a.entry_cost(opts), kind="stable")][:m]
                moves[h] = (cols, sp.values[opts, :len(cols)])
        for g in changed:
            cols_g = prog.group_cols[g]
            if g in ordered:
                c = ordered[g]
                f = schema.features[c]
                left = a.x[c] + (row[c] - a.x[c]) * (1.0 - np.exp2(-np.arange(0.0, 5.0)))
                if f.integer or f.kind == "ordinal":
                    left = np.round(left)
                left = np.unique(left[left != row[c]])
                bases = np.repeat(row[None], len(left), axis=0)
                bases[:, c] = left
            else:
                bases = row[None].copy()
                bases[:, cols_g] = a.x[cols_g]
            for h, (cols, vals) in moves.items():
                if h == g or not len(vals):
                    continue
                T = np.repeat(bases, len(vals), axis=0)
                T[:, cols] = np.tile(vals, (len(bases), 1))
                out.append(T)
        return out

    def edges(self, base: np.ndarray | None = None, grid: int = 128, per_side: int = 6,
              rounds: int = 20) -> dict[int, np.ndarray]:
        """Per ordered group: the values just past the nearest places where P(accept) changes on its
        line through ``base`` (default x; the other features at base's values), ``per_side`` on each
        side of base's value; only groups base leaves at x's value.

        Beyond the paper (issue 34; with ``polish``). One batched call scans every line on a grid (the
        data's values and an even grid, ``grid`` of each at most); each change of P between neighbours
        is then bisected (``rounds`` batched calls) to the far side of the change. A forest's optimum
        is a few such threshold crossings together, often between data values far from x; the beam
        of ``ascent`` starts from these moves.
        """
        a, sp = self.agent, self.agent.space
        schema = sp.program.schema
        lo, hi = schema.bounds()
        base = a.x if base is None else np.asarray(base, float)
        lines = []  # (group, column, values sorted away from x)
        for g in self.groups:
            if not self._ordered(g):
                continue
            c = int(sp.program.group_cols[g][0])
            if base[c] != a.x[c]:
                continue
            f = schema.features[c]
            if not (np.isfinite(hi[c] - lo[c]) and hi[c] > lo[c]):
                continue
            data = np.unique(sp.values[a.options(g), 0])
            if len(data) > grid:
                data = data[np.linspace(0, len(data) - 1, grid).astype(int)]
            ladder = (hi[c] - lo[c]) * np.exp2(-np.linspace(0.0, 24.0, grid // 2))  # dense near base and near 0
            v = np.unique(np.concatenate([data, np.linspace(lo[c], hi[c], grid + 1), base[c] + ladder, base[c] - ladder,
                                          lo[c] + ladder]))
            v = v[(v >= lo[c]) & (v <= hi[c])]
            if f.integer or f.kind == "ordinal":
                v = np.unique(np.round(v))
            for side in (-1.0, 1.0):
                w = v[(v - a.x[c]) * side > 0]
                if (f.mutability == "increase" and side < 0) or (f.mutability == "decrease" and side > 0) or not len(w):
                    continue
                lines.append((g, c, side, np.concatenate([[a.x[c]], w[np.argsort(np.abs(w - a.x[c]))]])))
        if not lines:
            return {}
        rows = np.repeat(base[None], sum(len(w) for *_, w in lines), axis=0)
        at = np.cumsum([0] + [len(w) for *_, w in lines])
        for (_g, c, _side, w), s0 in zip(lines, at[:-1], strict=True):
            rows[s0:s0 + len(w), c] = w
        ok = a.rules.violations(rows) == 0
        p = np.full(len(rows), np.nan)
        p[ok] = self.model.predict_proba(rows[ok])
        self.refine_rounds += 1
        near, far, col, grp = [], [], [], []
        for (g, c, _side, w), s0 in zip(lines, at[:-1], strict=True):
            q = p[s0:s0 + len(w)]
            change = np.flatnonzero(np.abs(np.diff(q)) > 1e-12)[:per_side]
            near += list(w[change])
            far += list(w[change + 1])
            col += [c] * len(change)
            grp += [g] * len(change)
        if not near:
            return {}
        near, far, col = np.array(near), np.array(far), np.array(col)
        integer = np.array([schema.features[c].integer or schema.features[c].kind == "ordinal" for c in col])
        base = np.repeat(base[None], len(col), axis=0)
        idx = np.arange(len(col))
        base[idx, col] = near
        p_near = self.model.predict_proba(base)
        for _ in range(rounds):
            mid = (near + far) / 2
            mid = np.where(integer, np.where(far > near, np.ceil(mid), np.floor(mid)), mid)
            open_ = (mid != far) & (mid != near)
            if not open_.any():
                break
            T = base.copy()
            T[idx, col] = mid
            same = np.abs(self.model.predict_proba(T) - p_near) <= 1e-12
            self.refine_rounds += 1
            near = np.where(open_ & same, mid, near)
            far = np.where(open_ & ~same, mid, far)
        out: dict[int, list[float]] = {}
        for g, v in zip(grp, far, strict=True):
            out.setdefault(int(g), []).append(float(v))
        return {g: np.unique(v) for g, v in out.items()}

    def _local(self, g: int, side: float) -> np.ndarray:
        """The data values of ordered group g on one side of x's value, at ranks 1, 2, 4, ... from it."""
        a, sp = self.agent, self.agent.space
        c = int(sp.program.group_cols[g][0])
        v = sp.values[a.options(g), 0]
        v = v[(v - a.x[c]) * side > 0]
        v = v[np.argsort(np.abs(v - a.x[c]), kind="stable")]
        ranks = (1 << np.arange(int(np.log2(max(len(v), 1))) + 1)) - 1
        return v[ranks[ranks < len(v)]]

    def _ordered(self, g: int) -> bool:
        """A single numeric or ordinal column: searched on a line."""
        cols = self.agent.space.program.group_cols[g]
        return len(cols) == 1 and self.agent.space.program.schema.features[cols[0]].kind in ("numeric", "ordinal")

    @staticmethod
    def _segment(f: Any, lo: float, v: float, m: int, known: np.ndarray) -> np.ndarray:
        """Probe values strictly between ``lo`` (fails) and ``v`` (passes): m evenly spaced, m / 2
        closing in on ``lo`` geometrically and the m / 2 data values (``known``) nearest ``lo``,
        so that a narrow passing interval near x (a split at a small amount) is not stepped over."""
        if abs(v - lo) <= (0.5 if f.integer or f.kind == "ordinal" else 1e-6 * (f.upper - f.lower)):
            return np.zeros(0)
        inner = np.concatenate([lo + (v - lo) * np.arange(1, m + 1) / (m + 1),
                                lo + (v - lo) * np.exp2(-np.arange(2, m // 2 + 2))])
        between = known[(known - lo) * (v - known) > 0]
        inner = np.concatenate([inner, between[np.argsort(np.abs(between - lo), kind="stable")][: m // 2]])
        if f.integer or f.kind == "ordinal":
            inner = np.round(inner)
        return np.unique(inner[(inner - lo) * (v - inner) > 0])

    @staticmethod
    def _ladder(f: Any, x: float, v: float, m: int) -> np.ndarray:
        """Up to m values beyond ``v`` away from ``x``: steps of |v - x| times 2^-8 ... 2^4, within range."""
        out = v + np.sign(v - x) * abs(v - x) * np.exp2(np.linspace(-8.0, 4.0, m))
        out = np.clip(out, f.lower, f.upper)
        if f.integer or f.kind == "ordinal":
            out = np.round(out)
        return np.unique(out[out != v])
