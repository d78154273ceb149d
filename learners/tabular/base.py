"""The base of the tabular generators: candidates -> projection -> one batched verification ->
polish of the nearest accepted ones (``TabularGenerator.recommend``), the labels they learn from
and their persistence (``config.json`` + ``arrays.npz``, never a pickle)."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from envs.rowwise import rowwise_matmul
from envs.tabular import TabularWorld
from learners.tabular.geometry import WorldGeometry, accepted_distances, repeats
from learners.tabular.polish import polish, trade_sweep
from solvers.mace.distance import Norm


@functools.cache
def _blas_controller() -> Any:
    """The process's BLAS libraries, found once (a limit on them then costs ~10 µs)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


LAST_DISTANCES_AGENTS = 64  # a batch this small keeps its distances to the training agents for its next ask (a request)
TRADE_ROUNDS = 2  # trade sweeps after the polish, each followed by a polish of the traded answers


@dataclass
class TabularLabels:
    """Solved agents a tabular generator learns from (MACE's answers)."""

    X: np.ndarray  # (M, D) encoded agents
    CF: np.ndarray  # (M, D) their counterfactuals
    distance: np.ndarray  # (M,) MACE's distance
    unlabelled: np.ndarray | None = None  # (U, D) rejected agents MACE never answered (a proposer may self-label them)


class TabularGenerator(ABC):
    """Base of the tabular generators: candidates -> projection -> batched verification -> polish."""

    method: ClassVar[str]
    Params: ClassVar[type]
    registry: ClassVar[dict[str, type[TabularGenerator]]] = {}  # every method, by name (for load)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        TabularGenerator.registry[cls.method] = cls

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
        agent's bound in the same direction (extreme; the polish brings them back). A donor -1 (none)
        lends the agent itself (no answer). Compiled: one pass, no (N, k, D) temporaries."""
        from learners.tabular.donor_kernels import lend_kernel

        col_changed = self.__dict__.get("_col_changed")
        if col_changed is None or col_changed[0] is not self.changed_:
            col_changed = (self.changed_, np.ascontiguousarray(self.changed_[:, geo.raw_of_column]))
            self.__dict__["_col_changed"] = col_changed
        lo, hi = geo.box(X)
        return lend_kernel(np.ascontiguousarray(X, float), np.ascontiguousarray(donors, np.int64), self.X_, self.CF_,
                           col_changed[1], geo.numeric, lo, hi)

    def _train_distances(self, X: np.ndarray) -> np.ndarray:
        """(N, M) squared scaled Euclidean distances (float32) from ``X`` to the training agents; the
        training side is scaled once per fitted state, not per request."""
        cached = self.__dict__.get("_scaled_train")
        if cached is None or cached[0] is not self.X_:
            B = self._scaled(self.X_)
            # -2 B, transposed and contiguous: the product comes out already scaled (by a power of two:
            # the same bits) and BLAS runs its fastest layout; the sums then add in place
            cached = (self.X_, np.ascontiguousarray(-2 * B.T), (B * B).sum(1))
            self.__dict__["_scaled_train"] = cached
        _, minus_2bt, bb = cached
        X = np.asarray(X)
        key = X.tobytes() if len(X) <= LAST_DISTANCES_AGENTS else None
        last = self.__dict__.get("_last_distances")  # a request asks for its agent's distances 3 or 4 times
        if key is not None and last is not None and last[0] is self.X_ and last[1] == key:
            return last[2].copy()
        A = self._scaled(X)
        d = rowwise_matmul(A, minus_2bt)  # each agent's row alone: its neighbours do not depend on the batch
        d += (A * A).sum(1)[:, None]
        d += bb[None, :]
        if key is not None:
            self.__dict__["_last_distances"] = (self.X_, key, d.copy())
        return d

    def _moved_labels(self) -> np.ndarray:
        """(M, D) which columns each training label's answer changes, computed once per set of labels."""
        hit = self.__dict__.get("_moved")
        if hit is None or hit[0] is not self.X_ or hit[1] is not self.CF_:
            hit = (self.X_, self.CF_, np.abs(self.CF_ - self.X_) > 1e-12)
            self.__dict__["_moved"] = hit
        return hit[2]

    def _neighbours(self, X: np.ndarray, k: int, among: np.ndarray | None = None, d: np.ndarray | None = None
                    ) -> np.ndarray:
        """Indices of the k nearest training agents (scaled Euclidean), optionally among a mask
        (``d``: ``_train_distances(X)`` where the caller has it already)."""
        d = self._train_distances(X) if d is None else d
        if among is not None:
            d = np.where(among, d, np.inf)
        from learners.tabular.donor_kernels import smallest_k

        return smallest_k(np.ascontiguousarray(d), int(k))  # nearest first, ties in index order

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
        # The model calls here multiply thin matrices (rows x features by features x 10 for an MLP):
        # BLAS threads cost more to wake than they save (5x slower on 2 busy cores), so one thread.
        if np.ndim(X) == 2 and not len(X):  # a batch of no agents: nothing to ask
            if np.shape(X)[1] != self.n_columns_:
                raise ValueError(f"X: expected {self.n_columns_} encoded columns, got {np.shape(X)[1]}")
            return Recommendations.none(self.n_columns_, n_alternatives)
        with _blas_controller().limit(limits=1, user_api="blas"):
            rec = self._recommend(world, X, norm=norm, polish_rounds=polish_rounds, n_alternatives=n_alternatives)
        geo = WorldGeometry.of(world, norm)
        if geo.gate is not None:  # the world's rules: every answer passes the shared checker (the searches'
            self._keep_rules(geo, np.atleast_2d(np.asarray(X, float)), rec)  # checks make this a formality)
        return rec

    @staticmethod
    def _keep_rules(geo: WorldGeometry, X: np.ndarray, rec: Recommendations) -> None:
        """Answers (and alternatives) that break a rule of the world dropped from ``rec``, in place."""
        bad = rec.found & ~geo.keeps(X, np.nan_to_num(rec.CF))
        if bad.any():
            rec.CF[bad], rec.distance[bad], rec.found[bad] = np.nan, np.inf, False
        if rec.alternatives is not None:
            alt = rec.alternatives
            real = ~np.isnan(alt).any(-1)
            alt[real & ~geo.keeps(X[:, None, :], np.nan_to_num(alt))] = np.nan

    def _recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm, polish_rounds: int | None,
                   n_alternatives: int) -> Recommendations:
        """``recommend``'s search (a method that searches further overrides this)."""
        t0 = time.perf_counter()
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != self.n_columns_:
            raise ValueError(f"X: expected {self.n_columns_} encoded columns, got {X.shape[1]}")
        geo = WorldGeometry.of(world, norm)
        C = geo.project(X, self.candidates(world, X))
        N, K, D = C.shape
        dist = accepted_distances(world, geo, X, C)
        order = np.argsort(dist, axis=1, kind="stable")
        steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
        top = min(K, max(1, int(self.params.polish_top)) if steps >= 0 else 1)
        pick = order[:, :top]  # the nearest accepted candidates are each polished, then the nearest wins
        P = C[np.arange(N)[:, None], pick].reshape(N * top, D)
        # a start met twice (the same row from two sources) is polished once: the polish of one row
        # never depends on the others, so the answers are the same
        live = (np.isfinite(np.take_along_axis(dist, pick, 1)) & ~repeats(P.reshape(N, top, D))).reshape(-1)
        P[~live] = np.nan
        Xr = np.repeat(X, top, axis=0)
        if steps >= 0:
            P = polish(world, geo, Xr, P, rounds=steps, probes=int(self.params.polish_probes))
        dp = np.where(live, geo.distance(Xr, np.nan_to_num(P)), np.inf).reshape(N, top)
        best = dp.argmin(1)
        found = np.isfinite(dp[np.arange(N), best])
        CF = np.where(found[:, None], P.reshape(N, top, D)[np.arange(N), best], np.nan)
        d = np.where(found, dp[np.arange(N), best], np.inf)
        if steps >= 0 and found.any():  # trades of two features
            rows = np.flatnonzero(found)
            live = rows
            for _ in range(TRADE_ROUNDS):
                traded = trade_sweep(world, geo, X[live], CF[live])
                moved = np.flatnonzero((traded != CF[live]).any(1))
                if not len(moved):
                    break
                # a trade lands on a coarse step: shrink it again
                traded[moved] = polish(world, geo, X[live[moved]], traded[moved], rounds=steps,
                                       probes=int(self.params.polish_probes))
                if geo.cost is not None:  # the trades rank by the unweighted distance: keep only those nearer
                    worse = geo.distance(X[live], traded) > geo.distance(X[live], CF[live])
                    traded[worse] = CF[live][worse]
                    moved = moved[~worse[moved]]
                CF[live] = traded
                live = live[moved]
            d[rows] = geo.distance(X[rows], CF[rows])
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
        klass = TabularGenerator.registry.get(cfg.get("method"))
        if klass is None:
            raise ValueError(f"{path}: unknown tabular generator {cfg.get('method')!r}; known: {sorted(TabularGenerator.registry)}")
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
    calls: int | None = None  # round trips to the model the batch took (a budgeted search reports them)
    rows: np.ndarray | None = None  # (N,) rows scored per agent (likewise)

    def __iter__(self):  # CF, distance = gen.recommend(...)
        return iter((self.CF, self.distance))

    @classmethod
    def none(cls, columns: int, n_alternatives: int = 0, calls: int | None = None) -> Recommendations:
        """The answers to a batch of no agents (no model call)."""
        return cls(np.zeros((0, columns)), np.zeros(0), np.zeros(0, bool),
                   np.zeros((0, n_alternatives, columns)) if n_alternatives > 0 else None, calls=calls,
                   rows=None if calls is None else np.zeros(0, np.int64))
