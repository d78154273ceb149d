"""envs.split_rules: the exact float64 split point of a library's test on a transformed input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.models import split_limits
from envs.split_rules import RULES, _key, _value, rule_holds, split_points

finite = st.floats(allow_nan=False, allow_infinity=False)
moderate = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
scales = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)


def _affine(mean: float, scale: float, form: str):
    """A scaler's map as the user's step computes it: StandardScaler's (x - mean) / scale, or
    MinMaxScaler's x * scale + shift (both monotone non-decreasing for scale > 0)."""
    if form == "standard":
        return lambda x: (np.asarray(x, np.float64) - mean) / scale
    return lambda x: np.asarray(x, np.float64) * scale + mean


def _check(thresholds: np.ndarray, rule: str, f, probes: np.ndarray) -> None:
    """left iff x <= U, at the probes and at U and its float64 neighbours."""
    U = split_points(thresholds, rule, f)
    for t, u in zip(thresholds, U, strict=True):
        xs = np.concatenate([probes, [u, np.nextafter(u, -np.inf), np.nextafter(u, np.inf)]])
        xs = xs[np.isfinite(xs)]
        with np.errstate(over="ignore", invalid="ignore"):
            z = f(xs) if f is not None else xs
        np.testing.assert_array_equal(rule_holds(z, np.full(len(xs), t), rule), xs <= u)


def test_key_orders_the_float64_lattice():
    xs = np.array([-np.inf, -1e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e308, np.inf])
    k = _key(xs)
    assert np.all(np.diff(k) >= 0) and k[4] == k[5]
    np.testing.assert_array_equal(_value(k[[0, 1, 2, 3, 5, 6, 7, 8, 9]]), xs[[0, 1, 2, 3, 5, 6, 7, 8, 9]])
    assert _key(np.nextafter(1.0, 2.0)) - _key(1.0) == 1 and _key(-1.0) - _key(np.nextafter(-1.0, -2.0)) == 1


@settings(max_examples=200, deadline=None)
@given(t=st.floats(min_value=-3e38, max_value=3e38, allow_nan=False))
def test_identity_float32_rule_is_split_limits(t):
    """With no transform, sklearn's rule gives exactly envs.models.split_limits' U."""
    assert split_points(np.array([t]), "float32<=")[0] == split_limits(t)[0]


@settings(max_examples=300, deadline=None)
@given(rule=st.sampled_from(RULES), form=st.sampled_from(["standard", "minmax"]), mean=moderate, scale=scales,
       ts=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=5),
       xs=st.lists(moderate, min_size=1, max_size=20))
def test_affine_transforms(rule, form, mean, scale, ts, xs):
    """Random scalers and thresholds: the direct test equals x <= U at random x, at U and next to it."""
    t = np.array(ts)
    if rule == "float32<":
        t = t.astype(np.float32).astype(np.float64)  # XGBoost's thresholds are float32
    f = _affine(mean, scale, form)
    U = split_points(t, rule, f)
    # also the preimages of the thresholds, where the flip is
    pre = np.concatenate([np.asarray(xs), t * scale + mean if form == "standard" else (t - mean) / scale])
    _check(t, rule, f, pre)
    assert np.all(np.isfinite(U) | (np.abs(t) > 1e5))  # within range the flip is a finite point


@settings(max_examples=100, deadline=None)
@given(rule=st.sampled_from(RULES), t=finite, xs=st.lists(finite, min_size=1, max_size=10))
def test_any_threshold_identity(rule, t, xs):
    if rule == "float32<":
        t = float(np.float32(t)) if abs(t) < 3.4e38 else t
    _check(np.array([t]), rule, None, np.asarray(xs))


def test_constant_tests_collapse():
    """A test true for every finite x is +inf (all left), one true for none is -inf (all right)."""
    f = lambda x: np.clip(np.asarray(x, np.float64), 0.0, 1.0)  # noqa: E731  (a bounded transform)
    U = split_points(np.array([2.0, -1.0, 0.5]), "float64<=", f)
    assert U[0] == np.inf and U[1] == -np.inf and U[2] == 0.5
    assert split_points(np.array([np.inf, -np.inf]), "float64<=").tolist() == [np.inf, -np.inf]
    # float32 overflow: float32(x) is +inf above ~3.4e38, never <= a finite threshold
    U = split_points(np.array([3.4028234e38]), "float32<=")
    assert np.isfinite(U[0]) and np.float32(U[0]) <= 3.4028234e38


def test_rejects_nan_and_unknown_rule():
    with pytest.raises(ValueError, match="NaN"):
        split_points(np.array([np.nan]), "float64<=")
    with pytest.raises(ValueError, match="rule"):
        split_points(np.array([1.0]), "float16<")
