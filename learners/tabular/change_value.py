"""``change_value``: learned, which raw features to change and by how much.

A network with two heads predicts, per raw feature, whether MACE's answer changes it (one sigmoid
each: the named-action idea, factored per feature as MCf factors classes) and, per encoded
column, the change (the full-action idea on tabular rows). The most probable subsets of the top
features are filled with the predicted values, pushed to the reachable bound and lent by the
nearest training agent with that subset (optionally also searched on a grid of split crossings or
multiples of the predicted change); once an answer is known, the most probable subsets, the top
numeric features alone and together, and every one-feature change of a discrete feature are
scanned within the room its distance leaves, and the nearest finds are polished and traded.

The network (torch for training, numpy for answering) is in ``change_net.py``, the values the
search tries (options, room levels, combinations, discrete moves) in ``change_search.py``, their
compiled loops in ``scan_kernels.py``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.base import Recommendations, TabularGenerator, TabularLabels
from learners.tabular.change_net import change_value_net, numpy_forward, numpy_layers
from learners.tabular.change_search import (
    combinations_within,
    discrete_variants,
    grid_indices,
    numeric_in_subsets,
    room_levels_compact,
    value_options,
)
from learners.tabular.donor_kernels import donors_kernel
from learners.tabular.geometry import (
    Variants,
    WorldGeometry,
    first_within,
    may_accept_within,
    nearest_accepted_variants,
    repeats,
)
from learners.tabular.pieces import affine_layers, piece_optimum, region_step
from learners.tabular.polish import polish, split_edges, trade_sweep
from learners.tabular.scan_kernels import block_boxes, scan_rows_kernel
from solvers.mace.distance import Norm

_LAST = threading.local()  # per thread, the last candidates' network prediction (the second search reuses it)
SCAN_BLOCK = 32  # a one-feature scan's values per block its score bound rules in or out
BOUNDED_BLOCK = 8  # the fewest rows of a block whose score bound is worth its cost


@dataclass
class ChangeValueParams:
    """Hyperparameters of the change-and-value tabular generator."""

    top_features: int = 6  # most probable changed features whose subsets are enumerated per agent
    top_subsets: int = 8  # most probable subsets of those tried per agent
    donors_per_subset: int = 2  # nearest training agents with exactly that subset that lend their values too
    knn_candidates: int = 4  # plain nearest-neighbour donors too (coverage where the network is unsure; 0: none)
    grid_subsets: int = 0  # most probable subsets whose values are searched on a grid before the scan (0: none; the scan covers them)
    grid_values: int = 24  # values tried per numeric feature of a one-feature subset (fewer for larger subsets)
    grid_rows: int = 64  # at most this many grid rows per subset (values per feature = rows ** (1 / features))
    scan_subsets: int = 4  # most probable subsets of one or two numeric features re-searched within the best answer's reach (0: none)
    scan_features: int = 4  # also scan each of this many most probable numeric features alone and together (0: none)
    scan_starts: int = 3  # nearest accepted scan rows per agent that are each polished and traded
    scan_discrete: bool = True  # also try every other value of each discrete feature alone
    scan_depth: int = 2  # the most of those features scanned together (1 to 3)
    combo_rows: int = 1000  # a tree ensemble: up to this many combinations per agent of split crossings of all its numeric features within the room, nearest first (0: none)
    combo_values: int = 2  # split crossings per numeric feature in those combinations (the nearest to the agent, either way)
    combo_common: int = 6  # and the values the training answers most often move the feature to (where within the room)
    combo_neighbours: int = 8  # and the values the answers of the agent's this many nearest training agents move it to
    scan_levels: tuple[int, int] = (16, 32)  # values of the first and the second feature of a scanned pair
    region_rounds: int = 2  # a ReLU MLP or LR: rounds re-choosing the answers' numeric changes on their linear piece (0: none)
    piece_lp: bool = True  # a ReLU MLP or LR: then the weighted l1 optimum over each answer's linear piece (a MILP: ``pieces.piece_optimum``)
    piece_predicted: int = 1  # and over the pieces of the network's predictions for this many most probable subsets (where accepted)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; a forest: one round of the joint scale, then its exact split sweep; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)
    use_network: bool = True  # False: no per-agent prediction (the training labels' change rates for all; an ablation)
    hidden: tuple[int, ...] = (256, 256)  # network MLP widths
    max_epochs: int = 80  # training epochs
    batch_size: int = 128  # training batch size
    lr: float = 3e-3  # peak learning rate (one-cycle)
    dropout: float = 0.1  # dropout after each hidden layer
    value_weight: float = 1.0  # weight of the value loss beside the which-features loss

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        for name in ("top_features", "top_subsets", "donors_per_subset"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if int(self.top_features) > 12:
            raise ValueError(f"top_features: at most 12 (2**top_features subsets are scored), got {self.top_features}")
        self.scan_levels = tuple(int(v) for v in self.scan_levels)
        if len(self.scan_levels) != 2 or min(self.scan_levels) < 1:
            raise ValueError(f"scan_levels: two counts >= 1, got {self.scan_levels}")
        if int(self.scan_depth) not in (1, 2, 3):
            raise ValueError(f"scan_depth: 1, 2 or 3 features scanned together, got {self.scan_depth}")
        for name in ("scan_features", "scan_subsets", "grid_subsets"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        for name in ("combo_rows", "combo_values", "combo_common", "combo_neighbours"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if int(self.scan_starts) < 1:
            raise ValueError(f"scan_starts: must be >= 1, got {self.scan_starts}")


class ChangeValueGenerator(TabularGenerator):
    """Learned: which raw features to change (one sigmoid each, the named-action idea factored
    per feature as MCf factors classes) and the value each encoded column takes (the full-action
    idea on tabular rows). The most probable subsets of the top features are each filled with the
    predicted values, with those values pushed to the reachable bound (the polish brings them back),
    and with the values of the nearest training agent whose MACE answer changed that same subset."""

    method = "change_value"
    Params = ChangeValueParams

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> ChangeValueGenerator:
        import torch

        from learners.base import FitContext
        from learners.lightning_fit import fit_lightning
        from learners.torch_training import TorchParams, seed_everything

        self._store(world, labels)
        p = self.params
        geo = WorldGeometry.of(world)
        J, D = self.changed_.shape[1], self.n_columns_
        X = self._scaled(self.X_)
        Y = ((self.CF_ - self.X_) / self.scale_span_).astype(np.float32)  # the change, in spans
        col_changed = self.changed_[:, geo.raw_of_column].astype(np.float32)  # value loss only where it changed
        pos = self.changed_.mean(0)
        weight = torch.as_tensor(np.clip((1 - pos) / np.maximum(pos, 1e-3), 1.0, 20.0) ** 0.5, dtype=torch.float32)
        vw = float(p.value_weight)

        def loss_fn(model, batch):
            xb, cb, yb, mb = batch
            logit, value = model(xb)
            bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, cb, pos_weight=weight)
            mse = ((torch.tanh(value) - yb) ** 2 * mb).sum() / mb.sum().clamp_min(1.0)
            return bce + vw * mse

        rng = np.random.default_rng(seed)
        order = rng.permutation(len(X))
        n_val = max(1, int(round(0.1 * len(X)))) if len(X) >= 20 else 0
        val, tr = order[:n_val], order[n_val:] if n_val else order
        if not n_val:
            val = order
        tensors = [torch.as_tensor(a) for a in (X, self.changed_.astype(np.float32), Y, col_changed)]
        seed_everything(seed)  # the initial weights too: a refit with the same seed is the same net
        self.net_ = change_value_net(D, J, p.hidden, p.dropout)
        tp = TorchParams(hidden=p.hidden, dropout=p.dropout, lr=p.lr, batch_size=p.batch_size, max_epochs=p.max_epochs,
                         patience=max(10, p.max_epochs // 4), batch_norm=True)
        ctx = FitContext(n_features=D, n_actions=J, max_len=J, seed=seed, progress=progress)
        self.fit_info_ = fit_lightning(self.net_, loss_fn, [t[tr] for t in tensors], [t[val] for t in tensors], tp, ctx)
        self.train_sets_ = self._set_keys(self.changed_)
        return self

    @staticmethod
    def _set_keys(changed: np.ndarray) -> np.ndarray:
        """(M,) one integer per subset of raw features (bit j: feature j changed)."""
        return (changed.astype(np.int64) << np.arange(changed.shape[1], dtype=np.int64)).sum(1)

    def _predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, J) change probabilities and (N, D) predicted encoded values (the network in numpy: a
        request's one or two rows cost microseconds, not torch's dispatch)."""
        if not self.params.use_network:  # the ablation: every agent gets the training labels' averages
            return (np.repeat(self.changed_.mean(0)[None], len(X), 0),
                    X + np.mean(self.CF_ - self.X_, axis=0)[None])
        out = numpy_forward(*self._numpy_net(), self._scaled(X))
        J = out.shape[1] - self.n_columns_
        prob = 1.0 / (1.0 + np.exp(-out[:, :J].astype(float)))
        return prob, X + np.tanh(out[:, J:]).astype(float) * self.scale_span_

    def _numpy_net(self) -> tuple[list[tuple[str, Any, Any]], np.ndarray, np.ndarray]:
        """The trained network as float32 numpy layers (trunk: linear, affine batch norm, ReLU; the
        two heads as one matrix), built once per fitted or loaded network."""
        hit = self.__dict__.get("_numpy_net_cache")
        if hit is not None and hit[0] is self.net_:
            return hit[1]
        out = numpy_layers(self.net_)
        self.__dict__["_numpy_net_cache"] = (self.net_, out)
        return out

    def subsets(self, prob: np.ndarray) -> np.ndarray:
        """(N, S, J) bool: the ``top_subsets`` most probable non-empty subsets of each agent's
        ``top_features`` most probable features (independent Bernoullis), most probable first."""
        p = self.params
        N, J = prob.shape
        L = min(int(p.top_features), J)
        top = np.argsort(-prob, axis=1)[:, :L]  # (N, L)
        masks = ((np.arange(1, 2 ** L)[:, None] >> np.arange(L)[None, :]) & 1).astype(bool)  # (2^L-1, L)
        q = np.clip(np.take_along_axis(prob, top, 1), 1e-6, 1 - 1e-6)  # (N, L)
        logp = masks[None] * np.log(q)[:, None, :] + ~masks[None] * np.log1p(-q)[:, None, :]
        S = min(int(p.top_subsets), len(masks))
        best = np.argsort(-logp.sum(-1), axis=1, kind="stable")[:, :S]  # (N, S)
        out = np.zeros((N, S, J), bool)
        chosen = masks[best]  # (N, S, L)
        rows = np.repeat(np.arange(N), S * L)
        subs = np.tile(np.repeat(np.arange(S), L), N)
        cols = np.repeat(top[:, None, :], S, axis=1).reshape(-1)
        out[rows, subs, cols] = chosen.reshape(-1)
        return out

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        p = self.params
        geo = WorldGeometry.of(world)
        prob, value = self._predict(X)
        subs = self.subsets(prob)  # (N, S, J)
        N, S, _ = subs.shape
        col = subs[..., geo.raw_of_column]  # (N, S, D)
        xb = np.broadcast_to(X[:, None, :], col.shape)
        predicted = np.where(col, value[:, None, :], xb)
        lo, hi = geo.box(X)
        step = value - X
        pushed = np.where(step > 0, hi, np.where(step < 0, lo, X))
        extreme = np.where(col & geo.numeric, pushed[:, None, :], predicted)
        parts = [predicted, extreme]
        # the nearest training agents whose MACE answer changed exactly this subset lend their values
        keys = self._set_keys(subs.reshape(N * S, -1)).reshape(N, S)
        d = self._train_distances(X)  # (N, M)
        donors = self._donors(d, keys, min(int(p.donors_per_subset), len(self.X_)))  # (N, S*q), -1: none
        parts.append(self._lend(geo, X, donors))  # (N, 3*S*q, D); a missing donor lends the agent (no answer)
        near = self._neighbours(X, max(int(p.knn_candidates), int(p.combo_neighbours), 1), d=d)  # nearest first
        _LAST.prediction = (self, X, prob, value, near, subs)  # the second search of this request reuses them
        if p.knn_candidates > 0:
            parts.append(self._lend(geo, X, near[:, : int(p.knn_candidates)]))
        if p.grid_subsets > 0:
            parts.append(self._grid(world, geo, X, value, subs[:, : int(p.grid_subsets)]))
        return np.concatenate(parts, axis=1)

    def _donors(self, d: np.ndarray, keys: np.ndarray, q: int) -> np.ndarray:
        """(N, S*q) per agent and subset, the ``q`` nearest training agents (by ``d`` (N, M)) whose MACE
        answer changed exactly that subset (``keys`` (N, S)), nearest first within a subset (ties:
        the lower index); -1 where fewer have it. Each lookup scans only the training agents that
        have the subset (compiled)."""
        N, S = keys.shape
        by_key = self.__dict__.get("_donor_index")
        if by_key is None or by_key[0] is not self.train_sets_:
            order = np.argsort(self.train_sets_, kind="stable")
            by_key = (self.train_sets_, order, self.train_sets_[order])
            self.__dict__["_donor_index"] = by_key
        _, order, sorted_keys = by_key
        out = donors_kernel(np.ascontiguousarray(d), np.ascontiguousarray(keys, np.int64), sorted_keys,
                            order.astype(np.int64), int(q))
        return out.reshape(N, S * q)

    def _recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm, polish_rounds: int | None,
                   n_alternatives: int) -> Recommendations:
        """As the base class, then a second search where the answer is known, in one model call: the
        subsets of ``_scan_sets`` (the most probable ones, and the top numeric features alone and
        together) are scanned within the reach the best answer's distance leaves (``_scan``), beside
        every one-feature change of a discrete feature; a nearer accepted point is polished and traded."""
        X = np.atleast_2d(np.asarray(X, float))
        rec = super()._recommend(world, X, norm=norm, polish_rounds=polish_rounds, n_alternatives=n_alternatives)
        t0 = time.perf_counter()
        last = getattr(_LAST, "prediction", None)
        _LAST.prediction = None
        geo = WorldGeometry.of(world, norm)
        fresh = last is not None and last[0] is self and last[1] is X
        near = last[4] if fresh else None  # the agents' nearest training agents (candidates found them)
        if int(self.params.combo_rows) > 0 and not rec.found.all() and split_edges(world):
            self._first_answers(world, geo, X, rec, polish_rounds, near)
        if int(self.params.scan_subsets) <= 0 or not rec.found.any():
            rec.seconds += time.perf_counter() - t0
            return rec
        rows = np.flatnonzero(rec.found & (rec.distance > 0))
        x = X[rows]
        if fresh:
            prob, value, subs = last[2][rows], last[3][rows], last[5][rows]
        else:
            prob, value = self._predict(x)
            subs = self.subsets(prob)
        subs = self._scan_sets(geo, prob, subs)
        reach = geo.reach(rec.distance[rows])  # the cost weights: the unweighted distance a nearer row may have
        V, own = self._scan(world, geo, x, value, subs, reach)  # variant rows of the agents own
        if self.params.scan_discrete:  # every one-feature change of a discrete feature too (few rows)
            Vd, od = discrete_variants(geo, x)
            V, own = Variants.concat([V, Vd]), np.concatenate([own, od])
        if int(self.params.combo_rows) > 0 and split_edges(world):  # several features' crossings at once
            Vc, oc = combinations_within(world, geo, x, rec.distance[rows], int(self.params.combo_values),
                                         int(self.params.combo_rows), self._combo_values(x, None if near is None else near[rows]))
            V, own = Variants.concat([V, Vc]), np.concatenate([own, oc])
        k = max(1, int(self.params.scan_starts))
        d_best, _, starts = nearest_accepted_variants(world, geo, x, V, own, k)  # one model call
        a_of, s_of = np.nonzero((d_best < rec.distance[rows, None] - 1e-12) & ~repeats(starts))  # nearer starts, each polished once
        if len(a_of):
            steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
            P = starts[a_of, s_of]
            if steps >= 0:
                P = polish(world, geo, x[a_of], P, rounds=steps, probes=int(self.params.polish_probes))
                P = trade_sweep(world, geo, x[a_of], P)
            dp = geo.distance(x[a_of], P)
            first = first_within(dp, a_of)  # each agent's nearest
            take = first[dp[first] < rec.distance[rows[a_of[first]]] - 1e-12]
            rec.CF[rows[a_of[take]]] = P[take]
            rec.distance[rows[a_of[take]]] = dp[take]
        if self.params.region_rounds > 0:  # a smooth model: the answers' numeric changes re-chosen on their linear piece
            R = region_step(world, geo, x, rec.CF[rows], rounds=int(self.params.region_rounds))
            dr = geo.distance(x, R)
            take = np.flatnonzero(dr < rec.distance[rows] - 1e-12)
            rec.CF[rows[take]], rec.distance[rows[take]] = R[take], dr[take]
        if self.params.piece_lp:  # and the exact optimum over the piece each answer (or the agent) lies on
            self._piece_optima(world, geo, x, rows, subs, value, rec)
        rec.seconds += time.perf_counter() - t0
        return rec

    def _piece_optima(self, world: TabularWorld, geo: WorldGeometry, x: np.ndarray, rows: np.ndarray,
                      subs: np.ndarray, value: np.ndarray, rec: Recommendations) -> None:
        """``piece_optimum`` from each answer, from the agent itself (its own piece) and from the network's
        predictions for the ``piece_predicted`` most probable subsets (a prediction often lands on the
        piece of MACE's answer where the polished answer has left it for another); the nearest
        result wins. ``rec`` is updated in place."""
        if affine_layers(world) is None:  # not a ReLU MLP or LR: no pieces
            return
        k = min(max(int(self.params.piece_predicted), 0), subs.shape[1])
        starts = np.stack([rec.CF[rows], x], 1)
        if k:
            predicted = geo.project(x, np.where(subs[:, :k, geo.raw_of_column], value[:, None, :], x[:, None, :]))
            starts = np.concatenate([starts, predicted], 1)
        n, m, D = starts.shape
        R = piece_optimum(world, geo, np.repeat(x, m, 0), starts.reshape(-1, D),
                          beat=np.repeat(rec.distance[rows], m)).reshape(n, m, D)
        moved = np.ones((n, m), bool)
        moved[:, 1:] = np.abs(R[:, 1:] - starts[:, 1:]).max(-1) > 0  # a start other than the answer counts once moved
        dr = np.where(np.isnan(R).any(-1) | ~moved, np.inf, geo.distance(x[:, None, :], np.nan_to_num(R)))
        best = dr.argmin(1)
        take = np.flatnonzero(dr[np.arange(n), best] < rec.distance[rows] - 1e-12)
        rec.CF[rows[take]], rec.distance[rows[take]] = R[take, best[take]], dr[take, best[take]]

    def _first_answers(self, world: TabularWorld, geo: WorldGeometry, X: np.ndarray, rec: Recommendations,
                       polish_rounds: int | None, near: np.ndarray | None = None) -> None:
        """A tree ensemble's agents no candidate answered: combinations of their numeric features'
        crossings anywhere in reach (the farthest first), the nearest accepted one polished; ``rec``
        is updated in place (the scan then starts from it)."""
        miss = np.flatnonzero(~rec.found)
        x = X[miss]
        V, own = combinations_within(world, geo, x, np.full(len(x), np.inf), int(self.params.combo_values),
                                     int(self.params.combo_rows), self._combo_values(x, None if near is None else near[miss]))
        d, _, start = nearest_accepted_variants(world, geo, x, V, own, 1)
        hit = np.flatnonzero(np.isfinite(d[:, 0]))
        if not len(hit):
            return
        steps = self.params.polish_rounds if polish_rounds is None else polish_rounds
        P = start[hit, 0]
        if steps >= 0:
            P = trade_sweep(world, geo, x[hit], polish(world, geo, x[hit], P, rounds=steps,
                                                       probes=int(self.params.polish_probes)))
        rec.CF[miss[hit]] = P
        rec.distance[miss[hit]] = geo.distance(x[hit], P)
        rec.found[miss[hit]] = True

    def _combo_values(self, X: np.ndarray, near: np.ndarray | None = None) -> np.ndarray:
        """(N, D, m + k) per agent the values ``combinations_within`` tries beyond the crossings nearest
        the agent: the ``combo_common`` values the training answers most often move each column to,
        then those the answers of the agent's ``combo_neighbours`` nearest training agents (``near``,
        nearest first, where the caller has them) move it to (NaN padded; a value may repeat:
        ``combinations_within`` tries each once)."""
        common = self._common_values(int(self.params.combo_common))
        k = int(self.params.combo_neighbours)
        N, (D, m) = len(X), common.shape
        if k <= 0:
            return np.broadcast_to(common[None], (N, D, m))
        near = self._neighbours(X, k) if near is None else near[:, :k]
        moved = np.abs(self.CF_[near] - self.X_[near]) > 1e-12  # (N, k, D)
        theirs = np.where(moved, self.CF_[near], np.nan).transpose(0, 2, 1)  # (N, D, k)
        return np.concatenate([np.broadcast_to(common[None], (N, D, m)), theirs], axis=2)

    def _common_values(self, m: int = 6) -> np.ndarray:
        """(D, m) per column the values the training answers most often move it to (NaN padded):
        a tree ensemble's answers land on a few split crossings again and again."""
        hit = self.__dict__.get("common_values_")
        if hit is not None and hit.shape[1] == m:
            return hit
        D = self.n_columns_
        out = np.full((D, m), np.nan)
        moved = self._moved_labels()
        for c in range(D):
            vals, counts = np.unique(self.CF_[moved[:, c], c], return_counts=True)
            top = vals[np.argsort(-counts, kind="stable")[:m]]
            out[c, : len(top)] = top
        self.__dict__["common_values_"] = out
        return out

    def _scan_sets(self, geo: WorldGeometry, prob: np.ndarray, subs: np.ndarray) -> np.ndarray:
        """(N, S, J) subsets scanned within reach: the ``scan_subsets`` most probable ones (of
        ``subs``: ``subsets(prob)``), then the ``scan_features`` most probable mutable numeric
        features alone and together (up to ``scan_depth`` at once)."""
        subs = subs[:, : int(self.params.scan_subsets)]
        N, J = prob.shape
        movable = np.zeros(J, bool)
        movable[geo.raw_of_column[geo.numeric & ~geo.fixed]] = True
        L = min(int(self.params.scan_features), int(movable.sum()))
        if L <= 0:
            return subs
        top = np.argsort(np.where(movable, -prob, np.inf), axis=1, kind="stable")[:, :L]  # (N, L)
        import itertools

        sets = [c for k in range(1, int(self.params.scan_depth) + 1) for c in itertools.combinations(range(L), k)]
        extra = np.zeros((N, len(sets), J), bool)
        rows = np.arange(N)
        for s, members in enumerate(sets):
            for m in members:
                extra[rows, s, top[:, m]] = True
        return np.concatenate([subs, extra], 1)

    def _scan(self, world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, subs: np.ndarray,
              best: np.ndarray) -> tuple[Variants, np.ndarray]:
        """Rows (``Variants`` of the subsets' base rows) and the agent each belongs to (T,): per distinct subset of one to three numeric
        features, their values within the reach of the distance ``best`` (N,), the subset's other
        features at the predicted value. One feature: up to R = (e1 + 1) * e2 values (a tree
        ensemble's crossings nearest the agent); two: e1 values of the feature with the fewest steps
        (and the agent's own) times e2 of the other; three: a grid of about R rows."""
        a, b, g = geo.weights
        room = best / max(b + g, 1e-12)  # the largest normalized change of one feature that can still win
        e1, e2 = self.params.scan_levels
        R = (e1 + 1) * e2
        N, S, J = subs.shape
        t3 = max(1, int(np.floor((R / 2) ** (1 / 3))))  # three features: (t3+1)^2 * 2 t3 <= R rows
        shapes = {1: [R], 2: [e1, e2], 3: [t3, t3, max(1, R // (t3 + 1) ** 2)]}
        levels, pos_of = room_levels_compact(world, geo, X, room,
                                             sorted({(e, k == 1) for k, shape in shapes.items() for e in shape}))
        base = geo.project(X, np.where(subs[..., geo.raw_of_column], value[:, None, :], X[:, None, :]))  # (N, S, D)
        num_raw, col_of_raw, k_num = numeric_in_subsets(geo, subs)
        keys = self._set_keys(subs.reshape(N * S, J)).reshape(N, S)
        for s in range(1, S):  # a subset met before for the same agent is scanned once
            k_num[:, s] = np.where((keys[:, :s] == keys[:, s:s + 1]).any(1), 0, k_num[:, s])
        steps_of_raw = np.full((N, J), 1e12)  # integer steps within reach per agent (a real feature: many)
        ints = np.flatnonzero(geo.numeric & geo.rounded)
        steps_of_raw[:, geo.raw_of_column[ints]] = np.floor(room[:, None] * geo.span[ints][None, :] + 1e-9)
        index, cols_out, vals_out, owner = [np.empty(0, np.int64)], [np.empty((0, 3), np.int64)], [np.empty((0, 3))], \
            [np.empty(0, np.int64)]
        # a row's distance from its agent, but for a max term's base part, is known before the model sees it:
        # rows that cannot come out nearer than the best answer are never built (no answer is lost)
        bdel = geo.deltas(X[:, None, :], base)  # (N, S, J)
        b_sum, b_nnz = bdel.sum(-1), (bdel > 1e-12).sum(-1)
        for k, shape in shapes.items():
            ii, ss = np.nonzero(k_num == k)
            if not len(ii):
                continue
            # the features with the fewest reachable steps first: they take the coarse axes, the finest the last one
            rank = np.where(subs[ii, ss] & num_raw, steps_of_raw[ii], np.inf)
            cols = col_of_raw[np.argsort(rank, axis=1, kind="stable")[:, :k]]  # (n, k)
            axes = []
            for pos, e in enumerate(shape):
                v = levels[(e, k == 1)][ii, pos_of[cols[:, pos]]]  # (n, e)
                if pos < k - 1:  # all but the last feature may also stay at the agent's value (NaN here)
                    v = np.concatenate([v, np.full((len(ii), 1), np.nan)], 1)
                axes.append(v)
            sizes = [v.shape[1] for v in axes]
            combos = grid_indices(tuple(sizes))
            padded = np.full((len(ii), k, max(sizes)), np.nan)
            for pos, v in enumerate(axes):
                padded[:, pos, : v.shape[1]] = v
            # the box of the k features' values (the agent's own too) around the subset's base, then of each
            # block of its rows (one value of the other axes, a range of the last one): where the model's
            # score bound rules out every row of a box, they are never built (none would be accepted); a
            # box of a few rows is cheaper scored than bounded
            block = sizes[-1] if k > 1 else min(SCAN_BLOCK, sizes[0])
            lo_b, hi_b, n_rows = block_boxes(padded, combos, cols, X, ii, block)  # (n, B, k) twice, (n, B)
            alive = n_rows > 0
            # the whole box first where it holds two or more bounded blocks (one block's box is the whole box)
            big = np.flatnonzero((n_rows.sum(1) >= BOUNDED_BLOCK) & ((n_rows >= BOUNDED_BLOCK).sum(1) != 1))
            whole = may_accept_within(world, base[ii[big], ss[big]], cols[big], lo_b[big].min(1), hi_b[big].max(1))
            alive[big[~whole]] = False
            p_of, b_of = np.nonzero(alive & (n_rows >= BOUNDED_BLOCK))
            alive[p_of, b_of] = may_accept_within(world, base[ii[p_of], ss[p_of]], cols[p_of], lo_b[p_of, b_of],
                                                  hi_b[p_of, b_of])
            keep = alive.any(1)
            if not keep.all():
                ii, ss, cols, padded, alive = ii[keep], ss[keep], cols[keep], padded[keep], alive[keep]
                if not len(ii):
                    continue
            idx, vc, vv = scan_rows_kernel(padded, combos, cols, X, ii, ss, S, b_sum, b_nnz, bdel, geo.raw_of_column,
                                           geo.span, np.asarray(best, float), float(a), float(b), float(g), alive,
                                           int(block))
            index.append(idx)
            cols_out.append(vc)
            vals_out.append(vv)
            owner.append(idx // S)
        V = Variants(base.reshape(N * S, base.shape[-1]), np.concatenate(index), np.concatenate(cols_out), np.concatenate(vals_out))
        return V, np.concatenate(owner)

    def _grid(self, world: TabularWorld, geo: WorldGeometry, X: np.ndarray, value: np.ndarray, subs: np.ndarray
              ) -> np.ndarray:
        """(N, S * R, D) candidates: for each of the first S subsets, the product of value options of
        its numeric features (discrete features take the predicted value), at most ``grid_rows`` rows
        per subset; rows beyond a subset's grid repeat the agent (dropped as no answer)."""
        p = self.params
        N, S, _ = subs.shape
        R = int(p.grid_rows)
        E = int(p.grid_values)
        options = value_options(world, geo, X, value, E)  # (N, D, E), NaN padded
        out = np.repeat(X[:, None, :], S * R, axis=1)
        base = np.where(subs[..., geo.raw_of_column], value[:, None, :], X[:, None, :])  # (N, S, D)
        num_raw, col_of_raw, k_num = numeric_in_subsets(geo, subs)
        for k in range(1, int(k_num.max(initial=0)) + 1):
            e = min(E, int(np.floor(R ** (1.0 / k) + 1e-9)))
            if e < 2 and k > 1:
                continue
            ii, ss = np.nonzero(k_num == k)
            if not len(ii):
                continue
            cols = col_of_raw[np.argsort(~(subs[ii, ss] & num_raw), axis=1, kind="stable")[:, :k]]  # (n, k)
            opts = options[ii[:, None], cols, :e]  # (n, k, e)
            combos = np.stack(np.meshgrid(*[np.arange(e)] * k, indexing="ij"), -1).reshape(-1, k)  # (e^k, k)
            rows = np.repeat(base[ii, ss][:, None, :], len(combos), axis=1)  # (n, e^k, D)
            vals = opts[:, np.arange(k)[None, :], combos]  # (n, e^k, k)
            bad = np.isnan(vals).any(-1)
            n_idx = np.arange(len(ii))[:, None, None]
            rows[n_idx, np.arange(len(combos))[None, :, None], cols[:, None, :]] = np.nan_to_num(vals)
            rows[bad] = X[ii][np.nonzero(bad)[0]]
            out[ii[:, None], ss[:, None] * R + np.arange(len(combos))[None, :]] = rows
        return out

    def _save_extra(self, path: Path) -> dict[str, Any]:
        import torch

        torch.save(self.net_.state_dict(), path / "weights.pt")
        np.savez(path / "train_sets.npz", train_sets=self.train_sets_)
        return {"n_raw": int(self.changed_.shape[1]), "fit": getattr(self, "fit_info_", None)}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        import torch

        self.net_ = change_value_net(self.n_columns_, int(meta["n_raw"]), self.params.hidden, self.params.dropout)
        self.net_.load_state_dict(torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        self.net_.eval()
        with np.load(path / "train_sets.npz", allow_pickle=False) as z:
            self.train_sets_ = z["train_sets"]
