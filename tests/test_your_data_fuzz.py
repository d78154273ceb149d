"""Fuzz: a user's Pipeline of each model family against its white box on random raw records (issue 54 item 6).

For LR, MLP, RandomForest, HistGradientBoosting, XGBoost and LightGBM, each in
``Pipeline(ColumnTransformer([StandardScaler, OneHotEncoder]), model)`` on ``make_table``'s small
synthetic table, 5,000 random raw records (values drawn within the spec's bounds, exactly at them and
at values of the table, every category of every categorical) go through the world's encoder, the white
box and ``UserModelOracle``: the white box decides as the Pipeline's own ``predict`` on every record,
except where its score is within ``BOUNDARY_TOL`` of the decision boundary (counted, and required to be
rare), and the oracle's decoded records decide as the raw ones. Then a generator (``nearest_cfe``,
trained on MACE's answers for rejected training rows) answers ~200 rejected random records: every answer
it returns is a record (it breaks no constraint of the world) and the user's model accepts it on the raw
record (the check a served answer goes through).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from data_gen.user_world import build_user_world
from learners.tabular import TabularLabels, WorldGeometry, build_tabular_generator
from solvers.mace import MACE
from tests.test_user_model import CATS, NUMS, USER_SPEC, make_table

RECORDS = 5000
SERVED = 200
LABELS = 30  # MACE-labelled rejected training rows the generator learns from
BOUNDARY_TOL = 1e-9  # |score| within this (plus the white box's own tolerance) may differ: float rounding


def _estimator(family: str):
    if family == "xgb":
        return pytest.importorskip("xgboost").XGBClassifier(n_estimators=30, max_depth=3, random_state=0, n_jobs=1)
    if family == "lgbm":
        return pytest.importorskip("lightgbm").LGBMClassifier(n_estimators=30, max_depth=3, random_state=0, n_jobs=1,
                                                              verbose=-1)
    return {"lr": lambda: LogisticRegression(max_iter=2000),
            "mlp": lambda: MLPClassifier((8, 4), max_iter=600, random_state=0),
            "rf": lambda: RandomForestClassifier(10, max_depth=4, random_state=0, n_jobs=1),
            "hgb": lambda: HistGradientBoostingClassifier(max_iter=20, max_depth=3, random_state=0)}[family]()


def random_records(spec, table: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` raw records: per feature a third uniform within the bounds, a sixth at each bound and a third
    at values of the table (numbers); every level in turn, then at random (categories)."""
    rng = np.random.default_rng(seed)
    cols = {}
    for f in spec.features:
        seen = table[f.name].to_numpy()
        if f.kind in ("real", "integer"):
            lo, hi = f.code_bounds()
            lo, hi = (seen.min() if lo is None else lo), (seen.max() if hi is None else hi)
            draw = rng.uniform(lo, hi, n) if f.kind == "real" else rng.integers(int(lo), int(hi) + 1, n)
            pick = rng.random(n)
            v = np.where(pick < 1 / 6, lo, np.where(pick < 1 / 3, hi, np.where(pick < 2 / 3, rng.choice(seen, n), draw)))
            cols[f.name] = v.astype(table[f.name].dtype)
        else:
            levels = list(f.levels)
            idx = np.concatenate([np.arange(len(levels)), rng.integers(0, len(levels), n - len(levels))])
            cols[f.name] = np.asarray(levels, dtype=object)[idx]
    return pd.DataFrame(cols)[list(table.columns.drop("y"))]


@pytest.mark.parametrize("family", ["lr", "mlp", "rf", "hgb", "xgb", "lgbm"])
def test_white_box_and_served_answers_agree_with_the_pipeline(family):
    table = make_table(400, seed=3)
    X_raw, y01 = table.drop(columns="y"), (table.y == "good").astype(int)
    pre = ColumnTransformer([("num", StandardScaler(), NUMS),
                             ("cat", OneHotEncoder(sparse_output=False, handle_unknown="ignore"), CATS)])
    pipe = Pipeline([("pre", pre), ("model", _estimator(family))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small MLP's convergence
        pipe.fit(X_raw, y01)
    world, bundle = build_user_world(table, spec=USER_SPEC, target="y", favourable="good", model=pipe)
    assert bundle.report.route == "white-box", str(bundle.report)

    records = random_records(bundle.spec, table, RECORDS)
    for f in bundle.spec.features:  # every category, and both bounds of every number, are among the records
        if f.levels:
            assert set(records[f.name]) == set(f.levels)
        else:
            assert {records[f.name].min(), records[f.name].max()} == set(f.code_bounds())
    bundle.spec.check_records(records)
    E = world.encoder.encode(records)
    said = pipe.predict(records) == 1
    score = bundle.white_box.score(E)
    near = np.abs(score) <= BOUNDARY_TOL + float(getattr(bundle.white_box, "tolerance", 0.0) or 0.0)
    differ = said != (score > 0)
    assert not (differ & ~near).any(), records[differ & ~near].head()
    assert int((differ & near).sum()) <= RECORDS // 1000  # counted: at most 0.1% of records, at the boundary
    assert np.array_equal(bundle.oracle(E), said)  # decoded records decide as the raw ones
    assert 0.05 < said.mean() < 0.95  # both decisions are fuzzed

    # A generator on MACE's answers: every answer it returns is accepted by the user's model on the raw record.
    rejected = bundle.data.X_train[~world.accepts(bundle.data.X_train)][:LABELS]
    mace = MACE(backend="milp", norm="one", rel_tol=1e-2, time_limit=10)
    solved = [(x, r) for x in rejected for r in mace.solve(world, x)[:1] if r.status == "ok"]
    assert len(solved) >= LABELS // 2
    labels = TabularLabels(np.array([x for x, _ in solved]), np.array([r.extra["counterfactual"] for _, r in solved]),
                           np.array([r.extra["distance"] for _, r in solved]))
    gen = build_tabular_generator("nearest_cfe").fit(world, labels, seed=0)
    agents = E[~said][:SERVED]
    rec = gen.recommend(world, agents)
    assert rec.found.mean() > 0.5
    assert not WorldGeometry.of(world).violations(agents[rec.found], rec.CF[rec.found]).any()  # each one a record
    codes = np.array([f.integer or f.group is not None for f in world.schema.features])
    CF = rec.CF[rec.found][:, codes]
    assert np.array_equal(CF, np.round(CF)), "a one-hot or integer column off its code (not a record)"  # exactly
    answers = bundle.oracle.frame(rec.CF[rec.found])
    assert (pipe.predict(answers[list(X_raw.columns)]) == 1).all()
