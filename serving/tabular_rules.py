"""The world's rules in a tabular service (issue 55): which rule refused a candidate, and why there is none.

:class:`serving.tabular.TabularService` verifies every answer against the world's rules
(``world.compiled_rules()``, ``envs.rules``) besides the schema and the model. This module keeps that
part apart:

- :func:`broken_rule`: per candidate row the name of the first rule it breaks (vectorized, the
  shared checker), or None;
- :func:`count_refusals`: a generator answer a rule refused is counted per rule name
  (``svc.rule_refusals``, shown by ``/model`` and ``/metrics``; ``counters["rule_refusals"]`` is
  their sum) and logged;
- :func:`bearing_rules`: per served answer the user's rules that bear on it (a rule whose IF holds for
  the change: a link whose source moved, an implication that fired, a forbidden transition from the
  record's level; or a rule without IF that reads a feature the change moves): the answer keeps
  them all, and the page says them as sentences (``rules`` of a row);
- :func:`no_recourse_rules`: when MACE proves that no counterfactual keeps the rules, the rules
  that stand in the way: the one MACE's grounding names, or those that the nearest counterfactual
  without the user's rules breaks (one more MACE run, on the world without them; none when there is
  no recourse even without them: then the rules are not the reason).

GeCo reads the world's rules itself (``solvers.geco``); whatever it returns is checked here anyway.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

log = logging.getLogger("recourse_gym.serve")

_BLOCKED = re.compile(r"no counterfactual keeps rule (['\"])(.+)\1 for this agent")


def broken_rule(rules: Any, X: np.ndarray, CF: np.ndarray) -> np.ndarray:
    """(n,) object array: the name of the first rule each finite row of ``CF`` breaks for its record in
    ``X`` (``rules``: ``envs.rules.CompiledRules``); None where it keeps them all, is not finite, or
    there are no rules."""
    out = np.full(len(CF), None, object)
    if rules is None or not len(CF):
        return out
    finite = np.isfinite(CF).all(1)
    if finite.any():
        out[finite] = rules.violations(X[finite], CF[finite])
    return out


def merge(*names: Any) -> tuple[str, ...]:
    """Rule names, each once, in the order first seen (None and empty left out)."""
    out: dict[str, None] = {}
    for group in names:
        for n in ([group] if isinstance(group, str) else () if group is None else group):
            if n:
                out[str(n)] = None
    return tuple(out)


def count_refusals(svc: Any, names: np.ndarray) -> None:
    """Count (per rule name) and log the generator answers the rules refused; ``names`` from :func:`broken_rule`."""
    hits = Counter(n for n in names if n is not None)
    if not hits:
        return
    with svc._lock:
        for n, k in hits.items():
            svc.rule_refusals[n] = svc.rule_refusals.get(n, 0) + k
        svc.counters["rule_refusals"] = svc.counters.get("rule_refusals", 0) + sum(hits.values())
    log.info("the world's rules refused %d generator answer(s), sent to the fallback: %s", sum(hits.values()),
             "; ".join(f"{n!r} x{k}" for n, k in hits.most_common()))


class _Bearing:
    """The rules' atoms as matrices (as ``CompiledRules`` builds its checker): which clause's IF holds."""

    def __init__(self, rules: Any):
        from envs.rules.atoms import OP_CODES

        atoms = [a for c in rules.clauses for a in (*c.antecedent, c.consequent)]
        d, m = len(rules.schema), len(atoms)
        self.cf, self.x = np.zeros((d, m)), np.zeros((d, m))
        for k, a in enumerate(atoms):
            np.add.at(self.cf[:, k], list(a.cf_cols), a.cf_coefs)
            np.add.at(self.x[:, k], list(a.x_cols), a.x_coefs)
        self.const = np.array([a.const for a in atoms])
        self.op = np.array([OP_CODES[a.op] for a in atoms], np.int64)
        self.ant = np.zeros((m, len(rules.clauses)), np.int64)  # atom -> the clause whose IF it is in
        self.has_if = np.zeros(len(rules.clauses), bool)
        self.reads = np.zeros((len(rules.clauses), d), bool)  # the columns each clause reads
        self.rule = np.zeros((len(rules.clauses), len(rules.names)), bool)
        k = 0
        for i, c in enumerate(rules.clauses):
            self.ant[k:k + len(c.antecedent), i] = 1
            self.has_if[i] = bool(c.antecedent)
            for a in (*c.antecedent, c.consequent):
                self.reads[i, list(a.cf_cols) + list(a.x_cols)] = True
            k += len(c.antecedent) + 1
            self.rule[i, c.rule] = True
        self.user = np.array([not n.endswith("(schema)") for n in rules.names])


_BEARING: dict[int, tuple[Any, _Bearing]] = {}


def bearing_rules(rules: Any, X: np.ndarray, CF: np.ndarray) -> list[list[str]]:
    """Per row of ``CF`` (an answer for the record in ``X``) the names of the user's rules that bear on
    it (see the module's docstring; the schema's mutability is left out); empty lists without rules."""
    if rules is None or not len(CF):
        return [[] for _ in range(len(CF))]
    from envs.rules.atoms import truth

    hit = _BEARING.get(id(rules))
    if hit is None or hit[0] is not rules:
        if len(_BEARING) > 16:
            _BEARING.clear()
        hit = _BEARING[id(rules)] = (rules, _Bearing(rules))
    b = hit[1]
    X, CF = np.atleast_2d(np.asarray(X, float)), np.atleast_2d(np.asarray(CF, float))
    e = CF @ b.cf + X @ b.x + b.const
    s = np.abs(CF) @ np.abs(b.cf) + np.abs(X) @ np.abs(b.x) + np.abs(b.const)
    fired = ((~truth(b.op, e, s)).astype(np.int64) @ b.ant == 0) & b.has_if  # (n, clauses): the IF holds
    moved = np.abs(CF - X) > 1e-12
    touched = ~b.has_if & (moved.astype(np.int64) @ b.reads.T.astype(np.int64) > 0)
    bears = ((fired | touched).astype(np.int64) @ b.rule.astype(np.int64) > 0) & b.user
    names = np.asarray(rules.names, object)
    return [list(names[row]) for row in bears]


def no_recourse_rules(svc: Any, x: np.ndarray, reason: str | None) -> tuple[str, ...]:
    """The user's rules behind MACE's proof that no counterfactual exists for ``x`` (empty: none of them)."""
    rules = svc.rules
    if rules is None or not rules.constraining:
        return ()
    m = _BLOCKED.search(reason or "")
    if m:
        return (m.group(2),)
    from solvers.mace import MACE

    try:
        r = MACE(**svc.mace_params).solve(replace(svc.world, rules=None), x)[0]
    except Exception:  # the answer stays MACE's proof; only its reason is unknown
        log.exception("MACE without the rules failed; no_recourse is not attributed to a rule")
        return ()
    if r.status != "ok" or r.final_state is None:
        return ()  # no recourse even without the user's rules
    hit = rules.broken(x, np.asarray(r.final_state, float)[None])[0]
    return tuple(n for n, b in zip(rules.names, hit, strict=True) if b)

