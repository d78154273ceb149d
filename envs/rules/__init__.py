"""The one constraint language (issue 55): PLAF and its extensions over a world's raw features.

Write rules as a :class:`RuleSet` (a data spec's ``rules:`` section; ``RuleSet.from_dict``), compile
them once per schema with :func:`compile_rules` (contradictions are reported there, naming the
rules), then

- ``compiled.violations(X, CF)``: per counterfactual row the name of the first rule it breaks, or
  None (vectorized over rows; ``holds`` and ``broken`` give the booleans) — the check every method
  runs on its answers;
- ``compiled.ground(x)``: the rules of one agent as linear inequalities over x_cf (MACE's MILP, a
  box for a search: ``GroundRules.box``);
- ``compiled.cost``: per raw feature the cost weight of an increase and of a decrease, which
  multiplies the feature's normalised change in MACE's distance (``solvers.mace.distance``);
- ``compiled.plaf_statements()``: the rules as PLAF text, for GeCo's ``Plaf``.
"""

from envs.rules.compiled import Clause, CompiledRules, compile_rules, labels
from envs.rules.ground import GroundClause, GroundRules, Ineq
from envs.rules.language import Forbid, Link, RuleError, RuleSet, StepBound, Weight

__all__ = ["Clause", "CompiledRules", "Forbid", "GroundClause", "GroundRules", "Ineq", "Link", "RuleError",
           "RuleSet", "StepBound", "Weight", "compile_rules", "labels"]
