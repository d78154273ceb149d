"""The world's rules (``envs.rules``) as MILP constraints: MACE's certificate then holds for them.

The rules come grounded on the agent (``Instance.rules``): every clause is a disjunction of
conjunctions of linear inequalities over x_cf (step bounds, forbidden transitions, links, PLAF
implications and comparisons, the schema's mutability). On the MILP's own box (the plausibility box,
already narrowed by every single-column rule, and by the distance budget):

- a disjunct that cannot hold on the box is dropped, a clause one disjunct of which always holds is
  dropped, a clause with no disjunct left makes the MILP infeasible (no counterfactual keeps it);
- a clause with one disjunct is linear: its inequalities are rows;
- a clause with several disjuncts gets a binary z_k per disjunct (one z and 1 - z for two), sum z_k >= 1,
  and each inequality ``a·x <= r`` of disjunct k the row ``a·x + M z_k <= r + M`` with
  M = max over the box of a·x, minus r: a big-M from the columns' bounds, never a constant.

``margin=None`` is the relaxed reading (``envs.rules.ground.Ineq.rhs_for``: it contains every point
the shared checker accepts, so the dual bound stays a certificate); a number is the robust reading,
whose point keeps continuous rules despite the solver's feasibility tolerance.
"""

from __future__ import annotations

from typing import Any

from solvers.mace.domain import Instance


def encode_rules(p: Any, xv: list[int], inst: Instance, margin: float | None) -> None:
    """Add ``inst.rules`` to the program ``p`` (``milp._Program``) over the feature columns ``xv``."""
    lo, hi, scale = inst.lower, inst.upper, inst.scales()
    clauses, dead = inst.rules.prune(lo, hi, scale, margin)
    if dead is not None:  # no point of the box keeps this rule: 0 >= 1
        p.row([p.var(0.0, 0.0)], [1.0], 1.0)
        return
    for cl in clauses:
        if len(cl.disjuncts) == 1:
            for q in cl.disjuncts[0]:
                p.row([xv[c] for c in q.cols], q.coefs, hi=q.rhs_for(lo, hi, scale, margin))
            continue
        if len(cl.disjuncts) == 2:  # z selects the first disjunct, 1 - z the second
            z = p.var(0.0, 1.0, integer=True)
            picks = [(z, 1.0), (z, -1.0)]
        else:
            zs = [p.var(0.0, 1.0, integer=True) for _ in cl.disjuncts]
            p.row(zs, [1.0] * len(zs), 1.0)
            picks = [(zk, 1.0) for zk in zs]
        for (zk, sign), dj in zip(picks, cl.disjuncts, strict=True):
            for q in dj:
                r = q.rhs_for(lo, hi, scale, margin)
                M = q.span(lo, hi)[1] - r
                if M <= 0:
                    continue  # holds on the whole box
                # a·x <= r + M·(1 - z) for the z that picks it (sign 1), a·x <= r + M·z for 1 - z (sign -1)
                p.row([*(xv[c] for c in q.cols), zk], [*q.coefs, sign * M], hi=r + (M if sign > 0 else 0.0))
