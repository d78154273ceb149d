"""``learners/tabular/rows.py``'s bookkeeping and ``budget_search._projected`` against plain loops over their
definitions (the second route): a row repeated is found bit for bit (the hash sort, its fallback on a
collision), rows are packed in order, and only the real rows are projected, to the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import learners.tabular.rows as rows
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import _projected
from tests.tabular_worlds import german_forest_sample


def _repeats_by_loop(C: np.ndarray) -> np.ndarray:
    """(N, Q): row q of agent n has the same bytes as one of that agent's rows before it."""
    N, Q, _ = C.shape
    return np.array([[any(C[n, q].tobytes() == C[n, p].tobytes() for p in range(q)) for q in range(Q)]
                     for n in range(N)], bool).reshape(N, Q)


@st.composite
def _row_sets(draw):
    """(N, Q, D) rows drawn from a few values (repeats likely), with NaN rows and signed zeros (equal as
    floats, not as bits)."""
    N, Q, D = draw(st.integers(1, 3)), draw(st.integers(0, 12)), draw(st.integers(1, 5))
    values = np.array([0.0, -0.0, 1.0, 2.5, np.nan])
    picks = draw(st.lists(st.integers(0, 2), min_size=N * Q * D, max_size=N * Q * D))
    C = values[np.asarray(picks, int)].reshape(N, Q, D) if N * Q * D else np.zeros((N, Q, D))
    for n, q in draw(st.lists(st.tuples(st.integers(0, N - 1), st.integers(0, max(Q - 1, 0))), max_size=3)):
        if Q:
            C[n, q] = np.nan if draw(st.booleans()) else values[[1, 3]][draw(st.integers(0, 1))]
    return C


@settings(max_examples=150, deadline=None)
@given(_row_sets())
def test_repeats_are_found_bit_for_bit(C):
    keys = rows.row_keys(C)
    expected = _repeats_by_loop(C)
    np.testing.assert_array_equal(rows.repeats(keys), expected)
    np.testing.assert_array_equal(rows._repeats_by_bytes(keys), expected)


def test_a_hash_collision_falls_back_to_the_bytes(monkeypatch):
    """Every row hashed alike (all multipliers 0): the rows that meet are compared, found unequal, and the
    answer comes from sorting the bytes."""
    rng = np.random.default_rng(0)
    C = rng.integers(0, 3, (2, 30, 4)).astype(float)
    monkeypatch.setattr(rows, "_MIX", np.zeros_like(rows._MIX))
    calls = []
    plain = rows._repeats_by_bytes
    monkeypatch.setattr(rows, "_repeats_by_bytes", lambda keys: calls.append(1) or plain(keys))
    np.testing.assert_array_equal(rows.repeats(rows.row_keys(C)), _repeats_by_loop(C))
    assert calls, "the collision was not noticed"


@settings(max_examples=100, deadline=None)
@given(_row_sets(), st.integers(0, 14))
def test_compact_and_fresh_match_loops(C, k):
    N, Q, D = C.shape
    packed = np.full((N, k, D), np.nan)
    for n in range(N):
        real = [C[n, q] for q in range(Q) if not np.isnan(C[n, q]).any()][:k]
        if real:
            packed[n, :len(real)] = real
    np.testing.assert_array_equal(rows.compact(C, k), packed)
    half = Q // 2
    asked = rows.row_keys(C[:, :half])
    kept = np.full((N, Q - half, D), np.nan)
    for n in range(N):
        seen = {C[n, q].tobytes() for q in range(half)}
        out = []
        for q in range(half, Q):
            b = C[n, q].tobytes()
            if b not in seen and not np.isnan(C[n, q]).any():
                out.append(C[n, q])
            seen.add(b)
        if out:
            kept[n, :len(out)] = out
    np.testing.assert_array_equal(rows.fresh(C[:, half:], asked), kept)


@pytest.mark.parametrize("agents", [1, 4])
def test_only_the_real_rows_are_projected_to_the_same_bits(agents):
    world, X = german_forest_sample()
    geo = WorldGeometry.of(world)
    X = X[:agents]
    rng = np.random.default_rng(agents)
    parts = [X[:, None, :] + rng.normal(0, 0.4, (agents, q, X.shape[1])) * geo.span for q in (7, 5)]
    for P in parts:
        P[rng.random(P.shape[:2]) < 0.5] = np.nan  # about half the rows are NaN (most moves of a step model are)
        P[0, 0] = np.nan
    whole = geo.project(X, np.nan_to_num(np.concatenate(parts, axis=1), nan=0.0))
    whole[np.isnan(np.concatenate(parts, axis=1)).any(-1)] = np.nan
    np.testing.assert_array_equal(_projected(geo, X, parts), whole)
    none = [np.full((agents, 3, X.shape[1]), np.nan)]
    assert np.isnan(_projected(geo, X, none)).all()


def test_one_agents_full_rows_leave_anothers_nan_rows_nan():
    """A batch where one agent has no NaN row: another agent's NaN rows stay NaN (they were once projected as
    zeros clipped into the box, rows nobody proposed, which a search then scored)."""
    world, X = german_forest_sample()
    geo = WorldGeometry.of(world)
    X = X[:2]
    C = X[:, None, :] + np.random.default_rng(0).normal(0, 0.4, (2, 6, X.shape[1])) * geo.span
    C[1, 2:] = np.nan
    out = _projected(geo, X, [C])
    assert np.isnan(out[1, 2:]).all() and not np.isnan(out[0]).any() and not np.isnan(out[1, :2]).any()
    np.testing.assert_array_equal(out[0], geo.project(X[:1], C[:1])[0])
