"""Contradictory rule sets, found once at compile time (before any agent is explained).

Per raw feature the rules that hold whatever the agent (no IF: mutability, step bounds, PLAF
comparisons of x_cf.F with x.F plus a constant) give an interval for its change Δ; forbidden
transitions remove (from, to) pairs of its levels; a link F -> G blocks F's move where G cannot move
as the link asks (repeated to a fixed point, so chains of links propagate). Reported, one line
naming the rules:

- an empty interval (``x_cf.age >= x.age + 4`` with ``age: {max_increase: 2}``), or one wider
  than the feature's range;
- a move every agent must make that a link forbids;
- a feature that no rule alone pins but that, together, the rules leave no move at all: an
  increase-only feature with a forbidden increase to every level, a step bound of 0 with a link that
  forces a move (``education-num`` increase-only, a link to ``age``, ``age: {max_increase: 0}``).
  A feature one rule pins on its own (immutable, ``x_cf.F = x.F``) is what the user asked for.

Rules with an IF on x_cf that the links do not cover are left to the solvers (an agent with no
counterfactual under them gets "no recourse", naming the rule where the grounding shows it).
"""

from __future__ import annotations

import math
from typing import Any

from envs.rules.language import RuleError

MAX_LEVELS = 1000  # discrete features with more levels are not enumerated for forbidden transitions


def check_conflicts(compiled: Any) -> None:
    """Raise ``RuleError`` where ``compiled`` (an ``envs.rules.CompiledRules``) contradicts itself."""
    raws, names, schema = compiled.raws, compiled.names, compiled.schema
    J = len(raws)
    col_raw = {c: j for j, r in enumerate(raws) for c in r.columns}
    lo = [(-math.inf, False, None)] * J  # (bound on the change, strict, rule) per raw feature
    hi = [(math.inf, False, None)] * J
    pinned: list[int | None] = [None] * J  # a group one rule keeps unchanged
    for cl in compiled.clauses:
        a = cl.consequent
        if cl.antecedent or len(a.cf_cols) == 0 or {col_raw[c] for c in (*a.cf_cols, *a.x_cols)} != \
                {col_raw[a.cf_cols[0]]}:
            continue
        j = col_raw[a.cf_cols[0]]
        if tuple(a.x_cols) != tuple(a.cf_cols) or any(u != -v for u, v in zip(a.cf_coefs, a.x_coefs, strict=True)):
            continue  # not a comparison of the change x_cf.F - x.F with a constant
        if raws[j].kind == "group":
            if a.op in ("=", "==") and a.const == 0:
                pinned[j] = cl.rule
            continue
        alpha = a.cf_coefs[0]
        v, op = -a.const / alpha, a.op if alpha > 0 else {"<=": ">=", "<": ">", ">=": "<=", ">": "<"}.get(a.op, a.op)
        if op in ("<=", "<", "=", "==") and (v, op != "<") < (hi[j][0], not hi[j][1]):
            hi[j] = (v, op == "<", cl.rule)
        if op in (">=", ">", "=", "==") and (-v, op != ">") < (-lo[j][0], not lo[j][1]):
            lo[j] = (v, op == ">", cl.rule)
    up = [_blocked(hi[j], +1) for j in range(J)]  # rules that forbid any increase (empty: allowed)
    down = [_blocked(lo[j], -1) for j in range(J)]
    for j, r in enumerate(raws):
        (lv, ls, lr), (hv, hs, hr) = lo[j], hi[j]
        if lv > hv or (lv == hv and (ls or hs)):
            raise RuleError(f"rules {names[lr]!r} and {names[hr]!r} contradict: {r.name!r} must change by "
                            f"{'>' if ls else '>='} {lv:g} and by {'<' if hs else '<='} {hv:g}")
        f = schema.features[r.columns[0]]
        width = f.upper - f.lower
        if r.kind != "group" and (lv > width or hv < -width):
            rule = lr if lv > width else hr
            raise RuleError(f"rule {names[rule]!r}: {r.name!r} must change by more than its range {width:g}")
        if pinned[j] is not None:
            up[j] = down[j] = {pinned[j]}
    alone = [up[j] == down[j] and len(up[j]) == 1 for j in range(J)]  # one rule pins the feature on its own
    for j in range(J):
        _forbidden(compiled, j, lo[j], hi[j], up, down)
    _links(compiled, up, down, lo, hi)
    for j, r in enumerate(raws):
        if up[j] and down[j] and not alone[j] and not _immutable(schema, r):
            rules = sorted(up[j] | down[j])
            raise RuleError(f"rules {[names[i] for i in rules]} together leave {r.name!r} no move for any agent "
                            "(no one of them pins it alone; declare it immutable if that is meant)")


def _blocked(bound: tuple[float, bool, int | None], sign: int) -> set[int]:
    """The rule of an interval end that forbids every move in direction ``sign`` (empty set if none)."""
    v, strict, rule = bound
    if rule is None:
        return set()
    return {rule} if (v <= 0 if sign > 0 else v >= 0) else set()


def _immutable(schema: Any, r: Any) -> bool:
    return all(schema.features[c].mutability == "immutable" for c in r.columns)


def _forbidden(compiled: Any, j: int, lo: tuple, hi: tuple, up: list[set[int]], down: list[set[int]]) -> None:
    """Block the directions in which every level of feature j has every move forbidden."""
    pairs = compiled.forbidden.get(j)
    if not pairs:
        return
    r = compiled.raws[j]
    f = compiled.schema.features[r.columns[0]]
    if r.kind == "group":
        levels = range(len(r.columns))
    elif f.upper - f.lower <= MAX_LEVELS:
        levels = range(int(f.lower), int(f.upper) + 1)
    else:
        return
    banned = {(a, b) for a, b, _ in pairs}
    forbid_rules = {k for _, _, k in pairs}
    ordered = r.kind not in ("group", "nominal")

    def allowed(a: int, b: int) -> bool:
        if (a, b) in banned or a == b:
            return False
        if not ordered:
            return True
        d = b - a
        return (d > lo[0] or (d == lo[0] and not lo[1])) and (d < hi[0] or (d == hi[0] and not hi[1]))

    moves = [(a, b) for a in levels for b in levels if allowed(a, b)]
    interval = {k for k in (lo[2], hi[2]) if k is not None}
    if ordered:
        if not any(b > a for a, b in moves) and not up[j]:
            up[j] = forbid_rules | interval
        if not any(b < a for a, b in moves) and not down[j]:
            down[j] = forbid_rules | interval
    elif not moves and not (up[j] and up[j] == down[j]):
        up[j] = down[j] = forbid_rules | interval


def _links(compiled: Any, up: list[set[int]], down: list[set[int]], lo: list, hi: list) -> None:
    """A link F -> G blocks F's move where G is blocked in the direction the link moves it (to a fixed point);
    a move that every agent must make and a link blocks is a contradiction."""
    names, raws = compiled.names, compiled.raws
    changed = True
    while changed:
        changed = False
        for src, dst, k, on, rule in compiled.links:
            need = up[dst] if k > 0 else down[dst]
            side = up if on == "up" else down
            if need and not side[src]:
                side[src] = need | {rule}
                changed = True
    for src, _dst, _k, on, rule in compiled.links:
        forced = lo[src] if on == "up" else hi[src]
        must = (forced[0] > 0 or (forced[0] == 0 and forced[1])) if on == "up" else \
            (forced[0] < 0 or (forced[0] == 0 and forced[1]))
        blocked = (up if on == "up" else down)[src]
        if must and rule in blocked:
            others = sorted(blocked - {rule})
            raise RuleError(f"rule {names[forced[2]]!r} makes every agent move {raws[src].name!r} "
                            f"{'up' if on == 'up' else 'down'}, which rule {names[rule]!r} forbids with "
                            f"{[names[i] for i in others]}")
