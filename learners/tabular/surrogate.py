"""A learned stand-in of a black-box model's score near its decision boundary, and the choice of which
rows to spend a query budget on (issue 56).

A model that can only be called still answers every call with a probability, not just a verdict. At fit
time ``boundary_queries`` draws rows where the answers live (on the segments from the training agents to
their MACE answers and past them, and the agents and answers with one to three features moved), the model
scores them (counted: the training's calls), and ``Surrogate`` regresses the model's logit on them (a ReLU
MLP, squared error on the clipped logit: an MLP's logit is learnt to a few hundredths, a forest's steps
less well). Its residual on held-out rows near the boundary is ``sigma_``.

When answering, the search builds far more candidate rows than the budget allows and ``Surrogate.pick``
keeps the ones most likely to be the nearest accepted row: with ``pi`` the surrogate's chance that a row
is accepted (its logit over ``sigma_``, a normal tail), a row's value is ``pi`` times the chance that
every nearer candidate is rejected. A sharp surrogate spends the rows around the boundary; a poor one
(large ``sigma_``) spreads them over distances as a search without it would. Every answer is still a row
the real model accepted: the surrogate only chooses what to ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from envs.block_diagonal import blocks_of
from envs.models import MLPModel
from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import nan_as_zero, take_rows

LOGIT_CLIP = 8.0  # the regression target: the model's logit clipped here (a forest's 0 and 1 are infinite)
NEAR_LOGIT = 1.0  # held-out rows with |logit| below this measure ``sigma_`` (the boundary's neighbourhood)
SIGMA_FLOOR = 0.02  # the least uncertainty the pick assumes (a surrogate is never exact)
PICK_BLOCK = 64  # agents whose candidates are scored at a time (memory)


def boundary_queries(geo: WorldGeometry, X: np.ndarray, CF: np.ndarray, per_label: int, seed: int = 0) -> np.ndarray:
    """(N * per_label, D) rows near the decision boundary the labels ``X`` -> ``CF`` cross: two fifths on
    the segments from each agent past its answer (scale 0 to 1.6, a quarter of the columns left at the
    agent's value), two fifths the answer and one fifth the agent with one to three raw features moved
    (a numeric one uniformly in the agent's box or by a normal step of 8% of its span; a category or
    code at random). Every row is projected onto its agent's box."""
    rng = np.random.default_rng(seed)
    N, D = X.shape
    k_seg, k_cf = per_label * 2 // 5, per_label * 2 // 5
    k_x = per_label - k_seg - k_cf
    t = rng.uniform(0.0, 1.6, (N, k_seg, 1))
    S = X[:, None] + t * (CF - X)[:, None]
    S = np.where(rng.random((N, k_seg, D)) < 0.25, X[:, None], S)
    parts = [geo.project(X, S), moved_rows(geo, X, CF, k_cf, rng), moved_rows(geo, X, X, k_x, rng)]
    return np.concatenate(parts, axis=1).reshape(-1, D)


def moved_rows(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(N, k, D) ``k`` copies of each base row of ``B`` with one to three mutable raw features moved."""
    lo, hi = geo.box(X)
    cols = geo.raw_columns()
    mutable = np.flatnonzero([not geo.fixed[c[c >= 0]].all() for c in cols])
    span = np.where(np.isfinite(geo.span), geo.span, 1.0)
    R = np.repeat(B[:, None], k, axis=1)
    if not len(mutable):
        return geo.project(X, R)
    for draw in range(3):
        pick = rng.random(R.shape[:2]) < (1.0 if draw == 0 else 0.5)
        raw = mutable[rng.integers(0, len(mutable), R.shape[:2])]
        for j in np.unique(raw):
            m = pick & (raw == j)
            cc = cols[j][cols[j] >= 0]
            c0 = cc[0]
            if geo.raw_kinds[j] == "numeric":
                uniform = lo[:, None, c0] + rng.random(m.shape) * (hi[:, None, c0] - lo[:, None, c0])
                step = R[:, :, c0] + rng.normal(0.0, 0.08, m.shape) * span[c0]
                R[:, :, c0] = np.where(m, np.where(rng.random(m.shape) < 0.3, uniform, step), R[:, :, c0])
            elif len(cc) > 1:  # a one-hot group: one of its categories
                cat = cc[rng.integers(0, len(cc), m.shape)]
                R[:, :, cc] = np.where(m[..., None], (cat[..., None] == cc).astype(float), R[:, :, cc])
            else:  # a binary or an ordinal code: anywhere in the box
                code = np.round(lo[:, None, c0] + rng.random(m.shape) * (hi[:, None, c0] - lo[:, None, c0]))
                R[:, :, c0] = np.where(m, code, R[:, :, c0])
    return geo.project(X, R)


@dataclass
class SurrogateParams:
    """Hyperparameters of the surrogate's network and training."""

    hidden: tuple[int, ...] = (64, 64)  # MLP widths
    members: int = 1  # networks fitted with successive seeds and averaged (one MLP members times as wide)
    max_epochs: int = 60  # training epochs
    batch_size: int = 512  # training batch size
    lr: float = 3e-3  # peak learning rate (one-cycle)

    def __post_init__(self) -> None:
        if int(self.members) < 1:
            raise ValueError(f"members: must be >= 1, got {self.members!r}")


class Surrogate:
    """A ReLU MLP regressing a model's clipped logit; ``logit``, ``predict_proba`` (so a search can run on
    it as on a model) and ``pick``."""

    def __init__(self, params: SurrogateParams | None = None) -> None:
        self.params = params or SurrogateParams()

    def fit(self, Q: np.ndarray, proba: np.ndarray, *, seed: int = 0, progress: bool = False) -> Surrogate:
        """Fit on rows ``Q`` (M, D) and the model's probabilities ``proba`` (M,) of them."""
        import torch

        from learners.base import FitContext
        from learners.lightning_fit import fit_lightning
        from learners.tabular.change_net import sequential_layers
        from learners.torch_training import TorchParams, mlp, seed_everything

        p = self.params
        Q = np.asarray(Q, float)
        self.mean_, self.scale_ = Q.mean(0), Q.std(0) + 1e-9
        target = _logit(np.asarray(proba, float))
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(Q))
        n_val = max(1, len(Q) // 10)
        val, tr = order[:n_val], order[n_val:]
        Xs = ((Q - self.mean_) / self.scale_).astype(np.float32)
        tensors = [torch.as_tensor(Xs), torch.as_tensor(target.astype(np.float32))]

        def loss_fn(model, batch):
            xb, yb = batch
            return ((model(xb).squeeze(-1) - yb) ** 2).mean()

        tp = TorchParams(hidden=tuple(p.hidden), lr=float(p.lr), batch_size=int(p.batch_size),
                         max_epochs=int(p.max_epochs), patience=max(10, int(p.max_epochs) // 4), batch_norm=False)
        nets, self.training_ = [], []
        for m in range(int(p.members)):  # the same rows and split, another initialisation and batch order each
            seed_everything(seed + m)
            net = mlp(Q.shape[1], tuple(p.hidden), 1, batch_norm=False)
            ctx = FitContext(n_features=Q.shape[1], n_actions=1, max_len=1, seed=seed + m, progress=progress)
            self.training_.append(fit_lightning(net, loss_fn, [t[tr] for t in tensors], [t[val] for t in tensors], tp, ctx))
            nets.append(sequential_layers(net))
        self.layers_ = average_layers(nets)
        held = self.logit(Q[val])
        near = np.abs(target[val]) < NEAR_LOGIT
        resid = held[near] - target[val][near] if near.any() else held - target[val]
        self.sigma_ = float(max(SIGMA_FLOOR, np.sqrt(np.mean(resid ** 2))))
        self.agreement_ = float(np.mean((held > 0) == (target[val] > 0)))
        self.n_features_ = Q.shape[1]
        return self

    def logit(self, X: np.ndarray) -> np.ndarray:
        """(...) the surrogate's logit of rows ``X`` (..., D)."""
        from learners.tabular.change_net import forward_layers

        X = np.asarray(X, float)
        h = ((X.reshape(-1, X.shape[-1]) - self.mean_) / self.scale_).astype(np.float32)
        blocks = self.__dict__.get("_blocks")
        if blocks is None or blocks[0] is not self.layers_:  # members side by side: their hidden layers by blocks
            blocks = (self.layers_, blocks_of([a if kind == "linear" else None for kind, a, _ in self.layers_]))
            self.__dict__["_blocks"] = blocks
        return forward_layers(self.layers_, h, blocks[1]).reshape(X.shape[:-1]).astype(float)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit(X)))

    def as_model(self) -> Any:
        """The surrogate as an ``envs.models.MLPModel`` (its input scaling folded into the first layer), for
        the white-box searches: the surrogate's parameters are ours to read."""
        W = [np.asarray(a, float) for k, a, _ in self.layers_ if k == "linear"]
        b = [np.asarray(c, float) for k, _, c in self.layers_ if k == "linear"]
        b[0] = b[0] - (self.mean_ / self.scale_) @ W[0]
        W[0] = W[0] / self.scale_[:, None]
        # its search scores thousands of variant rows an answer: BLAS blocks in float32 (the same bits in any
        # batch), and its other products a row at a time: an agent's answers on it then do not depend on the batch
        return SurrogateMLP(W, b, blocks=True, rowwise=True)

    def pick(self, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, rows: int, below: np.ndarray) -> np.ndarray:
        """(N, rows, D) the rows of ``C`` (N, Q, D) worth asking the model: distinct, nearer than ``below``
        (N,), keeping the world's rules, ranked by the chance each is the nearest accepted candidate
        (the surrogate's acceptance chance times the chance all nearer candidates are rejected), then
        ordered nearest first; NaN padded."""
        out = np.full((len(X), rows, X.shape[1]), np.nan)
        for lo in range(0, len(X), PICK_BLOCK):
            sl = slice(lo, lo + PICK_BLOCK)
            P = self._pick(geo, X[sl], C[sl], rows, below[sl])
            out[sl, : P.shape[1]] = P
        return out

    def _pick(self, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, rows: int, below: np.ndarray) -> np.ndarray:
        from scipy.special import ndtr

        dead = np.isnan(C).any(-1)
        Cz = nan_as_zero(C)
        d = np.where(dead, np.inf, geo.distance(X[:, None, :], Cz))
        d[d >= below[:, None] - 1e-15] = np.inf
        if geo.gate is not None:
            d[~geo.keeps(X[:, None, :], Cz)] = np.inf
        order = np.argsort(d, axis=1, kind="stable")
        d = np.take_along_axis(d, order, 1)
        C = take_rows(Cz, order)
        same = np.zeros_like(d, bool)  # a row equal to the previous one is not asked twice
        same[:, 1:] = (np.abs(C[:, 1:] - C[:, :-1]).max(-1) == 0) & np.isfinite(d[:, 1:])
        d[same] = np.inf
        live = np.isfinite(d)
        pi = np.zeros(d.shape)  # the surrogate asked about the live rows only (rowwise: the same bits; about
        pi[live] = ndtr(self.logit(C[live]) / self.sigma_)  # half of a pool repeats or breaks a rule)
        none_nearer = np.cumprod(np.concatenate([np.ones((len(X), 1)), 1.0 - pi[:, :-1]], axis=1), axis=1)
        value = np.where(live, pi * none_nearer + 1e-12 * pi, -1.0)  # the tiny term ranks the hopeless by pi
        top = np.argsort(-value, axis=1, kind="stable")[:, :rows]
        top = np.sort(top, axis=1)  # nearest first
        out = take_rows(C, top)
        out[~np.take_along_axis(live, top, 1)] = np.nan
        return out

    # ---------------------------------------------------------------------------------- persistence
    def arrays(self) -> dict[str, Any]:
        """The fitted surrogate as named arrays (``from_arrays`` reads them back)."""
        out: dict[str, Any] = {"surrogate_mean": self.mean_, "surrogate_scale": self.scale_,
                               "surrogate_sigma": np.array([self.sigma_, self.agreement_])}
        for i, (kind, a, b) in enumerate(self.layers_):
            if kind == "linear":
                out[f"surrogate_w{i}"], out[f"surrogate_b{i}"] = a, b
        out["surrogate_layers"] = np.array([i for i, (k, _, _) in enumerate(self.layers_) if k == "linear"], np.int64)
        return out

    @classmethod
    def from_arrays(cls, z: dict[str, Any], params: SurrogateParams | None = None) -> Surrogate:
        s = cls(params)
        s.mean_, s.scale_ = np.asarray(z["surrogate_mean"]), np.asarray(z["surrogate_scale"])
        s.sigma_, s.agreement_ = (float(v) for v in z["surrogate_sigma"])
        s.layers_ = []
        linear = [int(i) for i in z["surrogate_layers"]]
        for n, i in enumerate(linear):
            s.layers_.append(("linear", np.asarray(z[f"surrogate_w{i}"]), np.asarray(z[f"surrogate_b{i}"])))
            if n < len(linear) - 1:
                s.layers_.append(("relu", None, None))
        s.n_features_ = len(s.mean_)
        return s


class SurrogateMLP(MLPModel):
    """A surrogate's network as the white-box searches read it (``Surrogate.as_model``): an ``MLPModel`` (``blocks``,
    ``rowwise``) whose variant rows (``score_variants``, thousands an answer) are scored in float32. Its weights are
    float32 values (torch trains them so): float64 products of them carry digits the weights never had, at 1.5x the
    time. Its other products (``score``, the bounds) stay float64; the two differ by float32 rounding (about 1e-6 of
    a logit), which moves only what the surrogate proposes, never an answer: every answer is a row the real model
    accepted."""

    variant_dtype: ClassVar[type] = np.float32


def average_layers(nets: list[list[tuple[str, Any, Any]]]) -> list[tuple[str, Any, Any]]:
    """One ReLU MLP whose output is the mean of ``nets``' outputs (each a ``sequential_layers`` list of the
    same shape): the first layers side by side, the hidden ones block-diagonal, the last ones stacked and
    divided by their number. A single net is returned as it is. One network, so the white-box searches read
    an ensemble as they read one member (``as_model``)."""
    if len(nets) == 1:
        return nets[0]
    from scipy.linalg import block_diag

    linear = [[(np.asarray(a), np.asarray(b)) for kind, a, b in net if kind == "linear"] for net in nets]
    n, k = len(linear[0]), len(nets)
    out: list[tuple[str, Any, Any]] = []
    for i in range(n):
        Ws, bs = [w[i][0] for w in linear], [w[i][1] for w in linear]
        if i == 0:
            W, b = np.concatenate(Ws, axis=1), np.concatenate(bs)
        elif i < n - 1:
            W, b = block_diag(*Ws), np.concatenate(bs)
        else:
            W, b = np.concatenate(Ws, axis=0) / k, np.mean(bs, axis=0)
        out.append(("linear", W.astype(Ws[0].dtype), b.astype(bs[0].dtype)))
        if i < n - 1:
            out.append(("relu", None, None))
    return out


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1.0 / (1.0 + np.exp(LOGIT_CLIP)), 1.0 / (1.0 + np.exp(-LOGIT_CLIP)))
    return np.log(p / (1.0 - p))
