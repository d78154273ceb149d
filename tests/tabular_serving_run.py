"""A small tabular run for the serving tests: German Credit with a random forest, and stand-in generators.

``NearestAccepted`` proposes, per record, the accepted training rows made plausible for it
(immutable features copied from the record, increase/decrease-only ones clipped) and returns the
nearest one the model accepts; ``Careless`` returns the nearest accepted training row as it is
(it usually changes an immutable feature, so the service must reject it and fall back). They follow
the contract of ``learners.tabular.TabularGenerator.recommend``: ``(CF, distance)``,
NaN rows where there is no answer.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from data_gen.classifiers import build
from serving.records import RecordCodec


class NearestAccepted:
    """Stand-in generator: the nearest plausible accepted training row."""

    def __init__(self, world, X_train: np.ndarray, careless: bool = False, limit: int = 300):
        acc = X_train[world.accepts(X_train)]
        self.pool = acc[:limit]
        self.careless = careless
        self.codec = RecordCodec(world.encoder)

    def recommend(self, world, X: np.ndarray):
        X = np.atleast_2d(np.asarray(X, float))
        s = world.schema
        mut = np.array([f.mutability for f in s.features])
        N, P = len(X), len(self.pool)
        C = np.broadcast_to(self.pool[None], (N, P, X.shape[1])).copy()
        if not self.careless:
            xb = np.broadcast_to(X[:, None, :], C.shape)
            C = np.where(mut == "immutable", xb, C)
            C = np.where(mut == "increase", np.maximum(C, xb), C)
            C = np.where(mut == "decrease", np.minimum(C, xb), C)
        flat = C.reshape(-1, X.shape[1])
        ok = world.accepts(flat).reshape(N, P)
        d = self.codec.distance(np.repeat(X, P, 0), flat).reshape(N, P)
        d = np.where(ok, d, np.inf)
        best = d.argmin(1)
        found = np.isfinite(d[np.arange(N), best])
        CF = np.where(found[:, None], C[np.arange(N), best], np.nan)
        return CF, np.where(found, d[np.arange(N), best], np.inf)


def german_run(root: Path, dataset: str = "german", model: str = "forest"):
    """A run object with the fields of ``load_tabular_run``'s answer, the training data and the test rejects."""
    b = build(dataset, model, seed=0, cache_dir=root / "cache")
    w = b.world
    run = SimpleNamespace(
        world=w,
        config={"name": f"{dataset}_{model}", "tabular": {"dataset": dataset, "model": model, "seed": 0}},
        generators={"nearest": NearestAccepted(w, b.data.X_train),
                    "careless": NearestAccepted(w, b.data.X_train, careless=True)},
        mace_params={"backend": "milp", "norm": "one", "time_limit": 20.0},
        metrics={"nearest": {"validity": 1.0}})
    X_test = b.data.X_test
    return run, b.data.X_train, X_test[~w.accepts(X_test)], X_test[w.accepts(X_test)]
