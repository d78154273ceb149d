"""Rounding answers to values a person can act on (serving/rounding.py): rounded answers stay
accepted, lie on each feature's grid, change the same features, and are the nearest verified
rounding; where none verifies the answer is left as it was. A toy data set with money in whole
units, money in cents, a measurement without a grid, an integer and a category; linear and
non-monotone models."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_gen.tabular_encoder import RawColumn, TabularEncoder
from serving.records import RecordCodec
from serving.rounding import Rounder, resolution, round_answers
from serving.tabular import Answer

FEATURES = (RawColumn("savings", "real", "increase"), RawColumn("fee", "real"),
            RawColumn("ratio", "real"), RawColumn("months", "integer"),
            RawColumn("kind", "categorical", "immutable"))


def _data(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "savings": rng.integers(0, 5000, n).astype(float),  # whole units
        "fee": np.round(rng.uniform(0, 100, n), 2),  # cents
        "ratio": rng.uniform(0, 1, n),  # a measurement: no grid
        "months": rng.integers(4, 72, n),
        "kind": rng.choice(["a", "b", "c"], n)})


DF = _data()
ENC = TabularEncoder.fit(FEATURES, DF)
CODEC = RecordCodec(ENC)
ROWS = ENC.encode(DF)
ROUNDER = Rounder.from_rows(CODEC, ROWS)
SAV, FEE, RATIO, MONTHS = (ENC.columns_of(n)[0] for n in ("savings", "fee", "ratio", "months"))
STEPS = {SAV: 1.0, FEE: 0.01, MONTHS: 1.0}


def linear(w: np.ndarray, t: float):
    """accepted iff w·x >= t, and the schema's rules hold (as TabularService.verify checks)."""
    def verify(X: np.ndarray, CF: np.ndarray) -> np.ndarray:
        ok = np.array([v is None for v in CODEC.violations(X, CF, integral=False)])
        return ok & (CF @ w >= t - 1e-9)
    return verify


def on_grid(row: np.ndarray) -> bool:
    return all(abs(row[j] / s - round(row[j] / s)) < 1e-9 and row[j] == round(row[j], 2) for j, s in STEPS.items())


def changed(x: np.ndarray, cf: np.ndarray) -> set[int]:
    return set(np.flatnonzero(np.abs(cf - x) > 1e-12))


def test_resolution_from_the_data():
    assert resolution(DF["savings"].to_numpy()) == 0
    assert resolution(DF["fee"].to_numpy()) == 2
    assert resolution(DF["ratio"].to_numpy()) is None
    assert resolution(np.float32([0.1, 2.5, 7.3]).astype(float)) == 1  # float32 artefacts still on 0.1
    assert ROUNDER.resolutions() == {"savings": 1.0, "fee": 0.01, "months": 1.0}


@st.composite
def case(draw, monotone: bool = True):
    """A record of the data, a counterfactual off the grid that the model accepts, the model."""
    x = ROWS[draw(st.integers(0, len(ROWS) - 1))].copy()
    w = np.zeros(CODEC.n_columns)
    w[[SAV, FEE, RATIO]] = [draw(st.floats(0.001, 1.0)), draw(st.floats(-1.0, 1.0)), draw(st.floats(-1.0, 1.0))]
    cf = x.copy()
    lo, hi = CODEC.lower, CODEC.upper
    for j in (SAV, FEE, RATIO):
        if draw(st.booleans()):
            move = draw(st.floats(1e-3, 1.0)) * (hi[j] - lo[j])  # a change, not float noise
            sign = np.sign(w[j]) if monotone else draw(st.sampled_from([-1.0, 1.0]))
            if j == SAV:
                sign = 1.0  # increase-only
            cf[j] = float(np.clip(x[j] + sign * move, lo[j], hi[j]))
    t = float(cf @ w) - draw(st.floats(0.0, 0.05))
    return x, cf, w, t


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case(monotone=True))
def test_rounded_answers_stay_accepted_on_the_grid(c):
    """A linear model and changes that help it: every rounding succeeds, verifies, lies on the
    grid and changes the same features as the answer."""
    x, cf, w, t = c
    verify = linear(w, t)
    assert verify(x[None], cf[None])[0]
    R, held = ROUNDER.round(x[None], cf[None], verify)
    r = R[0]
    assert held[0]
    assert verify(x[None], R)[0]
    assert on_grid(r) or not changed(x, cf) & set(STEPS)
    assert changed(x, r) == changed(x, cf)
    assert r[RATIO] == cf[RATIO]  # no grid: as it was


def _brute(x, cf, verify):
    """The nearest verified rounding over every floor/ceil combination (None: none verifies)."""
    cols = [j for j, s in STEPS.items() if abs(cf[j] - x[j]) > 1e-12 and abs(cf[j] / s - round(cf[j] / s)) > 1e-9]
    best = None
    for combo in itertools.product(*[(np.floor(cf[j] / STEPS[j]), np.ceil(cf[j] / STEPS[j])) for j in cols]):
        r = cf.copy()
        r[cols] = [round(q * STEPS[j], 2) for q, j in zip(combo, cols, strict=True)]
        if (r[cols] == x[cols]).any() or (r < CODEC.lower).any() or (r > CODEC.upper).any() or not verify(x[None], r[None])[0]:
            continue
        d = CODEC.distance(x[None], r[None])[0]
        if best is None or d < best - 1e-15:
            best = d
    return best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case(monotone=False), st.floats(0.5, 20.0))
def test_non_monotone_model_rounds_or_leaves_alone(c, freq):
    """A non-monotone model (a sine ridge): a rounded answer verifies, lies on the grid and is the
    nearest verified rounding (brute force); where no rounding verifies, the answer is unchanged."""
    x, cf, w, _ = c
    def verify(X, CF):
        ok = np.array([v is None for v in CODEC.violations(X, CF, integral=False)])
        return ok & (np.sin(freq * CF[:, SAV] / 1000 + CF[:, FEE] / 10) >= np.sin(freq * cf[SAV] / 1000 + cf[FEE] / 10) - 0.01)
    R, held = ROUNDER.round(x[None], cf[None], verify)
    best = _brute(x, cf, verify)
    if held[0]:
        assert verify(x[None], R)[0] and (on_grid(R[0]) or not changed(x, cf) & set(STEPS))
        if best is not None:
            assert CODEC.distance(x[None], R)[0] == pytest.approx(best, abs=1e-12)
    else:
        assert np.array_equal(R[0], cf)
        assert best is None


class _Service:
    """What round_answers uses of a TabularService: codec, verify, the run's training rows."""

    def __init__(self, verify):
        self.codec, self.verify = CODEC, verify
        self.run = type("Run", (), {"domain_rows": staticmethod(lambda: ROWS)})()


def test_round_answers_rounds_answer_and_alternatives():
    x = ROWS[0].copy()
    w = np.zeros(CODEC.n_columns)
    w[[SAV, FEE]] = [1.0, 1.0]
    a, b = x.copy(), x.copy()
    a[SAV] = x[SAV] + 100.4  # only its ceiling (+101) stays accepted
    b[SAV], b[FEE] = x[SAV] + 200, x[FEE] + 0.005
    assert a[SAV] < CODEC.upper[SAV] and b[FEE] + 0.01 < CODEC.upper[FEE]
    t = a @ w - 0.1
    svc = _Service(linear(w, t))
    mace = Answer("ok", a, 0.1, "mace", "mace", True, True, [(b, 0.2, "mace")])
    same = Answer("ok", x + 0, 0.0, "model", "model", None, True)
    out = round_answers(svc, np.vstack([x, x]), [mace, same])
    r = out[0]
    assert r.cf[SAV] == np.ceil(a[SAV]) and on_grid(r.cf) and on_grid(r.alternatives[0][0])
    assert r.distance == pytest.approx(CODEC.distance(x[None], r.cf[None])[0])
    assert r.optimal is None  # MACE certified the point it found, not the rounded one
    assert r.alternatives[0][2] == "mace" and svc.verify(x[None], r.alternatives[0][0][None])[0]
    assert mace.cf is a and mace.optimal is True  # inputs untouched
    assert out[1] is same
