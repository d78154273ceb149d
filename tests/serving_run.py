"""A small trained run for the serving tests, with a test-only generator whose answers are known.

The world has 8 features, 10 actions and 2 manual groups: ``group`` is required, and feature 5
is out of reach of both groups (so some agents provably have no recourse).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from data_gen.dataset import Split
from evaluation.config import parse_config
from evaluation.experiment import train_experiment
from learners.base import GENERATORS, FitContext, Generator, Prediction

N_FEATURES = 8


@dataclass
class TableParams:
    """Hyperparameters of the test-only generator."""

    wrong: bool = False  # answer an empty set (invalid for every negative agent)


class TableGenerator(Generator):
    """Test-only: answers the training label of an agent seen in training (keyed by x only)."""

    method = "test_table"
    Params = TableParams

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> TableGenerator:
        self.X_, self.sets_ = np.asarray(train.X, np.uint8), np.asarray(train.sets, np.int64)
        return self

    def predict(self, X: np.ndarray) -> Prediction:
        table: dict[bytes, np.ndarray] = {}
        for x, s in zip(self.X_, self.sets_, strict=True):
            table.setdefault(x.tobytes(), s)
        blank = np.full(self.sets_.shape[1], -1, np.int64)
        X = np.asarray(X, np.uint8)
        sets = np.stack([blank if self.params.wrong else table.get(x.tobytes(), blank) for x in X])
        return Prediction(sets, np.full(len(X), 0.75))

    def _save_state(self, path: Path) -> dict[str, Any]:
        np.savez(path / "arrays.npz", X=self.X_, sets=self.sets_)
        return {}

    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            self.X_, self.sets_ = z["X"], z["sets"]


@contextmanager
def table_generator_registered() -> Iterator[None]:
    """Make the test generator loadable (for one test module: wrap a module-scoped fixture in it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(GENERATORS, TableGenerator.method, TableGenerator)
        yield


def train_run(root: Path, knn: bool = True) -> Path:
    """Train the run under ``root``: models ``table``, ``wrong`` and (``knn``) ``hamming_knn``."""
    gens = [{"method": "test_table", "name": "table"}, {"method": "test_table", "name": "wrong", "params": {"wrong": True}}]
    if knn and "hamming_knn" in GENERATORS:
        gens.append({"method": "hamming_knn", "params": {"k": 3}})
    cfg = parse_config({
        "name": "svc", "data_dir": str(root / "data"), "output_dir": str(root / "runs"),
        "dataset": {"n_features": N_FEATURES, "n_actions": 10, "pa": 0.3, "n_agents": 600, "groups": "manual",
                    "n_groups": 2, "seed": 0},
        "generators": gens})
    return train_experiment(cfg, progress=False, log=lambda *_: None)
