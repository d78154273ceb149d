"""The reading of one atom (envs/rules/atoms.py ``truth``) against its definition, entry by entry: the
sign-and-compare form the checker uses must read every op, tie, NaN, infinity and signed zero as the
six comparisons do."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.rules.atoms import OP_CODES, TOL, truth


def by_definition(op: np.ndarray, e: np.ndarray, s: np.ndarray, tol: float) -> np.ndarray:
    t = tol * s
    op = np.broadcast_to(op, e.shape)
    return np.select([op == 0, op == 1, op == 2, op == 3, op == 4],
                     [e <= t, e < -t, e >= -t, e > t, np.abs(e) <= t], np.abs(e) > t)


values = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                   st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 2e-9, -2e-9, 1.0, -1.0]))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 5), min_size=n, max_size=n), st.lists(values, min_size=3 * n, max_size=3 * n),
    st.lists(st.sampled_from([0.0, 1.0, 2.0, 1e12, np.inf]), min_size=3 * n, max_size=3 * n))),
    st.sampled_from([TOL, 0.0, 1e-3]))
def test_truth_reads_every_op_as_defined(case, tol):
    ops, e, s = case
    n = len(ops)
    op = np.array(ops)
    E, S = np.array(e).reshape(3, n), np.array(s).reshape(3, n)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(truth(op, E, S, tol), by_definition(op, E, S, tol))  # one op per column
        for code in range(6):  # one op for all
            assert np.array_equal(truth(code, E, S, tol), by_definition(np.array(code), E, S, tol))


def test_ties_sit_on_the_non_strict_side():
    e = np.array([1e-9, -1e-9, 0.0])
    s = np.ones(3)
    assert truth(OP_CODES["<="], e, s).all() and truth(OP_CODES[">="], e, s).all()
    assert not truth(OP_CODES["<"], e, s).any() and not truth(OP_CODES[">"], e, s).any()
    assert truth(OP_CODES["="], e, s).all() and not truth(OP_CODES["!="], e, s).any()


def test_one_agents_rows_read_as_each_rows_own_agent():
    """``RuleGate.keeps`` of one agent for every row (its side of each atom computed once) equals the same
    agent broadcast to every row, on German's default rules and rows that break each kind of rule."""
    from dataclasses import replace

    from data_gen.classifiers import build
    from data_gen.default_rules import default_rules
    from learners.tabular.rules import RuleGate

    b = build("german", "forest")
    world = replace(b.world, rules=default_rules("german"))
    gate = RuleGate.of(world)
    rng = np.random.default_rng(0)
    X = b.data.X_train
    for x in X[:12]:
        C = X[rng.integers(len(X), size=(1, 300))]  # other rows: most break some rule for this agent
        C[0, :40] = x + rng.normal(0, 0.5, size=(40, X.shape[1])) * (rng.random((40, X.shape[1])) < 0.1)
        one = gate.keeps(x[None], C)
        each = gate.keeps(np.broadcast_to(x, C.shape).copy(), C)
        assert one.shape == (1, 300) and np.array_equal(one, each)
        assert one.any() and not one.all()
