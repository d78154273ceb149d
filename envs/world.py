"""Actions and the recourse world over a feature schema (used by the tabular worlds).

An :class:`Action` directly sets one feature (to a value, or by adding a value), may change other
features as a consequence (I_a in the CSCF paper, section 3.1), has pre/post conditions and an
effort b(x_prev, x_next). A :class:`RecourseWorld` applies sequences of ``(action, value)``
steps, prices them with the consequence-aware cost model and says whether they are valid.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from envs.classifiers import Classifier
from envs.costs import ConsequenceGraph
from envs.recourse import Recourse
from envs.schema import FeatureSchema

StateFn = Callable[[np.ndarray], Any]  # state (d,) -> bool / float
EffortFn = Callable[[np.ndarray, np.ndarray], float]  # (x_prev, x_next) -> effort b


@dataclass(frozen=True)
class Action:
    """One action of a world.

    ``mode="set"`` sets ``feature`` to the value, ``"add"`` adds it. ``values`` is the value
    domain V: a ``(low, high)`` range, or a tuple of allowed values when ``discrete``.
    ``consequence(x_prev, x_next)`` returns the state after side effects (e.g. age += 2 per
    year of education); ``affects`` names the features it changes besides ``feature``.
    """

    name: str
    feature: str
    mode: Literal["set", "add"] = "set"
    values: tuple = (0.0, 1.0)
    discrete: bool = False
    effort: EffortFn | None = None
    consequence: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    affects: tuple[str, ...] = ()
    pre: StateFn | None = None
    post: StateFn | None = None

    def check_value(self, value: Any) -> None:
        if self.discrete:
            if value not in self.values:
                raise ValueError(f"action {self.name!r}: value {value!r} is not one of {list(self.values)}")
        else:
            lo, hi = self.values
            if not (lo <= float(value) <= hi):
                raise ValueError(f"action {self.name!r}: value {value} is outside [{lo}, {hi}]")


class RecourseWorld:
    """Schema + actions + cost model + classifier + constraints."""

    def __init__(self, schema: FeatureSchema, actions: Sequence[Action], classifier: Classifier,
                 graph: ConsequenceGraph | None = None, accept_threshold: float = 0.5):
        self.schema = schema
        self.actions = list(actions)
        self.classifier = classifier
        self.graph = graph
        self.accept_threshold = accept_threshold
        self.action_index = {a.name: i for i, a in enumerate(self.actions)}
        for a in self.actions:
            for f in (a.feature, *a.affects):
                if f not in schema.index:
                    raise ValueError(f"action {a.name!r}: unknown feature {f!r}")
        # I_a as a matrix: which features each action touches (for the discount of Eq. 2).
        self.affected = np.zeros((len(self.actions), len(schema)), dtype=bool)
        for i, a in enumerate(self.actions):
            for f in (a.feature, *a.affects):
                self.affected[i, schema.index[f]] = True

    def accepts(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.classifier.predict_proba(np.atleast_2d(X))) >= self.accept_threshold

    def step(self, x: np.ndarray, action: str | int, value: Any) -> tuple[np.ndarray, float, bool]:
        """Apply one action: returns (next state, cost c = b * g, constraints held)."""
        i = action if isinstance(action, int) else self.action_index.get(action, -1)
        if not 0 <= i < len(self.actions):
            raise ValueError(f"action: unknown action {action!r}")
        a = self.actions[i]
        a.check_value(value)
        j = self.schema.index[a.feature]
        ok = a.pre is None or bool(a.pre(x))
        nxt = np.array(x, dtype=float)
        nxt[j] = value if a.mode == "set" else nxt[j] + value
        if a.consequence is not None:
            nxt = np.asarray(a.consequence(x, nxt), dtype=float)
        ok = ok and (a.post is None or bool(a.post(nxt)))
        ok = ok and not self.schema.mutability_violations(x, nxt)[0]
        lo, hi = self.schema.bounds()
        ok = ok and bool(np.all((nxt >= lo) & (nxt <= hi)))
        b = float(a.effort(x, nxt)) if a.effort is not None else 1.0
        g = 1.0 if self.graph is None else float(self.graph.action_discounts(x, self.affected[i : i + 1])[0, 0])
        return nxt, b * g, ok

    def evaluate(self, x: np.ndarray, steps: Sequence[tuple[str | int, Any]], method: str = "given",
                 runtime: float = 0.0) -> Recourse:
        """Apply a sequence, price it and check validity (accepted at the end, every constraint held)."""
        t0 = time.perf_counter()
        state = self.schema.validate(x)[0]
        total, ok, ids, named = 0.0, True, [], []
        for action, value in steps:
            state, cost, held = self.step(state, action, value)
            total += cost
            ok &= held
            i = action if isinstance(action, int) else self.action_index[action]
            ids.append(i)
            named.append((self.actions[i].name, value))
        valid = ok and bool(self.accepts(state)[0])
        return Recourse(tuple(named), tuple(ids), state, total, valid, method,
                        runtime=runtime or time.perf_counter() - t0)
