"""MD-PSO counterfactuals (Shekhar et al., "A PSO Based Method to Generate Actionable
Counterfactuals for High Dimensional Data", §IV), on a black-box ``predict_proba``.

``MDPSO(...).fit(world, D)`` ranks the features by information value (IV, the paper's appendix,
with the model's own decisions on D as the classes); ``solve(world, x)`` then runs a mixed-discrete
particle swarm (Chowdhury et al. 2013) over the ``active_features`` mutable features of highest IV:

- positions live in [0, 1] per encoded column (min-max by the schema's range), inside the box
  ``[z - epsilon, z + epsilon]`` around the agent's value z (the paper's box constraint), narrowed
  by the schema's mutability (immutable features are never active; increase-only features never
  go below z); binary and one-hot columns use the whole [0, 1];
- the velocity update is Eq. 1, ``V <- c0 V + c1 r1 (P_i - X) + c2 r2 (P_g - X) + c3 r3 V^``, with
  the diversity term V^ pointing from the mean of the better half of the swarm to the particle;
- discrete features live on the hypercube and are mapped to its nearest corner after every move
  (integers rounded, a one-hot group to its largest coordinate), and so are evaluated exactly;
- the objective (Eq. 3) is validity (0 for a counterfactual, else ``2 + threshold - p``: every
  counterfactual beats every other point) + Gower distance (mean normalized delta over the raw
  features, MACE's l1 normalization) + l0 / J (the number of changed raw features, normalized);
- after the last iteration, the valid personal bests (topped up from every valid point seen) are
  clustered by k-means into ``n_diverse`` clusters and the best point of each cluster is returned
  (paper §V-B2).

One batched ``predict_proba`` call per iteration (all particles). MD-PSO is a heuristic: it
carries no optimality certificate (use MACE for one).

The world's rules (``envs.rules``, issue 55): the box is narrowed by every rule on one column
(``GroundRules.box``: step bounds, mutability, a forbidden category), and a particle that breaks a
rule (the shared checker, ``CompiledRules.holds``, on the whole swarm at once) is no counterfactual:
its objective carries the validity hinge plus one per broken rule, and it never enters the archive,
the sparsified points or the answers. Distances take the rules' cost weights (MACE's weighted
distance: each feature's delta and change count times the weight of the direction it moved).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from envs.recourse import Recourse
from solvers.base import Solver
from solvers.blackbox import CountingModel, check_agent, point_recourse
from solvers.mace.distance import DistanceFeature, deltas, directions, distance_features


def information_value(values: np.ndarray, positive: np.ndarray, n_bins: int = 10) -> float:
    """IV of one feature for a binary outcome: sum over bins of (p_i - n_i) ln(p_i / n_i).

    Numbers are cut into ``n_bins`` quantile bins, fewer distinct values are bins themselves;
    counts are smoothed by 0.5 so empty bins stay finite.
    """
    values = np.asarray(values, float)
    uniq = np.unique(values)
    if len(uniq) <= n_bins:
        bins = np.searchsorted(uniq, values)
    else:
        edges = np.unique(np.quantile(values, np.linspace(0, 1, n_bins + 1)[1:-1]))
        bins = np.searchsorted(edges, values, side="right")
    k = int(bins.max()) + 1
    pos = np.bincount(bins[positive], minlength=k) + 0.5
    neg = np.bincount(bins[~positive], minlength=k) + 0.5
    p, n = pos / pos.sum(), neg / neg.sum()
    return float(np.sum((p - n) * np.log(p / n)))


def kmeans(points: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 50) -> np.ndarray:
    """Cluster labels of Lloyd's k-means with k-means++ seeding (k <= number of points)."""
    centers = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        d2 = np.min([((points - c) ** 2).sum(axis=1) for c in centers], axis=0)
        centers.append(points[rng.choice(len(points), p=d2 / d2.sum())] if d2.sum() > 0 else
                       points[rng.integers(len(points))])
    C = np.array(centers)
    labels = np.zeros(len(points), np.int64)
    for _ in range(iterations):
        labels = ((points[:, None, :] - C[None]) ** 2).sum(axis=2).argmin(axis=1)
        new = np.array([points[labels == j].mean(axis=0) if (labels == j).any() else C[j] for j in range(k)])
        if np.allclose(new, C):
            break
        C = new
    return labels


class MDPSO(Solver):
    """Mixed-discrete particle swarm search for diverse, sparse, close counterfactuals."""

    name = "md-pso"
    exact = False

    def __init__(self, n_diverse: int = 5, n_particles: int = 50, n_iterations: int = 100,
                 active_features: int | None = None, epsilon: float = 1.0, box: str = "absolute",
                 inertia: float = 0.7,
                 cognitive: float = 1.5, social: float = 1.5, diversity: float = 0.3, snap: float = 0.05,
                 proximity: str = "gower", init: str = "data", sparsify: bool = True, n_bins: int = 10,
                 threshold: float = 0.5, max_iterations: int = 500, restart_every: int = 20,
                 seed: int = 0) -> None:
        self.n_diverse = n_diverse  # k: counterfactuals returned (k-means clusters)
        self.n_particles = n_particles  # swarm size (the paper: 50)
        self.n_iterations = n_iterations  # iterations (the paper: 100)
        self.active_features = active_features  # h: mutable raw features searched, by IV; None: all
        self.epsilon = epsilon  # box half-width around the agent's scaled value z
        self.box = box  # "relative": [z(1 - eps), z(1 + eps)] as the paper; "absolute": [z - eps, z + eps]
        self.inertia = inertia  # c0
        self.cognitive = cognitive  # c1: pull to the particle's best
        self.social = social  # c2: pull to the swarm's best
        self.diversity = diversity  # c3: push away from the better half's mean
        self.snap = snap  # a continuous coordinate within this share of its box of the agent's is the agent's
        self.proximity = proximity  # objective's l2: "gower" (|dx| / range, Eq. 6) or "mad" (|dx| / MAD, Eq. 9)
        self.init = init  # particles start at x with a few features drawn uniformly in the box ("box"), or
        # for half the swarm copied from the accepted data rows nearest to x ("data")
        self.sparsify = sparsify  # put changed features back to x while valid before selecting (black-box)
        self.n_bins = n_bins  # quantile bins of the information value
        self.threshold = threshold  # counterfactual iff P(accept) > threshold
        self.max_iterations = max_iterations  # iterations at most while fewer than k counterfactuals were met
        self.restart_every = restart_every  # in those, restart the particles without one this often
        self.seed = seed  # random seed

    def _check_params(self) -> None:
        for name in ("n_diverse", "n_particles", "n_iterations", "n_bins", "max_iterations", "restart_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if self.active_features is not None and int(self.active_features) < 1:
            raise ValueError(f"active_features: must be >= 1 or None, got {self.active_features!r}")
        if not float(self.epsilon) > 0.0:
            raise ValueError(f"epsilon: must be > 0, got {self.epsilon!r}")
        if not 0.0 <= float(self.threshold) < 1.0:
            raise ValueError(f"threshold: must be in [0, 1), got {self.threshold!r}")
        if self.box not in ("relative", "absolute"):
            raise ValueError(f"box: expected 'relative' or 'absolute', got {self.box!r}")
        if self.init not in ("data", "box"):
            raise ValueError(f"init: expected 'data' or 'box', got {self.init!r}")
        if self.proximity not in ("gower", "mad"):
            raise ValueError(f"proximity: expected 'gower' or 'mad', got {self.proximity!r}")
        if not 0.0 <= float(self.snap) < 0.5:
            raise ValueError(f"snap: must be in [0, 0.5), got {self.snap!r}")

    def fit(self, world: Any, data: np.ndarray) -> MDPSO:
        """Rank the mutable raw features by information value on ``data`` (classes: the model's decisions)."""
        self._check_params()
        schema = world.schema
        D = schema.validate(data, name="data")
        model = CountingModel(world.model, self.threshold)
        positive = model.accepts(D)
        self.positives_ = D[positive]  # accepted rows: the "data" initialization copies their values
        raws = distance_features(schema)
        iv = []
        for r in raws:
            v = D[:, list(r.columns)].argmax(axis=1) if r.kind == "group" else D[:, r.columns[0]]
            iv.append(information_value(v, positive, int(self.n_bins)))
        self.raws_ = raws
        self.information_value_ = np.array(iv)
        cols = [r.columns[0] for r in raws]
        mad = np.median(np.abs(D[:, cols] - np.median(D[:, cols], axis=0)), axis=0)
        numeric = np.array([r.kind == "numeric" for r in raws])
        self.scale_ = np.where(numeric, np.where(mad > 0, mad, 1.0), 1.0) if self.proximity == "mad" else None
        self.world_ = world
        self.fit_model_calls_ = model.calls
        return self

    def _check_world(self, world: Any) -> None:
        if not hasattr(self, "raws_"):
            raise ValueError("MDPSO: not fitted; call fit(world, data) first (it ranks the features on the data)")
        if world.schema != self.world_.schema or world.model is not self.world_.model:
            raise ValueError(f"world: MDPSO was fitted on {getattr(self.world_, 'name', '?')!r}; "
                             f"fit it on {getattr(world, 'name', '?')!r} first")

    def active(self, world: Any, x: np.ndarray, box: tuple[np.ndarray, np.ndarray] | None = None
               ) -> list[DistanceFeature]:
        """The h mutable raw features of highest information value (that can move for this agent;
        ``box``: the agent's box under the world's rules, ``_rule_box``)."""
        schema = world.schema
        lo, hi = schema.bounds()
        movable = []
        for j in np.argsort(-self.information_value_, kind="stable"):
            r = self.raws_[j]
            f = schema.features[r.columns[0]]
            if f.mutability == "immutable" or all(lo[c] == hi[c] for c in r.columns):
                continue
            if box is not None and all(box[0][c] == box[1][c] for c in r.columns):
                continue  # a rule pins it (a one-hot group: every category but x's forbidden)
            if (f.mutability == "increase" and all(x[c] >= hi[c] for c in r.columns) and r.kind != "group") or (
                    f.mutability == "decrease" and all(x[c] <= lo[c] for c in r.columns) and r.kind != "group"):
                continue
            movable.append(r)
        return movable if self.active_features is None else movable[: int(self.active_features)]

    def solve(self, world: Any, x: np.ndarray, **options: Any) -> list[Recourse]:
        self._check_params()
        self._check_world(world)
        t0 = time.perf_counter()
        schema = world.schema
        x = check_agent(schema, x)
        model = CountingModel(world.model, self.threshold)
        if model.predict_proba(x[None])[0] > self.threshold:
            return [point_recourse(schema, self.raws_, x, x, method=self.name, distance=0.0, valid=True,
                                   runtime=time.perf_counter() - t0,
                                   extra={"reason": "already_positive", "model_calls": model.calls})]
        rules = world.compiled_rules() if callable(getattr(world, "compiled_rules", None)) else None
        box, dead = _rule_box(schema, rules, x)
        if dead is not None:
            return [Recourse.none(self.name, status="no_recourse", runtime=time.perf_counter() - t0,
                                  reason=f"no counterfactual keeps rule {dead!r} for this agent")]
        swarm = _Swarm(self, schema, x, self.active(world, x, box), model, rules, box)
        if swarm.dim == 0:
            return [Recourse.none(self.name, status="no_recourse", runtime=time.perf_counter() - t0,
                                  reason="no feature can change (all immutable or at their bound)")]
        X, proba, dist = swarm.run()
        runtime = time.perf_counter() - t0
        extra = {"model_calls": model.calls, "model_rows": model.rows, "active": [r.name for r in swarm.raws],
                 "iterations": swarm.iterations, "restarts": swarm.restarts}
        if not len(X):
            return [Recourse.none(self.name, status="unknown", runtime=runtime,
                                  reason=f"no counterfactual within {self.n_iterations} iterations")]
        return [point_recourse(schema, self.raws_, x, X[i], method=self.name, distance=dist[i], valid=True,
                               runtime=runtime, extra={"proba": float(proba[i]), "rank": i, **extra})
                for i in range(len(X))]


def _rule_box(schema: Any, rules: Any, x: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray] | None, str | None]:
    """The schema's box narrowed by the world's rules on one column (None without rules), and the name
    of a rule no point keeps for this agent (else None)."""
    if rules is None:
        return None, None
    lo, hi = (np.asarray(b, float) for b in schema.bounds())
    g = rules.ground(x)
    if g.unsatisfiable is not None:
        return None, g.unsatisfiable
    lo, hi, dead = g.box(lo, hi, np.where(hi > lo, hi - lo, 1.0))
    return (lo, hi), dead


class _Swarm:
    """The particles of one agent: positions over the active features' columns, scaled to [0, 1]."""

    def __init__(self, pso: MDPSO, schema: Any, x: np.ndarray, active: list[DistanceFeature], model: CountingModel,
                 rules: Any = None, box: tuple[np.ndarray, np.ndarray] | None = None):
        self.p, self.schema, self.x, self.raws, self.model = pso, schema, x, active, model
        self.rules = rules  # the world's rules (envs.rules.CompiledRules); None: the schema's mutability only
        self.rng = np.random.default_rng(pso.seed)
        lower, upper = schema.bounds()
        cols = np.array([c for r in active for c in r.columns], np.int64)
        self.cols = cols
        self.dim = len(cols)
        self.lower, self.upper = lower[cols], upper[cols]
        self.span = np.where(self.upper > self.lower, self.upper - self.lower, 1.0)
        self.z = (x[cols] - self.lower) / self.span
        feats = [schema.features[c] for c in cols]
        corner = np.array([f.kind in ("binary", "categorical") or f.group is not None for f in feats], bool)
        self.integral = np.array([f.integer or f.kind == "ordinal" for f in feats], bool) & ~corner
        self.continuous = ~corner & ~self.integral
        eps = float(pso.epsilon) * (self.z if pso.box == "relative" else 1.0)
        lo = np.where(self.continuous, np.maximum(self.z - eps, 0.0), 0.0)  # the box binds real columns;
        hi = np.where(self.continuous, np.minimum(self.z + eps, 1.0), 1.0)  # discrete ones use their range
        mut = np.array([f.mutability for f in feats])
        self.lo = np.where(mut == "increase", np.maximum(lo, self.z), lo)
        self.hi = np.where(mut == "decrease", np.minimum(hi, self.z), hi)
        if box is not None:  # the rules on one column (step bounds, a forbidden category) narrow it too
            self.lo = np.minimum(np.maximum(self.lo, (box[0][cols] - self.lower) / self.span), self.z)
            self.hi = np.maximum(np.minimum(self.hi, (box[1][cols] - self.lower) / self.span), self.z)
        self.coord_raw = np.repeat(np.arange(len(active)), [len(r.columns) for r in active])
        start = 0
        self.one_hot = []  # coordinate indices of each one-hot group
        for r in active:
            if r.kind == "group":
                self.one_hot.append(np.arange(start, start + len(r.columns)))
            start += len(r.columns)
        self.in_one_hot = np.isin(np.arange(self.dim), np.concatenate([[], *self.one_hot]))
        self.binary = corner & ~self.in_one_hot
        self.all_raws = distance_features(schema)
        self.first = np.array([r.columns[0] for r in self.all_raws])  # a raw feature's (first) column
        self.numeric = np.array([r.kind == "numeric" for r in self.all_raws])
        self.cost = rules.cost if rules is not None and rules.weighted else None

    def decode(self, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions mapped to the nearest feasible corner: (positions, full encoded rows)."""
        S = np.clip(S, self.lo, self.hi)
        V = self.lower + S * self.span
        V = np.where(self.integral | self.binary, np.round(V), V)
        for idx in self.one_hot:
            top = S[:, idx].argmax(axis=1)
            V[:, idx] = 0.0
            V[np.arange(len(S)), idx[top]] = 1.0
        near = self.continuous & (np.abs(S - self.z) < float(self.p.snap) * (self.hi - self.lo))
        # the agent's own value, exactly; not per coordinate of a one-hot group (two categories set)
        V = np.where((near | (S == self.z)) & ~self.in_one_hot, self.x[self.cols], V)
        V = np.clip(V, self.lower, self.upper)
        X = np.tile(self.x, (len(S), 1))
        X[:, self.cols] = V
        return (V - self.lower) / self.span, X

    def score(self, X: np.ndarray) -> np.ndarray:
        """P(accept) of full rows (one model call), capped at the threshold where a row breaks one of the
        world's rules (the shared checker, on the accepted rows of the whole batch): such a row is no
        counterfactual for any step of the search. Without rules: P(accept) itself."""
        proba = self.model.predict_proba(X)
        if self.rules is not None:
            ok = proba > self.p.threshold
            if ok.any():
                ok[ok] = ~self.rules.holds(self.x, X[ok])
                proba = np.where(ok, self.p.threshold, proba)
        return proba

    def distance(self, X: np.ndarray) -> np.ndarray:
        """Gower (MACE's l1 normalization), with the world's cost weights where it has them."""
        D = deltas(self.all_raws, self.x, X)
        if self.cost is not None:
            D = D * directions(self.all_raws, self.x, X, self.cost)
        return D.mean(axis=1)

    def objective(self, X: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(objective, Gower distance) of full rows: validity hinge + Gower + l0 / J; with the world's
        rules, a row that breaks one is no counterfactual (the hinge, plus one per broken rule), and
        Gower and l0 weigh each feature by the cost weight of the direction it moved."""
        D = deltas(self.all_raws, self.x, X)
        W = None if self.cost is None else directions(self.all_raws, self.x, X, self.cost)
        changed = (D > 0) if W is None else (D > 0) * W
        if W is not None:
            D = D * W
        gower = D.mean(axis=1)
        if self.p.scale_ is None:
            near = gower
        else:  # the PSO paper's Eq. 9 / 11 in place of Gower: |dx| / MAD for numbers, 1[changed] otherwise
            near = np.where(self.numeric, np.abs(X[:, self.first] - self.x[self.first]) / self.p.scale_, D)
            near = (near if W is None else near * np.where(self.numeric, W, 1.0)).mean(axis=1)
        valid = proba > self.p.threshold
        hinge = np.where(valid, 0.0, 2.0 + self.p.threshold - proba)
        if self.rules is not None:
            broken = self.rules.broken(self.x, X).sum(axis=1)
            hinge = np.where(broken > 0, 2.0 + self.p.threshold - np.minimum(proba, self.p.threshold) + broken, hinge)
        return near + changed.mean(axis=1) + hinge, gower

    def start(self, n: int) -> np.ndarray:
        """n fresh positions: x with a few features drawn in the box, half of them from accepted rows."""
        rng = self.rng
        S = self.lo + rng.random((n, self.dim)) * (self.hi - self.lo)
        if self.p.init == "data" and len(self.p.positives_):  # half the swarm: values of nearby accepted rows
            pos = self.p.positives_
            near = np.argsort(np.abs((pos[:, self.cols] - self.x[self.cols]) / self.span).sum(axis=1))
            half = np.arange(0, n, 2)
            donors = pos[near[(np.arange(len(half)) + self.restarts * len(half)) % len(near)]][:, self.cols]
            S[half] = np.clip((donors - self.lower) / self.span, self.lo, self.hi)
        size = np.minimum(rng.geometric(0.15, n), len(self.raws))  # particle i starts changing size[i] features
        size[: n // 5] = len(self.raws)  # a fifth start at their donor (or anywhere in the box)
        moved = np.argsort(rng.random((n, len(self.raws))), axis=1) < size[:, None]
        return np.where(moved[:, self.coord_raw], S, self.z)

    def run(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The swarm's ``n_iterations`` moves; then, while fewer than k distinct counterfactuals were met
        (personal bests and every valid point seen), more iterations up to ``max_iterations`` in all,
        the particles that are no counterfactual restarting afresh every ``restart_every`` of them."""
        p, rng = self.p, self.rng
        n, k = int(p.n_particles), int(p.n_diverse)
        self.restarts = 0
        S, X = self.decode(self.start(n))
        V = np.zeros_like(S)
        proba = self.score(X)
        f, _ = self.objective(X, proba)
        best_S, best_f, best_X, best_p = S.copy(), f.copy(), X.copy(), proba.copy()
        archive_X, archive_f, archive_p = [X[proba > p.threshold]], [f[proba > p.threshold]], [proba[proba > p.threshold]]
        seen = {row.tobytes() for row in X[proba > p.threshold]}
        vmax = self.hi - self.lo
        cap = max(int(p.n_iterations), int(p.max_iterations))
        it = 0
        while it < int(p.n_iterations) or (it < cap and len(seen) < k):
            it += 1
            if it > int(p.n_iterations) and (it - int(p.n_iterations)) % int(p.restart_every) == 0:
                stuck = np.flatnonzero(best_p <= p.threshold)  # restart: the particles with no counterfactual
                if not len(stuck):  # all found one: restart the half with the worst objective
                    stuck = np.argsort(best_f, kind="stable")[n // 2:]
                self.restarts += 1
                S[stuck], _ = self.decode(self.start(len(stuck)))
                V[stuck] = 0.0
                best_S[stuck], best_f[stuck] = S[stuck], np.inf
            g = best_S[np.argmin(best_f)]
            elite = S[np.argsort(f, kind="stable")[: max(1, n // 2)]].mean(axis=0)
            r1, r2, r3 = rng.random((3, n, self.dim))
            V = (p.inertia * V + p.cognitive * r1 * (best_S - S) + p.social * r2 * (g - S)
                 + p.diversity * r3 * (S - elite))
            V = np.clip(V, -vmax, vmax)
            S, X = self.decode(S + V)
            proba = self.score(X)
            f, _ = self.objective(X, proba)
            better = f < best_f
            best_S[better], best_f[better], best_X[better], best_p[better] = S[better], f[better], X[better], proba[better]
            ok = proba > p.threshold
            archive_X.append(X[ok])
            archive_f.append(f[ok])
            archive_p.append(proba[ok])
            seen.update(row.tobytes() for row in X[ok])
        self.iterations = it
        return self.select(best_X, best_f, best_p, np.vstack(archive_X), np.concatenate(archive_f),
                           np.concatenate(archive_p))

    def select(self, best_X: np.ndarray, best_f: np.ndarray, best_p: np.ndarray, arch_X: np.ndarray,
               arch_f: np.ndarray, arch_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """k-means over the valid personal bests (topped up from the archive); the best of each cluster."""
        k, thr = int(self.p.n_diverse), self.p.threshold
        ok = best_p > thr
        X, f, pr = best_X[ok], best_f[ok], best_p[ok]
        X, f, pr = self._distinct(X, f, pr)
        want = 2 * int(self.p.n_particles) if self.p.sparsify else k  # sparsified points may coincide
        if len(X) < want and len(arch_X):  # top up with the best other valid points seen
            AX, af, ap = self._distinct(arch_X, arch_f, arch_p)
            fresh = ~(AX[:, None, :] == X[None, :, :]).all(axis=2).any(axis=1) if len(X) else np.ones(len(AX), bool)
            order = np.flatnonzero(fresh)[np.argsort(af[fresh], kind="stable")][: want - len(X)]
            X, f, pr = np.vstack([X, AX[order]]), np.concatenate([f, af[order]]), np.concatenate([pr, ap[order]])
        if not len(X):
            return X, pr, f
        labels = kmeans((X[:, self.cols] - self.lower) / self.span, k, self.rng) if len(X) > k else np.arange(len(X))
        if self.p.sparsify:  # every valid sparser version joins the candidates of its point's cluster
            TX, tp, tf, owner = self.sparsified(X.copy(), pr.copy(), f.copy())
            X, pr, f = np.vstack([TX, X]), np.concatenate([tp, pr]), np.concatenate([tf, f])
            labels = np.concatenate([labels[owner], labels])
        pick: list[int] = []
        for j in sorted(set(labels.tolist()), key=lambda j: f[labels == j].min()):
            for b in np.flatnonzero(labels == j)[np.argsort(f[labels == j], kind="stable")]:
                if not any(np.array_equal(X[b], X[c]) for c in pick):
                    pick.append(int(b))
                    break
        for b in np.argsort(f, kind="stable"):  # fewer clusters than k (k-means left one empty): the
            if len(pick) >= k:  # best other distinct points fill up to k
                break
            if not any(np.array_equal(X[b], X[c]) for c in pick):
                pick.append(int(b))
        X, f, pr = X[pick], f[pick], pr[pick]
        proba = self.score(X)  # re-scored: the answers' own call (and checked against the rules)
        keep = proba > thr
        X, f, proba = X[keep], f[keep], proba[keep]
        order = np.argsort(f, kind="stable")
        return X[order], proba[order], self.distance(X[order])

    def sparsified(self, X: np.ndarray, proba: np.ndarray, f: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Changed features put back to x's values while the points stay counterfactuals.

        Each round (one batched call) tries, for every point, putting back each changed feature
        alone and the 1, 2, 4, ... features that cost most together, and moves the point to the
        probe with the lowest objective; rounds stop when no point improves. Returns every valid
        probe that improved its point (rows, P(accept), objective, index of the point).
        """
        trail: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        starts = np.concatenate([[0], np.cumsum([len(r.columns) for r in self.raws])[:-1]])
        for _ in range(64):
            cost = np.add.reduceat(np.abs(X[:, self.cols] - self.x[self.cols]) / self.span, starts, axis=1)
            masks, owner = [], []
            for i in range(len(X)):
                changed = np.flatnonzero(cost[i] > 0)
                changed = changed[np.argsort(-cost[i, changed], kind="stable")]
                n = len(changed)
                if not n:
                    continue
                prefix = np.unique(np.minimum(np.exp2(np.arange(int(np.log2(n)) + 2)).astype(int), n))
                m = np.zeros((len(prefix) + n, len(self.raws)), bool)
                m[np.arange(len(prefix))[:, None], changed[None, :]] = np.arange(n)[None, :] < prefix[:, None]
                m[len(prefix) + np.arange(n), changed] = True
                masks.append(m)
                owner.append(np.full(len(m), i))
            if not masks:
                break
            owner_arr = np.concatenate(owner)
            back = np.vstack(masks)[:, self.coord_raw]  # (probes, dim)
            P = X[owner_arr].copy()
            P[:, self.cols] = np.where(back, self.x[self.cols], P[:, self.cols])
            pp = self.score(P)
            pf, _ = self.objective(P, pp)
            good = (pp > self.p.threshold) & (pf < f[owner_arr] - 1e-12)
            if not good.any():
                break
            trail.append((P[good], pp[good], pf[good], owner_arr[good]))
            for i in np.unique(owner_arr[good]):
                mine = np.flatnonzero(good & (owner_arr == i))
                b = mine[np.argmin(pf[mine])]
                X[i], proba[i], f[i] = P[b], pp[b], pf[b]
        if not trail:
            return X[:0], proba[:0], f[:0], np.zeros(0, np.int64)
        return tuple(np.concatenate(parts) for parts in zip(*trail, strict=True))  # type: ignore[return-value]

    @staticmethod
    def _distinct(X: np.ndarray, f: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not len(X):
            return X, f, p
        _, first = np.unique(X, axis=0, return_index=True)
        first = np.sort(first)
        return X[first], f[first], p[first]
