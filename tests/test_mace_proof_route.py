"""The proof route's cheaper form (issue 34): the re-solve reuses the MILP already passed to HiGHS
(solver state cleared) instead of rebuilding it, without the feasibility-jump heuristic.

On all-discrete worlds (4 models x 3 norms) the reused model must give the proof a fresh build
gives, and both must agree with brute force: nothing below the cut at the optimum (proof holds),
a point below the cut when the cut is set above the optimum (the proof must fail). The second
case found a hole in the verdict: without presolve HiGHS 1.15 ended "optimal" with a point above
the cut and its dual bound at the optimum below it (forest, l0: cut 0.301, point 0.4, bound 0.2);
``proof_closes`` now also asks for the dual bound; the l0 forest case fails without that.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.tabular import TabularWorld
from solvers.mace import MACE, distance
from solvers.mace.milp import MilpBackend, proof_closes
from tests.test_mace import _all_states, _discrete_data, _discrete_schema, _fit, _negatives


@pytest.fixture(scope="module")
def worlds():
    X, y = _discrete_data()
    return {kind: (TabularWorld(f"discrete/{kind}", _discrete_schema(), _fit(kind, X, y)), X)
            for kind in ("tree", "forest", "lr", "mlp")}


def _closed(be: MilpBackend, cut: float) -> bool:
    """The proof's verdict (``MACE._prove``): the search closed with no point below the cut."""
    r = be.minimize(30.0, cut=cut)
    v = float(be.inst.distance(r.x[None])[0]) if r.x is not None else np.inf
    return proof_closes(r.status, v, r.delta_min, cut)


@pytest.mark.parametrize("kind", ["tree", "forest", "lr", "mlp"])
@pytest.mark.parametrize("norm", ["zero", "one", "infty"])
def test_reused_model_proves_what_a_fresh_build_proves(worlds, kind, norm):
    world, X = worlds[kind]
    schema = world.schema
    states = _all_states(schema)
    solver = MACE(norm=norm)
    for x in _negatives(world, X, 3):
        ok = world.accepts(states) & ~schema.mutability_violations(x, states)
        best = float(distance(schema, x, states[ok], norm).min())
        inst = solver._instance(world, x)
        for cut, expect in ((best - inst.tolerance(best) / 2, True), (best * 1.5 + 1e-3, False)):
            reused = MilpBackend(inst)
            first = reused.minimize(30.0)  # the first route, then the proof on the same HiGHS model
            assert first.status == "optimal"
            assert _closed(reused, cut) is expect
            assert reused.p._highs is not None and reused.p._shape == (len(reused.p.lb), len(reused.p.rlo),
                                                                         len(reused.p.va))
            assert _closed(MilpBackend(inst), cut) is expect  # a fresh build: the same verdict
