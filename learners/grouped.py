"""Group-aware generators for worlds with grouped access to actions (learning-CFE paper, Table 4).

A group-blind generator sees ``x`` only. In a grouped world the optimal CFE also depends on the
agent's group (which actions it may use, or which classifier variant judges it), so two agents
with the same ``x`` can need different CFEs and no function of ``x`` answers both. Two ways to
give a generator the group, both wrapping any registered generator (``method`` + ``params``):

- ``PerGroupGenerator`` (``group_mode: per_group``, the paper's protocol): one generator per
  group, each trained on that group's agents only; an agent is answered by its group's model.
- ``GroupInputGenerator`` (``group_mode: input``): one generator over ``[x, one_hot(group)]``.
  The group columns are appended once here (:func:`group_one_hot`); to a full-action generator
  they look like capabilities that no action provides (the action vectors get zero columns),
  so every generator takes them unchanged.

Both answer ``predict(X, groups)``; ``groups`` is required. Inner models are saved in
subdirectories (``inner/`` or ``group<k>/``) with their own ``config.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from data_gen.dataset import Split
from learners.base import GENERATORS, FitContext, Generator, Prediction, build_generator, register

GROUP_MODES = ("blind", "input", "per_group")


def group_one_hot(X: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``[x, one_hot(group)]``: (B, n + n_groups) uint8, the group-conditioned input."""
    X = np.atleast_2d(np.asarray(X))
    g = _check_groups(groups, len(X), n_groups, "group_input")
    onehot = np.zeros((len(X), n_groups), dtype=np.uint8)
    onehot[np.arange(len(X)), g] = 1
    return np.concatenate([X.astype(np.uint8), onehot], axis=1)


def _check_groups(groups: Any, n_agents: int, n_groups: int, method: str) -> np.ndarray:
    if groups is None:
        raise ValueError(f"{method}: groups are required (one group id per agent); this model is group-aware")
    g = np.asarray(groups)
    if g.shape != (n_agents,) or (n_agents and not np.issubdtype(g.dtype, np.integer)):
        raise ValueError(f"{method}: expected {n_agents} integer group ids, got shape {g.shape} {g.dtype}")
    if n_agents and ((g < 0) | (g >= n_groups)).any():
        raise ValueError(f"{method}: group ids must be in [0, {n_groups}), got {sorted(set(g.tolist()))[:10]}")
    return g.astype(np.int64)


def _subset(s: Split, mask: np.ndarray) -> Split:
    return Split(*(getattr(s, f.name)[mask] for f in dataclasses.fields(Split)))


def _pad(sets: np.ndarray, width: int) -> np.ndarray:
    return np.pad(sets, ((0, 0), (0, width - sets.shape[1])), constant_values=-1)


@dataclass
class GroupedParams:
    """The generator a group-aware wrapper trains (once on the group input, or once per group)."""

    method: str = "named_cfe"  # registered method of the wrapped generator
    params: dict[str, Any] = field(default_factory=dict)  # hyperparameters of the wrapped generator

    def __post_init__(self) -> None:
        inner = GENERATORS.get(self.method)
        if inner is None:
            raise ValueError(f"method: unknown generator {self.method!r}; known: {sorted(GENERATORS)}")
        if issubclass(inner, _GroupAware) or hasattr(inner, "predict_sequences"):
            raise ValueError(f"method: {self.method!r} cannot be wrapped (a policy or an already group-aware model)")
        self.params = dict(self.params)
        inner(**self.params)  # validates the wrapped hyperparameters now, with the field named


class _GroupAware(Generator):
    """Shared checks of the group-aware wrappers (``uses_groups``: evaluation passes groups)."""

    Params = GroupedParams
    uses_groups: ClassVar[bool] = True

    def _inner(self) -> Generator:
        return build_generator(self.params.method, self.params.params)

    def _ctx_groups(self, ctx: FitContext) -> int:
        if ctx.world is None:
            raise ValueError(f"{self.method}: ctx.world is required (the number of groups)")
        return ctx.world.n_groups


@register
class GroupInputGenerator(_GroupAware):
    """One generator over ``[x, one_hot(group)]`` (the group id as an input)."""

    method = "group_input"

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> GroupInputGenerator:
        self.n_groups_, self.n_features_ = self._ctx_groups(ctx), ctx.n_features
        vectors = ctx.action_vectors
        if vectors is not None:  # the group columns: capabilities no action provides
            vectors = np.pad(np.asarray(vectors, dtype=np.uint8), ((0, 0), (0, self.n_groups_)))
        inner_ctx = dataclasses.replace(ctx, n_features=ctx.n_features + self.n_groups_, action_vectors=vectors,
                                        run_dir=None if ctx.run_dir is None else ctx.run_dir / "inner")
        self.model_ = self._inner().fit(self._widen(train), None if val is None else self._widen(val), inner_ctx)
        return self

    def _widen(self, s: Split) -> Split:
        return dataclasses.replace(s, X=group_one_hot(s.X, s.groups, self.n_groups_))

    def predict(self, X: np.ndarray, groups: np.ndarray | None = None) -> Prediction:
        X = np.atleast_2d(np.asarray(X))
        if X.shape[1] != self.n_features_:
            raise ValueError(f"{self.method}: X must have shape (B, {self.n_features_}), got {X.shape}")
        return self.model_.predict(group_one_hot(X, _check_groups(groups, len(X), self.n_groups_, self.method),
                                                 self.n_groups_))

    def _save_state(self, path: Path) -> dict[str, Any]:
        self.model_.save(path / "inner")
        return {"n_groups": self.n_groups_, "n_features": self.n_features_}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.n_groups_, self.n_features_ = meta["n_groups"], meta["n_features"]
        self.model_ = Generator.load(path / "inner")


@register
class PerGroupGenerator(_GroupAware):
    """One generator per group, trained on that group's agents (the paper's Table 4 protocol)."""

    method = "per_group"

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> PerGroupGenerator:
        self.n_groups_, self.n_features_ = self._ctx_groups(ctx), ctx.n_features
        counts = np.bincount(train.groups, minlength=self.n_groups_)
        if (counts == 0).any():
            raise ValueError(f"{self.method}: no training agents in group(s) {np.flatnonzero(counts == 0).tolist()}")
        self.models_ = []
        for g in range(self.n_groups_):
            sub_ctx = dataclasses.replace(ctx, run_dir=None if ctx.run_dir is None else ctx.run_dir / f"group{g}")
            sub_val = None if val is None else _subset(val, val.groups == g)
            self.models_.append(self._inner().fit(_subset(train, train.groups == g), sub_val, sub_ctx))
        return self

    def predict(self, X: np.ndarray, groups: np.ndarray | None = None) -> Prediction:
        X = np.atleast_2d(np.asarray(X))
        g = _check_groups(groups, len(X), self.n_groups_, self.method)
        parts = {k: self.models_[k].predict(X[g == k]) for k in np.unique(g)}
        width = max([p.sets.shape[1] for p in parts.values()], default=1)
        sets, conf = np.full((len(X), width), -1, dtype=np.int64), np.zeros(len(X))
        for k, p in parts.items():
            sets[g == k], conf[g == k] = _pad(np.asarray(p.sets, dtype=np.int64), width), p.confidence
        return Prediction(sets, conf)

    def _save_state(self, path: Path) -> dict[str, Any]:
        for g, m in enumerate(self.models_):
            m.save(path / f"group{g}")
        return {"n_groups": self.n_groups_, "n_features": self.n_features_}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        self.n_groups_, self.n_features_ = meta["n_groups"], meta["n_features"]
        self.models_ = [Generator.load(path / f"group{g}") for g in range(self.n_groups_)]


def group_aware(method: str, params: dict[str, Any], mode: str = "blind") -> Generator:
    """The generator of a config entry: ``method`` itself (``blind``), or wrapped for ``input`` / ``per_group``."""
    if mode not in GROUP_MODES:
        raise ValueError(f"group_mode: expected one of {GROUP_MODES}, got {mode!r}")
    if mode == "blind":
        return build_generator(method, params)
    return build_generator({"input": "group_input", "per_group": "per_group"}[mode],
                           {"method": method, "params": params})
