"""``proposer``: a network whose first batch of proposals already holds the answer, for models that can only
be called (issue 56).

The network maps an agent to K counterfactuals at once (K heads, one forward pass). It learns in two
stages:

1. **imitation** of MACE's certified answers: each head predicts which raw features change (a logit
   each, cross-entropy against the label's changed set) and by how much (the change in spans of each
   column, squared error where the label changed it; a proposal changes only the features its logits
   name, so it stays sparse), and the loss of the *nearest* head (winner takes all, plus ``spread`` times the mean, so that
   no head dies): the heads split the labels' modes (raise capital gain; more hours and a better job;
   ...) instead of averaging them into a point no model accepts;
2. **improvement on the model's own reward** (``expert_rounds``; expert iteration): agents drawn around
   the training agents (no MACE label: only model calls) are answered by the budgeted search below with
   the current network at a wide budget; every accepted answer (the reward: valid, and nearer is better:
   the search keeps the nearest) becomes a target, and the network is trained again on labels and targets.
   The calls and rows this costs are counted (``fit_info_``).

Beside the network, a second learned part names the changed set (``learners/tabular/set_names.py``): a
logistic regression of the agent ranks the labels' changed raw-feature sets, and for the ``set_names``
likeliest, the ``set_donors`` nearest training agents whose labels change exactly that set lend their new
values. These rows lead the proposals (after the surrogate's answers): the heads collapse onto the common
sets, and on a forest the right set with a neighbour's values is often a row the forest accepts.

Answering (``recommend``) is ``budget_search`` (``learners/tabular/budget_search.py``): the proposals on
rays and snapped to the labels' value vocabulary in the first call, then moves that shorten the answer,
within ``calls`` round trips and ``rows`` rows per agent, through ``predict_proba`` only. White-box reading
of the model is never used (wrap it in ``envs.black_box.BlackBoxModel`` to have that enforced and counted).

Which learned parts to add depends on the model (a surrogate where it is smooth, a student of its corners
where it answers in steps); ``setting="auto"`` lets the fit choose from the model's answers
(``learners/tabular/setting.py``).

``proposals`` chooses where the first batch comes from: ``network`` (the method), ``averages`` (no network:
the K centroids of the training labels' changes, the same for every agent: the same search without the
learned part, the baseline of every table) or ``neighbours`` (no network: the K nearest training agents'
changes, the k-NN idea under the same budget).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.black_box import BlackBoxModel, Budget
from envs.tabular import TabularWorld
from learners.tabular.base import Recommendations, TabularGenerator, TabularLabels
from learners.tabular.budget_search import AHEAD_AGENTS, budget_search, value_vocabulary
from learners.tabular.change_net import forward_layers, sequential_layers
from learners.tabular.geometry import WorldGeometry
from learners.tabular.proposer_params import ProposerParams
from learners.tabular.self_labels import answer_unlabelled
from learners.tabular.set_names import SetNamer
from learners.tabular.setting import choose_setting
from learners.tabular.steps import STEP_SHARE_MIN, step_share
from learners.tabular.student import CornerStudent
from learners.tabular.surrogate import Surrogate, SurrogateParams, boundary_queries
from solvers.mace.distance import Norm

FALLBACK_DONORS = 16  # training agents whose answers are transplanted for an agent none of whose first rows was accepted
EXPERT_BLOCK = 250  # agents per search in an expert round (memory: at 6 x 2,000 a search keeps every row it scored)


class ProposerGenerator(TabularGenerator):
    """K proposals per agent from one forward pass, then a search within a query budget (black box)."""

    method = "proposer"
    Params = ProposerParams

    # ------------------------------------------------------------------------------------- fitting
    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> ProposerGenerator:
        self._store(world, labels)
        p = self.params
        geo = WorldGeometry.of(world)
        self.raw_of_column_ = np.asarray(geo.raw_of_column, np.int64)
        self.vocab_ = value_vocabulary(geo, self.X_, self.CF_) if p.vocabulary else None
        self.fit_info_: dict[str, Any] = {"labels": int(len(self.X_)), "expert": []}
        self.surrogate_, self.inner_, self.set_namer_, self.student_ = None, None, None, None
        self.step_share_ = 0.0
        auto = p.setting == "auto"
        if auto or (self.vocab_ is not None and float(p.corner_grid) > 0):  # one call: does the model answer in steps?
            probe = BlackBoxModel(world.model)
            self.step_share_ = step_share(probe, geo, self.X_, seed=seed)
            self.fit_info_["steps"] = {"share": self.step_share_, "calls": probe.calls, "rows": probe.rows}
        if auto:  # the options the probe and the unlabelled rows call for (learners/tabular/setting.py)
            unlabelled = getattr(labels, "unlabelled", None)
            chosen, why = choose_setting(steps=self._in_steps(), unlabelled=0 if unlabelled is None else len(unlabelled),
                                         student_agents=int(p.student_agents), self_labels=int(p.self_labels),
                                         surrogate_members=int(p.surrogate_members))
            self.params = p = replace(p, **chosen)
            self.fit_info_["setting"] = {"chosen": chosen, "why": why}
        if int(p.student_agents) > 0 and self._in_steps():  # a stand-in of a model in steps, from its answers
            probe = BlackBoxModel(world.model)
            self.student_ = CornerStudent(members=int(p.student_members)).fit(
                replace(world, model=probe), geo, self.X_, self.vocab_, drawn=int(p.student_agents),
                corners=int(p.student_corners), seed=seed, memory=p.student_memory or None, progress=progress)
            self.fit_info_["student"] = {**self.student_.info_, "calls": probe.calls, "rows_asked": probe.rows}
        if p.surrogate:
            self._fit_surrogate(world, geo, labels, seed, progress)
        self._fit_proposals(seed, progress)
        unlabelled = getattr(labels, "unlabelled", None)
        if int(p.self_labels) > 0 and unlabelled is not None and len(unlabelled):
            self.add_self_labels(world, np.asarray(unlabelled, float)[:int(p.self_labels)], seed=seed, progress=progress)
        if p.proposals == "network":
            for r in range(int(p.expert_rounds)):
                self._expert_round(world, seed + 1 + r, progress)
        return self

    def _fit_proposals(self, seed: int, progress: bool) -> None:
        """What proposes from the labels: the averages (no network), or the set namer and the network."""
        p = self.params
        if p.proposals == "averages":
            self._fit_averages(seed)
        elif p.proposals == "network":
            t = time.perf_counter()
            self.set_namer_ = SetNamer().fit(self._scaled(self.X_), self.changed_) if int(p.set_names) > 0 else None
            self._train(self._scaled(self.X_), self._delta(self.X_, self.CF_), int(p.max_epochs), seed, progress, fresh=True)
            self.fit_info_["imitation_seconds"] = time.perf_counter() - t

    def add_self_labels(self, world: TabularWorld, A: np.ndarray, *, seed: int = 0, progress: bool = False
                        ) -> ProposerGenerator:
        """Rejected agents ``A`` (U, D) without MACE's answer, answered by this fitted generator's own search at
        ``self_label_calls`` x ``self_label_rows`` through ``world.model.predict_proba`` alone; the accepted answers
        join the labels (and, with ``self_label_values``, the search's value vocabulary: ``search_vocabulary``) and the
        proposals are fitted again (``fit`` does this
        with ``labels.unlabelled``; called after a fit, the answers use whatever the generator holds then, a student
        included). Its cost: ``fit_info_["self_labels"]``. Returns self."""
        p = self.params
        geo = WorldGeometry.of(world)
        A = np.asarray(A, float)
        if A.ndim != 2 or A.shape[1] != self.n_columns_:
            raise ValueError(f"labels.unlabelled: expected (U, {self.n_columns_}) encoded agents, got shape {A.shape}")
        CF, found, info = answer_unlabelled(self, world, A, Budget(int(p.self_label_calls), int(p.self_label_rows)),
                                            state=self._state_bytes(), memory=p.self_label_memory or None,
                                            n_workers=int(p.self_label_workers), progress=progress)
        self.X_, self.CF_ = np.concatenate([self.X_, A[found]]), np.concatenate([self.CF_, CF[found]])
        self.changed_ = geo.deltas(self.X_, self.CF_) > 1e-12
        for cached in ("_scaled_train", "_col_changed", "_numpy_cache", "_search_vocab", "_last_distances", "_moved"):  # keyed on the labels and the network
            self.__dict__.pop(cached, None)
        self._fit_proposals(seed, progress)
        self.fit_info_["self_labels"] = {**info, "labels": int(len(self.X_))}
        return self

    def _state_bytes(self) -> bytes:
        """The fitted state that answers (the labels, what proposes from them, the settings, a student): the
        self-labels' key."""
        parts = [self.X_, self.CF_] + ([self.centroids_] if self.params.proposals == "averages" else [])
        if self.params.proposals == "network":
            parts += [t.detach().cpu().numpy() for t in self.net_.state_dict().values()]
            if self.set_namer_ is not None:
                parts.append(self.set_namer_.coef_)
        # the search's settings (not where things are kept, nor on how many processes), and a student where it has one
        extra = repr(replace(self.params, self_label_memory="", student_memory="", self_label_workers=1,
                             self_label_values=False)).encode()
        search = self.search_vocabulary()
        if search is not self.vocab_:  # the vocabulary the search answers with, where the self-labels widened it
            parts += search
        if getattr(self, "student_", None) is not None:
            extra += json.dumps(self.student_.to_dict(), sort_keys=True).encode()
        return b"".join(np.ascontiguousarray(a).tobytes() for a in parts) + extra

    def _fit_surrogate(self, world: TabularWorld, geo: WorldGeometry, labels: TabularLabels, seed: int,
                       progress: bool) -> None:
        """The model's logit learnt near the boundary the labels cross, from the model's own answers, and the
        white-box search on it (``inner_``); then ``surrogate_rounds`` times, the search's answers for the
        training agents (where the surrogate is most wrong: its optimum exploits its errors) on a ladder and
        moved, asked of the model, and the surrogate fitted again on everything. Its calls and rows:
        ``fit_info_["surrogate"]``; not used where its held-out error stays over ``surrogate_max_sigma``."""
        from learners.tabular.budget_search import LEAD_LADDER
        from learners.tabular.change_value import ChangeValueGenerator
        from learners.tabular.surrogate import moved_rows

        p = self.params
        t0 = time.perf_counter()
        model = BlackBoxModel(world.model)
        Q = boundary_queries(geo, self.X_, self.CF_, int(p.surrogate_queries), seed)
        proba = model.predict_proba(Q)
        params = SurrogateParams(hidden=p.surrogate_hidden, members=int(p.surrogate_members),
                                 max_epochs=int(p.surrogate_epochs))
        sur = Surrogate(params).fit(Q, proba, seed=seed, progress=progress)
        rounds = int(p.surrogate_rounds) if int(p.surrogate_search) > 0 else 0
        for r in range(rounds + 1):
            self.surrogate_ = sur if sur.sigma_ <= float(p.surrogate_max_sigma) else None
            if self.surrogate_ is None:  # it did not learn the model (a forest's steps): the search goes on without it
                self.inner_ = None  # (nor its white-box search, where a refit came out worse than the first fit)
                break
            if int(p.surrogate_search) == 0:
                break
            self.__dict__.pop("_surrogate_world", None)
            if self.inner_ is None:  # the white-box search, on our own model
                self.inner_ = ChangeValueGenerator(piece_lp=bool(p.surrogate_piece_lp)).fit(replace(world, model=sur.as_model()), labels, seed=seed)
            if r == rounds:
                break
            A = self._surrogate_answers(world, self.X_, fitting=True)  # (M, k, D)
            ladder = np.asarray(LEAD_LADDER)[None, None, :, None]
            R = self.X_[:, None, None, :] + ladder * (A - self.X_[:, None, :])[:, :, None, :]
            R = geo.project(self.X_, R.reshape(len(A), -1, A.shape[-1]))
            rng = np.random.default_rng(seed + 100 + r)
            R = np.concatenate([R, moved_rows(geo, self.X_, A[:, 0], R.shape[1] // 2, rng)], axis=1).reshape(-1, A.shape[-1])
            Q, proba = np.concatenate([Q, R]), np.concatenate([proba, model.predict_proba(R)])
            sur = Surrogate(params).fit(Q, proba, seed=seed, progress=progress)
        self.fit_info_["surrogate"] = {"calls": model.calls, "rows": model.rows, "sigma": sur.sigma_,
                                       "agreement": sur.agreement_, "used": self.surrogate_ is not None,
                                       "rounds": rounds, "seconds": time.perf_counter() - t0}

    def _fit_averages(self, seed: int) -> None:
        """The K centroids of the labels' scaled changes (k-means; fewer where there are fewer labels)."""
        from sklearn.cluster import KMeans

        delta = (self.CF_ - self.X_) / self.scale_span_
        k = min(int(self.params.heads), len(np.unique(delta, axis=0)))
        km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(delta)
        sizes = np.bincount(km.labels_, minlength=k)
        self.centroids_ = km.cluster_centers_[np.argsort(-sizes, kind="stable")]  # most common change first

    def _train(self, Xs: np.ndarray, Ys: np.ndarray, epochs: int, seed: int, progress: bool, fresh: bool) -> None:
        import torch

        from learners.base import FitContext
        from learners.lightning_fit import fit_lightning
        from learners.torch_training import TorchParams, mlp, seed_everything

        p = self.params
        K, D, J = int(p.heads), Xs.shape[1], self.changed_.shape[1]
        spread = float(p.spread)
        of_col = torch.as_tensor(self.raw_of_column_)

        def loss_fn(model, batch):
            xb, yb = batch
            out = model(xb).view(len(xb), K, J + D)
            gate, delta = out[..., :J], out[..., J:]
            moved = (yb.abs() > 1e-9).float()  # (B, D) columns the label changes
            changed = torch.zeros(len(xb), J).index_add_(1, of_col, moved).clamp_max(1.0)  # (B, J) raw features
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                gate, changed[:, None, :].expand_as(gate), reduction="none").mean(-1)
            mask = changed[:, of_col][:, None, :]  # the value loss where the label's feature changed
            mse = (((delta - yb[:, None, :]) ** 2) * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
            err = bce + 5.0 * mse  # (B, K)
            return err.min(1).values.mean() + spread * err.mean()

        if fresh or getattr(self, "net_", None) is None:
            seed_everything(seed)
            self.net_ = _ProposerNet(mlp(D, p.hidden, K * (J + D), batch_norm=True, dropout=float(p.dropout)), K, D)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(Xs))
        n_val = max(1, int(round(0.1 * len(Xs)))) if len(Xs) >= 20 else 0
        val, tr = (order[:n_val], order[n_val:]) if n_val else (order, order)
        tensors = [torch.as_tensor(a.astype(np.float32)) for a in (Xs, Ys)]
        tp = TorchParams(hidden=p.hidden, dropout=float(p.dropout), lr=float(p.lr), batch_size=int(p.batch_size),
                         max_epochs=int(epochs), patience=max(10, int(epochs) // 4), batch_norm=True)
        ctx = FitContext(n_features=D, n_actions=K, max_len=K, seed=seed, progress=progress)
        self.fit_info_.setdefault("training", []).append(
            fit_lightning(self.net_, loss_fn, [t[tr] for t in tensors], [t[val] for t in tensors], tp, ctx))
        self.__dict__.pop("_numpy_cache", None)

    def _delta(self, X: np.ndarray, CF: np.ndarray) -> np.ndarray:
        """The change, in spans of each column (what the heads predict)."""
        return ((CF - X) / self.scale_span_).astype(np.float32)

    def _expert_round(self, world: TabularWorld, seed: int, progress: bool) -> None:
        """Agents drawn around the training agents, answered by the search at a wide budget with the current
        network through the model alone; the accepted answers join the labels as targets; train again."""
        p = self.params
        geo = WorldGeometry.of(world)
        t0 = time.perf_counter()
        model = BlackBoxModel(world.model)  # its calls and rows: the round's cost
        rng = np.random.default_rng(seed)
        base = self.X_[rng.integers(0, len(self.X_), int(p.expert_agents))]
        noise = rng.normal(0.0, 0.05, base.shape) * self.scale_span_ * geo.numeric
        A = geo.project(base, (base + noise)[:, None, :])[:, 0]
        A = A[~(model.predict_proba(A) > 0.5)]  # rejected ones only (one call)
        CF, ok = np.full(A.shape, np.nan), np.zeros(len(A), bool)
        for lo in range(0, len(A), EXPERT_BLOCK):  # a block of agents per search (memory: every row scored is
            a = A[lo:lo + EXPERT_BLOCK]  # kept to be asked once; an answer does not depend on the batch)
            res = budget_search(model, geo, a, self.candidates(world, a), Budget(int(p.expert_calls), int(p.expert_rows)),
                                vocab=self.vocab_, surrogate=self.surrogate_,
                                lead=int(p.surrogate_search) if self.inner_ is not None else 0,
                                grid_share=self._grid_share(), steps=self._in_steps(), picks=self._picks(geo, a))
            CF[lo:lo + len(a)], ok[lo:lo + len(a)] = res.CF, res.found
        Xs = np.concatenate([self._scaled(self.X_), self._scaled(A[ok])])
        Ys = np.concatenate([self._delta(self.X_, self.CF_), self._delta(A[ok], CF[ok])])
        self._train(Xs, Ys, int(p.expert_epochs), seed, progress, fresh=False)
        self.fit_info_["expert"].append({"agents": int(len(A)), "answered": int(ok.sum()), "calls": model.calls,
                                         "rows": model.rows, "seconds": time.perf_counter() - t0})

    # ------------------------------------------------------------------------------------ proposing
    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        """(N, K, D) the first batch of proposals (not yet projected)."""
        X = np.atleast_2d(np.asarray(X, float))
        p = self.params
        if p.proposals == "averages":
            return X[:, None, :] + self.centroids_[None, :, :] * self.scale_span_
        if p.proposals == "neighbours":
            return self._lent(X, int(p.heads))
        J = self.changed_.shape[1]
        out = forward_layers(self._numpy_net(), self._scaled(X)).reshape(len(X), int(p.heads), -1).astype(float)
        gate, delta = out[..., :J] > 0.0, out[..., J:]  # a raw feature changes where its logit is positive
        delta = np.where(gate[..., self.raw_of_column_] & (np.abs(delta) >= float(p.min_change)), delta, 0.0)
        P = X[:, None, :] + delta * self.scale_span_
        if int(p.neighbours) > 0:  # the labels' own answers beside the heads' (the search takes them in this order)
            P = np.concatenate([P, self._lent(X, int(p.neighbours))], axis=1)
        if getattr(self, "set_namer_", None) is not None and int(p.set_names) > 0 and int(p.set_donors) > 0:
            P = np.concatenate([self._named_set_rows(X), P], axis=1)
        if getattr(self, "inner_", None) is not None and self.surrogate_ is not None:  # the surrogate's answers first
            P = np.concatenate([self._surrogate_answers(world, X), P], axis=1)
        return P

    def _surrogate_answers(self, world: TabularWorld, X: np.ndarray, *, fitting: bool = False) -> np.ndarray:
        """(N, surrogate_search, D) the white-box search's nearest answers on the surrogate (the agent itself
        where it has fewer); its piece MILP as ``surrogate_piece_lp`` (``fitting``) or ``answer_piece_lp``."""
        k = int(self.params.surrogate_search)
        sw = self.__dict__.get("_surrogate_world")
        if sw is None or sw[0] is not world:
            sw = (world, replace(world, model=self.surrogate_.as_model()))
            self.__dict__["_surrogate_world"] = sw
        inner = self.inner_
        piece_lp = bool(self.params.surrogate_piece_lp if fitting else self.params.answer_piece_lp)
        if inner.params.piece_lp != piece_lp:  # the same fitted search, its last step on or off (kept: its caches)
            view = self.__dict__.get("_inner_view")
            if view is None or view[0] is not self.inner_:
                view = (self.inner_, copy.copy(self.inner_))
                view[1].params = replace(self.inner_.params, piece_lp=piece_lp)
                self.__dict__["_inner_view"] = view
            inner = view[1]
        rec = inner.recommend(sw[1], X, n_alternatives=max(0, k - 1))
        A = rec.CF[:, None, :] if rec.alternatives is None else np.concatenate([rec.CF[:, None, :], rec.alternatives], 1)
        A = A[:, :k]
        return np.where(np.isnan(A).any(-1, keepdims=True), X[:, None, :], A)

    def _named_set_rows(self, X: np.ndarray) -> np.ndarray:
        """(N, set_names * set_donors, D) the ``set_donor_rows`` of the ``set_names`` sets ``set_namer_``
        ranks likeliest for each agent."""
        p = self.params
        return self.set_donor_rows(X, self.set_namer_.rank(self._scaled(X), int(p.set_names)), int(p.set_donors))

    def set_donor_rows(self, X: np.ndarray, sets: np.ndarray, k: int, values: bool = True) -> np.ndarray:
        """(N, T * k, D) for each set index of ``sets`` (N, T) (into ``set_namer_.keys_``; -1: none), the agent
        with the new values (``values``; else the changes) of its ``k`` nearest training agents whose labels
        change exactly that set, the agent itself where fewer have it; donor rank first, then set rank:
        round one, cut short, keeps every set's nearest donor."""
        T = sets.shape[1]
        d = self._train_distances(X)
        moved = self._moved_labels()
        out = np.repeat(X[:, None, :], T * k, axis=1)
        for t in range(T):  # a few sets: a loop over sets, not agents
            among = self.set_namer_.set_of_label_[None, :] == sets[:, t:t + 1]  # (N, M)
            idx = self._neighbours(X, k, among=among, d=d)  # (N, k'); past the set's last member: not in it
            live = np.take_along_axis(among, idx, axis=1)[..., None]
            lent = np.where(moved[idx], self.CF_[idx], X[:, None, :]) if values else X[:, None, :] + self.CF_[idx] - self.X_[idx]
            out[:, t + T * np.arange(idx.shape[1])] = np.where(live, lent, X[:, None, :])
        return out

    def search_vocabulary(self) -> list[np.ndarray] | None:
        """The value vocabulary the search answers with: ``vocab_`` (the values MACE's answers move each numeric
        column to), widened with ``self_label_values`` by the values the self-labels' answers move the same columns
        to (a split no MACE label crosses, found by the fit's own search at 8 x 2,000: Adult forest's age 45 and 29).
        The student's corners keep ``vocab_``: it was fitted on them, and scores corners of new values worse."""
        if not getattr(self.params, "self_label_values", False) or self.vocab_ is None:
            return self.vocab_
        hit = self.__dict__.get("_search_vocab")
        if hit is None or hit[0] != len(self.X_):  # keyed on the labels (self-labels join them)
            moved = self._moved_labels()
            wide = [np.union1d(v, self.CF_[moved[:, c], c]) if len(v) else v for c, v in enumerate(self.vocab_)]
            same = all(len(w) == len(v) for w, v in zip(wide, self.vocab_, strict=True))
            hit = (len(self.X_), self.vocab_ if same else wide)
            self.__dict__["_search_vocab"] = hit
        return hit[1]

    def _in_steps(self) -> bool:
        """Whether the fit-time probe found the model answering in steps (``steps.step_share``)."""
        return getattr(self, "step_share_", 0.0) >= STEP_SHARE_MIN

    def _picks(self, geo: WorldGeometry, X: np.ndarray, scan: dict | None = None) -> np.ndarray | None:
        """(N, student_rows, D) the student's likeliest accepted corners per agent (None without a student); ``scan``:
        where the corners listed and scored are kept for ``_next_picks`` (``CornerStudent.picks``)."""
        if getattr(self, "student_", None) is None or self.params.student_use == "round_two":  # none in round one
            return None
        return self._student_picks(geo, X, int(self.params.student_rows), scan)

    def _next_picks(self, geo: WorldGeometry, X: np.ndarray, scan: dict | None = None
                    ) -> Callable[[np.ndarray, int], np.ndarray] | None:
        """``budget_search``'s ``next_picks``: for agents ``a`` of ``X``, the student's ``k`` likeliest accepted
        corners, nearest first (``student_use`` "round_two" or "both"; None without a student), from where
        round one's picks left each agent's corners in ``scan``."""
        if getattr(self, "student_", None) is None or self.params.student_use == "round_one":
            return None
        return lambda a, k: self._student_picks(geo, X[a], k, scan)

    def _student_picks(self, geo: WorldGeometry, X: np.ndarray, k: int, scan: dict | None = None) -> np.ndarray:
        """(N, k, D) the student's picks at the proposer's answering settings (pool, distinct, threshold)."""
        p = self.params
        return self.student_.picks(geo, X, self.vocab_, k, pool=int(p.student_pool), distinct=bool(p.student_distinct),
                                   threshold=float(p.student_threshold), scan=scan)

    def _grid_share(self) -> float:
        """Round one's share for the vocabulary's corner grid: ``corner_grid`` where the model answers in steps."""
        return float(self.params.corner_grid) if self._in_steps() else 0.0

    def _transplants(self, X: np.ndarray, k: int) -> np.ndarray:
        """(N, k, D) each agent with the features its k nearest training agents changed set to their new
        values (absolute: where a relative change does not reach the boundary)."""
        idx = self._neighbours(X, min(k, len(self.X_)))
        moved = self._moved_labels()
        return np.where(moved[idx], self.CF_[idx], X[:, None, :])

    def _donor_rows(self, X: np.ndarray, start: np.ndarray, k: int) -> np.ndarray:
        """(N, k, D) ``_transplants`` of each agent's training neighbours ranked ``start[i]`` to ``start[i] + k``
        (NaN past the last): the rows of a later round for an agent no row has answered yet."""
        n = len(self.X_)
        idx = self._neighbours(X, min(n, int(np.max(start, initial=0)) + k))
        rank = np.asarray(start, np.int64)[:, None] + np.arange(k)[None, :]
        live = rank < idx.shape[1]
        take = np.take_along_axis(idx, np.minimum(rank, idx.shape[1] - 1), 1) if idx.shape[1] else np.zeros_like(rank)
        moved = self._moved_labels()
        out = np.where(moved[take], self.CF_[take], X[:, None, :])
        out[~live] = np.nan
        return out

    def _lent(self, X: np.ndarray, k: int) -> np.ndarray:
        """(N, k, D) the changes of the k nearest training agents, added to each agent."""
        idx = self._neighbours(X, min(k, len(self.X_)))
        return X[:, None, :] + (self.CF_[idx] - self.X_[idx])

    def _numpy_net(self) -> list[tuple[str, Any, Any]]:
        hit = self.__dict__.get("_numpy_cache")
        if hit is None:
            hit = sequential_layers(self.net_.body)
            self.__dict__["_numpy_cache"] = hit
        return hit

    # ------------------------------------------------------------------------------------- answering
    def _recommend(self, world: TabularWorld, X: np.ndarray, *, norm: Norm, polish_rounds: int | None,
                   n_alternatives: int) -> Recommendations:
        rec = self.recommend_within(world, X, Budget(int(self.params.calls), int(self.params.rows)), norm=norm,
                                    n_alternatives=n_alternatives)
        return rec

    def recommend_within(self, world: TabularWorld, X: np.ndarray, budget: Budget, *, norm: Norm = "one",
                         n_alternatives: int = 0) -> Recommendations:
        """The nearest accepted counterfactual per agent found within ``budget`` (per agent), through
        ``world.model.predict_proba`` only."""
        t0 = time.perf_counter()
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != self.n_columns_:
            raise ValueError(f"X: expected {self.n_columns_} encoded columns, got {X.shape[1]}")
        if not len(X):
            return Recommendations.none(self.n_columns_, n_alternatives, calls=0)
        geo = WorldGeometry.of(world, norm)
        # round two's picks continue from round one's corners where both are asked of a batch small enough to keep them
        scan = {} if self.params.student_use == "both" and len(X) <= AHEAD_AGENTS else None
        res = budget_search(world.model, geo, X, self.candidates(world, X), budget, vocab=self.search_vocabulary(),
                            first_share=float(self.params.first_share), fallback=self._transplants(X, FALLBACK_DONORS),
                            surrogate=self.surrogate_,
                            lead=int(self.params.surrogate_search) if self.inner_ is not None else 0,
                            grid_share=self._grid_share(), steps=self._in_steps(), picks=self._picks(geo, X, scan),
                            donors=lambda a, start, k: self._donor_rows(X[a], start, k),
                            next_picks=self._next_picks(geo, X, scan), near_picks=int(self.params.student_near_picks),
                            stand_in=None if getattr(self, "student_", None) is None else self.student_.margin)
        alts = None
        if n_alternatives > 0:  # the search's next distinct accepted rows, nearest first
            alts = np.full((len(X), n_alternatives, X.shape[1]), np.nan)
            k = min(n_alternatives, res.alternatives.shape[1])
            alts[:, :k] = res.alternatives[:, :k]
        return Recommendations(res.CF, res.distance, res.found, alts, time.perf_counter() - t0, calls=res.calls,
                               rows=res.rows)

    # ----------------------------------------------------------------------------------- persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        out = super()._arrays()
        out["raw_of_column"] = self.raw_of_column_
        out["step_share"] = np.array([self.step_share_])
        if self.vocab_ is not None:
            out["vocab_sizes"] = np.array([len(v) for v in self.vocab_], np.int64)
            out["vocab"] = np.concatenate(self.vocab_) if self.vocab_ else np.zeros(0)
        if self.params.proposals == "averages":
            out["centroids"] = self.centroids_
        if self.surrogate_ is not None:
            out.update(self.surrogate_.arrays())
        if getattr(self, "set_namer_", None) is not None:
            out.update(self.set_namer_.arrays())
        return out

    def _set_arrays(self, z: dict[str, np.ndarray]) -> None:
        super()._set_arrays(z)
        self.raw_of_column_ = z["raw_of_column"].astype(np.int64)
        self.step_share_ = float(z["step_share"][0]) if "step_share" in z else 0.0
        self.vocab_ = None
        if "vocab_sizes" in z:
            self.vocab_ = np.split(z["vocab"], np.cumsum(z["vocab_sizes"])[:-1])
        if "centroids" in z:
            self.centroids_ = z["centroids"]
        self.surrogate_ = Surrogate.from_arrays(z) if "surrogate_mean" in z else None
        self.set_namer_ = SetNamer.from_arrays(z) if "set_keys" in z else None
        if self.set_namer_ is None and int(self.params.set_names) > 0:  # saved before the named sets: it names none
            self.params = replace(self.params, set_names=0)

    def _save_extra(self, path: Path) -> dict[str, Any]:
        if getattr(self, "student_", None) is not None:  # its trees as JSON (no pickle)
            (path / "student.json").write_text(json.dumps(self.student_.to_dict()))
        if self.params.proposals == "network":
            import torch

            torch.save(self.net_.state_dict(), path / "weights.pt")
        if getattr(self, "inner_", None) is not None:  # the white-box search on the surrogate, beside it
            self.inner_.save(path / "surrogate_search")
        return {"fit_info": getattr(self, "fit_info_", {})}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        self.fit_info_ = meta.get("fit_info", {})
        student = path / "student.json"
        self.student_ = CornerStudent.from_dict(json.loads(student.read_text())) if student.exists() else None
        inner = path / "surrogate_search"
        self.inner_ = TabularGenerator.load(inner) if self.surrogate_ is not None and inner.exists() else None
        if self.params.proposals == "network":
            import torch

            from learners.torch_training import mlp

            p = self.params
            K, D, J = int(p.heads), self.n_columns_, self.changed_.shape[1]
            self.net_ = _ProposerNet(mlp(D, p.hidden, K * (J + D), batch_norm=True, dropout=float(p.dropout)), K, D)
            self.net_.load_state_dict(torch.load(path / "weights.pt", weights_only=True))
            self.net_.eval()


def _ProposerNet(body: Any, heads: int, columns: int) -> Any:
    """The torch module: the MLP body, its output read as (heads, columns) scaled rows."""
    from torch import nn

    class ProposerNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = body
            self.heads, self.columns = heads, columns

        def forward(self, x):
            return self.body(x)

    return ProposerNet()
