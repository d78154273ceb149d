"""``learners.tabular.set_spread``: rows taken round robin over their changed sets, against a plain reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular import WorldGeometry
from learners.tabular.set_spread import set_keys, spread_over_sets
from tests.blackbox_worlds import toy_data, toy_world

GEO = WorldGeometry.of(toy_world("forest"))
ROWS = toy_data()


def _raw_set(x: np.ndarray, r: np.ndarray) -> tuple[int, ...]:
    """The raw features row ``r`` changes from ``x`` (the toy schema: four single columns, then a one-hot job)."""
    ch = np.abs(r - x) > 1e-12
    return tuple(np.flatnonzero([*ch[:4], ch[4:].any()]).tolist())


def _reference(x: np.ndarray, R: np.ndarray, tried: np.ndarray) -> np.ndarray:
    """The order by its definition: per row its set's turn (earlier rows of the set), then the tried rows of its
    set, then where the set first appears, then its place; NaN rows last."""
    sets = [None if np.isnan(r).any() else _raw_set(x, r) for r in R]
    tried_sets = [_raw_set(x, t) for t in tried if not np.isnan(t).any()]
    key = []
    for q, s in enumerate(sets):
        if s is None:
            key.append((1, 0, 0, 0, q))
            continue
        turn = sum(1 for p in range(q) if sets[p] == s)
        first = next(p for p in range(len(sets)) if sets[p] == s)
        key.append((0, turn, tried_sets.count(s), first, q))
    return R[sorted(range(len(R)), key=lambda q: key[q])]


@settings(max_examples=60, deadline=None)
@given(agents=st.integers(1, 4), rows=st.integers(0, 30), n_tried=st.integers(0, 12), nan_share=st.floats(0, 0.4),
       seed=st.integers(0, 10**6))
def test_spread_over_sets_is_round_robin_with_tried_sets_last(agents, rows, n_tried, nan_share, seed):
    rng = np.random.default_rng(seed)
    X = ROWS[rng.choice(len(ROWS), agents)]
    # rows near each agent: a few features changed each, so sets repeat
    R = np.repeat(X[:, None, :], rows, axis=1)
    T = np.repeat(X[:, None, :], n_tried, axis=1)
    for M in (R, T):
        for n in range(agents):
            for q in range(M.shape[1]):
                other = ROWS[rng.integers(len(ROWS))]
                feats = rng.choice(5, rng.integers(1, 3), replace=False)
                for f in feats:
                    cols = [f] if f < 4 else [4, 5, 6]
                    M[n, q, cols] = other[cols]
        M[rng.random(M.shape[:2]) < nan_share] = np.nan
    out = spread_over_sets(GEO, X, R, T)
    assert out.shape == R.shape
    for n in range(agents):
        np.testing.assert_array_equal(out[n], _reference(X[n], R[n], T[n]))


def test_set_keys_name_the_raw_features_changed():
    """Equal sets have equal keys whatever the new values (a one-hot group's any level is one feature); NaN rows
    key 0."""
    x = ROWS[0]
    a, b, c = x.copy(), x.copy(), x.copy()
    a[[0, 3]] = [2, 4]
    b[[0, 3]] = [3, 1]
    c[[0, 4, 5, 6]] = [2, 0, 1, 0]  # age and the job group
    d = c.copy()
    d[[4, 5, 6]] = [0, 0, 1]
    nan = np.full_like(x, np.nan)
    k = set_keys(GEO, x[None], np.stack([a, b, c, d, nan])[None])[0]
    assert k[0] == k[1] and k[2] == k[3] and k[0] != k[2] and k[4] == 0


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 25), seed=st.integers(0, 10**6))
def test_alternate_spread_takes_the_two_orders_in_turn_each_row_once(rows, seed):
    """Rows alternately in their own order and in the spread's, a row already taken skipped: every row once."""
    from learners.tabular.set_spread import alternate_spread

    rng = np.random.default_rng(seed)
    X = ROWS[rng.choice(len(ROWS), 2)]
    R = np.repeat(X[:, None, :], rows, axis=1)
    for n in range(2):
        for q in range(rows):
            f = int(rng.integers(5))
            cols = [f] if f < 4 else [4, 5, 6]
            R[n, q, cols] = ROWS[rng.integers(len(ROWS))][cols]
    R[:, ::3] = R[:, :1]  # repeats inside a list (kept once)
    T = R[:, :2].copy()
    out = alternate_spread(GEO, X, R, T)
    S = spread_over_sets(GEO, X, R, T)
    for n in range(2):
        want, seen = [], set()
        for q in range(rows):
            for r in (R[n, q], S[n, q]):
                if r.tobytes() not in seen:
                    seen.add(r.tobytes())
                    want.append(r)
        got = out[n][~np.isnan(out[n]).any(1)]
        np.testing.assert_array_equal(got, np.array(want).reshape(-1, R.shape[2]))
