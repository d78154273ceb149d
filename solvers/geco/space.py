"""GeCo's search space: the active domain of every feature group in a database D (paper §3, §4.2).

``FeasibleSpace.build(program, D)`` is computed once per world and data set: for each feature
group the distinct value combinations found in D (``Π_G(D)``) with their frequencies, stored as
one table of *entries* (an entry is one value of one group). ``ground(x)`` specialises it to an
agent (``feasibleSpace(D, Γ, C_x)``): which entries satisfy the group's unary rules and differ from
the agent's own value (the sample space ``DG_i``), their sampling weights (frequency in D), and
each entry's share of the distance (MACE's normalized deltas of the raw features it changes, times
the world's cost weight of the direction it moves them: ``envs.rules``), so a candidate's distance is
a sum over the groups it changes. ``AgentSpace.keeps`` is the check every candidate row passes: the
grounded program, and the world's rules by the shared checker (``CompiledRules.holds``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.geco.plaf import CompiledPlaf, GroundedPlaf
from solvers.mace.distance import norm_weights

PAD = -1  # the padding entry: "this slot changes nothing" (the last row of every entry table)


@dataclass
class FeasibleSpace:
    """Distinct values of every feature group in D, as one entry table (agent- and model-free)."""

    program: CompiledPlaf
    start: np.ndarray  # (G+1,) the entries of group g are start[g]:start[g+1]
    group: np.ndarray  # (E+1,) group of each entry; the padding row has group G
    values: np.ndarray  # (E+1, W) the group's column values, left-aligned; padding row zeros
    cols: np.ndarray  # (E+1, W) their encoded columns; unused slots point at the dummy column d
    count: np.ndarray  # (E,) frequency of the value in D
    col_offset: np.ndarray  # (d,) position of a column within its group's columns

    @classmethod
    def build(cls, program: CompiledPlaf, D: np.ndarray) -> FeasibleSpace:
        schema = program.schema
        D = schema.validate(D, name="data")
        if len(D) == 0:
            raise ValueError("data: needs at least one row (GeCo samples feature values from it)")
        d, G = len(schema), len(program.groups)
        width = max(len(c) for c in program.group_cols)
        starts, groups, values, cols, counts = [0], [], [], [], []
        for g, gcols in enumerate(program.group_cols):
            uniq, cnt = np.unique(D[:, gcols], axis=0, return_counts=True)
            pad = np.zeros((len(uniq), width))
            pad[:, :len(gcols)] = uniq
            where = np.full((len(uniq), width), d, np.int64)
            where[:, :len(gcols)] = gcols
            values.append(pad)
            cols.append(where)
            counts.append(cnt.astype(float))
            groups.append(np.full(len(uniq), g, np.int64))
            starts.append(starts[-1] + len(uniq))
        col_offset = np.zeros(d, np.int64)
        for gcols in program.group_cols:
            col_offset[gcols] = np.arange(len(gcols))
        return cls(program, np.array(starts), np.concatenate([*groups, [G]]),
                   np.vstack([*values, np.zeros((1, width))]), np.vstack([*cols, np.full((1, width), d)]),
                   np.concatenate(counts), col_offset)

    @property
    def n_groups(self) -> int:
        return len(self.program.groups)

    def entries(self, g: int) -> np.ndarray:
        """Entry ids of group ``g``."""
        return np.arange(self.start[g], self.start[g + 1])

    def ground(self, x: np.ndarray, norm: tuple[float, float, float], checker: Any = None,
               cost: np.ndarray | None = None) -> AgentSpace:
        """The sample spaces and distance terms of one agent (``norm``: Eq. 2's alpha, beta, gamma;
        ``checker``: the world's ``CompiledRules`` or None; ``cost``: its (J, 2) weights or None)."""
        return AgentSpace.build(self, x, norm, checker, cost)


@dataclass
class AgentSpace:
    """The feasible space of one agent ``x``: allowed entries per group, weights, distance terms."""

    space: FeasibleSpace
    rules: GroundedPlaf
    x: np.ndarray  # (d,)
    x_ext: np.ndarray  # (d+1,) x with the dummy column (0)
    allowed: np.ndarray  # (E,) entry is in DG_g: satisfies g's unary rules and differs from x's value
    own: np.ndarray  # (G,) entry holding x's own value (-1 when x's value is not in D)
    own_ok: np.ndarray  # (G,) x's own value satisfies the group's unary rules
    s0: np.ndarray  # (E+1,) number of raw features an entry changes
    s1: np.ndarray  # (E+1,) sum of their normalized deltas
    sinf: np.ndarray  # (E+1,) largest normalized delta
    weights: tuple[float, float, float]  # MACE's (alpha, beta, gamma) for the raw-feature count J
    cache: dict = field(default_factory=dict)  # per-agent tables of the evaluators
    checker: Any = None  # the world's rules (envs.rules.CompiledRules), checked on every candidate row; None: none
    cost: np.ndarray | None = None  # (J, 2) cost weights of each raw feature's increase and decrease; None: all 1
    box: tuple[np.ndarray, np.ndarray] | None = None  # the schema's range narrowed by the rules; None: the schema's

    @classmethod
    def build(cls, space: FeasibleSpace, x: np.ndarray, norm: tuple[float, float, float], checker: Any = None,
              cost: np.ndarray | None = None) -> AgentSpace:
        prog = space.program
        rules = prog.ground(x)
        E, G = len(space.count), space.n_groups
        allowed = np.zeros(E, bool)
        own = np.full(G, -1, np.int64)
        own_ok = np.ones(G, bool)
        s0, s1, sinf = np.zeros(E + 1), np.zeros(E + 1), np.zeros(E + 1)
        for g, gcols in enumerate(prog.group_cols):
            ids = space.entries(g)
            vals = space.values[ids, :len(gcols)]
            same = np.all(vals == x[gcols], axis=1)
            if same.any():
                own[g] = ids[np.argmax(same)]
            own_ok[g] = bool(rules.group_mask(g, x[gcols][None])[0])
            allowed[ids] = rules.group_mask(g, vals) & ~same
            for j in prog.groups[g]:  # MACE's normalized delta of each raw feature of the group
                r = prog.raws[j]
                pos = space.col_offset[list(r.columns)]
                if r.kind == "numeric":
                    dj = np.abs(vals[:, pos[0]] - x[r.columns[0]]) / r.span if r.span > 0 else np.zeros(len(ids))
                else:
                    dj = np.any(vals[:, pos] != x[list(r.columns)], axis=1).astype(float)
                if cost is not None:  # the weight of the direction the entry moves the feature
                    down = vals[:, pos[0]] < x[r.columns[0]] if r.kind not in ("group", "nominal") else False
                    w = np.where(down, cost[j, 1], cost[j, 0])
                    s0[ids] += w * (dj > 0)
                    dj = w * dj
                else:
                    s0[ids] += dj > 0
                s1[ids] += dj
                sinf[ids] = np.maximum(sinf[ids], dj)
        if not rules.feasible:
            allowed[:] = False
        a, b, gam = norm
        if min(a, b, gam) < 0 or abs(a + b + gam - 1.0) > 1e-9:
            raise ValueError(f"alpha, beta, gamma: must be >= 0 and sum to 1 (Eq. 2), got {norm}")
        J = len(prog.raws)
        weights = norm_weights((a / J, b / J, gam), J)
        return cls(space, rules, np.asarray(x, float), np.append(x, 0.0), allowed, own, own_ok, s0, s1, sinf,
                   weights, checker=checker, cost=cost)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per column: the schema's range, narrowed by the world's one-column rules for this agent
        (``box``, set by ``GeCo.solve``)."""
        return self.box if self.box is not None else self.space.program.schema.bounds()

    def keeps(self, X: np.ndarray) -> np.ndarray:
        """(n,) bool: each full row keeps every rule of the program and, by the shared checker, the world's."""
        ok = self.rules.violations(X) == 0
        if self.checker is not None and ok.any():
            ok[ok] = self.checker.holds(self.x, np.atleast_2d(X)[ok])
        return ok

    def options(self, g: int) -> np.ndarray:
        """Entry ids of ``DG_g`` (the values a mutation of group g may take)."""
        ids = self.space.entries(g)
        return ids[self.allowed[ids]]

    def mutable_groups(self) -> np.ndarray:
        return np.array([g for g in range(self.space.n_groups) if self.allowed[self.space.entries(g)].any()],
                        np.int64)

    def mutable_cols(self) -> np.ndarray:
        """Encoded columns some candidate can change."""
        groups = self.mutable_groups()
        cols = [self.space.program.group_cols[g] for g in groups]
        return np.concatenate(cols) if cols else np.zeros(0, np.int64)

    def entry_cost(self, e: np.ndarray) -> np.ndarray:
        """The distance of changing only the group of each entry (Eq. 2 in MACE's normalization)."""
        a, b, g = self.weights
        return a * self.s0[e] + b * self.s1[e] + g * self.sinf[e]
