"""The declarative vocabulary of the sequential worlds: conditions, consequences, efforts, actions
and discount functions as plain data (frozen dataclasses), so a world saves to JSON and back.

:mod:`envs.sequential` compiles them into vectorized transitions; :mod:`envs.sequential_cscf`
uses them to write down CSCF's Adult and German Credit action sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Op = Literal["<", "<=", ">", ">=", "==", "!="]
_OPS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
        "!=": np.not_equal}


@dataclass(frozen=True)
class Condition:
    """``x[column] op value`` on one encoded column (codes for ordinal features, 0/1 for one-hot)."""

    column: str
    op: Op
    value: float

    def __post_init__(self):
        if self.op not in _OPS:
            raise ValueError(f"condition on {self.column!r}: unknown op {self.op!r} (known: {list(_OPS)})")
        object.__setattr__(self, "value", float(self.value))  # 120 and 120.0 fingerprint alike

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Consequence:
    """A side effect on ``column`` of changing the action's direct column from d to d'.

    ``shift``: column += factor * (d' - d) (AddEducation: age += 2 per level);
    ``scale``: column *= (d' / d) ** factor (AdjustLoanPeriod keeps credit per month).
    """

    column: str
    kind: Literal["shift", "scale"]
    factor: float = 1.0

    def __post_init__(self):
        if self.kind not in ("shift", "scale"):
            raise ValueError(f"consequence on {self.column!r}: unknown kind {self.kind!r}")
        object.__setattr__(self, "factor", float(self.factor))


@dataclass(frozen=True)
class Effort:
    """The direct effort b(x_prev, x_next) of an action, on its direct column.

    ``abs``: |d' - d| / scale; ``const``: scale; ``rel_sq``: ((d' - d) / d) ** 2 (synth's German
    loan actions).
    """

    kind: Literal["abs", "const", "rel_sq"]
    scale: float = 1.0

    def __post_init__(self):
        if self.kind not in ("abs", "const", "rel_sq"):
            raise ValueError(f"effort: unknown kind {self.kind!r}")
        if not self.scale > 0:
            raise ValueError(f"effort: scale must be > 0, got {self.scale}")
        object.__setattr__(self, "scale", float(self.scale))


@dataclass(frozen=True)
class SequentialAction:
    """One action: what it sets, its value grid and domain, consequences, conditions and effort.

    ``mode="add"`` adds the value to ``column``, ``"set"`` sets it, ``"assign"`` writes
    ``assign_value`` (a one-hot column: its group is cleared first) and takes no value (None).
    ``grid`` is the documented value grid (raw units) of a valued action; ``domain`` the closed
    range any value must lie in (``integer``: and be whole).
    """

    name: str
    column: str
    mode: Literal["add", "set", "assign"]
    effort: Effort
    grid: tuple[float, ...] = ()
    domain: tuple[float, float] | None = None
    integer: bool = False
    assign_value: float = 1.0
    consequences: tuple[Consequence, ...] = ()
    pre: tuple[Condition, ...] = ()
    post: tuple[Condition, ...] = ()
    description: str = ""

    def __post_init__(self):
        if self.mode not in ("add", "set", "assign"):
            raise ValueError(f"action {self.name!r}: unknown mode {self.mode!r}")
        object.__setattr__(self, "assign_value", float(self.assign_value))
        if self.mode == "assign":
            if self.grid:
                raise ValueError(f"action {self.name!r}: an assign action takes no value grid")
            return
        if not self.grid:
            raise ValueError(f"action {self.name!r}: a valued action needs a value grid")
        grid = tuple(float(v) for v in self.grid)
        if list(grid) != sorted(set(grid)):
            raise ValueError(f"action {self.name!r}: the grid must be strictly increasing")
        domain = self.domain or (grid[0], grid[-1])
        if not (domain[0] <= grid[0] and grid[-1] <= domain[1]):
            raise ValueError(f"action {self.name!r}: grid [{grid[0]:g}, {grid[-1]:g}] leaves the domain {domain}")
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "domain", (float(domain[0]), float(domain[1])))

    @property
    def valued(self) -> bool:
        return self.mode != "assign"

    def check_value(self, value: Any) -> float:
        """The value as a float, or a ValueError naming the action and its domain."""
        if not self.valued:
            if value is not None:
                raise ValueError(f"action {self.name!r}: takes no value (it assigns {self.column}), got {value!r}")
            return float("nan")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"action {self.name!r}: value {value!r} is not a number") from None
        lo, hi = self.domain
        if not np.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"action {self.name!r}: value {value!r} is outside its domain [{lo:g}, {hi:g}]")
        if self.integer and v != round(v):
            raise ValueError(f"action {self.name!r}: value {value!r} must be a whole number")
        return v


@dataclass(frozen=True)
class Tau:
    """A discount function tau_kh(x) in [0, 1] read from one encoded column (CSCF Fig. 2, Eq. 1).

    ``linear``: clip(a + b * x, 0, 1) with ``params = {"a", "b"}``;
    ``rules``: the value of the first rule ``[op, threshold, value]`` that holds, else ``default``;
    ``exp_ramp``: 1 - (e^x - e^lo) / (e^hi - e^lo) clipped to [0, 1] (CSCF's hours -> capital gain).
    """

    kind: Literal["linear", "rules", "exp_ramp"]
    column: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        need = {"linear": {"a", "b"}, "rules": {"rules", "default"}, "exp_ramp": {"lo", "hi"}}.get(self.kind)
        if need is None:
            raise ValueError(f"tau on {self.column!r}: unknown kind {self.kind!r}")
        if need - set(self.params):
            raise ValueError(f"tau on {self.column!r}: {self.kind} needs params {sorted(need)}")

    def function(self, j: int):
        """The vectorized tau over encoded states, reading column index ``j``."""
        p = self.params
        if self.kind == "linear":
            return lambda X: np.clip(p["a"] + p["b"] * X[:, j], 0.0, 1.0)
        if self.kind == "exp_ramp":
            lo, hi = float(p["lo"]), float(p["hi"])
            # (e^x - e^lo) / (e^hi - e^lo), computed relative to e^hi so it never overflows
            return lambda X: 1.0 - np.clip((np.exp(np.minimum(X[:, j], hi) - hi) - np.exp(lo - hi))
                                           / (1.0 - np.exp(lo - hi)), 0.0, 1.0)
        rules = [(_OPS[op], float(t), float(v)) for op, t, v in p["rules"]]

        def tau(X: np.ndarray) -> np.ndarray:
            out = np.full(len(X), float(p["default"]))
            done = np.zeros(len(X), dtype=bool)
            for fn, t, v in rules:
                hit = ~done & fn(X[:, j], t)
                out[hit] = v
                done |= hit
            return out
        return tau


@dataclass(frozen=True)
class DiscountEdge:
    """An edge k -> h of the feature relationship graph: the state of raw feature ``source``
    discounts actions that change raw feature ``target`` by ``tau``."""

    source: str
    target: str
    tau: Tau
