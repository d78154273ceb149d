"""``learners/tabular/vocab_table.py``: the vocabulary's lookups for every numeric column at once give the values
of a lookup a column at a time with ``np.searchsorted`` (written out here as the reference), bit for bit, on
vocabularies with copies of an edge, points on a value, NaN points, columns without a vocabulary and lookups
split into blocks (snaps, first values past an agent, values between an agent and its answer); and ``reach._rung_probabilities``' hash matching against a comparison of every pair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import learners.tabular.vocab_table as vt
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.moves import inner_values
from learners.tabular.reach import _rung_probabilities
from learners.tabular.steps import vocab_between
from learners.tabular.vocab_table import between_values, first_values, snap_outward, vocab_sides, vocab_table
from tests.tabular_worlds import threshold_world


def _reference_snap(geo, X, P, vocab):
    """The column-at-a-time snap (``first_round._snap`` before the table)."""
    S = P.copy()
    for c in np.flatnonzero(geo.numeric):
        if not len(vocab[c]):
            continue
        vu, vd = vocab_sides(vocab[c])
        x, p = np.broadcast_to(X[:, None, c], P.shape[:2]), P[:, :, c]
        up, down = p > x + 1e-12, p < x - 1e-12
        i_up = np.clip(np.searchsorted(vu, p, "left"), 0, len(vu) - 1)
        i_dn = np.clip(np.searchsorted(vd, p, "right") - 1, 0, len(vd) - 1)
        S[:, :, c] = np.where(up & (vu[i_up] >= p), vu[i_up], np.where(down & (vd[i_dn] <= p), vd[i_dn], p))
    return S


def _reference_first(geo, X, vocab, V):
    """The column-at-a-time first values (``steps.vocab_past`` per column, either way)."""
    N, D = X.shape
    out = np.full((2, N, D, V), np.nan)
    for c in np.flatnonzero(geo.numeric):
        if not len(vocab[c]):
            continue
        vu, vd = vocab_sides(vocab[c])
        i_up = np.searchsorted(vu, X[:, c], "right")[:, None] + np.arange(V)
        i_dn = np.searchsorted(vd, X[:, c], "left")[:, None] - 1 - np.arange(V)
        out[0, :, c] = np.where(i_up < len(vu), vu[np.clip(i_up, 0, len(vu) - 1)], np.nan)
        out[1, :, c] = np.where(i_dn >= 0, vd[np.clip(i_dn, 0, len(vd) - 1)], np.nan)
    return out


def _reference_between(geo, X, B, vocab, K):
    """The column-at-a-time values between the agent and the answer (``steps.vocab_between`` per column)."""
    N, D = X.shape
    out = np.full((N, D, K), np.nan)
    for c in np.flatnonzero(geo.numeric):
        if len(vocab[c]):
            out[:, c] = vocab_between(vocab[c], X[:, c], B[:, c], K)
    return out


def _world(D: int) -> TabularWorld:
    schema = FeatureSchema(tuple(Feature(f"x{i}", "numeric", 0.0, 10.0) for i in range(D)))
    from envs.models import LinearModel

    return TabularWorld("toy/vocab", schema, LinearModel(np.ones(D), -1.0))


@st.composite
def _case(draw):
    D = draw(st.integers(1, 4))
    grid = np.round(np.linspace(0.0, 10.0, 41), 6)
    vocab = []
    for _ in range(D):
        v = np.sort(draw(st.lists(st.sampled_from(list(grid)), min_size=0, max_size=12, unique=True)))
        if len(v) and draw(st.booleans()):  # a copy of an edge (the labels' float noise)
            v = np.sort(np.concatenate([v, v[:1] + 1e-12]))
        vocab.append(np.asarray(v, float))
    N, K = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    pick = st.one_of(st.sampled_from(list(grid)), st.floats(0.0, 10.0, allow_nan=False))
    X = np.array([[draw(pick) for _ in range(D)] for _ in range(N)])
    P = np.array([[[draw(st.one_of(pick, st.just(np.nan))) for _ in range(D)] for _ in range(K)] for _ in range(N)])
    return D, vocab, X, P


@settings(max_examples=150, deadline=None)
@given(_case(), st.sampled_from([1 << 22, 1]))
def test_the_table_lookups_equal_the_column_at_a_time_ones(case, block):
    """Snaps, first values and the values between an agent and an answer (``moves.inner_values``) equal the
    reference's bits (NaN where it has NaN), also split into one-row blocks (``LOOKUP_ELEMENTS``), with NaN
    proposals and agents."""
    D, vocab, X, P = case
    geo = WorldGeometry.of(_world(D))
    old = vt.LOOKUP_ELEMENTS
    vt.LOOKUP_ELEMENTS = block
    try:
        table = vocab_table(geo, vocab)
        np.testing.assert_array_equal(snap_outward(table, X, P), _reference_snap(geo, X, P, vocab))
        for V in (1, 3):
            np.testing.assert_array_equal(first_values(table, X, V), _reference_first(geo, X, vocab, V))
        Xn = X.copy()
        Xn[0, 0] = np.nan  # an agent's NaN reads as past every value, as ``np.searchsorted`` places it
        np.testing.assert_array_equal(first_values(table, Xn, 2), _reference_first(geo, Xn, vocab, 2))
        B = np.where(np.isnan(P[:, 0]), X, P[:, 0])  # an answer per agent, some columns unchanged
        for K in (1, 3):
            np.testing.assert_array_equal(between_values(table, X, B, K), _reference_between(geo, X, B, vocab, K))
            want = _reference_between(geo, X, B, vocab, K)
            want[np.abs(B - X) <= 1e-12] = np.nan
            np.testing.assert_array_equal(inner_values(geo, X, B, vocab, K), want)
    finally:
        vt.LOOKUP_ELEMENTS = old


def test_a_table_is_built_once_per_vocabulary_and_never_for_a_copy():
    """The same vocabulary arrays find their table; equal arrays that are other objects get their own (the
    cache goes by identity), and a column without values is not in the table."""
    world = threshold_world()
    geo = WorldGeometry.of(world)
    vocab = [np.array([2.0, 5.5, 8.0]), np.zeros(0)]
    t = vocab_table(geo, vocab)
    assert vocab_table(geo, vocab) is t
    assert vocab_table(geo, [v.copy() for v in vocab]) is not t
    assert t.cols.tolist() == [0] and t.n_up.tolist() == [3] and np.isinf(t.up[0, 3:]).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rungs_are_matched_by_hash_as_by_comparing_every_pair(seed):
    """Each rung's probability is that of the first equal scored row (-0.0 equal to 0.0, NaN rows never equal,
    a row scored twice read at its first), as a comparison of every pair of rows gives it."""
    rng = np.random.default_rng(seed)
    N, R, Q, D = 3, 8, 20, 4
    C = rng.integers(0, 3, (N, Q, D)).astype(float)
    C[:, 5] = np.nan
    C[0, 7] = C[0, 2]  # a repeat: the first one counts
    L = np.concatenate([C[:, rng.permutation(Q)[: R // 2]], rng.integers(0, 3, (N, R // 2, D)).astype(float)], 1)
    L[1, 0] = np.nan
    L = np.where(L == 0.0, -0.0, L)  # a rung's -0.0 meets a scored row's 0.0
    proba = rng.random((N, Q))
    same = (L[:, :, None, :] == C[:, None, :, :]).all(-1)
    want = np.where(same.any(-1), np.take_along_axis(proba, same.argmax(-1), 1), np.nan)
    np.testing.assert_array_equal(_rung_probabilities(L, C, proba), want)
    assert np.isfinite(want).sum() >= N * R // 4  # the case is not vacuous
