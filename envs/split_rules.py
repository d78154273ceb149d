"""Exact split points: where a tree's test on a transformed input flips, as a float64 on the raw column.

A user's tree reads z = transform(x) (a scaler of their pipeline: monotone non-decreasing, float64 to
float64) and tests it with its library's comparator:

- ``"float32<="``: scikit-learn's trees (DecisionTree, RandomForest, ExtraTrees, GradientBoosting's
  regressors): left iff ``float32(z) <= t`` (t a float64, compared in float64; ``_tree.pyx``);
- ``"float32<"``: XGBoost: left iff ``float32(z) < t`` (t a float32; its DMatrix holds float32);
- ``"float64<="``: LightGBM and scikit-learn's HistGradientBoosting: left iff ``z <= t`` in float64.

Each of these is monotone in x (true for small x, false for large), so over the float64 numbers the
left branch is exactly ``x <= U`` for one float64 U: :func:`split_points` finds it by bisection over
the ordered float64 lattice (the bits of a float64 read as an integer, the sign folded so that the
order is the numbers' order; 64 halvings). No rounding argument is needed, and any monotone
transform works, however it rounds. A test that holds for every finite x gets U = +inf (all left), one
that holds for none U = -inf (all right), so ``x <= U`` is the test over finite x in every case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

Rule = Literal["float32<=", "float32<", "float64<="]
RULES: tuple[str, ...] = ("float32<=", "float32<", "float64<=")
_MAX = float(np.finfo(np.float64).max)
_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)  # every bit but the sign
_SIGN = np.int64(-0x8000_0000_0000_0000)


def _key(x: np.ndarray) -> np.ndarray:
    """Order-preserving int64 key of non-NaN float64s (-0.0 and +0.0 share 0)."""
    b = np.ascontiguousarray(x, np.float64).view(np.int64)
    return np.where(b < 0, -(b & _MAGNITUDE), b)


def _value(k: np.ndarray) -> np.ndarray:
    """The float64 of a key (``_key``'s inverse; key 0 is +0.0)."""
    k = np.asarray(k, np.int64)
    return np.where(k < 0, (-k) | _SIGN, k).view(np.float64)


def rule_holds(z: np.ndarray, t: np.ndarray, rule: Rule) -> np.ndarray:
    """The library's own test ``rule`` on inputs z and thresholds t (elementwise): True = left."""
    z = np.asarray(z, np.float64)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range casts to +-inf, as the libraries do
        if rule == "float32<=":
            return z.astype(np.float32).astype(np.float64) <= np.asarray(t, np.float64)
        if rule == "float32<":
            return z.astype(np.float32) < np.asarray(t, np.float64).astype(np.float32)
    if rule == "float64<=":
        return z <= np.asarray(t, np.float64)
    raise ValueError(f"rule: unknown split rule {rule!r}; expected one of {RULES}")


def split_points(thresholds: np.ndarray, rule: Rule,
                 transform: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """U per threshold: over finite float64 x, ``rule_holds(transform(x), t, rule)`` iff ``x <= U``.

    ``transform`` (None: identity) must be vectorized and monotone non-decreasing; it is called about
    64 times on arrays of len(thresholds). U = +inf: the test holds for every finite x; -inf: for none.
    """
    t = np.asarray(thresholds, np.float64).reshape(-1)
    if np.isnan(t).any():
        raise ValueError("thresholds: NaN is not a split threshold")

    def holds(x: np.ndarray, sel: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # a scaler overflows at +-MAX to +-inf: fine
            z = np.asarray(x if transform is None else transform(x), np.float64)
        return rule_holds(z, t[sel], rule)

    every = np.arange(len(t))
    at_lo = holds(np.full(len(t), -_MAX), every)
    at_hi = holds(np.full(len(t), _MAX), every)
    out = np.where(at_hi, np.inf, -np.inf)
    live = np.flatnonzero(at_lo & ~at_hi)  # true at -MAX, false at +MAX: the flip lies between
    lo = np.full(len(live), _key(np.array([-_MAX]))[0])  # invariant: true at lo, false at hi
    hi = np.full(len(live), _key(np.array([_MAX]))[0])
    while len(live):
        open_ = lo < hi - 1
        if not open_.any():
            break
        mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)  # floor((lo + hi) / 2) without overflow
        ok = holds(_value(mid), live)
        lo = np.where(open_ & ok, mid, lo)
        hi = np.where(open_ & ~ok, mid, hi)
    out[live] = _value(lo)
    return out
