"""Amortized counterfactual generators for the tabular worlds, trained on MACE's labels.

A generator answers a batch of rejected agents (encoded rows) with counterfactuals in one pass:

1. ``candidates(world, X)`` proposes K encoded rows per agent (the method's own idea);
2. every candidate is *projected* onto what the agent may reach (schema bounds, immutable and
   increase-/decrease-only features, integer codes rounded away from the agent, one valid 1 per
   one-hot group) and the whole (N, K) batch is checked with the model in one call;
3. the nearest accepted candidate (MACE's normalized distance, Eq. 3) is *polished*: its numeric
   changes shrink toward the agent by bisection while the model still accepts (a few batched
   calls), then each changed feature is tried back at the agent's value (one batched call).

So every answer is accepted by the model and breaks no constraint by construction; an agent
none of whose candidates is accepted gets a NaN row (the server then falls back to a solver).
The polish only shortens the answer; it is a heuristic, and the answers carry no certificate.

Methods (``TABULAR_GENERATORS``):

- ``nearest_cfe``: no learning, the baseline. The k nearest training agents (Euclidean on the
  schema-scaled rows) lend their MACE counterfactual: the features they changed take the
  neighbour's new values (absolute) or the neighbour's change added to the agent (relative).
- ``named_cfe``: a named-CFE classifier (learners.named_cfe, the learning-CFE paper's MC model)
  over the set of raw features MACE changed; for each of its top classes, the nearest training
  agent with that class lends its values as above.

Persistence follows learners/base.py: ``config.json`` + ``arrays.npz`` (+ the classifier's
``weights.pt``), never a pickle.
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from envs.tabular import TabularWorld
from solvers.mace.distance import Norm, norm_weights, raw_features

MARGIN = 1e-6  # LR/MLP white boxes are float64 copies: an answer must clear this score to be sure


# ---------------------------------------------------------------------------------------- geometry

@dataclass
class WorldGeometry:
    """Per-column arrays of a tabular world that the vectorized steps below need."""

    lower: np.ndarray  # (D,) schema bounds
    upper: np.ndarray
    fixed: np.ndarray  # (D,) bool: immutable
    up: np.ndarray  # increase-only
    down: np.ndarray  # decrease-only
    integral: np.ndarray  # (D,) bool: integer codes (ordinal, binary, integer numbers, one-hot)
    numeric: np.ndarray  # (D,) bool: columns measured by |dx| / span (shrinkable)
    span: np.ndarray  # (D,) R_j of numeric columns (1 elsewhere)
    raw_of_column: np.ndarray  # (D,) raw feature index of each column
    raw_kinds: list[str]  # per raw feature: numeric | binary | nominal | group
    group_columns: list[np.ndarray]  # columns of each one-hot group
    weights: tuple[float, float, float]  # (alpha, beta, gamma) of Eq. 3

    @classmethod
    def of(cls, world: TabularWorld, norm: Norm = "one") -> WorldGeometry:
        """The geometry of ``world`` (cached per world object and norm: a server asks on every request)."""
        key = (id(world), norm if isinstance(norm, str) else tuple(norm))
        hit = _GEOMETRY.get(key)
        if hit is not None and hit[0] is world:
            return hit[1]
        geo = cls._build(world, norm)
        if len(_GEOMETRY) > 64:
            _GEOMETRY.clear()
        _GEOMETRY[key] = (world, geo)
        return geo

    @classmethod
    def _build(cls, world: TabularWorld, norm: Norm) -> WorldGeometry:
        schema = world.schema
        lo, hi = schema.bounds()
        mut = np.array([f.mutability for f in schema.features])
        raws = raw_features(schema)
        of_col = np.zeros(len(schema), np.int64)
        numeric = np.zeros(len(schema), bool)
        span = np.ones(len(schema))
        for j, r in enumerate(raws):
            of_col[list(r.columns)] = j
            if r.kind == "numeric":
                numeric[r.columns[0]] = True
                span[r.columns[0]] = r.span if r.span > 0 else np.inf
        integral = np.array([f.kind in ("binary", "ordinal", "categorical") or f.group is not None
                             or bool(getattr(f, "integer", False)) for f in schema.features])
        return cls(np.asarray(lo, float), np.asarray(hi, float), mut == "immutable", mut == "increase",
                   mut == "decrease", integral, numeric, span, of_col, [r.kind for r in raws],
                   [np.asarray(r.columns) for r in raws if r.kind == "group"], norm_weights(norm, len(raws)))

    def __post_init__(self) -> None:
        in_group = np.zeros(len(self.integral), bool)
        for cols in self.group_columns:
            in_group[cols] = True
        self.rounded = self.integral & ~in_group  # integer codes outside one-hot groups

    @property
    def n_raw(self) -> int:
        return len(self.raw_kinds)

    def box(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) reachable bounds per agent: schema bounds narrowed by mutability."""
        lo = np.where(self.fixed | self.up, np.maximum(self.lower, X), self.lower)
        hi = np.where(self.fixed | self.down, np.minimum(self.upper, X), self.upper)
        return lo, hi

    def project(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """Candidates ``C`` (N, K, D) made reachable for the agents ``X`` (N, D)."""
        Xb = X[:, None, :]
        lo, hi = self.box(X)
        C = np.clip(np.nan_to_num(C, nan=0.0), lo[:, None, :], hi[:, None, :])
        for cols in self.group_columns:  # exactly one 1 per one-hot group (its largest entry)
            g = C[..., cols]
            C[..., cols] = (np.arange(len(cols)) == g.argmax(-1)[..., None]).astype(float)
        ints = self.rounded
        if ints.any():  # round away from the agent: the change is at least the proposed one
            d = C[..., ints] - Xb[..., ints]
            C[..., ints] = Xb[..., ints] + np.sign(d) * np.ceil(np.abs(d) - 1e-9)
            C = np.clip(C, lo[:, None, :], hi[:, None, :])
        return C

    def deltas(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(..., J) per-raw-feature normalized deltas of candidates ``C`` (..., D) from ``X``."""
        diff = np.abs(C - X)
        out = np.zeros(C.shape[:-1] + (self.n_raw,))
        num = np.flatnonzero(self.numeric)
        out[..., self.raw_of_column[num]] = np.nan_to_num(diff[..., num] / self.span[num])
        other = np.flatnonzero(~self.numeric)
        if len(other):
            moved = (diff[..., other] > 1e-9).astype(float)
            np.maximum.at(np.moveaxis(out, -1, 0), self.raw_of_column[other], np.moveaxis(moved, -1, 0))
        return out

    def distance(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """MACE's Eq. 3 distance of ``C`` (..., D) from ``X`` (broadcast), in [0, 1]."""
        a, b, g = self.weights
        d = self.deltas(X, C)
        return a * (d > 1e-12).sum(-1) + b * d.sum(-1) + g * d.max(-1, initial=0.0)

    def violations(self, X: np.ndarray, C: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """(N,) bool: does a row of ``C`` leave the agent's reachable box or break a one-hot group?"""
        lo, hi = self.box(X)
        bad = ((C < lo - tol) | (C > hi + tol)).any(-1)
        for cols in self.group_columns:
            bad |= np.abs(C[:, cols].sum(-1) - 1) > tol
        ints = self.integral
        bad |= (np.abs(C[:, ints] - np.round(C[:, ints])) > tol).any(-1)
        return bad


_GEOMETRY: dict[tuple, tuple[TabularWorld, WorldGeometry]] = {}


def accepts(world: TabularWorld, X: np.ndarray) -> np.ndarray:
    """Acceptance as verified: bit-exact trees and forests as they are, LR/MLP copies with a margin."""
    X = np.atleast_2d(X)
    if getattr(world.model, "exact", False):
        return world.model.predict(X)
    return world.model.score(X) >= MARGIN


def _line_search(world: TabularWorld, make, near: np.ndarray, far: np.ndarray, integral: np.ndarray, *,
                 rounds: int, probes: int) -> np.ndarray:
    """Per item, the accepted value nearest to ``near`` on the segment [near, far] (``far`` is
    accepted): ``probes`` evenly spaced points per item and round, all items in one model call
    (``make`` turns the (n, probes) values into rows), so ``rounds`` calls reach a resolution of
    (probes + 1) ** -rounds of the segment. Integer items probe integers (rounded away from near)."""
    near, far = near.astype(float).copy(), far.astype(float).copy()
    n, t = len(near), np.arange(1, probes + 1) / (probes + 1)
    every = np.arange(n)
    for _ in range(rounds):
        V = near[:, None] + (far - near)[:, None] * t[None, :]
        gap = np.abs(V - near[:, None])
        V = np.where(integral[:, None], near[:, None] + np.sign(far - near)[:, None] * np.ceil(gap - 1e-9), V)
        live = V != far[:, None]
        if not live.any():
            break
        ok = accepts(world, make(V)).reshape(n, probes) & live
        has = ok.any(1)
        j = ok.argmax(1)
        last_live = np.where(live.any(1), probes - 1 - live[:, ::-1].argmax(1), 0)
        new_near = np.where(has, np.where(j > 0, V[every, np.maximum(j - 1, 0)], near),
                            np.where(live.any(1), V[every, last_live], near))
        far = np.where(has, V[every, j], far)
        near = new_near
    return far


def polish(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *, rounds: int = 4,
           probes: int = 15) -> np.ndarray:
    """Shorten accepted answers ``C`` (N, D; NaN rows skipped) while the model accepts them: one
    scale of all numeric changes, then each numeric change on its own (combined if the model still
    accepts), then each changed feature back at the agent's value. About 2 + rounds + 2 model calls."""
    C = C.copy()
    rows = np.flatnonzero(~np.isnan(C).any(1))
    if not len(rows):
        return C
    x, c = X[rows], C[rows]
    num = geo.numeric
    if num.any() and rounds > 0:
        P = probes

        lo, hi = geo.box(x)
        xn, cn, lon, hin = x[:, None, num], c[:, None, num], lo[:, None, num], hi[:, None, num]
        rnd = geo.rounded[num]

        def scaled(S: np.ndarray) -> np.ndarray:  # (n, P) scales -> projected rows (numeric columns only move)
            V = xn + S[..., None] * (cn - xn)
            V[..., rnd] = xn[..., rnd] + np.sign(V[..., rnd] - xn[..., rnd]) * np.ceil(
                np.abs(V[..., rnd] - xn[..., rnd]) - 1e-9)
            T = np.repeat(c[:, None, :], P, axis=1)
            T[..., num] = np.clip(V, lon, hin)
            return T.reshape(-1, c.shape[1])

        s = _line_search(world, scaled, np.zeros(len(c)), np.ones(len(c)), np.zeros(len(c), bool),
                         rounds=max(1, rounds // 2), probes=P)
        c = scaled(np.repeat(s[:, None], P, axis=1)).reshape(len(c), P, -1)[:, 0]
        a_idx, cols = np.nonzero(num[None, :] & (np.abs(c - x) > 1e-12))
        if len(a_idx):
            base = c[a_idx]

            def moved(V: np.ndarray) -> np.ndarray:
                T = np.repeat(base[:, None, :], P, axis=1)
                T[np.arange(len(a_idx))[:, None], np.arange(P)[None, :], cols[:, None]] = V
                return T.reshape(-1, c.shape[1])

            far = _line_search(world, moved, x[a_idx, cols], c[a_idx, cols], geo.integral[cols], rounds=rounds,
                               probes=P)
            combined = c.copy()
            combined[a_idx, cols] = far
            c = np.where(accepts(world, combined)[:, None], combined, c)
    # each changed raw feature back at the agent's value, all tried in one call
    changed = geo.deltas(x, c) > 1e-12
    a_idx, j_idx = np.nonzero(changed)
    if len(a_idx):
        trials = c[a_idx].copy()
        cols = geo.raw_of_column[None, :] == j_idx[:, None]
        trials[cols] = x[a_idx][cols]
        ok = accepts(world, trials)
        d = geo.distance(x[a_idx], trials)
        best_d = geo.distance(x, c)
        for t in np.flatnonzero(ok)[np.argsort(d[ok], kind="stable")]:  # greedy: smallest distance first
            i = a_idx[t]
            if d[t] < best_d[i] - 1e-12:  # one drop per agent: trials were made from the undropped row
                c[i], best_d[i] = trials[t], d[t]
    C[rows] = c
    return C


# ------------------------------------------------------------------------------------ generators

@dataclass
class TabularLabels:
    """Solved agents a tabular generator learns from (MACE's answers)."""

    X: np.ndarray  # (M, D) encoded agents
    CF: np.ndarray  # (M, D) their counterfactuals
    distance: np.ndarray  # (M,) MACE's distance


class TabularGenerator(ABC):
    """Base of the tabular generators: candidates -> projection -> batched verification -> polish."""

    method: ClassVar[str]
    Params: ClassVar[type]

    def __init__(self, **params: Any):
        from learners.base import build_params

        self.params = build_params(self.method, self.Params, params)

    # learned state shared by the methods: the training agents and their answers
    def _store(self, world: TabularWorld, labels: TabularLabels) -> None:
        if len(labels.X) == 0:
            raise ValueError(f"{self.method}: no solved training agents to learn from")
        D = len(world.schema)
        if labels.X.shape[1] != D or labels.CF.shape != labels.X.shape:
            raise ValueError(f"{self.method}: labels have {labels.X.shape[1]} columns, the world {D}")
        self.X_, self.CF_ = np.asarray(labels.X, float), np.asarray(labels.CF, float)
        self.n_columns_ = D
        geo = WorldGeometry.of(world)
        self.changed_ = geo.deltas(self.X_, self.CF_) > 1e-12  # (M, J)
        self.scale_lo_, span = geo.lower, geo.upper - geo.lower
        self.scale_span_ = np.where(span > 0, span, 1.0)

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        return ((X - self.scale_lo_) / self.scale_span_).astype(np.float32)

    def _lend(self, geo: WorldGeometry, X: np.ndarray, donors: np.ndarray) -> np.ndarray:
        """(N, 3k, D) candidates from each donor's changed features: the donor's new values (absolute),
        the donor's change added to the agent (relative), and the numeric changes pushed to the
        agent's bound in the same direction (extreme; the polish brings them back)."""
        N, k = donors.shape
        col_changed = self.changed_[donors][..., geo.raw_of_column]  # (N, k, D)
        xb = np.broadcast_to(X[:, None, :], (N, k, X.shape[1]))
        absolute = np.where(col_changed, self.CF_[donors], xb)
        rel = xb + (self.CF_[donors] - self.X_[donors])
        relative = np.where(col_changed & geo.numeric, rel, absolute)
        lo, hi = geo.box(X)
        step = self.CF_[donors] - self.X_[donors]
        pushed = np.where(step > 0, hi[:, None, :], np.where(step < 0, lo[:, None, :], xb))
        extreme = np.where(col_changed & geo.numeric, pushed, absolute)
        return np.concatenate([absolute, relative, extreme], axis=1)

    def _neighbours(self, X: np.ndarray, k: int, among: np.ndarray | None = None) -> np.ndarray:
        """Indices of the k nearest training agents (scaled Euclidean), optionally among a mask."""
        A, B = self._scaled(X), self._scaled(self.X_)
        d = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]
        if among is not None:
            d = np.where(among, d, np.inf)
        k = min(k, d.shape[1])
        idx = np.argpartition(d, k - 1, axis=1)[:, :k]
        return np.take_along_axis(idx, np.argsort(np.take_along_axis(d, idx, 1), 1), 1)

    @abstractmethod
    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> TabularGenerator:
        """Learn from MACE's answers; returns self."""

    @abstractmethod
    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        """(N, K, D) proposed counterfactuals (not yet projected or verified)."""

    def recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm = "one", polish_rounds: int | None = None,
                  n_alternatives: int = 0) -> Recommendations:
        """The nearest verified counterfactual per agent (NaN rows where no candidate is accepted)."""
        t0 = time.perf_counter()
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != self.n_columns_:
            raise ValueError(f"X: expected {self.n_columns_} encoded columns, got {X.shape[1]}")
        geo = WorldGeometry.of(world, norm)
        C = geo.project(X, self.candidates(world, X))
        N, K, D = C.shape
        ok = accepts(world, C.reshape(-1, D)).reshape(N, K)
        ok &= (np.abs(C - X[:, None, :]) > 1e-12).any(-1)  # the agent itself is no answer
        dist = np.where(ok, geo.distance(X[:, None, :], C), np.inf)
        order = np.argsort(dist, axis=1, kind="stable")
        steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
        top = min(K, max(1, int(self.params.polish_top)) if steps >= 0 else 1)
        pick = order[:, :top]  # the nearest accepted candidates are each polished, then the nearest wins
        P = C[np.arange(N)[:, None], pick].reshape(N * top, D)
        live = np.isfinite(np.take_along_axis(dist, pick, 1)).reshape(-1)
        P[~live] = np.nan
        Xr = np.repeat(X, top, axis=0)
        if steps >= 0:
            P = polish(world, geo, Xr, P, rounds=steps, probes=int(self.params.polish_probes))
        dp = np.where(live, geo.distance(Xr, np.nan_to_num(P)), np.inf).reshape(N, top)
        best = dp.argmin(1)
        found = np.isfinite(dp[np.arange(N), best])
        CF = np.where(found[:, None], P.reshape(N, top, D)[np.arange(N), best], np.nan)
        d = np.where(found, dp[np.arange(N), best], np.inf)
        alts = None
        if n_alternatives > 0:  # the next distinct accepted candidates, nearest first
            alts = np.full((N, n_alternatives, D), np.nan)
            for i in np.flatnonzero(found):
                seen = [CF[i]]
                for kk in order[i, 1:]:
                    if not np.isfinite(dist[i, kk]) or len(seen) > n_alternatives:
                        break
                    if all(np.abs(C[i, kk] - s).max() > 1e-9 for s in seen):
                        alts[i, len(seen) - 1] = C[i, kk]
                        seen.append(C[i, kk])
        return Recommendations(CF, d, found, alts, time.perf_counter() - t0)

    # persistence ------------------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        return {"X": self.X_, "CF": self.CF_, "changed": self.changed_, "scale_lo": self.scale_lo_,
                "scale_span": self.scale_span_}

    def _set_arrays(self, z: dict[str, np.ndarray]) -> None:
        self.X_, self.CF_, self.changed_ = z["X"], z["CF"], z["changed"].astype(bool)
        self.scale_lo_, self.scale_span_ = z["scale_lo"], z["scale_span"]
        self.n_columns_ = self.X_.shape[1]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path / "arrays.npz", **self._arrays())
        meta = self._save_extra(path)
        (path / "config.json").write_text(json.dumps(
            {"method": self.method, "params": dataclasses.asdict(self.params), "meta": meta}, indent=2))
        return path

    def _save_extra(self, path: Path) -> dict[str, Any]:
        return {}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore what ``_save_extra`` wrote (nothing by default)."""

    @staticmethod
    def load(path: str | Path) -> TabularGenerator:
        path = Path(path)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model: {path} has no config.json (not a saved tabular generator)")
        cfg = json.loads((path / "config.json").read_text())
        klass = TABULAR_GENERATORS.get(cfg.get("method"))
        if klass is None:
            raise ValueError(f"{path}: unknown tabular generator {cfg.get('method')!r}; known: {sorted(TABULAR_GENERATORS)}")
        gen = klass(**cfg["params"])
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            gen._set_arrays({k: z[k] for k in z.files})
        gen._load_extra(path, cfg.get("meta", {}))
        return gen


@dataclass
class Recommendations:
    """What ``TabularGenerator.recommend`` returns for a batch."""

    CF: np.ndarray  # (N, D) encoded counterfactuals, NaN rows where none was accepted
    distance: np.ndarray  # (N,) MACE's distance (inf where none)
    found: np.ndarray  # (N,) bool
    alternatives: np.ndarray | None = None  # (N, n, D) further accepted candidates (NaN padded), unpolished
    seconds: float = 0.0  # wall time of the whole batch

    def __iter__(self):  # CF, distance = gen.recommend(...)
        return iter((self.CF, self.distance))


@dataclass
class NearestCfeParams:
    """Hyperparameters of the k-nearest-neighbour baseline."""

    k: int = 10  # training agents that lend their counterfactual (2k candidates: absolute and relative)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; -1: no polish)
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


@dataclass
class NamedCfeTabularParams:
    """Hyperparameters of the named-CFE tabular generator (classifier: learners.named_cfe's MLP)."""

    top_classes: int = 5  # classifier's top classes tried per agent (2 candidates each)
    neighbours_per_class: int = 2  # nearest training agents of each class that lend their values
    knn_candidates: int = 0  # extra plain nearest-neighbour donors (0: the network's answer alone)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)
    hidden: tuple[int, ...] = (256, 256)  # classifier MLP widths
    max_epochs: int = 60  # classifier training epochs
    batch_size: int = 128  # classifier batch size
    lr: float = 3e-3  # classifier peak learning rate
    dropout: float = 0.1  # classifier dropout

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        for name in ("top_classes", "neighbours_per_class"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")


class NamedCfeTabularGenerator(TabularGenerator):
    """Which features to change from a named-CFE classifier; their values from the nearest agents
    whose MACE answer changed the same features."""

    method = "named_cfe"
    Params = NamedCfeTabularParams

    def _classifier(self):
        from learners.named_cfe import NamedCfeGenerator

        p = self.params
        return NamedCfeGenerator(hidden=p.hidden, max_epochs=p.max_epochs, batch_size=p.batch_size, lr=p.lr,
                                 dropout=p.dropout, patience=max(10, p.max_epochs // 4))

    def _sets(self) -> np.ndarray:
        ids = np.where(self.changed_, np.arange(self.changed_.shape[1]), np.iinfo(np.int64).max)
        width = max(1, int(self.changed_.sum(1).max(initial=0)))
        ids = np.sort(ids, axis=1)[:, :width]
        return np.where(ids == np.iinfo(np.int64).max, -1, ids)

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> NamedCfeTabularGenerator:
        from data_gen.dataset import Split
        from data_gen.encodings import CfeVocabulary
        from learners.base import FitContext

        self._store(world, labels)
        sets = self._sets()
        J = self.changed_.shape[1]
        vocab = CfeVocabulary(sets, [f"change_{j}" for j in range(J)])
        split = Split(X=self._scaled(self.X_), groups=np.zeros(len(sets), np.int64), sets=sets,
                      cost=np.asarray(labels.distance, float), class_ids=vocab.encode(sets),
                      runtime=np.zeros(len(sets)))
        ctx = FitContext(n_features=self.n_columns_, n_actions=J, max_len=sets.shape[1], seed=seed,
                         progress=progress)
        self.clf_ = self._classifier().fit(split, None, ctx)
        if not np.array_equal(self.clf_.classes_, vocab.sets_):  # the classifier numbers classes as vocab does
            raise RuntimeError("named_cfe: classifier classes differ from the label vocabulary")
        self.train_class_ = vocab.encode(sets)
        return self

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        p = self.params
        geo = WorldGeometry.of(world)
        P = self.clf_.predict_proba(self._scaled(X))
        m = min(int(p.top_classes), P.shape[1])
        top = np.argsort(-P, axis=1)[:, :m]  # (N, m)
        A, B = self._scaled(X), self._scaled(self.X_)
        d = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]  # (N, M)
        q = int(p.neighbours_per_class)
        donors = []
        for r in range(m):  # nearest training agents of the r-th class of each agent
            dm = np.where(self.train_class_[None, :] == top[:, r:r + 1], d, np.inf)
            kk = min(q, dm.shape[1])
            idx = np.argpartition(dm, kk - 1, axis=1)[:, :kk]
            idx = np.take_along_axis(idx, np.argsort(np.take_along_axis(dm, idx, 1), 1), 1)
            has = np.isfinite(np.take_along_axis(dm, idx, 1))
            idx = np.where(has, idx, np.argmin(d, axis=1)[:, None])  # a class with no member left: nearest agent
            donors.append(idx)
        if p.knn_candidates > 0:
            donors.append(self._neighbours(X, int(p.knn_candidates)))
        return self._lend(geo, X, np.concatenate(donors, axis=1))

    def _save_extra(self, path: Path) -> dict[str, Any]:
        self.clf_.save(path / "classifier")
        np.savez(path / "train_class.npz", train_class=self.train_class_)
        return {}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        from learners.named_cfe import NamedCfeGenerator

        self.clf_ = NamedCfeGenerator.load(path / "classifier")
        with np.load(path / "train_class.npz", allow_pickle=False) as z:
            self.train_class_ = z["train_class"]


TABULAR_GENERATORS: dict[str, type[TabularGenerator]] = {
    NearestCfeGenerator.method: NearestCfeGenerator,
    NamedCfeTabularGenerator.method: NamedCfeTabularGenerator,
}


def build_tabular_generator(method: str, params: dict[str, Any] | None = None) -> TabularGenerator:
    if method not in TABULAR_GENERATORS:
        raise ValueError(f"method: unknown tabular generator {method!r}; known: {sorted(TABULAR_GENERATORS)}")
    return TABULAR_GENERATORS[method](**(params or {}))


__all__ = ["TABULAR_GENERATORS", "NamedCfeTabularGenerator", "NearestCfeGenerator", "Recommendations",
           "TabularGenerator", "TabularLabels", "WorldGeometry", "accepts", "build_tabular_generator", "polish"]
