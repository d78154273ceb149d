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
    np.testing.assert_array_equal(rows.compact(C, k), rows.packed_rows(~np.isnan(C).any(-1), k, C))  # the numpy steps
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


@settings(max_examples=150, deadline=None)
@given(_row_sets(), st.integers(0, 12))
def test_compiled_fresh_is_the_numpy_steps(C, half):
    """``fresh``'s compiled kernel against the numpy steps it replaced (``_fresh_numpy``): the same rows, bit for
    bit, with and without rows asked before (signed zeros, NaN rows, repeats within and across)."""
    half = min(half, C.shape[1])
    asked = rows.row_keys(C[:, :half])
    for M, a in ((C[:, half:], asked), (C, None), (C[:, half:], rows.row_keys(C[:, :0]))):
        np.testing.assert_array_equal(rows.fresh(M, a), rows._fresh_numpy(M, a))


def test_compiled_fresh_falls_back_on_a_hash_collision(monkeypatch):
    """Every row hashed alike: the kernel meets unequal rows, says so, and the numpy steps answer."""
    rng = np.random.default_rng(1)
    C = rng.integers(0, 3, (2, 40, 4)).astype(float)
    want = rows._fresh_numpy(C[:, 20:], rows.row_keys(C[:, :20]))
    monkeypatch.setattr(rows, "_MIX", np.zeros_like(rows._MIX))
    calls = []
    plain = rows._fresh_numpy
    monkeypatch.setattr(rows, "_fresh_numpy", lambda M, a=None: calls.append(1) or plain(M, a))
    np.testing.assert_array_equal(rows.fresh(C[:, 20:], rows.row_keys(C[:, :20])), want)
    assert calls, "the collision was not noticed"


def _nearest_first_numpy(C, d, rows, k):
    """The numpy steps ``row_kernels.nearest_first_kernel`` replaced (the reference), from the distances on."""
    N, Q, D = C.shape
    first = np.argsort(d, axis=1, kind="stable")
    d = np.take_along_axis(d, first, 1)
    n_tie, j = np.nonzero((d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:]))
    if len(n_tie):
        equal = (C[n_tie, first[n_tie, j + 1]] == C[n_tie, first[n_tie, j]]).all(-1)
        d[n_tie[equal], j[equal] + 1] = np.inf
    order = np.argsort(d, axis=1, kind="stable")
    n = np.isfinite(d).sum(1)
    pos = np.arange(rows)[None, :]
    if (n > k).any():
        pick = np.floor(pos / np.maximum(k - 1, 1)[:, None] * np.maximum(n - 1, 0)[:, None]).astype(int)
        pick = np.where((n > k)[:, None], np.minimum(pick, np.maximum(n - 1, 0)[:, None]), pos)
        order = np.take_along_axis(order, np.minimum(pick, order.shape[1] - 1), 1)
    else:
        order = order[:, :rows]
    m, agent = order.shape[1], np.arange(N)[:, None]
    out = np.full((N, rows, D), np.nan)
    out[:, :m] = C[agent, first[agent, order]]
    kept = np.full((N, rows), np.inf)
    kept[:, :m] = d[agent, order]
    out[~np.isfinite(kept) | (pos >= k[:, None])] = np.nan
    return out


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(0, 30), st.integers(1, 25))
def test_compiled_nearest_first_is_the_numpy_steps(seed, N, Q, rows_):
    """The ranking after the distances against the numpy steps it replaced, bit for bit: ties of equal and
    unequal rows (three equal rows in a row: each dropped against the one before it, as first sorted), signed
    zeros, rows of no distance, caps from 0 past ``rows``, a batch where one agent's rows are spread."""
    from learners.tabular.row_kernels import nearest_first_kernel

    rng = np.random.default_rng(seed)
    C = rng.choice([0.0, -0.0, 1.0, 2.0], size=(N, Q, 3))
    d = rng.choice([0.1, 0.2, 0.3, np.inf], size=(N, Q))
    same = rng.random((N, Q)) < 0.3  # rows copied from the one before, at its distance
    for n, q in zip(*np.nonzero(same), strict=True):
        if q:
            C[n, q], d[n, q] = C[n, q - 1], d[n, q - 1]
    k = rng.integers(0, rows_ + 3, N).clip(0, rows_)
    np.testing.assert_array_equal(nearest_first_kernel(C, d, rows_, k), _nearest_first_numpy(C, d.copy(), rows_, k))


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
