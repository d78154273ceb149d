"""Run directories saved by the code before issue 38 (the move of the runners, metrics and reports
to ``evaluation/``) still load and serve: one of each family, trained at commit 8c49311 and kept in
``tests/fixtures/runs_before_house/`` (see its README.md).

A run records where its data set or labels are as an absolute path of the machine that trained it
(``dataset.json``, ``labels.json``); the test copies the fixtures to a temporary directory and
points that one field at the copy, and changes nothing else.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serving.sequential import SequentialService, is_sequential_run
from serving.service import RecommendationService
from serving.tabular import TabularService, is_tabular_run

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "runs_before_house"


def _copy(tmp_path: Path, run: str, data: str | None = None, pointer: str | None = None) -> Path:
    """The fixture ``run`` (and its data directory ``data``) copied under ``tmp_path``, with the
    path field of ``run/pointer`` pointing at the copied data."""
    run_dir = Path(shutil.copytree(FIXTURES / run, tmp_path / run))
    if data is not None:
        data_dir = shutil.copytree(FIXTURES / data, tmp_path / data)
        info = json.loads((run_dir / pointer).read_text())
        info["path"] = str(data_dir)
        (run_dir / pointer).write_text(json.dumps(info, indent=2))
    return run_dir


@pytest.mark.parametrize("model", ["hamming_knn", "named_cfe"])
def test_capability_run(tmp_path, model):
    run_dir = _copy(tmp_path, "capability", "capability_dataset", "dataset.json")
    svc = RecommendationService(run_dir, model, fallback_budget_s=None)
    assert svc.generator.method == model
    agents = pd.read_parquet(FIXTURES / "capability_dataset" / "agents.parquet")
    x = np.asarray(agents["x"][agents["status"] == "kept"].iloc[0], np.uint8)
    [answer] = svc.recommend_records([x.tolist()])
    assert answer["status"] == "ok" and answer["verified"], answer
    assert svc.stats()["generated"] == 1


def test_tabular_run(tmp_path):
    run_dir = _copy(tmp_path, "tabular")
    assert is_tabular_run(run_dir)
    svc = TabularService(run_dir, fallback_budget_s=None)
    try:
        assert svc.model_name == "nearest_cfe"
        X = pd.read_parquet(run_dir / "labels" / "labels.parquet")["x"]
        record = svc.codec.decode(np.asarray(X.iloc[0], float))
        [answer] = svc.recommend_records([record])
        assert (answer["status"], answer["verified"], answer["method"]) == ("ok", True, "nearest_cfe"), answer
    finally:
        svc.close()


def test_sequential_run(tmp_path):
    run_dir = _copy(tmp_path, "sequential", "sequential_labels", "labels.json")
    assert is_sequential_run(run_dir)
    svc = SequentialService(run_dir, fallback_budget_s=None)
    try:
        assert svc.model_name == "seq_bc" and svc.policy.method == "seq_bc"
        X = pd.read_parquet(run_dir.parent / "sequential_labels" / "agents.parquet")["x"]
        record = svc.codec.decode(np.asarray(X.iloc[1], float))  # the policy answers it (agent 0: the sequencer)
        [answer] = svc.recommend_records([record])
        assert (answer["status"], answer["verified"], answer["method"]) == ("ok", True, "seq_bc"), answer
    finally:
        svc.close()
