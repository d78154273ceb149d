"""Sequential worlds for the tests: the CSCF action sets over the real encodings with hand-made
linear black boxes (no training), and small random toy worlds for brute-force checks."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pandas as pd

from data_gen.loaders import ADULT_FEATURES, GERMAN_FULL_FEATURES, load_raw
from data_gen.tabular_encoder import TabularEncoder
from envs.models import LinearModel
from envs.schema import Feature, FeatureSchema
from envs.sequential import (
    Condition,
    Consequence,
    DiscountEdge,
    Effort,
    SequentialAction,
    SequentialWorld,
    Tau,
)
from envs.sequential_cscf import adult_actions, adult_discounts, german_actions


@cache
def encoder(name: str) -> TabularEncoder:
    """The encoder of the ``adult`` or ``german_full`` data set (fitted on all rows)."""
    features = {"adult": ADULT_FEATURES, "german_full": GERMAN_FULL_FEATURES}[name]
    return TabularEncoder.fit(features, load_raw(name)[0])


def linear(schema: FeatureSchema, weights: dict[str, float], bias: float) -> LinearModel:
    w = np.zeros(len(schema))
    for col, v in weights.items():
        w[schema.index[col]] = v
    return LinearModel(w, bias)


ADULT_RECORD = {"age": 31, "workclass": "Private", "education-num": 9, "marital-status": "Never-married",
                "occupation": "Sales", "relationship": "Not-in-family", "race": "White", "sex": "Male",
                "capital-gain": 0.0, "capital-loss": 0.0, "hours-per-week": 40, "native-country": "United-States"}
GERMAN_RECORD = {"checking_status": "<0 DM", "duration": 24, "credit_history": "existing paid duly",
                 "purpose": "car (new)", "credit_amount": 4000, "savings_status": "<100 DM", "employment": "1-4 years",
                 "installment_rate": 3, "personal_status_sex": "male: single", "other_debtors": "none",
                 "residence_since": 2, "property": "car or other", "age": 30, "other_installment_plans": "none",
                 "housing": "own", "existing_credits": 1, "job": "skilled employee", "num_dependents": 1,
                 "own_telephone": "none", "foreign_worker": "yes"}


def adult_agent(**changes) -> np.ndarray:
    return encoder("adult").encode(pd.DataFrame([{**ADULT_RECORD, **changes}]))[0]


def german_agent(**changes) -> np.ndarray:
    return encoder("german_full").encode(pd.DataFrame([{**GERMAN_RECORD, **changes}]))[0]


def adult_world(discounts: bool = True) -> SequentialWorld:
    """Adult actions; accepts iff capital-gain / 1000 + education code > 14.5 (HS-grad: a gain of 7000)."""
    schema = encoder("adult").schema
    model = linear(schema, {"capital-gain": 1e-3, "education-num": 1.0}, -14.5)
    return SequentialWorld("adult-test", schema, adult_actions(schema), model,
                           adult_discounts() if discounts else ())


def german_world() -> SequentialWorld:
    """German actions; accepts iff the loan is small and short: 3 - credit / 1000 - duration / 12 > 0."""
    schema = encoder("german_full").schema
    model = linear(schema, {"credit_amount": -1e-3, "duration": -1 / 12}, 3.0)
    return SequentialWorld("german-test", schema, german_actions(schema), model)


def toy_world(seed: int, discounts: bool = True) -> SequentialWorld:
    """Four actions over three numbers and a 2-category group, with a random linear black box."""
    rng = np.random.default_rng(seed)
    schema = FeatureSchema((Feature("a", lower=0, upper=10), Feature("b", lower=0, upper=10),
                            Feature("c", lower=0, upper=10),
                            Feature("g=x", "binary", 0, 1, group="g", integer=True),
                            Feature("g=y", "binary", 0, 1, group="g", integer=True)))
    actions = [
        SequentialAction("addA", "a", "add", Effort("abs", float(rng.uniform(0.5, 2))), (1, 2, 3, 4),
                         consequences=(Consequence("c", "shift", 0.5),), post=(Condition("a", "<=", 10),)),
        SequentialAction("setB", "b", "set", Effort("abs", float(rng.uniform(1, 3))), (0, 2, 4, 6, 8)),
        SequentialAction("toY", "g=y", "assign", Effort("const", float(rng.uniform(1, 4))),
                         pre=(Condition("g=y", "==", 0),)),
        SequentialAction("addC", "c", "add", Effort("abs", float(rng.uniform(0.5, 2))), (1, 3, 5),
                         pre=(Condition("b", "<", 7),)),
    ]
    edges = [DiscountEdge("g", "a", Tau("linear", "g=y", {"a": 1.0, "b": -0.5})),
             DiscountEdge("b", "c", Tau("rules", "b", {"rules": [[">=", 4, 0.6]], "default": 1.0}))] if discounts else []
    w = rng.uniform(0.2, 1.0, 5) * np.array([1, 1, 1, 0, 1])
    model = LinearModel(w, -float(w[:3].sum() * 5 + 0.5 * w[4]))
    return SequentialWorld(f"toy{seed}", schema, actions, model, edges)


def toy_agents(world: SequentialWorld, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.zeros((n, world.n_features))
    X[:, :3] = rng.integers(0, 5, (n, 3))
    X[:, 3] = 1.0
    return X


def brute_force(world: SequentialWorld, x: np.ndarray, max_length: int = 3) -> float:
    """Cheapest valid sequence of distinct actions on the grid whose every step changes the state."""
    best = np.inf
    for L in range(1, max_length + 1):
        for seq in itertools.permutations(range(world.n_actions), L):
            grids = [world.actions[a].grid if world.actions[a].valued else (np.nan,) for a in seq]
            V = np.array(list(itertools.product(*grids)), float)
            r = world.rollout(np.repeat(x[None], len(V), 0), np.tile(seq, (len(V), 1)), V, keep_states=True)
            changed = (np.diff(r.states, axis=1) != 0).any(axis=2).all(axis=1)
            good = r.ok & world.accepts(r.final) & changed
            if good.any():
                best = min(best, float(r.cost[good].min()))
    return best
