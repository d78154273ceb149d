"""Sequential tabular worlds: ordered actions with values, consequences and discounts (CSCF section 3).

A :class:`SequentialWorld` is the world of the CSCF paper on a real data set: a state is an
*encoded* row (numbers in raw units, ordinal codes, one-hot groups; ``data_gen.tabular_encoder``),
an action directly sets one feature (``add`` a value, ``set`` it to a value, or ``assign`` a
fixed category), may change other features as a consequence (I_a; "more education also means
you are older"), has pre/post conditions and an effort b(x_prev, x_next); its cost is
c = b * g(x_prev) with the discount g of the feature relationship graph (Eq. 1-2, through
:class:`envs.costs.ConsequenceGraph`; no graph: c = b). A sequence is valid when every pre and
post condition holds and the classifier accepts the final state.

Everything is declarative (conditions, consequences, efforts and discount functions are data,
not Python callables; :mod:`envs.sequential_actions`, re-exported here), so a world saves to
JSON and loads back bit-identical, with a fingerprint, and every transition is vectorized over a batch of states: the sequencer, the exact
search and a Gymnasium environment all price the same sequences the same way through
:meth:`SequentialWorld.apply` and :meth:`SequentialWorld.rollout`.

Every valued action has a documented **value grid** (``SequentialAction.grid``, raw units): the
values the sequencer decodes to, the exact search enumerates and an RL policy chooses from.
Any value inside the action's ``domain`` is accepted by :meth:`SequentialWorld.evaluate`. The
Adult and German Credit action sets of CSCF live in :mod:`envs.sequential_cscf`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.costs import ConsequenceGraph, Edge
from envs.models import model_from_dict
from envs.recourse import Recourse
from envs.schema import Feature, FeatureSchema
from envs.sequential_actions import (  # noqa: F401  (re-exported: the vocabulary of a world)
    _OPS,
    Condition,
    Consequence,
    DiscountEdge,
    Effort,
    Op,
    SequentialAction,
    Tau,
)

Step = tuple[str | int, Any]  # (action name or id, value; None for an assign action)


# ------------------------------------------------------------------------------------ the world

@dataclass
class Transition:
    """The batched result of one step: next states, step costs c = b * g, and the conditions."""

    states: np.ndarray  # (B, D)
    cost: np.ndarray  # (B,) c = b * g
    effort: np.ndarray  # (B,) b
    discount: np.ndarray  # (B,) g
    failed: np.ndarray  # (B,) number of pre/post conditions that failed (0 = the step is allowed)

    @property
    def ok(self) -> np.ndarray:
        return self.failed == 0


@dataclass
class Rollout:
    """The batched result of applying padded sequences (-1 = no step)."""

    final: np.ndarray  # (B, D)
    step_costs: np.ndarray  # (B, T), 0 where no step
    failed: np.ndarray  # (B,) failed conditions over all steps
    states: np.ndarray | None = None  # (B, T + 1, D) when asked for

    @property
    def cost(self) -> np.ndarray:
        return self.step_costs.sum(axis=1)

    @property
    def ok(self) -> np.ndarray:
        return self.failed == 0


class SequentialWorld:
    """Schema + declarative actions + discount graph + a classifier, vectorized over states.

    ``model`` is anything with ``predict_proba(X) -> P(accept)`` over encoded rows; a white-box
    model of :mod:`envs.models` (``score(X) > 0`` accepts) is what saves to JSON. ``meta`` is
    free-form provenance (data set, black-box accuracy) kept in the JSON but not fingerprinted.
    """

    def __init__(self, name: str, schema: FeatureSchema, actions: Sequence[SequentialAction], model: Any,
                 discounts: Sequence[DiscountEdge] = (), meta: dict[str, Any] | None = None):
        self.name = name
        self.schema = schema
        self.actions = tuple(actions)
        self.model = model
        self.discounts = tuple(discounts)
        self.meta = dict(meta or {})
        if not self.actions:
            raise ValueError("actions: a world needs at least one action")
        names = [a.name for a in self.actions]
        if len(set(names)) != len(names):
            raise ValueError(f"actions: duplicate names {sorted({n for n in names if names.count(n) > 1})}")
        self.action_index = {n: i for i, n in enumerate(names)}
        # raw features: a one-hot group is one feature (Gower distance, tweak frequencies, the graph)
        col_raw = [f.group or f.name for f in schema.features]
        self.raw_names: list[str] = list(dict.fromkeys(col_raw))
        raw_idx = {n: i for i, n in enumerate(self.raw_names)}
        self.column_raw = np.array([raw_idx[r] for r in col_raw], dtype=np.int64)
        self._compiled = [self._compile(a) for a in self.actions]
        # I_a as a matrix over raw features: which features each action touches (Eq. 2, o_{2+h})
        self.affected = np.zeros((self.n_actions, len(self.raw_names)), dtype=bool)
        for i, c in enumerate(self._compiled):
            self.affected[i, self.column_raw[[c["j"], *c["group"], *(k for k, _, _ in c["cons"])]]] = True
        edges = []
        for e in self.discounts:
            for end in (e.source, e.target):
                if end not in raw_idx:
                    raise ValueError(f"discounts: unknown raw feature {end!r}")
            edges.append(Edge(raw_idx[e.source], raw_idx[e.target], e.tau.function(self._col(e.tau.column, "tau"))))
        self.graph = ConsequenceGraph(len(self.raw_names), edges) if edges else None
        self.grid_sizes = np.array([len(a.grid) if a.valued else 1 for a in self.actions], dtype=np.int64)
        self.grid_values = np.full((self.n_actions, int(self.grid_sizes.max())), np.nan)
        for i, a in enumerate(self.actions):
            if a.valued:
                self.grid_values[i, : len(a.grid)] = a.grid
        lo, hi = schema.bounds()
        self._span = np.where(hi > lo, hi - lo, 1.0)
        self._groups = {g: np.flatnonzero(np.array([f.group == g for f in schema.features]))
                        for g in {f.group for f in schema.features if f.group}}
        # Gower as one product: a changed one-hot group differs in two columns (weight 1/2 each)
        self._gower_weights = np.array([0.5 if f.group else 1.0 for f in schema.features]) / len(self.raw_names)

    def __reduce__(self) -> tuple:
        """Pickle (to worker processes) by the declarative parts; the compiled closures are rebuilt."""
        return (SequentialWorld, (self.name, self.schema, self.actions, self.model, self.discounts, self.meta))

    # ------------------------------------------------------------------ compilation
    def _col(self, name: str, where: str) -> int:
        if name not in self.schema.index:
            raise ValueError(f"{where}: unknown column {name!r}")
        return self.schema.index[name]

    def _compile(self, a: SequentialAction) -> dict[str, Any]:
        where = f"action {a.name!r}"
        j = self._col(a.column, where)
        feat = self.schema.features[j]
        group = [int(k) for k in np.flatnonzero([f.group == feat.group for f in self.schema.features])
                 if k != j] if (a.mode == "assign" and feat.group) else []
        cons = [(self._col(c.column, where), c.kind, c.factor) for c in a.consequences]
        return {
            "j": j, "group": group, "cons": cons, "touched": [j, *(k for k, _, _ in cons)],
            "pre": [(self._col(c.column, where), _OPS[c.op], c.value) for c in a.pre],
            "post": [(self._col(c.column, where), _OPS[c.op], c.value) for c in a.post],
        }

    # ------------------------------------------------------------------ shapes
    @property
    def n_actions(self) -> int:
        return len(self.actions)

    @property
    def n_features(self) -> int:
        return len(self.schema)

    @property
    def action_names(self) -> list[str]:
        return [a.name for a in self.actions]

    @property
    def order_matters(self) -> bool:
        """Whether discounts make the order of the same steps change the cost."""
        return self.graph is not None

    def action_id(self, action: str | int) -> int:
        """The id of an action given by name or id, or a ValueError listing the known ones."""
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            if 0 <= int(action) < self.n_actions:
                return int(action)
        elif isinstance(action, str) and action in self.action_index:
            return self.action_index[action]
        raise ValueError(f"action: unknown action {action!r} (known: {self.action_names})")

    def grid(self, action: str | int) -> np.ndarray:
        """The documented value grid of an action (raw units); empty for an assign action."""
        return np.asarray(self.actions[self.action_id(action)].grid, dtype=float)

    def without_discounts(self) -> SequentialWorld:
        """The same world with c = b (CSCF's "scf" variant)."""
        return SequentialWorld(self.name + "/scf", self.schema, self.actions, self.model, (), self.meta)

    # ------------------------------------------------------------------ checks
    def validate(self, X: Any, *, name: str = "x") -> np.ndarray:
        """Encoded agents as a float (B, D) array, or a ValueError naming the first problem.

        Checks the schema (width, NaN, range, integer codes) and that every one-hot group has
        exactly one 1.
        """
        arr = self.schema.validate(X, name=name)
        for g, cols in self._groups.items():
            bad = arr[:, cols].sum(axis=1) != 1
            if bad.any():
                r = int(np.argmax(bad))
                raise ValueError(f"{name}: row {r} one-hot group {g!r} is {arr[r, cols].tolist()} (needs exactly one 1)")
        return arr

    def score(self, X: np.ndarray) -> np.ndarray:
        """Decision score per row: the world accepts iff it is > 0 (one batched model call)."""
        X = np.atleast_2d(X)
        if hasattr(self.model, "score"):
            return np.asarray(self.model.score(X), dtype=float)
        return np.asarray(self.model.predict_proba(X), dtype=float) - 0.5

    def accepts(self, X: np.ndarray) -> np.ndarray:
        return self.score(X) > 0

    # ------------------------------------------------------------------ dynamics (batched)
    def action_discounts(self, X: np.ndarray) -> np.ndarray:
        """g_i(x) of every action at every state (Eq. 2), shape (B, A); all ones without a graph."""
        X = np.atleast_2d(X)
        if self.graph is None:
            return np.ones((len(X), self.n_actions))
        return self.graph.action_discounts(X, self.affected)

    def transition(self, X: np.ndarray, action: int, values: np.ndarray | float | None = None,
                   discount: np.ndarray | None = None) -> Transition:
        """Apply one action (by id) to every row of ``X`` with per-row ``values`` (no checks; fast path).

        ``discount``: the rows' g for this action when the caller already has it (see
        :meth:`action_discounts`); computed here otherwise.
        """
        a, c = self.actions[action], self._compiled[action]
        X = np.atleast_2d(X)
        Y = X.copy()
        j = c["j"]
        if a.mode == "add":
            Y[:, j] = X[:, j] + values
        elif a.mode == "set":
            Y[:, j] = values
        else:
            Y[:, c["group"]] = 0.0
            Y[:, j] = a.assign_value
        for k, kind, factor in c["cons"]:
            if kind == "shift":
                Y[:, k] = X[:, k] + factor * (Y[:, j] - X[:, j])
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    Y[:, k] = X[:, k] * (Y[:, j] / X[:, j]) ** factor
        failed = np.zeros(len(X), dtype=np.int64)
        for k, fn, v in c["pre"]:
            failed += ~fn(X[:, k], v)
        for k, fn, v in c["post"]:
            failed += ~fn(Y[:, k], v)
        failed += ~np.isfinite(Y[:, c["touched"]]).all(axis=1)  # only these columns changed
        if a.effort.kind == "const":
            effort = np.full(len(X), a.effort.scale)
        elif a.effort.kind == "abs":
            effort = np.abs(Y[:, j] - X[:, j]) / a.effort.scale
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                effort = np.nan_to_num(((Y[:, j] - X[:, j]) / X[:, j]) ** 2, nan=np.inf)
        if discount is not None:
            g = discount
        elif self.graph is None:
            g = np.ones(len(X))
        else:
            g = self.graph.action_discounts(X, self.affected[action: action + 1])[:, 0]
        return Transition(Y, effort * g, effort, g, failed)

    def apply(self, X: np.ndarray, actions: int | str | np.ndarray, values: Any = None) -> Transition:
        """One step for a batch: ``actions`` one id/name or (B,) ids, ``values`` scalar or (B,) raw values.

        Rows may take different actions (grouped internally); assign actions ignore their value
        (pass NaN or None). Values are not checked against the domain (use :meth:`evaluate`).
        """
        X = np.atleast_2d(np.asarray(X, dtype=float))
        B = len(X)
        ids = (np.full(B, self.action_id(actions)) if np.ndim(actions) == 0
               else np.asarray(actions, dtype=np.int64))
        if ids.shape != (B,):
            raise ValueError(f"actions: expected one id or {B} ids, got shape {ids.shape}")
        if ((ids < 0) | (ids >= self.n_actions)).any():
            raise ValueError(f"actions: ids must be in [0, {self.n_actions})")
        vals = np.broadcast_to(np.asarray(np.nan if values is None else values, dtype=float), (B,))
        out = Transition(X.copy(), np.zeros(B), np.zeros(B), np.ones(B), np.zeros(B, dtype=np.int64))
        for a in np.unique(ids):
            rows = ids == a
            t = self.transition(X[rows], int(a), vals[rows])
            out.states[rows], out.cost[rows], out.effort[rows] = t.states, t.cost, t.effort
            out.discount[rows], out.failed[rows] = t.discount, t.failed
        return out

    def apply_index(self, X: np.ndarray, actions: int | str | np.ndarray, value_index: Any = 0) -> Transition:
        """:meth:`apply` with values given as positions in each action's grid (0 for assign actions)."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        ids = np.broadcast_to(np.asarray(self.action_id(actions) if np.ndim(actions) == 0 else actions), (len(X),))
        k = np.broadcast_to(np.asarray(value_index, dtype=np.int64), (len(X),))
        if ((k < 0) | (k >= self.grid_sizes[ids])).any():
            raise ValueError("value_index: outside the action's value grid")
        return self.apply(X, ids, self.grid_values[ids, k])

    def step_mask(self, X: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """(B, A, G) bool: which (action, grid value) steps are allowed from each state.

        A step is allowed when its pre and post conditions hold, the grid slot exists, it changes
        the state and its action is not in ``used`` (B, A) (each action at most once, as in CSCF).
        """
        X = np.atleast_2d(np.asarray(X, dtype=float))
        B, G = len(X), self.grid_values.shape[1]
        mask = np.zeros((B, self.n_actions, G), dtype=bool)
        for a in range(self.n_actions):
            n = int(self.grid_sizes[a])
            t = self.transition(np.repeat(X, n, axis=0), a, np.tile(self.grid_values[a, :n], B))
            changed = (t.states != np.repeat(X, n, axis=0)).any(axis=1)
            mask[:, a, :n] = (t.ok & changed).reshape(B, n)
        if used is not None:
            mask &= ~np.asarray(used, dtype=bool)[:, :, None]
        return mask

    def rollout(self, X0: np.ndarray, actions: np.ndarray, values: np.ndarray | None = None, *,
                keep_states: bool = False) -> Rollout:
        """Apply padded sequences in order: ``actions`` (B, T) ids with -1 for no step, ``values`` (B, T)."""
        X = np.array(np.atleast_2d(X0), dtype=float)
        S = np.atleast_2d(np.asarray(actions, dtype=np.int64))
        V = np.full(S.shape, np.nan) if values is None else np.atleast_2d(np.asarray(values, dtype=float))
        if S.shape[0] != len(X) or V.shape != S.shape:
            raise ValueError(f"actions/values: expected ({len(X)}, T) arrays, got {S.shape} and {V.shape}")
        if (S >= self.n_actions).any():
            raise ValueError(f"actions: ids must be < {self.n_actions}")
        costs = np.zeros(S.shape)
        failed = np.zeros(len(X), dtype=np.int64)
        states = [X.copy()] if keep_states else None
        for t in range(S.shape[1]):
            stepping = np.flatnonzero(S[:, t] >= 0)
            G = None if self.graph is None else np.ones((len(X), self.n_actions))
            if G is not None and len(stepping):  # every action's discount at once for the rows that step
                G[stepping] = self.graph.action_discounts(X[stepping], self.affected)
            for a in np.unique(S[stepping, t]):
                rows = np.flatnonzero(S[:, t] == a)
                tr = self.transition(X[rows], int(a), V[rows, t], None if G is None else G[rows, a])
                X[rows] = tr.states
                costs[rows, t] = tr.cost
                failed[rows] += tr.failed
            if keep_states:
                states.append(X.copy())
        return Rollout(X, costs, failed, np.stack(states, axis=1) if keep_states else None)

    # ------------------------------------------------------------------ objectives
    def tweak_counts(self, actions: np.ndarray) -> np.ndarray:
        """(B, R): how often each raw feature is changed by the actions of padded sequences (o_{2+h})."""
        S = np.atleast_2d(np.asarray(actions, dtype=np.int64))
        counts = np.zeros((S.shape[0], self.n_actions), dtype=np.int64)
        rows = np.repeat(np.arange(S.shape[0]), S.shape[1])
        flat = S.reshape(-1)
        np.add.at(counts, (rows[flat >= 0], flat[flat >= 0]), 1)
        return counts @ self.affected.astype(np.int64)

    def gower(self, X0: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Gower's distance between agents and counterfactuals (o_2): numeric |delta| / range, a
        one-hot group 0/1, averaged over raw features."""
        diff = np.abs(np.atleast_2d(X) - np.atleast_2d(X0)) / self._span
        return diff @ self._gower_weights

    # ------------------------------------------------------------------ one agent, one sequence
    def parse_steps(self, steps: Sequence[Step]) -> tuple[list[int], list[float]]:
        """Action ids and float values (NaN for assign) of user steps, checked (clear errors)."""
        ids, values = [], []
        for i, step in enumerate(steps):
            if not isinstance(step, (tuple, list)) or len(step) != 2:
                raise ValueError(f"steps[{i}]: expected (action, value), got {step!r}")
            a = self.action_id(step[0])
            ids.append(a)
            values.append(self.actions[a].check_value(step[1]))
        return ids, values

    def evaluate(self, x: Any, steps: Sequence[Step], method: str = "given", runtime: float = 0.0,
                 **extra: Any) -> Recourse:
        """Apply a sequence to one agent, price it and check it: a :class:`Recourse` whose ``extra``
        holds the per-step costs, the states and a readable description."""
        t0 = time.perf_counter()
        X = self.validate(x)
        if len(X) != 1:
            raise ValueError(f"x: expected one agent, got {len(X)} rows")
        x0 = X[0]
        ids, values = self.parse_steps(steps)
        S = np.array([ids or [-1]], dtype=np.int64)
        V = np.array([values or [np.nan]], dtype=float)
        r = self.rollout(x0[None], S, V, keep_states=True)
        accepted = bool(self.accepts(r.final)[0])
        named = tuple((self.actions[a].name, None if not self.actions[a].valued else _plain(v))
                      for a, v in zip(ids, values, strict=True))
        return Recourse(named, tuple(ids), r.final[0], float(r.cost[0]), bool(r.ok[0]) and accepted, method,
                        runtime=runtime or time.perf_counter() - t0,
                        extra={"step_costs": r.step_costs[0, : len(ids)].tolist(),
                               "states": r.states[0, : len(ids) + 1].tolist(),
                               "conditions_held": bool(r.ok[0]), "accepted": accepted,
                               "gower": float(self.gower(x0, r.final)[0]),
                               "text": self.describe(r.states[0], ids, values), **extra})

    def price(self, x: Any, steps: Sequence[Step]) -> float:
        """The consequence-aware cost of a sequence for one agent (sum of c = b * g, in order)."""
        return self.evaluate(x, steps).cost

    def is_valid(self, x: Any, steps: Sequence[Step]) -> bool:
        """Every pre/post condition holds and the classifier accepts the final state."""
        return self.evaluate(x, steps).valid

    def describe(self, states: np.ndarray, ids: Sequence[int], values: Sequence[float]) -> str:
        """Readable steps: "AddEducation +2 (education-num HS-grad→Assoc-voc, age 31→35), then ..."."""
        parts = []
        for t, (a, v) in enumerate(zip(ids, values, strict=True)):
            act, before, after = self.actions[a], states[t], states[t + 1]
            changed = [self._show_change(j, before, after) for j in self._compiled[a]["touched"]
                       if before[j] != after[j] or j == self._compiled[a]["j"]]
            changed = [c for c in changed if c]
            if act.mode == "set":
                head, rest = f"{act.name} {changed[0].split(' ', 1)[1]}", changed[1:]
            else:
                head, rest = act.name + (f" {v:+g}" if act.mode == "add" else ""), changed
            parts.append(head + (f" ({', '.join(rest)})" if rest else ""))
        return ", then ".join(parts) if parts else "(no action)"

    def _show_change(self, j: int, before: np.ndarray, after: np.ndarray) -> str:
        f = self.schema.features[j]
        if f.group:  # one-hot: show the category before and after
            cols = self._groups[f.group]
            name = lambda x: self.schema.features[cols[int(np.argmax(x[cols]))]].name.split("=", 1)[1]  # noqa: E731
            return f"{f.group} {name(before)}→{name(after)}"
        return f"{f.name} {_show(f, before[j])}→{_show(f, after[j])}"

    # ------------------------------------------------------------------ persistence
    def definition(self) -> dict[str, Any]:
        """The fingerprinted content: schema, actions, discount graph and model."""
        if not hasattr(self.model, "to_dict") or not hasattr(self.model, "kind"):
            raise ValueError("model: only a white-box model of envs.models saves to JSON")
        return {
            "kind": "sequential",
            "name": self.name,
            "schema": [_feature_dict(f) for f in self.schema.features],
            "actions": [asdict(a) for a in self.actions],
            "discounts": [asdict(e) for e in self.discounts],
            "model": {"kind": self.model.kind, **self.model.to_dict()},
        }

    def fingerprint(self) -> str:
        """A content hash of the world definition (detects a changed or edited world at load time)."""
        return hashlib.sha256(json.dumps(self.definition(), sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {**self.definition(), "meta": self.meta, "fingerprint": self.fingerprint()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SequentialWorld:
        if d.get("kind") != "sequential":
            raise ValueError(f"world: expected kind 'sequential', got {d.get('kind')!r}")
        schema = FeatureSchema(tuple(Feature(**{**f, "lower": _num(f["lower"]), "upper": _num(f["upper"]),
                                                "categories": tuple(f["categories"])}) for f in d["schema"]))
        actions = [SequentialAction(**{
            **a, "effort": Effort(**a["effort"]), "grid": tuple(a["grid"]),
            "domain": None if a["domain"] is None else tuple(a["domain"]),
            "consequences": tuple(Consequence(**c) for c in a["consequences"]),
            "pre": tuple(Condition(**c) for c in a["pre"]), "post": tuple(Condition(**c) for c in a["post"])})
            for a in d["actions"]]
        edges = [DiscountEdge(e["source"], e["target"], Tau(**e["tau"])) for e in d["discounts"]]
        world = cls(d["name"], schema, actions, model_from_dict(d["model"]), edges, d.get("meta"))
        if "fingerprint" in d and world.fingerprint() != d["fingerprint"]:
            raise ValueError(f"world: fingerprint {world.fingerprint()} does not match the stored "
                             f"{d['fingerprint']} (the file was edited or corrupted)")
        return world

    def save(self, path: str | Path) -> None:
        """JSON (no pickle): the definition, its fingerprint and the provenance ``meta``."""
        Path(path).write_text(json.dumps(self.to_dict(), default=_plain))

    @classmethod
    def load(cls, path: str | Path, fingerprint: str | None = None) -> SequentialWorld:
        """Load a saved world; ``fingerprint`` (optional) must match, e.g. the one a dataset recorded."""
        world = cls.from_dict(json.loads(Path(path).read_text()))
        if fingerprint is not None and world.fingerprint() != fingerprint:
            raise ValueError(f"world: {path} has fingerprint {world.fingerprint()}, expected {fingerprint}")
        return world

    def with_model(self, model: Any, meta: dict[str, Any] | None = None) -> SequentialWorld:
        """The same actions and graph over another classifier."""
        return SequentialWorld(self.name, self.schema, self.actions, model, self.discounts,
                               {**self.meta, **(meta or {})})

    def replace_actions(self, **changes: dict[str, Any]) -> SequentialWorld:
        """A copy with some actions' fields replaced, e.g. ``replace_actions(WaitYears={"grid": (1, 2)})``."""
        unknown = set(changes) - set(self.action_index)
        if unknown:
            raise ValueError(f"actions: unknown {sorted(unknown)} (known: {self.action_names})")
        acts = [replace(a, **changes[a.name]) if a.name in changes else a for a in self.actions]
        return SequentialWorld(self.name, self.schema, acts, self.model, self.discounts, self.meta)


# ---------------------------------------------------------------------------------------- helpers

def _plain(v: Any) -> Any:
    """A number as a plain int/float (whole floats as int), for JSON and readable steps."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (np.ndarray, tuple)):
        return list(v)
    return v


def _num(v: Any) -> float:
    return float("inf") if v == "inf" else float("-inf") if v == "-inf" else float(v)


def _feature_dict(f: Feature) -> dict[str, Any]:
    d = asdict(f)
    for k in ("lower", "upper"):
        d[k] = float(d[k]) if np.isfinite(d[k]) else "inf" if d[k] > 0 else "-inf"
    d["categories"] = list(f.categories)
    return d


def _show(f: Feature, v: float) -> str:
    """A value in raw units: an ordinal code as its label, whole numbers without decimals."""
    if f.categories and float(v).is_integer() and 0 <= v < len(f.categories):
        return f.categories[int(v)]
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.4g}"
